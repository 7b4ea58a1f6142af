#!/usr/bin/env bash
# Installs everything scurry needs to build and test, from Debian's packages only.
# Idempotent: packages already present are left as they are; apt-get runs only when one is missing.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build ccache pkg-config clang
  libhdf5-dev hdf5-tools zlib1g-dev libzstd-dev libblosc-dev
  libopenblas-dev liblapack-dev liblapacke-dev
  libfftw3-dev libigraph-dev libhnswlib-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  python3-anndata python3-h5py python3-numpy python3-scipy python3-pandas python3-zarr
  # the Python package (python/): pybind11, Python's headers, pytest for tests/python
  pybind11-dev python3-dev python3-pytest
  # the sanitized build of scripts/test.sh: clang, its sanitizer runtimes and OpenMP (libomp; with
  # libarcher, the OpenMP annotations for ThreadSanitizer)
  clang libclang-rt-dev libomp-dev
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all ${#pkgs[@]} packages present"
