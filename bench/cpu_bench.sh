#!/usr/bin/env bash
# CPU benchmarks for bench/RESULTS.md (run on an otherwise idle machine):
#   bash bench/cpu_bench.sh [OUTDIR]
# 1. the preprocessing chain (and the graph) on a synthetic 200,000 x 30,000 matrix, ~2,000 nonzeros
#    per cell, in memory; 2. the whole `scurry run` on the shared pbmc3k data, 5 times (vs scanpy's
#    timings in ../shared/data/golden); 3. reading a ~1 GB h5ad.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
mkdir -p "$out"
S=build/scurry
echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(date -u +%F)"
echo "== 1. synthetic 200000 x 30000, CPU"
$S bench --synthetic 200000x30000 --nnz-per-cell 2000 --repeat 1 --graph --json "$out/cpu_200k.json" | tee "$out/cpu_200k.log"
echo "== 2. pbmc3k, scurry run x5"
for i in 1 2 3 4 5; do
  $S -q run data/pbmc3k_first1000_10x_mtx -o /tmp/scurry_bench_pbmc.h5ad --timings "$out/cpu_pbmc3k_run$i.json"
done
echo "== 3. reading a ~1 GB h5ad"
$S -q simulate /tmp/scurry_bench_1gb.h5ad --n-cells 130000 --n-genes 20000 --nnz-per-cell 1000
ls -l /tmp/scurry_bench_1gb.h5ad
/usr/bin/time -f "cat: %e s" cat /tmp/scurry_bench_1gb.h5ad > /dev/null
$S -q bench --read /tmp/scurry_bench_1gb.h5ad --repeat 3 | tee "$out/cpu_read_1gb.log"
rm -f /tmp/scurry_bench_1gb.h5ad /tmp/scurry_bench_pbmc.h5ad
