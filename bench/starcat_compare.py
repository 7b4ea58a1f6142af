#!/usr/bin/python3
"""Pearson r per program between starCAT's usages (bench/starcat_reference.py -o, .npy) and scurry's
(`scurry cnmf project ... -o OUT.txt`, normalised usages). Usage: starcat_compare.py REF.npy SCURRY.txt"""
import sys

import numpy as np
import pandas as pd

ref = np.load(sys.argv[1]).astype(np.float64)
ours = pd.read_csv(sys.argv[2], sep="\t", index_col=0).values.astype(np.float64)
assert ref.shape == ours.shape, (ref.shape, ours.shape)
r = [np.corrcoef(ref[:, j], ours[:, j])[0, 1] for j in range(ref.shape[1])]
d = np.abs(ref - ours)
print("programs %d: Pearson r min %.6f median %.6f max %.6f; |usage difference| mean %.2e, max %.2e"
      % (len(r), min(r), float(np.median(r)), max(r), d.mean(), d.max()))
print("per program r: " + " ".join("%.4f" % x for x in r))
sys.exit(0 if min(r) >= 0.99 else 1)
