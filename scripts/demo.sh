#!/usr/bin/env bash
# The demo: builds scurry and runs it on the bundled pbmc3k subset (1,000 cells x 13,714 genes).
#   bash scripts/demo.sh
# Writes demo_out/pbmc3k.h5ad (open it with anndata/scanpy) and demo_out/timings.json.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: paths relative to the checkout, so that builds in any clone share the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
bash scripts/install-deps.sh
cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target scurry
cmake --build build -j2 --target scurry_python
bash scripts/install-python.sh build
mkdir -p demo_out
build/scurry run data/pbmc3k_first1000_10x_mtx -o demo_out/pbmc3k.h5ad --timings demo_out/timings.json
echo
build/scurry info demo_out/pbmc3k.h5ad
