#!/usr/bin/env bash
# scurry cnmf end to end: run on simulated counts, cNMF's file layout, usages in the h5ad's obsm,
# the stepwise commands reproduce run's consensus, and a bad argument exits with code 2.
set -euo pipefail
SCURRY="$1"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
"$SCURRY" -q simulate "$T/in.h5ad" --n-cells 400 --n-genes 300 --nnz-per-cell 120 --clusters 4 --seed 5
"$SCURRY" -q --threads 2 cnmf run "$T/in.h5ad" --output-dir "$T/out" --name t -k 3 4 --n-iter 6 --numgenes 150 \
  --seed 7 --write-h5ad "$T/u.h5ad"
D="$T/out/t"
for f in t.spectra.k_3.dt_0_5.consensus.txt t.usages.k_4.dt_0_5.consensus.txt t.gene_spectra_score.k_3.dt_0_5.txt \
         t.gene_spectra_tpm.k_4.dt_0_5.txt t.k_selection.png t.k_selection_stats.df.npz t.overdispersed_genes.txt \
         cnmf_tmp/t.nmf_params.df.npz cnmf_tmp/t.nmf_idvrun_params.yaml cnmf_tmp/t.spectra.k_3.merged.df.npz; do
  [ -s "$D/$f" ] || { echo "missing $f"; exit 1; }
done
/usr/bin/python3 - "$T" <<'PY'
import sys, anndata, pandas as pd, numpy as np
t = sys.argv[1]
a = anndata.read_h5ad(t + "/u.h5ad")
u = pd.read_csv(t + "/out/t/t.usages.k_4.dt_0_5.consensus.txt", sep="\t", index_col=0)
assert a.obsm["cnmf_usages_k4"].shape == (400, 4), a.obsm["cnmf_usages_k4"].shape
assert list(u.index) == list(a.obs_names)
assert np.allclose(u.values, a.obsm["cnmf_usages_k4"], rtol=1e-6, atol=1e-6)
s = pd.read_csv(t + "/out/t/t.spectra.k_3.dt_0_5.consensus.txt", sep="\t", index_col=0)
assert s.shape == (3, 150) and np.allclose(s.sum(1), 1, atol=1e-5)
g = pd.read_csv(t + "/out/t/t.gene_spectra_score.k_3.dt_0_5.txt", sep="\t", index_col=0)
assert g.shape == (3, 300)
with np.load(t + "/out/t/t.k_selection_stats.df.npz", allow_pickle=True) as f:
    k = pd.DataFrame(**f)
assert list(k.k) == [3, 4] and (k.silhouette <= 1).all()
PY
# Stepwise (cNMF's spelling: -c, and the old positional form above): the same consensus as run.
"$SCURRY" -q cnmf prepare -c "$T/in.h5ad" --output-dir "$T/out2" --name t -k 3 4 --n-iter 6 --numgenes 150 --seed 7
"$SCURRY" -q cnmf factorize --output-dir "$T/out2" --name t --worker-index 0 --total-workers 2
"$SCURRY" -q cnmf factorize --output-dir "$T/out2" --name t --worker-index 1 --total-workers 2
"$SCURRY" -q cnmf combine --output-dir "$T/out2" --name t
"$SCURRY" -q cnmf consensus --output-dir "$T/out2" --name t -k 3
cmp "$D/t.spectra.k_3.dt_0_5.consensus.txt" "$T/out2/t/t.spectra.k_3.dt_0_5.consensus.txt"
# Bad input: k = 0 is an input error (exit 2).
set +e
"$SCURRY" -q cnmf run "$T/in.h5ad" --output-dir "$T/out3" --name t -k 0 --n-iter 2 2>/dev/null
rc=$?
set -e
[ "$rc" = 2 ] || { echo "expected exit 2, got $rc"; exit 1; }
# The benchmark (CPU): table and JSON.
"$SCURRY" -q --threads 2 cnmf bench --cells 300 --genes 100 -k 3 4 --replicates 2 --iterations 3 --seed 4 \
  --json "$T/bench.json" > "$T/bench.log"
grep -q "rep/s" "$T/bench.log" || { echo "no table"; cat "$T/bench.log"; exit 1; }
/usr/bin/python3 - "$T/bench.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["backend"] == "cpu" and j["cells"] == 300 and j["genes"] == 100 and j["iterations"] == 3, j
assert [k["k"] for k in j["ks"]] == [3, 4]
for k in j["ks"]:
    assert k["replicates"] == 2 and k["flops_per_iteration"] == 4 * 300 * 100 * k["k"] * 2
    assert abs(k["replicates_per_second"] * k["seconds"] - 2) < 1e-9
    assert 0 < k["relative_error"] < 1
assert 0 < j["density"] < 1 and j["nnz"] == round(j["density"] * 300 * 100)
PY
set +e
"$SCURRY" -q cnmf bench --cells 100 --genes 50 -k 3 --programs 40 2>/dev/null
rc=$?
set -e
[ "$rc" = 2 ] || { echo "bench: expected exit 2, got $rc"; exit 1; }
echo ok
