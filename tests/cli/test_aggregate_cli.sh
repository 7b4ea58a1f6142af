#!/usr/bin/env bash
# scurry aggregate end to end: exit codes, and the output read by anndata 0.8 (warnings as errors)
# laid out as sc.get.aggregate's AnnData (one row per group named by its categories, the by columns
# categorical in obs, var copied, one dense layer per function, no X), its values equal to numpy's
# per-group sums, means, nonzero counts and variances of X.
# usage: test_aggregate_cli.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
golden="$repo/tests/data/golden/pbmc3k_first1000.scanpy.h5ad"

"$scurry" -q aggregate "$golden" -o "$tmp/a.h5ad" --by leiden --func sum,mean,count_nonzero,var
set +e
"$scurry" -q aggregate "$golden" -o "$tmp/bad.h5ad" --by louvain --func sum 2>"$tmp/err"; rc1=$?
"$scurry" -q aggregate "$golden" -o "$tmp/bad.h5ad" --by leiden --func median 2>/dev/null; rc2=$?
set -e
test "$rc1" -eq 2 && test "$rc2" -eq 2 && grep -q "'louvain'" "$tmp/err" && test ! -e "$tmp/bad.h5ad"

"$py" -W error - "$tmp" "$golden" <<'PY'
import sys
import numpy as np
import anndata as ad

tmp, golden = sys.argv[1], sys.argv[2]
g = ad.read_h5ad(golden)
a = ad.read_h5ad(f"{tmp}/a.h5ad")
cats = list(g.obs["leiden"].cat.categories)
assert list(a.obs_names) == cats and list(a.obs["leiden"].cat.categories) == cats
assert a.X is None and list(a.var_names) == list(g.var_names)
assert sorted(a.layers.keys()) == ["count_nonzero", "mean", "sum", "var"]
x = np.asarray(g.X, dtype=np.float64)
for k, c in enumerate(cats):
    sel = (g.obs["leiden"] == c).values
    xs = x[sel]
    np.testing.assert_allclose(a.layers["sum"][k], xs.sum(0), rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(a.layers["mean"][k], xs.mean(0), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(a.layers["count_nonzero"][k], (xs != 0).sum(0))
    np.testing.assert_allclose(a.layers["var"][k], xs.var(0, ddof=1), rtol=1e-8, atol=1e-9)
print("aggregate CLI: ok")
PY
