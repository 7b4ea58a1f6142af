#!/usr/bin/env bash
# Issue 23 point 5: starCAT's fit at 1,000,000 cells, `scurry cnmf project` on the GPU and on the CPU
# (16 threads), each the whole command in a fresh process from an .h5ad; the query simulated on the
# machine (`scurry simulate`, the model and seed of RESULTS section 33's CPU figures), the reference
# bench/data/starcat_ref_k20_sim3.txt (20 programs over 1,500 genes, from `scurry cnmf run` on 10,000
# cells of the same model). Prints each command's fit time (scurry's log), wall and peak RSS, and
# whether the GPU's usages equal the CPU's (they should, byte for byte: the same active-set code).
# The GPU's log line also gives the device phases of the fit (upload, check and gene sums, solve and
# download; RESULTS section 39). Target (issue 23 point 5): the GPU fit <= 0.88 s at 1M cells, 100x
# starCAT's 88 CPU s (section 33).
# Usage: bash bench/starcat_gpu_h200.sh [SCURRY] [DIR] [CELLS]
set -euo pipefail
S=${1:-./build-cuda/scurry}
D=${2:-/tmp/starcat_bench}
N=${3:-1000000}
REF=$(dirname "$0")/data/starcat_ref_k20_sim3.txt
mkdir -p "$D"
Q="$D/q$N.h5ad"
if [ ! -s "$Q" ]; then
  /usr/bin/time -f "simulate: wall %e s" "$S" -q --threads 16 simulate --n-cells "$N" --n-genes 2000 --nnz-per-cell 600 \
    --clusters 8 --seed 3 "$Q"
fi
ls -la "$Q"
for dev in gpu cpu; do
  for rep in 1 2; do
    /usr/bin/time -v -o "$D/$dev.time" "$S" --threads 16 --device $dev cnmf project "$REF" "$Q" -o "$D/u_$dev.txt" \
      2> "$D/$dev.log" || { echo "$dev run failed: $(tail -1 "$D/$dev.log")"; continue; }
    echo "$dev run $rep: $(grep -o 'fit [0-9.]* s: .*' "$D/$dev.log"); whole command wall $(grep Elapsed "$D/$dev.time" | awk '{print $NF}'), user $(grep 'User time' "$D/$dev.time" | awk '{print $NF}') s, peak RSS $(grep 'Maximum resident' "$D/$dev.time" | awk '{print $NF}') KB"
  done
done
if cmp -s "$D/u_gpu.txt" "$D/u_cpu.txt"; then echo "GPU usages == CPU usages, byte for byte ($N cells)"
else echo "GPU usages differ from the CPU's: $(cmp "$D/u_gpu.txt" "$D/u_cpu.txt" | head -1)"; fi
