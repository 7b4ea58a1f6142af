#!/usr/bin/env python3
"""scanpy's pbmc3k tutorial ("Preprocessing and clustering 3k PBMCs") with `import scurry as sc`,
on the bundled first 1,000 cells of pbmc3k (tests/data/pbmc3k_first1000.h5ad).

    python3 examples/pbmc3k.py [--out DIR]

Plots go through scanpy (`scanpy.pl`) when scanpy is installed, into DIR (default pbmc3k_out/);
without scanpy they are skipped and the script prints what each stage produced.
"""
import argparse
import os
import sys

import scurry as sc

here = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument("--data", default=os.path.join(here, "..", "tests", "data", "pbmc3k_first1000.h5ad"))
parser.add_argument("--out", default="pbmc3k_out")
args = parser.parse_args()

try:  # plotting only: scurry has no plots of its own
    import scanpy

    pl = scanpy.pl
    os.makedirs(args.out, exist_ok=True)
    scanpy.settings.figdir = args.out
except ImportError:
    pl = None
    print("scanpy is not installed: plots skipped", file=sys.stderr)


def plot(fn, *a, **kw):
    if pl is not None:
        getattr(pl, fn)(*a, show=False, save=f"_{fn}.png", **kw)


adata = sc.read_h5ad(args.data)
adata.var_names_make_unique()
print(adata)

# preprocessing
plot("highest_expr_genes", adata, n_top=20)
sc.pp.filter_cells(adata, min_genes=200)
sc.pp.filter_genes(adata, min_cells=3)
adata.var["mt"] = adata.var_names.str.startswith("MT-")
sc.pp.calculate_qc_metrics(adata, qc_vars=["mt"], percent_top=None, log1p=False, inplace=True)
plot("violin", adata, ["n_genes_by_counts", "total_counts", "pct_counts_mt"], jitter=0.4, multi_panel=True)
adata = adata[adata.obs.n_genes_by_counts < 2500, :]
adata = adata[adata.obs.pct_counts_mt < 5, :].copy()
adata.layers["counts"] = adata.X.copy()
sc.pp.normalize_total(adata, target_sum=1e4)
sc.pp.log1p(adata)
sc.pp.highly_variable_genes(adata, min_mean=0.0125, max_mean=3, min_disp=0.5)
plot("highly_variable_genes", adata)
print(f"{int(adata.var.highly_variable.sum())} highly variable genes")
adata.raw = adata
adata = adata[:, adata.var.highly_variable]
sc.pp.scale(adata, max_value=10)

# PCA, neighbours, UMAP, Leiden
sc.pp.pca(adata, svd_solver="arpack")
plot("pca_variance_ratio", adata, log=True)
sc.pp.neighbors(adata, n_neighbors=10, n_pcs=40)
sc.tl.umap(adata)
sc.tl.leiden(adata)
print(f"{adata.obs.leiden.cat.categories.size} Leiden clusters:", adata.obs.leiden.value_counts().to_dict())
plot("umap", adata, color=["leiden", "CST3", "NKG7"])

# marker genes
sc.tl.rank_genes_groups(adata, "leiden", method="t-test")
plot("rank_genes_groups", adata, n_genes=25, sharey=False)
sc.tl.rank_genes_groups(adata, "leiden", method="wilcoxon")
print(sc.get.rank_genes_groups_df(adata, None).groupby("group").head(3)[["group", "names", "scores"]])
print(adata)
