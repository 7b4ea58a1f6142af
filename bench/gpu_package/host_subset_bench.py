#!/usr/bin/env python3
# Usage: python3 bench/gpu_package/host_subset_bench.py PATH_OF_A_SCURRY_PACKAGE (e.g. build/python); COW=1: pandas copy-on-write.
# Python-side costs of the package's GPU steps around the C++ calls, on an AnnData shaped like the 1.3M chain's with
# X absent (as while X is resident): obs 1,306,127 cells (string names, a 10-category column), var 27,998 genes.
import sys, time
import numpy as np, pandas as pd, anndata
sys.path.insert(0, sys.argv[1])
from scurry._core import subset_inplace
import scurry._core as core
import os
if os.environ.get("COW"): pd.options.mode.copy_on_write = True
n, g = 1306127, 27998
rng = np.random.default_rng(0)
obs = pd.DataFrame({"cluster": pd.Categorical.from_codes(rng.integers(0, 10, n).astype(np.int8), [f"c{i}" for i in range(10)])},
                   index=pd.Index([f"cell{i}" for i in range(n)], dtype=object))
var = pd.DataFrame({"mt": np.zeros(g, bool)}, index=pd.Index([f"gene{i}" for i in range(g)], dtype=object))
def fresh():
    a = anndata.AnnData(obs=obs.copy(), var=var.copy())
    a.obs_names.is_unique; return a
T = {}
for rep in range(7):
    a = fresh()
    cols = {f"col{i}": rng.random(n) for i in range(11)}
    t = time.perf_counter()
    for k, v in cols.items():
        (core.set_column(a.obs, k, v) if hasattr(core, "set_column") else a.obs.__setitem__(k, v))
    T.setdefault("11 obs columns", []).append(time.perf_counter() - t)
    t = time.perf_counter(); subset_inplace(a, obs=np.ones(n, bool)); T.setdefault("filter_cells, all kept", []).append(time.perf_counter() - t)
    t = time.perf_counter(); subset_inplace(a, var=np.ones(g, bool)); T.setdefault("filter_genes, all kept", []).append(time.perf_counter() - t)
    keep = np.zeros(g, bool); keep[rng.choice(g, 2000, replace=False)] = True
    t = time.perf_counter(); subset_inplace(a, var=keep); T.setdefault("HVG subset (2,000 genes)", []).append(time.perf_counter() - t)
    ds = core._scurry.Dataset()
    t = time.perf_counter(); ds.set_var_names(a.var_names if rep % 2 else var.index); T.setdefault("28k var names into a Dataset", []).append(time.perf_counter() - t)
    assert a.n_vars == 2000 and a.n_obs == n
for k, v in T.items():
    print(f"{k}: median {np.median(v[1:]) * 1e3:.2f} ms")
