#!/usr/bin/env python3
"""Seeded dense log-normalised-like data with batch effects for the combat / regress_out timings
(issue 21): CELLS x GENES float32 X (gamma-distributed expression, a per-batch location and scale
shift per gene, a dependence on total_counts), obs batch (8 levels), total_counts, pct_counts_mt.

    make_dense.py OUT.h5ad --cells 100000 --genes 2000 --seed 0
"""
import argparse

import anndata
import numpy as np
import pandas as pd

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--cells", type=int, default=100000)
ap.add_argument("--genes", type=int, default=2000)
ap.add_argument("--batches", type=int, default=8)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()
rng = np.random.default_rng(a.seed)
batch = rng.integers(0, a.batches, a.cells)
tc = rng.lognormal(8, 0.5, a.cells)
mt = rng.gamma(2, 1.5, a.cells)
x = np.empty((a.cells, a.genes), dtype=np.float32)
shift = rng.normal(0, 0.3, (a.batches, a.genes)).astype(np.float32)
scale = np.exp(rng.normal(0, 0.2, (a.batches, a.genes))).astype(np.float32)
for s in range(0, a.cells, 10000):
    e = min(a.cells, s + 10000)
    g = rng.gamma(1.0, 1.0, (e - s, a.genes)).astype(np.float32)
    x[s:e] = np.log1p(g * scale[batch[s:e]]) + shift[batch[s:e]] + 1e-4 * (tc[s:e, None] - 3000)
obs = pd.DataFrame({"batch": pd.Categorical([f"b{b}" for b in batch]), "total_counts": tc, "pct_counts_mt": mt},
                   index=[f"c{i}" for i in range(a.cells)])
anndata.AnnData(x, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(a.genes)])).write_h5ad(a.out)
