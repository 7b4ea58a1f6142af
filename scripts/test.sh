#!/usr/bin/env bash
# Builds scurry and runs every test: bash scripts/test.sh
# Installs the Debian packages it needs (idempotent), configures build/ (Release, Ninja; ccache is
# used when present), builds with -j2 and runs ctest. GPU tests (label `gpu`) skip themselves when no
# CUDA device is visible, so all labels run. Exits with ctest's status.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: paths relative to the checkout, so that builds in any clone share the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
bash scripts/install-deps.sh
cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
status=0
ctest --test-dir build --output-on-failure -j2 || status=$?
exit "$status"
