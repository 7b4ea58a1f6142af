#!/usr/bin/env bash
# The sharded CPU pipeline under MPI gives the one-rank result:
#   bash test_mpi_run.sh SCURRY_BINARY REPO_ROOT
# Runs `mpirun -np 2 scurry run pbmc.h5ad` and `scurry run pbmc.h5ad` and compares the outputs with
# anndata: obs/var columns (floats to 1e-6 relative, the rest identical; HVG flags identical), X,
# layers/counts, raw.X, obsm['X_pca'] up to sign, obsp distances (the exact kNN: identical
# neighbours), leiden labels (identical or ARI >= 0.99). Also: a multi-rank error ends every rank
# with the exit code (no hang); --device gpu on 2 ranks equals 1 rank where there is a GPU, and is a
# clear error where there is none.
# Skips (exit 0, with a message) when mpirun is missing or scurry was built without MPI.
set -u
SCURRY=$1
REPO=$2
H5AD="$REPO/tests/data/pbmc3k_first1000.h5ad"
PY=/usr/bin/python3

if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 0; fi
if ! ldd "$SCURRY" 2>/dev/null | grep -q 'libmpi'; then echo "SKIP: $SCURRY was built without MPI"; exit 0; fi
[ -f "$H5AD" ] || { echo "FAIL - $H5AD is missing"; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/scurry_mpi_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
n=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
die() { echo "FAIL - $1"; for f in "$WORK"/*.log; do [ -s "$f" ] && sed "s|^|  $(basename "$f"): |" "$f" | tail -25; done; exit 1; }

# OpenMPI on a small box, maybe as root (CI): allow root, more ranks than cores, local launch only
# (no ssh), shared memory without the single-copy mechanism (refused in some containers).
export OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_orte_base_help_aggregate=0
MPIRUN=(mpirun --oversubscribe -np 2)
[ "$(id -u)" -eq 0 ] && MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2)

timeout 300 "${MPIRUN[@]}" "$SCURRY" --threads 1 run "$H5AD" -o "$WORK/a.h5ad" >"$WORK/mpi.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || die "mpirun -np 2 scurry run: exit code $rc"
grep -q 'MPI, 2 ranks' "$WORK/mpi.log" || die "mpirun -np 2 scurry run did not run on 2 ranks"
[ -s "$WORK/a.h5ad" ] || die "mpirun -np 2 scurry run wrote no output"
pass "mpirun -np 2 scurry run"

timeout 300 "$SCURRY" --threads 1 run "$H5AD" -o "$WORK/b.h5ad" >"$WORK/one.log" 2>&1 || die "scurry run (one rank) failed"
pass "scurry run (one rank)"

cat >"$WORK/compare.py" <<'PYEOF'
import sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, anndata as ad, scipy.sparse as sp

a, b = ad.read_h5ad(sys.argv[1]), ad.read_h5ad(sys.argv[2])  # 2 ranks, 1 rank
# "gpu": the GPU tests' tolerances (float32 partial sums over other row splits): X to 1e-5 of
# max(|x|, 1), X_pca's first 20 components correlated above 0.999, the same kNN neighbours with
# distances to 1e-3, connectivities to 1e-3, Leiden partitions of modularity within 0.01 on one graph.
gpu = len(sys.argv) > 3 and sys.argv[3] == "gpu"
bad = []
def check(ok, what):
    if not ok: bad.append(what)

def close(x, y, rtol=1e-6):
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape: return False
    if x.size == 0: return True
    scale = np.nanmax(np.abs(y)) if np.isfinite(y).any() else 1.0
    same_nan = np.array_equal(np.isnan(x), np.isnan(y))
    ok = np.abs(x - y) <= rtol * np.maximum(np.abs(y), 1e-3 * scale)
    return same_nan and bool(np.all(ok | np.isnan(y)))

def dense(m): return m.toarray() if sp.issparse(m) else np.asarray(m)

check(a.shape == b.shape, f"shape {a.shape} vs {b.shape}")
check(list(a.obs_names) == list(b.obs_names), "obs_names differ")
check(list(a.var_names) == list(b.var_names), "var_names differ")
for name, da, db in (("obs", a.obs, b.obs), ("var", a.var, b.var)):
    check(list(da.columns) == list(db.columns), f"{name} columns {list(da.columns)} vs {list(db.columns)}")
    for c in db.columns:
        if c not in da.columns or c == "leiden": continue
        x, y = da[c], db[c]
        if y.dtype.kind == "f":
            rtol = 1e-5 if gpu else 1e-6  # (GPU: float32 partial sums over other row splits)
            check(close(x, y, rtol), f"{name}['{c}'] differs beyond {rtol} relative")
        else:
            check(np.array_equal(x.astype(str).values, y.astype(str).values), f"{name}['{c}'] differs")
check(int(a.var["highly_variable"].sum()) == 2000, "not 2000 highly variable genes")
if gpu:
    check(bool(np.all(np.abs(dense(a.X) - dense(b.X)) <= 1e-5 * np.maximum(np.abs(dense(b.X)), 1.0))), "X differs beyond 1e-5")
else:
    check(close(dense(a.X), dense(b.X)), "X differs beyond 1e-6 relative")
check((a.layers["counts"] != b.layers["counts"]).nnz == 0, "layers['counts'] differ")
check(close(dense(a.raw.X), dense(b.raw.X), 1e-5 if gpu else 1e-6), "raw.X differs")
P, Q = a.obsm["X_pca"], b.obsm["X_pca"]
check(P.shape == Q.shape == (b.n_obs, 50), f"X_pca shape {P.shape}")
if P.shape == Q.shape and gpu:
    for j in range(20):
        r = np.corrcoef(P[:, j], Q[:, j])[0, 1]
        check(abs(r) > 0.999, f"X_pca component {j}: correlation {r:.5f}")
elif P.shape == Q.shape:
    s = np.sign(np.sum(P * Q, axis=0)); s[s == 0] = 1
    err = np.max(np.abs(P * s - Q), axis=0) / np.max(np.abs(Q), axis=0)
    check(err.max() <= 1e-5, f"X_pca differs up to sign: worst component {int(err.argmax())} at {err.max():.3g}")
Da, Db = a.obsp["distances"].tocsr(), b.obsp["distances"].tocsr()
Da.sort_indices(); Db.sort_indices()
check(np.array_equal(Da.indptr, Db.indptr) and np.array_equal(Da.indices, Db.indices), "kNN neighbours differ")
if Da.nnz == Db.nnz: check(close(Da.data, Db.data, 1e-3 if gpu else 1e-6), "kNN distances differ")
Ca, Cb = a.obsp["connectivities"], b.obsp["connectivities"]
check(Ca.shape == Cb.shape and abs(Ca - Cb).max() <= (1e-3 if gpu else 1e-5), "connectivities differ")
la, lb = a.obs["leiden"].astype(str).values, b.obs["leiden"].astype(str).values
def modularity(C, labels):
    C = C.tocsr(); m2 = C.sum(); k = np.asarray(C.sum(1)).ravel(); q = 0.0
    for l in np.unique(labels):
        i = np.where(labels == l)[0]
        q += C[i][:, i].sum() / m2 - (k[i].sum() / m2) ** 2
    return q
if gpu:
    qa, qb = modularity(Cb, la), modularity(Cb, lb)
    print(f"leiden modularity on the 1-rank graph: 2 ranks {qa:.4f}, 1 rank {qb:.4f}")
    check(abs(qa - qb) <= 0.01, f"leiden modularity {qa:.4f} vs {qb:.4f}")
elif not np.array_equal(la, lb):
    # adjusted Rand index
    ua, ia = np.unique(la, return_inverse=True); ub, ib = np.unique(lb, return_inverse=True)
    t = np.zeros((len(ua), len(ub))); np.add.at(t, (ia, ib), 1)
    c2 = lambda v: v * (v - 1) / 2
    sij, sa, sb, nn = c2(t).sum(), c2(t.sum(1)).sum(), c2(t.sum(0)).sum(), c2(len(la))
    exp = sa * sb / nn
    ari = (sij - exp) / (0.5 * (sa + sb) - exp)
    check(ari >= 0.99, f"leiden labels: ARI {ari:.4f} < 0.99")
check(a.obsm["X_umap"].shape == (b.n_obs, 2), "X_umap missing or misshapen")
for m in bad: print("  " + m)
sys.exit(1 if bad else 0)
PYEOF
"$PY" "$WORK/compare.py" "$WORK/a.h5ad" "$WORK/b.h5ad" >"$WORK/compare.log" 2>&1 || die "2 ranks vs 1 rank: results differ"
pass "2 ranks equal 1 rank: obs/var, X, counts, raw, X_pca (up to sign), kNN, connectivities, leiden"

# An error on the ranks ends them all with the exit code (2: bad input), without hanging.
timeout 120 "${MPIRUN[@]}" "$SCURRY" run "$H5AD" -o "$WORK/e.h5ad" --min-genes 100000 >"$WORK/err.log" 2>&1
rc=$?
[ "$rc" -ne 124 ] || die "a failing multi-rank run hung"
[ "$rc" -eq 2 ] || die "a failing multi-rank run: exit code $rc, expected 2"
grep -q 'min_genes=100000 removes all 1000 cells' "$WORK/err.log" || die "a failing multi-rank run: no error message over all cells"
[ ! -e "$WORK/e.h5ad" ] || die "a failing multi-rank run left an output"
pass "multi-rank error: all ranks end with exit code 2 and the error message, no output"

# --device gpu on several ranks: one GPU per rank (the launcher's local rank modulo the host's GPUs).
# With a GPU: 2 ranks equal 1 rank (the same comparison). Without one: a clear error on every rank.
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 1 ]; then
  timeout 300 "${MPIRUN[@]}" "$SCURRY" --device gpu run "$H5AD" -o "$WORK/g2.h5ad" >"$WORK/gpu2.log" 2>&1 ||
    die "mpirun -np 2 scurry --device gpu run failed"
  timeout 300 "$SCURRY" --device gpu run "$H5AD" -o "$WORK/g1.h5ad" >"$WORK/gpu1.log" 2>&1 || die "scurry --device gpu run failed"
  "$PY" "$WORK/compare.py" "$WORK/g2.h5ad" "$WORK/g1.h5ad" gpu >"$WORK/compare_gpu.log" 2>&1 ||
    die "--device gpu: 2 ranks vs 1 rank: results differ"
  pass "--device gpu: 2 ranks equal 1 rank (the GPU tests' tolerances)"
else
  timeout 120 "${MPIRUN[@]}" "$SCURRY" --device gpu run "$H5AD" -o "$WORK/g.h5ad" >"$WORK/gpu.log" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] || die "--device gpu on 2 ranks without a GPU hung"
  [ "$rc" -eq 2 ] || die "--device gpu on 2 ranks without a GPU: exit code $rc, expected 2"
  grep -q 'no usable CUDA device' "$WORK/gpu.log" || die "--device gpu on 2 ranks without a GPU: no clear message"
  [ ! -e "$WORK/g.h5ad" ] || die "--device gpu on 2 ranks without a GPU left an output"
  pass "--device gpu on 2 ranks without a GPU: a clear error, exit code 2, no output"
fi

echo "$n passed, 0 failed"
