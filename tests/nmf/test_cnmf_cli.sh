#!/usr/bin/env bash
# scurry cnmf end to end: run on simulated counts, cNMF's file layout, usages in the h5ad's obsm,
# the stepwise commands reproduce run's consensus, and a bad argument exits with code 2.
set -euo pipefail
SCURRY="$1"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
"$SCURRY" -q simulate "$T/in.h5ad" --n-cells 400 --n-genes 300 --nnz-per-cell 120 --clusters 4 --seed 5
"$SCURRY" -q --threads 2 cnmf run "$T/in.h5ad" --output-dir "$T/out" --name t -k 3 4 --n-iter 6 --numgenes 150 \
  --seed 7 --write-h5ad "$T/u.h5ad" --build-reference
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
# cNMF's other prepare options and the aliases: --init nndsvd, --densify, --tpm, --max-iter (old
# spelling of --max-nmf-iter), TrynkaLab's --engine/--gpu-batch, k-selection (old k_selection_plot).
"$SCURRY" -q cnmf prepare -c "$T/in.h5ad" --output-dir "$T/o4" --name t -k 3 --n-iter 2 --numgenes 100 --seed 3 \
  --init nndsvd --densify --max-iter 50 --tpm "$T/out2/t/cnmf_tmp/t.tpm.h5ad"
"$SCURRY" -q cnmf factorize --output-dir "$T/o4" --name t --engine cpu --gpu-batch 8
"$SCURRY" -q cnmf combine --output-dir "$T/o4" --name t
"$SCURRY" -q cnmf k-selection --output-dir "$T/o4" --name t
/usr/bin/python3 - "$T" <<'PY'
import sys, h5py, numpy as np
t = sys.argv[1] + "/o4/t/cnmf_tmp/t."
kv = dict(l.split(": ", 1) for l in open(t + "nmf_idvrun_params.yaml").read().splitlines())
assert kv["init"] == "nndsvd" and kv["max_iter"] == "50", kv
with h5py.File(t + "norm_counts.h5ad", "r") as f:
    assert isinstance(f["X"], h5py.Dataset) and f["X"].dtype == np.float64, f["X"]  # --densify: dense float64
with h5py.File(t + "tpm.h5ad", "r") as f, h5py.File(sys.argv[1] + "/out2/t/cnmf_tmp/t.tpm.h5ad", "r") as g:
    assert np.allclose(f["X"][()].sum(), g["X/data"][()].sum(), rtol=1e-5)  # the given TPM, stored dense
a, b = (np.load(t + "spectra.k_3.iter_%d.df.npz" % i, allow_pickle=True)["data"] for i in (0, 1))
assert np.array_equal(a, b)  # nndsvd: every replicate starts (and ends) the same
PY
# cNMF's other counts inputs: a cells x genes TSV and a .df.npz frame give the h5ad's prepare.
/usr/bin/python3 - "$T" <<'PY'
import sys, anndata, numpy as np, pandas as pd
t = sys.argv[1]
a = anndata.read_h5ad(t + "/in.h5ad")
df = pd.DataFrame(a.X.toarray(), index=a.obs_names, columns=a.var_names)
df.to_csv(t + "/in.txt", sep="\t")
np.savez_compressed(t + "/in.df.npz", data=df.values, index=df.index.values, columns=df.columns.values)
PY
for f in in.txt in.df.npz; do
  "$SCURRY" -q cnmf prepare -c "$T/$f" --output-dir "$T/o5" --name "$f" -k 3 --n-iter 2 --numgenes 150 --seed 7
  cmp "$T/out2/t/t.overdispersed_genes.txt" "$T/o5/$f/$f.overdispersed_genes.txt"
  /usr/bin/python3 - "$T/out2/t/cnmf_tmp/t.norm_counts.h5ad" "$T/o5/$f/cnmf_tmp/$f.norm_counts.h5ad" <<'PY'
import sys, anndata, numpy as np
a, b = (anndata.read_h5ad(f) for f in sys.argv[1:])
assert list(a.obs_names) == list(b.obs_names) and list(a.var_names) == list(b.var_names)
assert np.allclose(a.X.toarray(), b.X.toarray(), rtol=1e-6)
PY
done
# starCAT: the run's reference projected back onto its own counts; usages normalised per cell.
"$SCURRY" -q --threads 2 cnmf project "$D/t.starcat_spectra.k_3.dt_0_5.txt" "$T/in.h5ad" -o "$T/proj.txt"
/usr/bin/python3 - "$T/proj.txt" <<'PY'
import sys, pandas as pd, numpy as np
u = pd.read_csv(sys.argv[1], sep="\t", index_col=0)
assert u.shape == (400, 3) and list(u.columns) == ["GEP1", "GEP2", "GEP3"], u.shape
assert np.allclose(u.sum(1), 1, atol=1e-5) and (u.values >= 0).all()
PY
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
