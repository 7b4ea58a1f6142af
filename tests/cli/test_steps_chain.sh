#!/usr/bin/env bash
# The step-by-step CLI produces what `scurry run` produces (issue 17 point 8): the tutorial chain as
# single steps, with --counts-layer (layers['counts']) and --keep-raw (raw of every gene before the
# HVG subset), gives the same file contents as `run` with its defaults (every slot compared by
# tests/cli/compare_h5ad.py). Then the steps' --layer / --key-added / --neighbors-key.
# usage: test_steps_chain.sh <scurry-binary> <repo-root>
set -euo pipefail
s=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
in="$repo/tests/data/pbmc3k_first1000.h5ad"
cd "$tmp"

"$s" -q run "$in" -o run.h5ad
"$s" -q qc "$in" -o 1.h5ad --qc-vars mt
"$s" -q filter-cells 1.h5ad -o 2.h5ad --min-genes 200
"$s" -q filter-genes 2.h5ad -o 3.h5ad --min-cells 3
"$s" -q normalize-total 3.h5ad -o 4.h5ad --target-sum 1e4 --counts-layer
"$s" -q log1p 4.h5ad -o 5.h5ad
"$s" -q highly-variable-genes 5.h5ad -o 6.h5ad --n-top-genes 2000 --subset --keep-raw
"$s" -q scale 6.h5ad -o 7.h5ad --max-value 10
"$s" -q pca 7.h5ad -o 8.h5ad --n-comps 50
"$s" -q neighbors 8.h5ad -o 9.h5ad
"$s" -q umap 9.h5ad -o 10.h5ad
"$s" -q leiden 10.h5ad -o 11.h5ad
"$s" -q rank-genes-groups 11.h5ad -o chain.h5ad --groupby leiden
"$py" "$repo/tests/cli/compare_h5ad.py" run.h5ad chain.h5ad

# without --keep-raw / --counts-layer the chain differs from run exactly there (the check can fail)
"$s" -q highly-variable-genes 5.h5ad -o 6b.h5ad --n-top-genes 2000 --subset
! "$py" "$repo/tests/cli/compare_h5ad.py" 6.h5ad 6b.h5ad > diff.txt
grep -q "^raw" diff.txt

# --layer: the layer changes, X does not; --key-added / --neighbors-key name the graph's slots
"$s" -q normalize-total 4.h5ad -o L.h5ad --layer counts --target-sum 100 --key-added sz
"$s" -q log1p L.h5ad -o L2.h5ad --layer counts
"$s" -q neighbors 8.h5ad -o N.h5ad --key-added nn --n-neighbors 8
"$s" -q umap N.h5ad -o N2.h5ad --neighbors-key nn --maxiter 50
"$s" -q leiden N2.h5ad -o N3.h5ad --neighbors-key nn --key-added cl
"$py" - <<'PY'
import numpy as np, anndata as ad, scipy.sparse as sp
a4, L, L2 = ad.read_h5ad("4.h5ad"), ad.read_h5ad("L.h5ad"), ad.read_h5ad("L2.h5ad")
assert (a4.X != L2.X).nnz == 0, "X changed by a --layer step"
tot = np.asarray(L.layers["counts"].sum(1)).ravel()
assert np.allclose(tot[tot > 0], 100, rtol=1e-4), "layers['counts'] not normalised to 100"
assert np.allclose(L.obs["sz"], np.asarray(a4.layers["counts"].sum(1)).ravel(), rtol=1e-6)
assert np.allclose(L2.layers["counts"].data, np.log1p(L.layers["counts"].data), rtol=1e-6)
n = ad.read_h5ad("N3.h5ad")
assert {"nn_distances", "nn_connectivities"} <= set(n.obsp.keys()) and "distances" not in n.obsp
assert "nn" in n.uns and "X_umap" in n.obsm and "cl" in n.obs and "leiden" not in n.obs
assert n.obs["cl"].cat.categories.size > 1
PY

echo ok
