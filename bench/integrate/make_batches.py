#!/usr/bin/env python3
"""Seeded synthetic PCA embeddings with batch effects, for Harmony (issue 21): `clusters` Gaussian
cell types in `dims` dimensions (per-dimension scale decaying like PCA variances), `batches`
batches, each with its own offset vector and its own cell-type proportions. Writes an h5ad with
obsm['X_pca'] (float32), obs['batch'] (categorical 'b0'..), obs['celltype'] (categorical 'c0'..).

    make_batches.py OUT.h5ad --cells 100000 --dims 50 --batches 8 --clusters 12 --seed 0
"""
import argparse

import anndata
import numpy as np
import pandas as pd


def make(cells, dims, batches, clusters, seed):
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(1.0 + np.arange(dims))
    centres = rng.normal(0, 6, (clusters, dims)) * scale
    offsets = rng.normal(0, 3, (batches, dims)) * scale
    props = rng.dirichlet(np.full(clusters, 2.0), batches)
    batch = rng.integers(0, batches, cells)
    ctype = np.array([rng.choice(clusters, p=props[b]) for b in batch]) if cells <= 20000 else \
        (props[batch].cumsum(1) > rng.random(cells)[:, None]).argmax(1)
    x = centres[ctype] + offsets[batch] + rng.normal(0, 1, (cells, dims)) * scale
    return x.astype(np.float32), batch, ctype


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cells", type=int, default=100000)
    ap.add_argument("--dims", type=int, default=50)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--clusters", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    x, batch, ctype = make(a.cells, a.dims, a.batches, a.clusters, a.seed)
    obs = pd.DataFrame({
        "batch": pd.Categorical([f"b{b}" for b in batch], categories=[f"b{b}" for b in range(a.batches)]),
        "celltype": pd.Categorical([f"c{c}" for c in ctype], categories=[f"c{c}" for c in range(a.clusters)]),
    }, index=[f"cell{i}" for i in range(a.cells)])
    ad = anndata.AnnData(X=np.zeros((a.cells, 1), dtype=np.float32), obs=obs,
                         var=pd.DataFrame(index=["g0"]), obsm={"X_pca": x})
    ad.write_h5ad(a.out)


if __name__ == "__main__":
    main()
