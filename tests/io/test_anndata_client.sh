#!/usr/bin/env bash
# The real client: a rich h5ad written by scurry (test_h5ad's H5ad.WriteSampleForPython, seeded)
# must be read by anndata with warnings as errors, every slot equal to the JSON sidecar.
# usage: test_anndata_client.sh <scurry-binary> <repo-root>
set -euo pipefail
bin_dir=$(dirname "$1")
repo=$2
py=/usr/bin/python3
if ! "$py" -c 'import anndata' 2>/dev/null; then
  echo "anndata is not installed for $py" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SCURRY_WRITE_SAMPLE="$tmp/sample.h5ad" "$bin_dir/tests/test_h5ad" --gtest_filter=H5ad.WriteSampleForPython
test -s "$tmp/sample.h5ad" && test -s "$tmp/sample.h5ad.json"
"$py" -W error "$repo/tests/io/anndata_client.py" "$tmp/sample.h5ad" "$tmp/sample.h5ad.json"
