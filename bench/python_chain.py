#!/usr/bin/env python3
"""The tutorial chain through the Python package, as `scurry run` runs it with its defaults (QC with
mt, filter_cells min_genes 200, filter_genes min_cells 3, layers['counts'], normalize_total 1e4,
log1p, HVG seurat top 2000, raw, HVG subset, scale max_value 10, PCA 50, neighbors 15, UMAP, Leiden,
rank_genes_groups t-test), from an h5ad to an h5ad. For peak-RSS comparisons with the CLI:

    /usr/bin/time -v python3 bench/python_chain.py IN.h5ad OUT.h5ad
    /usr/bin/time -v scurry run IN.h5ad -o OUT.h5ad
"""
import sys
import time

import scurry as sc

src, dst = sys.argv[1], sys.argv[2]
t0 = time.time()
adata = sc.read_h5ad(src)
adata.var["mt"] = adata.var_names.str.startswith("MT-") | adata.var_names.str.startswith("mt-")
sc.pp.calculate_qc_metrics(adata, qc_vars=["mt"], inplace=True)
sc.pp.filter_cells(adata, min_genes=200)
sc.pp.filter_genes(adata, min_cells=3)
adata.layers["counts"] = adata.X.copy()
sc.pp.normalize_total(adata, target_sum=1e4)
sc.pp.log1p(adata)
sc.pp.highly_variable_genes(adata, n_top_genes=2000)
adata.raw = adata
adata = adata[:, adata.var.highly_variable].copy()
sc.pp.scale(adata, max_value=10)
sc.pp.pca(adata, n_comps=50)
sc.pp.neighbors(adata, n_neighbors=15)
sc.tl.umap(adata)
sc.tl.leiden(adata)
sc.tl.rank_genes_groups(adata, "leiden", method="t-test")
adata.write_h5ad(dst)
print(f"python chain: {adata.n_obs} cells x {adata.n_vars} genes, "
      f"{adata.obs['leiden'].cat.categories.size} clusters, {time.time() - t0:.1f} s", file=sys.stderr)
