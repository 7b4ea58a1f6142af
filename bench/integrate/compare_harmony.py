#!/usr/bin/env python3
"""Agreement of two Harmony results on make_batches.py data (issue 21): for a seeded sample of query
cells, exact euclidean neighbours against all cells; the 15-NN overlap between the two embeddings,
batch iLISI (inverse Simpson index of the batches among the 30 nearest neighbours) and cell-type
purity (share of the 15 nearest neighbours of the same type) of each.

    compare_harmony.py DATA.h5ad OURS.h5ad HARMONYPY.npy [--queries 2000]
"""
import argparse

import anndata
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("data")
ap.add_argument("ours")
ap.add_argument("ref")
ap.add_argument("--queries", type=int, default=2000)
a = ap.parse_args()
d = anndata.read_h5ad(a.data)
ours = anndata.read_h5ad(a.ours).obsm["X_pca_harmony"].astype(np.float64)
ref = np.load(a.ref).astype(np.float64)
q = np.random.default_rng(0).choice(len(ours), a.queries, replace=False)
batch = d.obs["batch"].cat.codes.to_numpy()
ctype = d.obs["celltype"].cat.codes.to_numpy()


def knn(x, k):
    out = []
    sq = (x ** 2).sum(1)
    for i in q:
        dist = sq - 2 * x @ x[i] + sq[i]
        dist[i] = np.inf
        out.append(np.argpartition(dist, k)[:k])
    return np.array(out)


def ilisi(nn):
    p = np.array([np.bincount(batch[r], minlength=batch.max() + 1) / len(r) for r in nn])
    return np.mean(1 / (p ** 2).sum(1))


def purity(nn):
    return np.mean([(ctype[r] == ctype[i]).mean() for i, r in zip(q, nn)])


a15, b15, a30, b30 = knn(ours, 15), knn(ref, 15), knn(ours, 30), knn(ref, 30)
overlap = np.mean([len(set(x) & set(y)) / 15 for x, y in zip(a15, b15)])
print(f"15-NN overlap {overlap:.4f}; iLISI ours {ilisi(a30):.4f} harmonypy {ilisi(b30):.4f}; "
      f"purity ours {purity(a15):.4f} harmonypy {purity(b15):.4f}")
