#!/usr/bin/env bash
# The real zarr clients, both ways:
#  1. stores written by Python (anndata 0.8 + zarr-python 2, and a copy re-encoded with zarr in every
#     codec/layout) are read by scurry equal to the h5ad anndata wrote from the same AnnData
#     (test_zarr's Zarr.ReadsStoreWrittenByPython), and open in `scurry info` / `scurry convert`;
#  2. stores written by scurry (zarr v2, every codec) are read by anndata.read_zarr with warnings as
#     errors, every slot equal to the JSON sidecar. (zarr v3 stores need zarr-python 3, which Debian
#     does not ship: test_zarr checks them by round trip and against the v3 spec.)
# usage: test_zarr_client.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
bin_dir=$(dirname "$1")
repo=$2
py=/usr/bin/python3
if ! "$py" -c 'import anndata, zarr, numcodecs' 2>/dev/null; then
  echo "anndata/zarr are not installed for $py (scripts/install-deps.sh installs python3-zarr)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
seed=${SCURRY_TEST_SEED:-$RANDOM}
echo "test_zarr_client: seed $seed (SCURRY_TEST_SEED=$seed to replay)"

# 1. Python -> scurry
"$py" "$repo/tests/io/zarr_client.py" make "$tmp/py" "$seed"
for v in anndata variants; do
  h5=$tmp/py/py.h5ad
  [ "$v" = variants ] && h5=$tmp/py/py_variants.h5ad
  out=$(SCURRY_PY_ZARR="$tmp/py/py_$v.zarr" SCURRY_PY_H5AD="$h5" \
    "$bin_dir/tests/test_zarr" --gtest_filter=Zarr.ReadsStoreWrittenByPython 2>&1) || { echo "$out"; exit 1; }
  grep -q "1 test\." <<<"$out" && ! grep -q SKIPPED <<<"$out" || { echo "$out"; echo "the check did not run"; exit 1; }
  echo "test_zarr_client: scurry reads $v store == anndata's h5ad"
  info=$("$scurry" info "$tmp/py/py_$v.zarr")
  grep -q "^format    zarr" <<<"$info" || { echo "scurry info: no zarr format line:"; echo "$info"; exit 1; }
  grep -q "^shape     157 x 43 " <<<"$info" || { echo "scurry info: wrong shape:"; echo "$info"; exit 1; }
  "$scurry" convert "$tmp/py/py_$v.zarr" "$tmp/py/conv_$v.h5ad"
  "$py" -W error - "$tmp/py/conv_$v.h5ad" "$h5" <<'PY'
import sys, warnings
import numpy as np, scipy.sparse as sp
warnings.simplefilter("error")
import anndata
a, b = anndata.read_h5ad(sys.argv[1]), anndata.read_h5ad(sys.argv[2])
def dense(m):
    return m.toarray() if sp.issparse(m) else np.asarray(m)
assert a.shape == b.shape, (a.shape, b.shape)
assert np.array_equal(dense(a.X), dense(b.X)) and a.X.dtype == b.X.dtype
assert a.obs.equals(b.obs), "obs differ"
assert a.var.equals(b.var), "var differ"
for k in b.layers: assert np.array_equal(dense(a.layers[k]), dense(b.layers[k])), k
for k in b.obsm: assert np.array_equal(dense(a.obsm[k]), dense(b.obsm[k])), k
for k in b.obsp: assert np.array_equal(dense(a.obsp[k]), dense(b.obsp[k])), k
assert a.uns["title"] == b.uns["title"] and a.uns["params"]["deeper"]["r"] == 0.5
assert np.array_equal(dense(a.raw.X), dense(b.raw.X))
print("test_zarr_client: scurry convert of", sys.argv[1], "== anndata's h5ad")
PY
done

# 2. scurry -> Python
SCURRY_WRITE_ZARR_SAMPLE="$tmp/sc" "$bin_dir/tests/test_zarr" --gtest_filter=Zarr.WriteSampleForPython >/dev/null
test -s "$tmp/sc/sample.json"
for s in "$tmp"/sc/v2_*.zarr; do
  "$py" -W error "$repo/tests/io/zarr_client.py" check "$s" "$tmp/sc/sample.json"
done
test -s "$tmp/sc/v3_zstd.zarr/zarr.json"
echo "test_zarr_client: ok"
