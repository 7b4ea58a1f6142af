#!/usr/bin/env python3
"""A synthetic scurry/scanpy result of N cells with every slot the run report reads (issue 20's size
and time figures at 1,000 to 10,000,000 cells, where a CPU `scurry run` on 2 cores is too slow):
obs QC columns (n_genes_by_counts, total_counts, pct_counts_mt) and 'leiden' (12 clusters), obsm
X_umap (one anisotropic Gaussian blob per cluster), raw/X (log1p of normalised counts, about
`--nnz` genes per cell drawn with cluster-specific marker genes), raw.var's seurat HVG columns, an
X of the HVG shape without entries (the report never reads X when raw exists), uns pca
variance_ratio, log1p, rank_genes_groups (the marker genes as scanpy's record arrays) and
uns['scurry']['filters'].  Seeded: the same arguments give the same file.

usage: report_synthetic.py OUT.h5ad --cells N [--genes 5000] [--nnz 60] [--seed 0]
"""
import argparse

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--cells", type=int, required=True)
p.add_argument("--genes", type=int, default=5000)
p.add_argument("--nnz", type=int, default=60)
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()
rng = np.random.default_rng(a.seed)
n, g, k = a.cells, a.genes, 12
cl = rng.integers(0, k, n)
genes = np.array([f"G{j}" for j in range(g)], dtype=object)
markers = rng.choice(g, size=(k, 8), replace=False)

# raw/X: per cell `nnz` draws from a Zipf-like base distribution, a third of them from its
# cluster's markers; duplicates summed; values log1p(counts * 1e4 / total).
base = 1.0 / np.arange(1, g + 1) ** 0.9
base /= base.sum()
m = a.nnz
indptr = np.arange(0, (n + 1) * m, m, dtype=np.int64)
idx = rng.choice(g, size=(n, m), p=base)
nm = m // 3
idx[:, :nm] = markers[cl][:, rng.integers(0, 8, nm)]
cnt = rng.geometric(0.4, size=(n, m)).astype(np.float32)
x = sp.csr_matrix((cnt.ravel(), idx.ravel().astype(np.int32), indptr), shape=(n, g))
x.sum_duplicates()
tot = np.asarray(x.sum(axis=1)).ravel()
x = sp.diags((1e4 / tot).astype(np.float32)) @ x
x.data = np.log1p(x.data).astype(np.float32)
x = x.tocsr()

obs = pd.DataFrame(index=pd.Index([f"cell{i}" for i in range(n)]))
total = rng.lognormal(8, 0.5, n).astype(np.float32)
obs["n_genes_by_counts"] = np.maximum(200, (total ** 0.82 * rng.lognormal(0, 0.08, n))).astype(np.int32)
obs["total_counts"] = total
obs["pct_counts_mt"] = rng.gamma(2.0, 1.5, n).astype(np.float32)
obs["leiden"] = pd.Categorical(cl.astype(str), categories=[str(c) for c in range(k)])

centres = rng.normal(0, 8, (k, 2))
scale = rng.uniform(0.5, 2.0, (k, 2))
umap = (centres[cl] + rng.normal(0, 1, (n, 2)) * scale[cl]).astype(np.float32)

var_raw = pd.DataFrame(index=pd.Index(genes))
hv = np.zeros(g, bool)
hv[rng.choice(g, 2000, replace=False)] = True
var_raw["highly_variable"] = hv
var_raw["means"] = np.log1p(np.asarray(x.mean(axis=0)).ravel()).astype(np.float64)
var_raw["dispersions"] = rng.normal(0, 1, g) + hv * 1.5
var_raw["dispersions_norm"] = (rng.normal(0, 1, g) + hv * 2.5).astype(np.float32)

raw = ad.AnnData(X=x, var=var_raw, obs=obs[[]])
hvg = np.flatnonzero(hv)
res = ad.AnnData(X=sp.csr_matrix((n, len(hvg)), dtype=np.float32), obs=obs, var=var_raw.iloc[hvg][[]].copy())
res.raw = raw
res.obsm["X_umap"] = umap
vr = np.sort(rng.exponential(1, 50))[::-1]
res.uns["pca"] = {"variance_ratio": (vr / vr.sum() * 0.3).astype(np.float32), "params": {"zero_center": True}}
res.uns["log1p"] = {}
groups = [str(c) for c in range(k)]
names = np.rec.fromarrays([genes[np.r_[markers[c], rng.choice(g, 92, replace=False)]].astype(object) for c in range(k)],
                          dtype=[(s, "O") for s in groups])
scores = np.rec.fromarrays([np.sort(rng.normal(5, 3, 100))[::-1].astype(np.float32) for _ in groups],
                           dtype=[(s, "float32") for s in groups])
res.uns["rank_genes_groups"] = {"names": names, "scores": scores, "logfoldchanges": scores, "pvals_adj": scores,
                                "params": {"groupby": "leiden", "method": "t-test", "reference": "rest"}}
res.uns["scurry"] = {"version": "synthetic (bench/report_synthetic.py)",
                     "filters": {"min_genes": 200.0, "min_cells": 3.0, "n_obs_input": int(n * 1.02),
                                 "n_vars_input": g + 300, "n_obs_kept": n, "n_vars_kept": g}}
res.write_h5ad(a.out)
print(f"{a.out}: {n} cells, raw {g} genes, raw nnz {x.nnz}")
