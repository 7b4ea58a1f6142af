# On the GPU machine (carry .gpu after prepare.sh): the package's chain at 1.3M against `scurry bench --stepwise` on
# the same card (RESULTS 64): the bench once, then the chain in fresh processes (CHAINS, default 4), one profiled
# (cProfile per step, PROFILE_LINES lines, callers of PROFILE_CALLERS), and GC_RUNS more with the cyclic collector off.
PART=none bash bench/gpu_package/run.sh > /dev/null 2>&1
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import pandas, numpy; print('pandas', pandas.__version__, 'numpy', numpy.__version__)"
[ -f /tmp/sim.h5ad ] || timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10 > /dev/null
timeout 100 /tmp/bundle/bin/scurry --device gpu bench --synthetic 1306127x27998 --nnz-per-cell 2000 --flavor cell_ranger --on-device --repeat 3 --stepwise > $OUT/bench.log 2>&1
grep -E "^(qc|filter|normalize|log1p|highly|scale|pca|total)" $OUT/bench.log
for i in $(seq ${CHAINS:-4}); do timeout 120 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_$i.log 2>&1; grep "^run 1" $OUT/chain_$i.log; done
for i in $(seq ${GC_RUNS:-0}); do GC_OFF=1 timeout 120 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_gc_$i.log 2>&1; grep "^run 1" $OUT/chain_gc_$i.log | sed 's/^/gc off: /'; done
if [ -n "${PROFILE_LINES:-}" ]; then
  PROFILE=1 timeout 120 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_profile.log 2>&1; grep "^run 1" $OUT/chain_profile.log | sed 's/^/profiled: /'
  # the bench's resident phases (SCURRY_PROFILE) beside the profiled chain's
  SCURRY_PROFILE=1 timeout 100 /tmp/bundle/bin/scurry --device gpu bench --synthetic 1306127x27998 --nnz-per-cell 2000 --flavor cell_ranger --on-device --repeat 2 --stepwise > $OUT/bench_profile.log 2>&1
fi
