#!/usr/bin/env bash
# The batch tools end to end (issue 21): harmony-integrate, combat, regress-out, scrublet and run
# --integrate harmony --scrublet on pbmc3k with the references' made-up batch (first 500 cells 'a'):
# exit codes, a bad key named in the message with no output left, and the outputs read by anndata
# 0.8 (warnings as errors) with scanpy's slots: X_pca_harmony, combat's X within 1e-3 of scanpy's,
# regress_out's X equal to numpy's least squares within 1e-4, Scrublet's obs/uns as scanpy 1.10's.
# usage: test_integrate_cli.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
golden="$repo/tests/data/golden/pbmc3k_first1000.scanpy.h5ad"
ref="$repo/tests/data/golden/pbmc3k_first1000.scanpy_integrate.h5"
counts="$repo/tests/data/pbmc3k_first1000.h5ad"

# Inputs: the log-normalised HVG matrix with obs batch/total_counts/pct_counts_mt and X_pca; the
# counts with obs batch.
"$py" -W error - "$tmp" "$golden" "$ref" "$counts" <<'PY'
import sys
import h5py
import numpy as np
import pandas as pd
import anndata as ad

tmp, golden, ref, counts = sys.argv[1:]
g = ad.read_h5ad(golden)
r = h5py.File(ref, "r")
idx = r["hvg_raw_index"][()]
x = g.raw.X[:, idx].toarray().astype(np.float32)
obs = pd.DataFrame({"batch": pd.Categorical(["a"] * 500 + ["b"] * 500),
                    "total_counts": r["total_counts"][()],
                    "pct_counts_mt": g.obs["pct_counts_mt"].values}, index=g.obs_names)
ad.AnnData(x, obs=obs, var=pd.DataFrame(index=g.var_names), obsm={"X_pca": g.obsm["X_pca"]}).write_h5ad(f"{tmp}/in.h5ad")
c = ad.read_h5ad(counts)
c.obs["batch"] = pd.Categorical(["a"] * 500 + ["b"] * 500)
c.write_h5ad(f"{tmp}/counts.h5ad")
PY

"$scurry" -q harmony-integrate "$tmp/in.h5ad" -o "$tmp/h.h5ad" --key batch
"$scurry" -q combat "$tmp/in.h5ad" -o "$tmp/c.h5ad" --key batch
"$scurry" -q regress-out "$tmp/in.h5ad" -o "$tmp/r.h5ad" --keys total_counts,pct_counts_mt
"$scurry" -q scrublet "$tmp/counts.h5ad" -o "$tmp/s.h5ad"
"$scurry" -q scrublet "$tmp/counts.h5ad" -o "$tmp/sb.h5ad" --batch-key batch
set +e
"$scurry" -q harmony-integrate "$tmp/in.h5ad" -o "$tmp/bad1.h5ad" --key sample 2>"$tmp/e1"; rc1=$?
"$scurry" -q combat "$tmp/in.h5ad" -o "$tmp/bad2.h5ad" --key donor 2>"$tmp/e2"; rc2=$?
"$scurry" -q regress-out "$tmp/in.h5ad" -o "$tmp/bad3.h5ad" --keys total_counts,pct_mito 2>"$tmp/e3"; rc3=$?
"$scurry" -q scrublet "$tmp/in.h5ad" -o "$tmp/bad4.h5ad" 2>"$tmp/e4"; rc4=$?
"$scurry" -q scrublet "$tmp/counts.h5ad" -o "$tmp/bad5.h5ad" --batch-key sample 2>"$tmp/e5"; rc5=$?
"$scurry" -q run "$tmp/counts.h5ad" -o "$tmp/bad6.h5ad" --integrate harmony 2>"$tmp/e6"; rc6=$?
"$scurry" -q --device cpu harmony-integrate "$tmp/in.h5ad" -o "$tmp/bad7.h5ad" --key batch --gpus 1 2>"$tmp/e7"; rc7=$?
set -e
for i in 1 2 3 4 5 6 7; do
  rc="rc$i"
  test "${!rc}" -eq 2 || { echo "bad$i: exit ${!rc}"; cat "$tmp/e$i"; exit 1; }
  test ! -e "$tmp/bad$i.h5ad" || { echo "bad$i: output left"; exit 1; }
done
grep -q "'sample'" "$tmp/e1" && grep -q "'donor'" "$tmp/e2" && grep -q "'pct_mito'" "$tmp/e3"
grep -q "counts" "$tmp/e4" && grep -q "'sample'" "$tmp/e5" && grep -q "batch-key" "$tmp/e6"
grep -q "in.h5ad" "$tmp/e1" && grep -q -- "--gpus" "$tmp/e7"

"$scurry" -q run "$tmp/counts.h5ad" -o "$tmp/run.h5ad" --batch-key batch --integrate harmony --scrublet --no-markers

"$py" -W error - "$tmp" "$ref" <<'PY'
import sys
import h5py
import numpy as np
import anndata as ad

tmp, ref = sys.argv[1:]
r = h5py.File(ref, "r")
inp = ad.read_h5ad(f"{tmp}/in.h5ad")
h = ad.read_h5ad(f"{tmp}/h.h5ad")
z = h.obsm["X_pca_harmony"]
assert z.shape == (1000, 50) and z.dtype == np.float32 and np.isfinite(z).all()
assert not np.allclose(z, inp.obsm["X_pca"])
# the 15 nearest neighbours of scanpy's (harmonypy's) X_pca_harmony mostly kept
def knn(m):
    d = ((m[:, None, :].astype(np.float64) - m[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    return np.argsort(d, 1)[:, :15]
a, b = knn(z), knn(r["X_pca_harmony"][()])
overlap = np.mean([len(set(a[i]) & set(b[i])) / 15 for i in range(1000)])
assert overlap >= 0.85, overlap
c = ad.read_h5ad(f"{tmp}/c.h5ad")
assert not hasattr(c.X, "toarray")
np.testing.assert_allclose(c.X[:, :100], r["combat"][()], atol=1e-3)
rr = ad.read_h5ad(f"{tmp}/r.h5ad")
x = inp.X.astype(np.float64)
d = np.c_[np.ones(1000), inp.obs["total_counts"], inp.obs["pct_counts_mt"]]
want = x - d @ np.linalg.lstsq(d, x, rcond=None)[0]
np.testing.assert_allclose(rr.X, want, atol=1e-4)
s = ad.read_h5ad(f"{tmp}/s.h5ad")
assert s.obs["doublet_score"].dtype == np.float64 and s.obs["predicted_doublet"].dtype == bool
np.testing.assert_allclose(s.obs["doublet_score"].values, r["scrublet/doublet_score"][()], atol=1e-9)
u = s.uns["scrublet"]
assert set(u) == {"doublet_scores_sim", "doublet_parents", "parameters", "threshold"}, set(u)
assert u["doublet_parents"].shape == (2000, 2)
assert int(u["parameters"]["n_neighbors"]) == 16 and float(u["parameters"]["sim_doublet_ratio"]) == 2.0
assert abs(float(u["threshold"]) - float(r["scrublet/threshold"][()])) < 1e-9
sb = ad.read_h5ad(f"{tmp}/sb.h5ad")
assert sb.uns["scrublet"]["batched_by"] == "batch" and set(sb.uns["scrublet"]["batches"]) == {"a", "b"}
assert np.isfinite(sb.obs["doublet_score"]).all()
run = ad.read_h5ad(f"{tmp}/run.h5ad")
assert "X_pca_harmony" in run.obsm and "doublet_score" in run.obs and "predicted_doublet" in run.obs
assert run.uns["neighbors"]["params"]["use_rep"] == "X_pca_harmony", run.uns["neighbors"]["params"]
print("integrate CLI: ok")
PY
