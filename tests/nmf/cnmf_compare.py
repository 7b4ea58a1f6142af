#!/usr/bin/env python3
"""Compares a cNMF run folder written by scurry with one written by cNMF 1.7.1 itself.

usage: cnmf_compare.py SCURRY_DIR GOLDEN_DIR NAME [--full] [--resumed]
Checks (numpy's own loader; exits non-zero on the first failure):
  * every .df.npz of the golden folder that exists in both: keys data/index/columns, dtypes and shapes
    equal, and equal index/columns labels (the names of cells, genes and programs);
  * the golden folder's files (that the test copy holds) all exist in scurry's folder (--full: every
    golden file name must exist);
    (--resumed: a folder resumed from cNMF's merged spectra has no iter files: those are not required);
  * the numbers: every consensus program of cNMF matched to one of scurry's with Pearson r >= 0.95
    (spectra and usages), the k-selection stability and error within 5%, the replicate seeds equal.
Prints the agreement figures.
"""
import os, sys
import numpy as np

def load(path):
    with np.load(path, allow_pickle=True) as f:
        return {k: f[k] for k in f.files}

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

def main():
    ours, gold, name = sys.argv[1], sys.argv[2], sys.argv[3]
    full = "--full" in sys.argv
    resumed = "--resumed" in sys.argv
    gfiles = []
    for root, _, files in os.walk(gold):
        for f in files:
            gfiles.append(os.path.relpath(os.path.join(root, f), gold))
    for rel in sorted(gfiles):
        o = os.path.join(ours, rel)
        if not os.path.exists(o):
            if resumed and ".iter_" in rel:
                continue
            if full or rel.endswith(".npz") or rel.endswith(".yaml") or rel.endswith(".txt"):
                fail("scurry did not write " + rel)
            continue
        if not rel.endswith(".npz"):
            continue
        a, b = load(o), load(os.path.join(gold, rel))
        if sorted(a) != sorted(b):
            fail("%s: keys %s, cNMF's %s" % (rel, sorted(a), sorted(b)))
        for k in b:
            if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape:
                fail("%s[%s]: %s %s, cNMF's %s %s" % (rel, k, a[k].dtype, a[k].shape, b[k].dtype, b[k].shape))
        for k in ("index", "columns"):
            if not np.array_equal(a[k], b[k]):
                # consensus/stats labels must match; replicate-dependent labels too
                fail("%s[%s]: labels differ (%s... vs %s...)" % (rel, k, a[k][:3], b[k][:3]))
        print("ok %-60s %s" % (rel, ", ".join("%s %s%s" % (k, b[k].dtype, b[k].shape) for k in ("data", "index", "columns"))))
    # Numbers.
    t = lambda d, f: os.path.join(d, "cnmf_tmp", name + "." + f)
    pa, pb = load(t(ours, "nmf_params.df.npz")), load(t(gold, "nmf_params.df.npz"))
    if not np.array_equal(pa["data"].astype(np.int64), pb["data"].astype(np.int64)):
        fail("nmf_params differ: %s vs %s" % (pa["data"][:3], pb["data"][:3]))
    print("replicate seeds: equal to cNMF's (%d replicates)" % len(pb["data"]))
    ka, kb = load(os.path.join(ours, name + ".k_selection_stats.df.npz")), load(os.path.join(gold, name + ".k_selection_stats.df.npz"))
    for col in (2, 3):
        rel = np.abs(ka["data"][:, col] - kb["data"][:, col]) / np.abs(kb["data"][:, col])
        print("k-selection %s: scurry %s cNMF %s, max relative difference %.3g" % (
            kb["columns"][col], ka["data"][:, col].tolist(), kb["data"][:, col].tolist(), rel.max()))
        if rel.max() > 0.05:
            fail("k-selection %s differs by more than 5%%" % kb["columns"][col])
    for dt in ("0_5", "2_0"):
        for what, f in (("spectra", "spectra.k_5.dt_%s.consensus.df.npz"), ("usages", "usages.k_5.dt_%s.consensus.df.npz"),
                        ("gene_spectra_tpm", "gene_spectra_tpm.k_5.dt_%s.df.npz"),
                        ("starcat", "starcat_spectra.k_5.dt_%s.df.npz")):
            fa, fb = t(ours, f % dt), t(gold, f % dt)
            if not os.path.exists(fb):
                continue
            A, B = load(fa)["data"].astype(float), load(fb)["data"].astype(float)
            if what == "usages":
                A, B = A.T, B.T
            k = B.shape[0]
            R = np.corrcoef(np.vstack([B, A]))[:k, k:]
            best = R.max(axis=1)
            same_order = np.allclose(np.argmax(R, axis=1), np.arange(k))
            print("dt %s %-16s: every cNMF program matched, Pearson r min %.9f (1 - r max %.2e)%s" % (
                dt, what, best.min(), 1 - best.min(), ", same order" if same_order else ""))
            if best.min() < 0.95:
                fail("%s dt %s: a cNMF program has no scurry match with r >= 0.95" % (what, dt))
    print("all checks passed")

if __name__ == "__main__":
    main()
