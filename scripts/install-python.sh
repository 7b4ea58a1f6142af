#!/usr/bin/env bash
# Installs the Python package built in BUILD (default build/) into the system python3's site
# directory (Debian: /usr/local/lib/python3.X/dist-packages), so that `python3 -c "import scurry"`
# works from any directory: bash scripts/install-python.sh [BUILD]
# A copy (cmake --install --component python), not a link to the build tree: the package keeps
# working when the build tree is cleaned or rebuilt with other options. No-op (with a message)
# when the build has no Python package (pybind11 missing, or a sanitized build).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
if ! ls "$build"/python/scurry/_scurry*.so >/dev/null 2>&1; then
  echo "install-python: $build has no Python package (SCURRY_PYTHON off or pybind11 missing); skipped"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "install-python: not root and no sudo: the package is not installed (import it with PYTHONPATH=$build/python)"
    exit 0
  fi
  SUDO="sudo"
fi
$SUDO cmake --install "$build" --component python >/dev/null
dir=$(cd / && /usr/bin/python3 -c "import scurry, os; print(os.path.dirname(scurry.__file__), scurry.__version__)")
echo "install-python: scurry $dir"
