#!/usr/bin/env python3
"""Runs harmonypy (Debian's python3-harmonypy, 0.0.9) as scanpy.external.pp.harmony_integrate does
(run_harmony(X_pca, obs, key, **kwargs), X_pca_harmony = Z_corr.T) on an h5ad and writes
obsm['X_pca_harmony'] to OUT (an .npy), printing the wall time of run_harmony (seconds).

    run_harmonypy.py IN.h5ad OUT.npy --key batch [--key other] [--theta 2] [--max-iter 10]
"""
import argparse
import logging
import time

import anndata
import harmonypy
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--key", action="append", required=True)
    ap.add_argument("--theta", type=float)
    ap.add_argument("--max-iter", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    logging.getLogger("harmonypy").setLevel(logging.WARNING)
    ad = anndata.read_h5ad(a.inp)
    x = np.asarray(ad.obsm["X_pca"], dtype=np.float64)
    kw = {} if a.theta is None else {"theta": a.theta}
    t0 = time.perf_counter()
    ho = harmonypy.run_harmony(x, ad.obs, a.key if len(a.key) > 1 else a.key[0], max_iter_harmony=a.max_iter,
                               random_state=a.seed, verbose=False, **kw)
    t = time.perf_counter() - t0
    np.save(a.out, ho.Z_corr.T.astype(np.float32))
    print(f"{t:.3f} s run_harmony, {len(ho.objective_harmony) - 1} harmony iterations, kmeans rounds {ho.kmeans_rounds}")


if __name__ == "__main__":
    main()
