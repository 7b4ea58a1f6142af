#!/usr/bin/env bash
# scurry cnmf as a drop-in for cNMF 1.7.1, against cNMF's own run folder (tests/data/golden/cnmf_pbmc3k,
# made by cNMF's Python on tests/data/pbmc3k_first1000.h5ad; tests/data/README.md):
#  1. cNMF's command line (prepare -c ... -k 4 5 --n-iter 6 --seed 14 --numgenes 500, factorize,
#     combine, k_selection_plot, consensus at thresholds 0.5 and 2.0 with --show-clustering and
#     --build-reference) writes every file cNMF wrote with the same name, keys, dtypes, shapes and
#     labels, numpy and pandas read them as cNMF's load_df_from_npz / load_results do, and the numbers
#     agree: replicate seeds equal, k-selection stability and error within 5%, every consensus
#     program (spectra, usages, TPM spectra, starCAT reference) matched with Pearson r >= 0.95
#     (tests/nmf/cnmf_compare.py);
#  2. scurry resumes from cNMF's folder: consensus and k_selection_plot from cNMF's merged spectra,
#     replicate table, yaml and normalised counts give cNMF's results; combine merges cNMF's iter files;
#  3. factorize --skip-completed-runs redoes only the missing replicate (same bytes);
#  4. the PNGs are PNGs with ink on them; bad folders fail with the file named.
set -euo pipefail
SCURRY="$1"
ROOT="$2"
GOLD="$ROOT/tests/data/golden/cnmf_pbmc3k/pbmc3k"
CMP="$ROOT/tests/nmf/cnmf_compare.py"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
IN="$ROOT/tests/data/pbmc3k_first1000.h5ad"
S=("$SCURRY" -q --threads 1 cnmf)  # small problems: one thread is fastest (same bits for any count)
# 1. The drop-in command line.
"${S[@]}" prepare --output-dir "$T/a" --name pbmc3k -c "$IN" -k 4 5 --n-iter 6 --seed 14 --numgenes 500 --total-workers 1
"${S[@]}" factorize --output-dir "$T/a" --name pbmc3k --worker-index 0 --total-workers 1
"${S[@]}" combine --output-dir "$T/a" --name pbmc3k
"${S[@]}" k_selection_plot --output-dir "$T/a" --name pbmc3k
for dt in 0.5 2.0; do
  "${S[@]}" consensus --output-dir "$T/a" --name pbmc3k -k 5 --local-density-threshold $dt --show-clustering --build-reference
done
/usr/bin/python3 "$CMP" "$T/a/pbmc3k" "$GOLD" pbmc3k
/usr/bin/python3 - "$T/a/pbmc3k" <<'PY'
# What cNMF's load_results and load_df_from_npz do with these files.
import sys, glob, os
import numpy as np, pandas as pd
d = sys.argv[1]
for f in glob.glob(d + "/cnmf_tmp/*.df.npz") + glob.glob(d + "/*.df.npz"):
    with np.load(f, allow_pickle=True) as z:
        pd.DataFrame(**z)
dt = "0_5"
score = pd.read_csv(d + "/pbmc3k.gene_spectra_score.k_5.dt_%s.txt" % dt, sep="\t", index_col=0).T
tpm = pd.read_csv(d + "/pbmc3k.gene_spectra_tpm.k_5.dt_%s.txt" % dt, sep="\t", index_col=0).T
usage = pd.read_csv(d + "/pbmc3k.usages.k_5.dt_%s.consensus.txt" % dt, sep="\t", index_col=0)
usage = usage.div(usage.sum(axis=1), axis=0)
usage.columns = [int(x) for x in usage.columns]
assert usage.shape == (1000, 5) and score.shape == (13714, 5) and tpm.shape == (13714, 5)
assert not score.isnull().values.any()
top = [list(score.sort_values(by=c, ascending=False).index[:100]) for c in score.columns]
assert all(len(set(t)) == 100 for t in top)
ref = pd.read_csv(d + "/pbmc3k.starcat_spectra.k_5.dt_%s.txt" % dt, index_col=0, sep="\t")  # as starCAT reads it
assert list(ref.index) == ["GEP%d" % i for i in range(1, 6)] and ref.shape == (5, 500)
with open(d + "/cnmf_tmp/pbmc3k.nmf_idvrun_params.yaml") as f:
    kv = dict(l.split(": ", 1) for l in f.read().splitlines())
assert kv == {"alpha_H": "0.0", "alpha_W": "0.0", "beta_loss": "frobenius", "init": "random", "l1_ratio": "0.0",
              "max_iter": "1000", "solver": "cd", "tol": "0.0001"}, kv
for png in glob.glob(d + "/*.png"):
    b = open(png, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", png
    assert len(b) > 5000, (png, len(b))
assert len(glob.glob(d + "/*.clustering.k_5.dt_*.png")) == 2
print("cNMF-side reads ok")
PY
# 2. Resume from cNMF's folder: cNMF's replicate table, yaml, normalised counts, TPM statistics and
#    merged spectra; the TPM matrix (not in the test copy) from scurry's prepare of the same counts.
R="$T/r/pbmc3k"
mkdir -p "$R/cnmf_tmp"
cp "$GOLD"/cnmf_tmp/pbmc3k.{nmf_params.df.npz,nmf_idvrun_params.yaml,norm_counts.h5ad,tpm_stats.df.npz} "$R/cnmf_tmp/"
cp "$GOLD"/cnmf_tmp/pbmc3k.spectra.k_{4,5}.merged.df.npz "$R/cnmf_tmp/"
cp "$GOLD/pbmc3k.overdispersed_genes.txt" "$R/"
cp "$T/a/pbmc3k/cnmf_tmp/pbmc3k.tpm.h5ad" "$R/cnmf_tmp/"
chmod -R u+w "$T/r"
"${S[@]}" k_selection_plot --output-dir "$T/r" --name pbmc3k
for dt in 0.5 2.0; do
  "${S[@]}" consensus --output-dir "$T/r" --name pbmc3k -k 5 --local-density-threshold $dt --build-reference
done
/usr/bin/python3 "$CMP" "$R" "$GOLD" pbmc3k --resumed
# combine over cNMF's own iter files (two of them in the test copy).
C="$T/c/pbmc3k"
mkdir -p "$C/cnmf_tmp"
cp "$GOLD"/cnmf_tmp/pbmc3k.nmf_params.df.npz "$GOLD"/cnmf_tmp/pbmc3k.spectra.k_5.iter_{0,1}.df.npz "$C/cnmf_tmp/"
chmod -R u+w "$T/c"
set +e
"${S[@]}" combine --output-dir "$T/c" --name pbmc3k -k 5 2> "$T/err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "pbmc3k.spectra.k_5.iter_2.df.npz" "$T/err" || { echo "combine: expected exit 2 naming iter_2 (rc $rc)"; cat "$T/err"; exit 1; }
"${S[@]}" combine --output-dir "$T/c" --name pbmc3k -k 5 --skip-missing-files
/usr/bin/python3 - "$C/cnmf_tmp/pbmc3k.spectra.k_5.merged.df.npz" "$GOLD/cnmf_tmp/pbmc3k.spectra.k_5.merged.df.npz" <<'PY'
import sys, numpy as np
a, b = (np.load(f, allow_pickle=True) for f in sys.argv[1:])
assert a["data"].shape == (10, 500) and a["data"].dtype == np.float64
assert np.array_equal(a["data"], b["data"][:10]) and list(a["index"]) == list(b["index"][:10])
assert list(a["columns"]) == list(b["columns"])
print("combine of cNMF's iter files ok")
PY
# 3. --skip-completed-runs: only the missing replicate is redone, with the same bytes.
cp "$T/a/pbmc3k/cnmf_tmp/pbmc3k.spectra.k_5.iter_3.df.npz" "$T/iter3.npz"
rm "$T/a/pbmc3k/cnmf_tmp/pbmc3k.spectra.k_5.iter_3.df.npz"
touch -d '2001-01-01' "$T/a/pbmc3k/cnmf_tmp/pbmc3k.spectra.k_4.iter_0.df.npz"
"${S[@]}" factorize --output-dir "$T/a" --name pbmc3k --skip-completed-runs
cmp "$T/iter3.npz" "$T/a/pbmc3k/cnmf_tmp/pbmc3k.spectra.k_5.iter_3.df.npz"
[ "$(date -r "$T/a/pbmc3k/cnmf_tmp/pbmc3k.spectra.k_4.iter_0.df.npz" +%Y)" = 2001 ] || { echo "a completed run was redone"; exit 1; }
# 4. Errors name the file.
set +e
"${S[@]}" consensus --output-dir "$T/none" --name pbmc3k -k 5 2> "$T/err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "nmf_params.df.npz" "$T/err" || { echo "expected exit 2 naming nmf_params.df.npz (rc $rc)"; cat "$T/err"; exit 1; }
echo ok
