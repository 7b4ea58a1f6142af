#!/usr/bin/env python3
"""The kNN search scanpy 1.9.6 runs, pynndescent as umap-learn's `nearest_neighbors` calls it (issue 19 point 3).

scanpy 1.9.6's `pp.neighbors` (method 'umap', n_obs >= 4096) calls umap.umap_.nearest_neighbors(X_pca, 15,
random_state=check_random_state(0), metric='euclidean'), which builds
    NNDescent(X, n_neighbors=15, metric='euclidean', random_state=..., n_trees=min(64, 5 + round(sqrt(n) / 20)),
              n_iters=max(5, round(log2(n))), max_candidates=60, low_memory=True, n_jobs=-1, compressed=False)
and reads its neighbor_graph. This script does the same with Debian's python3-pynndescent (umap-learn is not a
Debian package) on an embedding, times it (numba's compile paid first on a small array and reported apart), and
measures recall@15 on a sample of query rows against an exact search in float64.

  pynndescent_vs.py make OUT.h5ad N D [SEED]   write a seeded 12-cluster Gaussian mixture as obsm['X_pca']
                                              (per-dimension spread falling off like a PCA spectrum)
  pynndescent_vs.py run IN.h5ad [--sample S]   time pynndescent on obsm['X_pca'], print one JSON line
"""
import json, os, sys, time

import h5py
import numpy as np


def make(out, n, d, seed=7):
    rng = np.random.default_rng(seed)
    c = 12
    j = np.arange(d)
    centre = (6.0 * rng.standard_normal((c, d)) / np.sqrt(1.0 + j)).astype(np.float32)
    spread = (2.0 / np.sqrt(1.0 + 0.3 * j)).astype(np.float32)
    x = np.empty((n, d), np.float32)
    lab = rng.integers(0, c, n)
    for a in range(0, n, 200_000):
        b = min(n, a + 200_000)
        x[a:b] = centre[lab[a:b]] + rng.standard_normal((b - a, d), dtype=np.float32) * spread
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    adata = ad.AnnData(X=sp.csr_matrix((n, 1), dtype=np.float32),
                       obs=pd.DataFrame(index=[f"c{i}" for i in range(n)]),
                       var=pd.DataFrame(index=["g0"]))
    adata.obsm["X_pca"] = x
    adata.write_h5ad(out)


def exact_rows(x, rows, k):
    out = np.empty((len(rows), k), np.int64)
    xx = (x.astype(np.float64) ** 2).sum(1)
    for a in range(0, len(rows), 256):
        q = x[rows[a:a + 256]].astype(np.float64)
        dd = xx[None, :] - 2.0 * q @ x.T.astype(np.float64) + (q ** 2).sum(1)[:, None]
        p = np.argpartition(dd, k, axis=1)[:, :k]
        out[a:a + 256] = p
    return out


def run(path, sample=1000):
    from pynndescent import NNDescent
    from sklearn.utils import check_random_state
    with h5py.File(path, "r") as f:
        x = np.ascontiguousarray(f["obsm/X_pca"][...], dtype=np.float32)
    n = x.shape[0]
    k = 15

    def nnd(data):
        m = data.shape[0]
        index = NNDescent(data, n_neighbors=k, metric="euclidean", metric_kwds={},
                          random_state=check_random_state(0),
                          n_trees=min(64, 5 + int(round(m ** 0.5 / 20.0))),
                          n_iters=max(5, int(round(np.log2(m)))), max_candidates=60,
                          low_memory=True, n_jobs=-1, verbose=False, compressed=False)
        return index.neighbor_graph

    t0 = time.perf_counter()
    nnd(x[:5000].copy())
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    c0 = time.process_time()
    ind, dist = nnd(x)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rows = np.random.default_rng(1).choice(n, size=min(sample, n), replace=False)
    ex = exact_rows(x, rows, k)
    hits = sum(len(set(ind[r]) & set(e)) for r, e in zip(rows, ex))
    print(json.dumps({"file": os.path.basename(path), "n": n, "d": x.shape[1], "threads": os.cpu_count(),
                      "compile_s": round(compile_s, 2), "search_wall_s": round(wall, 2),
                      "search_cpu_s": round(cpu, 2), "recall@15": round(hits / (len(rows) * k), 4)}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *(int(s) for s in sys.argv[5:6]))
    else:
        s = int(sys.argv[sys.argv.index("--sample") + 1]) if "--sample" in sys.argv else 1000
        run(sys.argv[2], s)
