#!/usr/bin/env bash
# scurry draw-graph and the leiden options users call (issue 22 points 3-4) end to end on scanpy's
# golden pbmc3k: the files read by anndata 0.8 (warnings as errors) with scanpy's slots
# (obsm X_draw_graph_fa float64, uns draw_graph params; leiden_<res> keys, leiden_R labels
# "<cats>,<new>" and the other cells' labels unchanged, the igraph flavor); bad input exits 2 with a
# message naming the problem and leaves no output.
# usage: test_draw_graph_leiden_cli.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
golden="$repo/tests/data/golden/pbmc3k_first1000.scanpy.h5ad"

"$scurry" -q draw-graph "$golden" -o "$tmp/1.h5ad" --iterations 200
"$scurry" -q draw-graph "$tmp/1.h5ad" -o "$tmp/2.h5ad" --init-pos X_umap --key-added-ext fa_umap --iterations 100
"$scurry" -q leiden "$tmp/2.h5ad" -o "$tmp/3.h5ad" --resolution 0.5,1.0,2.0
"$scurry" -q leiden "$tmp/3.h5ad" -o "$tmp/4.h5ad" --restrict-to leiden:0,3
"$scurry" -q leiden "$tmp/4.h5ad" -o "$tmp/5.h5ad" --flavor igraph --n-iterations 2 --key-added leiden_igraph

set +e
"$scurry" -q draw-graph "$golden" -o "$tmp/bad.h5ad" --layout fr 2>"$tmp/err1"; rc1=$?
"$scurry" -q draw-graph "$golden" -o "$tmp/bad.h5ad" --init-pos X_nope 2>"$tmp/err2"; rc2=$?
"$scurry" -q leiden "$golden" -o "$tmp/bad.h5ad" --restrict-to leiden:0,42 2>"$tmp/err3"; rc3=$?
"$scurry" -q leiden "$golden" -o "$tmp/bad.h5ad" --flavor igraph --directed true 2>"$tmp/err4"; rc4=$?
"$scurry" -q leiden "$golden" -o "$tmp/bad.h5ad" --restrict-to leiden 2>"$tmp/err5"; rc5=$?
set -e
test "$rc1" -eq 2 && grep -q "not implemented" "$tmp/err1"
test "$rc2" -eq 2 && grep -q "X_nope" "$tmp/err2"
test "$rc3" -eq 2 && grep -q "'42' is not a valid category" "$tmp/err3"
test "$rc4" -eq 2 && grep -q "directed" "$tmp/err4"
test "$rc5" -eq 2 && grep -q "KEY:CAT" "$tmp/err5"
test ! -e "$tmp/bad.h5ad"

"$py" -W error - "$tmp/5.h5ad" <<'PY'
import sys
import numpy as np
import anndata as ad
a = ad.read_h5ad(sys.argv[1])
fa = a.obsm["X_draw_graph_fa"]
assert fa.dtype == np.float64 and fa.shape == (1000, 2) and np.isfinite(fa).all() and fa.std() > 1
assert a.obsm["X_draw_graph_fa_umap"].shape == (1000, 2)
assert a.uns["draw_graph"]["params"]["layout"] == "fa" and a.uns["draw_graph"]["params"]["random_state"] == 0
for r in ("0.5", "1.0", "2.0"):
    col = a.obs["leiden_" + r]
    assert str(col.dtype) == "category" and a.uns["leiden_" + r]["params"]["resolution"] == float(r)
assert a.obs["leiden_0.5"].cat.categories.size < a.obs["leiden_2.0"].cat.categories.size
old = a.obs["leiden"].astype(str).values
new = a.obs["leiden_R"].astype(str).values
inside = np.isin(old, ["0", "3"])
assert (new[~inside] == old[~inside]).all()
assert all(v.startswith("0-3,") for v in new[inside]) and len(set(new[inside])) > 1
ig = a.obs["leiden_igraph"]
assert str(ig.dtype) == "category" and 3 <= ig.cat.categories.size <= 15
print("draw-graph / leiden cli ok")
PY
