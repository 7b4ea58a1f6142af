#!/usr/bin/python3
"""starCAT's fit, reproduced step by step, timed: the CPU reference for `scurry cnmf project`.

starCAT (Kotliar et al. 2024, github immunogenomics/starCAT, starcat.py `starCAT.fit_transform`)
fits a query's usages of a reference's programs with the spectra fixed. Its steps, as this script
runs them (our own code; nothing of starCAT is copied or imported):

  1. reference: the TSV read as float32 (programs x genes); genes with NaN in any program dropped;
  2. the query read with anndata; genes = sorted(set(reference genes) & set(query var names));
     the query restricted to them (`query[:, genes].copy()`);
  3. `sklearn.preprocessing.scale(X, with_mean=False)` (unit variance, population std, 0 -> 1),
     cast to the reference's dtype (float32);
  4. `sklearn.decomposition.non_negative_factorization(X, H=ref[genes], n_components=k,
     beta_loss='frobenius', solver='mu', tol=1e-4, max_iter=1000, init='random', update_H=False)`;
  5. usages normalised to sum 1 per cell (starCAT's default output).

Usage: /usr/bin/python3 bench/starcat_reference.py QUERY.h5ad REF.txt [-o USAGES.npy] [--json F]
Prints the wall and CPU seconds of each step and of the whole fit (steps 2-5, the read apart).
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np


def clocks():
    t = os.times()
    return time.perf_counter(), t.user + t.system + t.children_user + t.children_system


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("query")
    ap.add_argument("reference")
    ap.add_argument("-o", "--out", help="write the normalised usages (cells x programs, float32) as .npy")
    ap.add_argument("--json", help="write the timings as JSON")
    a = ap.parse_args()

    import anndata
    import pandas as pd
    import sklearn
    from sklearn import preprocessing
    from sklearn.decomposition import non_negative_factorization

    steps = {}
    w0, c0 = clocks()
    ref = pd.read_csv(a.reference, index_col=0, sep="\t").astype(np.float32)
    ref = ref.loc[:, ~ref.isnull().any(axis=0)]
    q = anndata.read_h5ad(a.query)
    w1, c1 = clocks()
    steps["read"] = (w1 - w0, c1 - c0)

    genes = sorted(set(ref.columns).intersection(set(q.var_names)))
    print("%d out of %d genes in the reference overlap with the query" % (len(genes), ref.shape[1]))
    X = q[:, genes].X.copy()
    if not np.all((X.data if hasattr(X, "data") else X) >= 0):
        sys.exit("query has negative values")
    X = preprocessing.scale(X, with_mean=False)
    if X.dtype != ref.values.dtype:
        X = X.astype(ref.values.dtype)
    w2, c2 = clocks()
    steps["overlap_scale"] = (w2 - w1, c2 - c1)

    H = np.ascontiguousarray(ref[genes].values)
    W, _, n_iter = non_negative_factorization(X, H=H, n_components=H.shape[0], beta_loss="frobenius", solver="mu",
                                              tol=1e-4, max_iter=1000, init="random", update_H=False)
    w3, c3 = clocks()
    steps["nmf"] = (w3 - w2, c3 - c2)
    s = W.sum(axis=1, keepdims=True)
    U = np.divide(W, s, out=np.zeros_like(W), where=s > 0)
    w4, c4 = clocks()
    steps["normalise"] = (w4 - w3, c4 - c3)
    fit_wall, fit_cpu = w4 - w1, c4 - c1

    print("starCAT reference: %d cells x %d genes (nnz %d), %d programs; sklearn %s, %d MU iterations"
          % (X.shape[0], X.shape[1], X.nnz if hasattr(X, "nnz") else X.size, H.shape[0], sklearn.__version__, n_iter))
    for k, (w, c) in steps.items():
        print("  %-14s wall %9.3f s  cpu %9.3f s" % (k, w, c))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    print("  fit (2-5)      wall %9.3f s  cpu %9.3f s   peak RSS %.2f GB" % (fit_wall, fit_cpu, rss))
    if a.out:
        np.save(a.out, U.astype(np.float32))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cells": int(X.shape[0]), "genes": int(X.shape[1]), "programs": int(H.shape[0]),
                       "mu_iterations": int(n_iter), "sklearn": sklearn.__version__,
                       "steps": {k: {"wall_s": w, "cpu_s": c} for k, (w, c) in steps.items()},
                       "fit_wall_s": fit_wall, "fit_cpu_s": fit_cpu, "peak_rss_gb": rss}, f, indent=2)


if __name__ == "__main__":
    main()
