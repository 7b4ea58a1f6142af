#!/usr/bin/env bash
# cNMF factorisation benchmarks (bench/RESULTS.md), JSON and logs under bench/results/:
#   bash bench/cnmf_bench.sh cpu [BUILD_DIR]    # 50,000 cells x 2000 genes on the CPU
#   bash bench/cnmf_bench.sh gpu [BUILD_DIR]    # 2.4M cells x 2000 genes on every visible GPU
# Both: k = 10, 30, 60; exactly 100 HALS iterations per replicate (tol 0); synthetic counts with 20
# planted programs, ~15% nonzeros, scaled as cNMF's prepare. The GPU run generates the data on the
# devices, picks R per k by memory (R * k <= 1200 per GPU) unless --replicates is given, and is done
# with fp32 GEMMs, then TF32 GEMMs, then on one GPU only. Reference: the published GPU cNMF, ~11.8 s
# per replicate at 2.4M cells (A100); target >= 20x that throughput (>= 1.7 replicates/s).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-cpu}
B=${2:-build}
S=$B/scurry
out=bench/results
mkdir -p "$out"
echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(date -u +%F)"
case "$what" in
  cpu)
    $S --threads "$(nproc)" cnmf bench --cells 50000 --genes 2000 -k 10 30 60 --replicates 2 --iterations 100 \
      --json "$out/cnmf_cpu_50k.json" | tee "$out/cnmf_cpu_50k.log"
    ;;
  gpu)
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
    $S --device gpu cnmf bench --cells 2400000 --genes 2000 -k 10 30 60 --iterations 100 --gpus all \
      --json "$out/cnmf_gpu_2.4M_fp32.json" | tee "$out/cnmf_gpu_2.4M_fp32.log"
    $S --device gpu cnmf bench --cells 2400000 --genes 2000 -k 10 30 60 --iterations 100 --gpus all --tf32 \
      --json "$out/cnmf_gpu_2.4M_tf32.json" | tee "$out/cnmf_gpu_2.4M_tf32.log"
    $S --device gpu cnmf bench --cells 2400000 --genes 2000 -k 10 30 60 --iterations 100 --gpus 1 --tf32 \
      --json "$out/cnmf_gpu_2.4M_tf32_1gpu.json" | tee "$out/cnmf_gpu_2.4M_tf32_1gpu.log"
    ;;
  *)
    echo "usage: bash bench/cnmf_bench.sh cpu|gpu [BUILD_DIR]" >&2
    exit 2
    ;;
esac
