#!/usr/bin/env bash
# The 11.4M-cell atlas benchmark (issues 7 and 8): on a machine with N GPUs, generate a synthetic
# 11,441,407 x 45,854 atlas on the GPUs (each GPU its own rows) and run the whole pipeline -- QC,
# filter_cells (200..10,000 genes), filter_genes (>= 10 cells), normalize_total, log1p, HVG
# cell_ranger, scale, PCA, IVF-Flat kNN (k = 15) on the first 50 PCs, connectivities, UMAP
# (min_dist 0.3), Leiden (resolution 1) -- timing each step, with peak GPU memory.
#
# Usage: bench/atlas_run.sh N_GPUS [OUT_DIR]       e.g. bench/atlas_run.sh 8 out
#        bench/atlas_run.sh "2 4 8" [OUT_DIR]     each count in turn (a fresh process each), then the
#                                                 per-step scaling table (bench/atlas_scaling.py)
# Environment (defaults = issue 8's recipe):
#   SCURRY=path/to/scurry   NNZ=2000 (nonzeros per cell)   HVG=5000   COMPS=100
#   ZERO_CENTER=false (scale without centring: the matrix stays sparse and the PCA densifies it one
#                      chunk of rows at a time, centring folded into the Gram matrix as scanpy's
#                      implicit centring; true: the dense scaled HVG matrix, 4 B x HVG x 11.4M / N)
# Memory: per GPU ~ 8 B x NNZ x 11.4M / N of counts. Rehearsed on 2 x H200 (RESULTS.md section 8).
set -euo pipefail
COUNTS=${1:?usage: atlas_run.sh N_GPUS|"N1 N2 ..." [OUT_DIR]}
OUT=${2:-.}
SCURRY=${SCURRY:-scurry}
NNZ=${NNZ:-2000}
HVG=${HVG:-5000}
COMPS=${COMPS:-100}
ZERO_CENTER=${ZERO_CENTER:-false}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off
JSONS=()
for N in $COUNTS; do
  LOG="$OUT/atlas_${N}gpu.log"
  /usr/bin/time -v "$SCURRY" --device gpu bench \
    --synthetic 11441407x45854 --nnz-per-cell "$NNZ" --on-device --repeat 0 --gpus "$N" \
    --flavor cell_ranger --min-genes 200 --max-genes 10000 --min-cells 10 --n-top-genes "$HVG" \
    --zero-center "$ZERO_CENTER" --n-comps "$COMPS" \
    --graph --graph-knn ivf --graph-pcs 50 --umap-min-dist 0.3 \
    --json "$OUT/atlas_${N}gpu.json" 2>&1 | tee "$LOG"
  nvidia-smi --query-gpu=index,name,memory.total --format=csv >> "$LOG" || true
  JSONS+=("$OUT/atlas_${N}gpu.json")
done
if [ "${#JSONS[@]}" -gt 1 ] && command -v python3 > /dev/null; then
  python3 "$(dirname "$0")/atlas_scaling.py" "${JSONS[@]}" | tee "$OUT/atlas_scaling.md"
fi
