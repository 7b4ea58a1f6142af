#!/usr/bin/env bash
# scurry's tl steps end to end (issue 22): diffmap, dpt, paga, dendrogram, embedding-density,
# kmeans and tsne chained on scanpy's golden pbmc3k, the result read by anndata 0.8 (warnings as
# errors) with scanpy's slots and values compared with scanpy's own (the golden scanpy_embed.h5);
# bad input exits 2 with a message naming the problem and leaves no output.
# usage: test_tl_cli.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
golden="$repo/tests/data/golden/pbmc3k_first1000.scanpy.h5ad"
embed="$repo/tests/data/golden/pbmc3k_first1000.scanpy_embed.h5"

"$scurry" -q diffmap "$golden" -o "$tmp/1.h5ad" --n-comps 15
"$scurry" -q dpt "$tmp/1.h5ad" -o "$tmp/2.h5ad" --root-cell 5
"$scurry" -q paga "$tmp/2.h5ad" -o "$tmp/3.h5ad" --groups leiden
"$scurry" -q dendrogram "$tmp/3.h5ad" -o "$tmp/4.h5ad" --groupby leiden
"$scurry" -q embedding-density "$tmp/4.h5ad" -o "$tmp/5.h5ad" --basis umap
"$scurry" -q kmeans "$tmp/5.h5ad" -o "$tmp/6.h5ad" --n-clusters 5
"$scurry" -q tsne "$tmp/6.h5ad" -o "$tmp/7.h5ad" --n-pcs 50 --n-iter 300

set +e
"$scurry" -q dpt "$golden" -o "$tmp/bad.h5ad" 2>"$tmp/err1"; rc1=$?
"$scurry" -q dendrogram "$golden" -o "$tmp/bad.h5ad" --groupby louvain 2>"$tmp/err2"; rc2=$?
"$scurry" -q embedding-density "$golden" -o "$tmp/bad.h5ad" --basis tsne 2>"$tmp/err3"; rc3=$?
"$scurry" -q tsne "$golden" -o "$tmp/bad.h5ad" --perplexity 5000 2>"$tmp/err4"; rc4=$?
set -e
test "$rc1" -eq 2 && grep -q "root" "$tmp/err1"
test "$rc2" -eq 2 && grep -q "'louvain'" "$tmp/err2"
test "$rc3" -eq 2 && grep -q "X_tsne" "$tmp/err3"
test "$rc4" -eq 2 && grep -q "perplexity" "$tmp/err4"
test ! -e "$tmp/bad.h5ad"

"$py" -W error - "$tmp/7.h5ad" "$embed" <<'PY'
import sys
import h5py
import numpy as np
import anndata as ad

a = ad.read_h5ad(sys.argv[1])
g = h5py.File(sys.argv[2], "r")
dm = a.obsm["X_diffmap"]
assert dm.shape == (1000, 15) and a.uns["diffmap_evals"].shape == (15,)
for c in range(15):
    r = np.corrcoef(dm[:, c], g["X_diffmap"][:, c])[0, 1]
    assert abs(r) >= 0.99, (c, r)
pt = a.obs["dpt_pseudotime"].values
assert pt[5] == 0 and abs(pt.max() - 1) < 1e-12 and int(a.uns["iroot"]) == 5
conn = np.asarray(a.uns["paga"]["connectivities"])
assert np.abs(conn - g["paga_connectivities"][()]).max() <= 0.02
assert a.uns["paga"]["groups"] == "leiden" and len(a.uns["leiden_sizes"]) == 7
tree = np.asarray(a.uns["paga"]["connectivities_tree"])
assert (tree != 0).sum() == 6
den = a.uns["dendrogram_leiden"]
np.testing.assert_allclose(den["linkage"], g["dendrogram_linkage"][()], atol=1e-6)
assert list(den["categories_ordered"]) == [str(x) for x in den["dendrogram_info"]["ivl"]]
np.testing.assert_allclose(a.obs["umap_density"].values, g["umap_density"][()], atol=1e-5)
assert list(a.uns["umap_density_params"]["components"]) == [1, 2]
km = a.obs["kmeans"]
assert str(km.dtype) == "category" and km.cat.categories.size == 5
ts = a.obsm["X_tsne"]
assert ts.shape == (1000, 2) and np.isfinite(ts).all() and ts.std() > 1
print("tl cli ok")
PY
