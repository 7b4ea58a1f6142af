"""Compare two Scrublet outputs (h5ad): Pearson correlation of obs doublet_score and the share of
cells whose predicted_doublet agrees (cells with a NaN score in either skipped).
Usage: /usr/bin/python3 bench/scrublet_compare.py A.h5ad B.h5ad"""
import sys

import h5py
import numpy as np


def read(path):
    with h5py.File(path, "r") as f:
        obs = f["obs"]
        s = np.asarray(obs["doublet_score"][...], dtype=np.float64)
        p = obs["predicted_doublet"]
        p = np.asarray(p[...] if isinstance(p, h5py.Dataset) else p["codes"][...]).astype(bool)
        return s, p


sa, pa = read(sys.argv[1])
sb, pb = read(sys.argv[2])
ok = np.isfinite(sa) & np.isfinite(sb)
r = np.corrcoef(sa[ok], sb[ok])[0, 1]
print(f"cells {ok.sum()}: score correlation {r:.4f}, predictions agree {np.mean(pa[ok] == pb[ok]):.4f}, "
      f"predicted doublets {pa[ok].sum()} vs {pb[ok].sum()}")
