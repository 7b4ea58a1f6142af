#!/usr/bin/env python3
"""15-NN preservation of UMAP embeddings: the share of each cell's 15 nearest neighbours in a
reference representation (obsm X_pca by default) found among its 15 nearest in obsm X_umap.

usage: umap_quality.py REF.h5ad RESULT.h5ad [RESULT2.h5ad ...] [--rep X_pca] [--k 15] [--sample N]
REF gives the representation; each RESULT gives X_umap (same cells, same order). With --sample,
the preservation is averaged over N seeded random cells (the full kNN of the embedding is still
exact). Needs anndata, numpy and scipy (Debian's python3-anndata, python3-scipy)."""
import argparse

import anndata
import numpy as np
from scipy.spatial import cKDTree


def neighbours(x, k, rows):
    tree = cKDTree(x)
    _, idx = tree.query(x[rows], k=k + 1)
    return idx[:, 1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("results", nargs="+")
    ap.add_argument("--rep", default="X_pca")
    ap.add_argument("--k", type=int, default=15)
    ap.add_argument("--sample", type=int, default=0)
    a = ap.parse_args()
    ref = anndata.read_h5ad(a.ref, backed="r")
    x = np.asarray(ref.obsm[a.rep], dtype=np.float64)
    n = x.shape[0]
    rows = np.arange(n)
    if a.sample and a.sample < n:
        rows = np.sort(np.random.default_rng(0).choice(n, a.sample, replace=False))
    base = neighbours(x, a.k, rows)
    for path in a.results:
        emb = np.asarray(anndata.read_h5ad(path, backed="r").obsm["X_umap"], dtype=np.float64)
        got = neighbours(emb, a.k, rows)
        hit = sum(len(set(b) & set(g)) for b, g in zip(base, got))
        print(f"{path}: {a.k}-NN preservation {hit / (len(rows) * a.k):.4f} ({len(rows)} cells)")


if __name__ == "__main__":
    main()
