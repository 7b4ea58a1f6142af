#!/usr/bin/env python3
"""Harmony references on seeded synthetic batches (issue 21): harmonypy 0.0.9 (Debian's
python3-harmonypy, with python3-sklearn 1.2.1 for its k-means) run as
scanpy.external.pp.harmony_integrate does, on bench/integrate/make_batches.py's model
(1,500 cells x 20 dims, 3 batches, 6 cell types, seed 7) plus a second batch variable ('donor',
4 levels, partly aligned with the batches and shifting the cells too). Writes
tests/data/golden/harmony_synthetic.h5 (float32, gzip): X_pca (input), batch, donor, celltype
(codes), harmony_batch (run_harmony(..., 'batch')) and harmony_batch_donor (['batch', 'donor']).

    python3 tests/data/make_harmony_ref.py
"""
import hashlib
import logging
import os
import sys

import h5py
import harmonypy
import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "integrate"))
from make_batches import make  # noqa: E402


def main():
    logging.getLogger("harmonypy").setLevel(logging.WARNING)
    x, batch, ctype = make(1500, 20, 3, 6, 7)
    rng = np.random.default_rng(8)
    donor = np.where(rng.random(len(batch)) < 0.7, batch, rng.integers(0, 4, len(batch)))
    scale = 1.0 / np.sqrt(1.0 + np.arange(x.shape[1]))
    x = (x + (rng.normal(0, 1.5, (4, x.shape[1])) * scale)[donor]).astype(np.float32)
    obs = pd.DataFrame({"batch": pd.Categorical([f"b{b}" for b in batch]),
                        "donor": pd.Categorical([f"d{b}" for b in donor])})
    out = os.path.join(HERE, "golden", "harmony_synthetic.h5")
    with h5py.File(out, "w") as f:
        def put(name, a, dtype):
            f.create_dataset(name, data=np.asarray(a, dtype=dtype), compression="gzip", compression_opts=9,
                             shuffle=True, track_times=False)
        put("X_pca", x, np.float32)
        put("batch", batch, np.int8)
        put("donor", donor, np.int8)
        put("celltype", ctype, np.int8)
        for name, keys in [("harmony_batch", "batch"), ("harmony_batch_donor", ["batch", "donor"])]:
            ho = harmonypy.run_harmony(x.astype(np.float64), obs, keys, random_state=0, verbose=False)
            put(name, ho.Z_corr.T, np.float32)
            print(name, "harmony iterations", len(ho.objective_harmony) - 1, "kmeans rounds", ho.kmeans_rounds)
    print(hashlib.sha256(open(out, "rb").read()).hexdigest(), "golden/harmony_synthetic.h5")


if __name__ == "__main__":
    main()
