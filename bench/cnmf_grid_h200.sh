#!/usr/bin/env bash
# Issue 23 point 6 (issue 6's grid through cNMF's own command line) on one H200:
#   2,400,000 cells x 2,000 genes with 20 planted programs (`scurry cnmf simulate`: `cnmf bench`'s
#   model, CPU generator, written as an .h5ad), then the drop-in verbs a cNMF user types:
#   prepare -k 2 4 ... 60 --n-iter $NITER (3,000 replicates), factorize, combine, k_selection_plot,
#   consensus -k 20. 100 iterations per replicate: `--max-nmf-iter 100 --tol 0` (cNMF's
#   --max-nmf-iter; --tol 0 is scurry's, so that no replicate stops early, as in issue 6 and
#   RESULTS section 5); TF32 GEMMs (`--tf32`, as section 5).
#
# Idempotent and resumable: the data and prepare are skipped when present, factorize runs with
# --skip-completed-runs under a time budget (a batch killed by the budget is redone next time, the
# finished batches' spectra files stay), and each later verb is skipped once it has finished. Run
# it again until it prints "GRID DONE" (session 15 on one H200: two 10-minute calls and 3.5 minutes of
# a third; RESULTS section 44). DIR must survive between the calls: on the lent GPU machine, call again
# within its idle window, before it is given back and its disk wiped.
#
# Usage: bash bench/cnmf_grid_h200.sh [SCURRY] [DIR] [BUDGET_S]
#   SCURRY   the binary (default ./build-cuda/scurry)
#   DIR      working folder (default /tmp/cnmf_grid; ~30 GB: counts 6 GB, norm_counts 9 GB, TPM 6 GB)
#   BUDGET_S seconds this call may use (default 560: under one 600 s device call)
# GRID_TIME: GNU time (default /usr/bin/time). A smoke test elsewhere: GRID_CELLS=3000 GRID_KS="2 4" GRID_NITER=3 GRID_DEVICE=cpu GRID_THREADS=2 ...
set -uo pipefail
S=${1:-./build-cuda/scurry}
D=${2:-/tmp/cnmf_grid}
BUDGET=${3:-560}
T0=$(date +%s)
mkdir -p "$D"
LOG="$D/grid.log"
say() { echo "[$(date -u +%H:%M:%S) +$(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# run NAME CMD...: timed (/usr/bin/time -v into $D/NAME.time), output into $D/NAME.log; returns its status.
run() {
  local name=$1; shift
  say "start $name: $*"
  "${GRID_TIME:-/usr/bin/time}" -v -o "$D/$name.time" "$@" >> "$D/$name.log" 2>&1
  local rc=$?
  say "end $name rc=$rc wall $(grep 'Elapsed' "$D/$name.time" | awk '{print $NF}') peak RSS $(grep 'Maximum resident' "$D/$name.time" | awk '{print $NF}') KB"
  return $rc
}
CELLS=${GRID_CELLS:-2400000}
KS=${GRID_KS:-$(seq -s ' ' 2 2 60)}
NITER=${GRID_NITER:-100}
DEV=${GRID_DEVICE:-gpu}
TH=${GRID_THREADS:-16}
NK=$(echo $KS | wc -w)
CK=${GRID_CONSENSUS_K:-20}
N=grid
O="$D/out"
say "call: binary $S, folder $D, budget ${BUDGET}s, disk free $(df -h "$D" | awk 'NR==2{print $4}')"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null | tee -a "$LOG"

# 1. The data.
if [ ! -s "$D/counts.h5ad" ]; then
  run simulate "$S" --threads $TH cnmf simulate "$D/counts.h5ad" --cells $CELLS --genes 2000 --programs 20 --seed 0 || exit 1
fi
# 2. prepare (its run-parameter yaml is written last).
if [ ! -s "$O/$N/cnmf_tmp/$N.nmf_idvrun_params.yaml" ]; then
  run prepare "$S" --threads $TH cnmf prepare --output-dir "$O" --name $N -c "$D/counts.h5ad" -k $KS --n-iter $NITER \
    --seed 14 --numgenes 2000 --max-nmf-iter 100 --tol 0 || exit 1
fi
# 3. factorize, resumable.
want=$((NK * NITER))
have() { ls "$O/$N/cnmf_tmp/" 2>/dev/null | grep -c '\.spectra\.k_[0-9]*\.iter_[0-9]*\.df\.npz$'; }
if [ "$(have)" -lt $want ]; then
  budget=$(( $(left) - 10 ))
  if [ $budget -lt 60 ]; then say "not enough time left for factorize; run this script again"; exit 0; fi
  run "factorize_$(date +%s)" timeout --signal=TERM $budget "$S" --threads $TH --device $DEV cnmf factorize --output-dir "$O" \
    --name $N --worker-index 0 --total-workers 1 --skip-completed-runs --tf32
  say "replicate spectra: $(have) of $want"
  if [ "$(have)" -lt $want ]; then say "factorize not finished: run this script again to resume"; exit 0; fi
fi
# 4-6. combine, k_selection_plot, consensus (each once).
step() {
  local name=$1; shift
  [ -e "$D/$name.done" ] && return 0
  if [ "$(left)" -lt 30 ]; then say "stopping before $name: run this script again"; exit 0; fi
  run "$name" timeout --signal=TERM $(( $(left) - 5 )) "$@" || { say "$name did not finish: run this script again"; exit 0; }
  touch "$D/$name.done"
}
step combine "$S" --threads $TH cnmf combine --output-dir "$O" --name $N
step k_selection_plot "$S" --threads $TH --device $DEV cnmf k_selection_plot --output-dir "$O" --name $N
step consensus "$S" --threads $TH --device $DEV cnmf consensus --output-dir "$O" --name $N -k $CK --local-density-threshold 0.5

# Summary: per k, the replicates and seconds of its factorize batches (from every call's log);
# section 5's replicates/s (`cnmf bench`, one H200, TF32) for k = 10, 30, 60: 13.42, 4.10, 1.782.
say "GRID DONE"
cat "$D"/factorize_*.log | awk '
  /cnmf factorize: k=/ {
    match($0, /k=[0-9]+/); k = substr($0, RSTART + 2, RLENGTH - 2) + 0
    match($0, /, [0-9]+ replicates/); r = substr($0, RSTART + 2, RLENGTH - 13) + 0
    match($0, /, [0-9.]+ s\)/); s = substr($0, RSTART + 2, RLENGTH - 5) + 0
    R[k] += r; T[k] += s; tot_r += r; tot_s += s
  }
  END {
    ref[10] = 13.42; ref[30] = 4.10; ref[60] = 1.782
    printf "%4s %6s %9s %9s %16s %14s\n", "k", "reps", "fit_s", "rep/s", "section5_rep/s", "x_published"
    for (k = 2; k <= 60; k += 2) if (R[k] > 0)
      printf "%4d %6d %9.1f %9.3f %16s %14.1f\n", k, R[k], T[k], R[k] / T[k], (k in ref) ? ref[k] : "-", R[k] / T[k] * 11.8
    printf "all: %d replicates in %.1f s of batches (%.3f replicates/s; the published GPU cNMF: 3,000 in 9.8 h)\n", tot_r, tot_s, tot_r / tot_s
  }' | tee -a "$LOG"
for f in "$D"/*.time; do
  printf "%-28s wall %10s  peak RSS %10s KB\n" "$(basename "$f" .time)" "$(grep Elapsed "$f" | awk '{print $NF}')" \
    "$(grep 'Maximum resident' "$f" | awk '{print $NF}')"
done | tee -a "$LOG"
ls "$O/$N/" | tee -a "$LOG"
