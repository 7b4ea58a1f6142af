# On the GPU machine (carry .gpu after prepare.sh): the package's chain with the heap set up as the CLI's on the
# first upload (RESULTS 63), against `scurry bench --stepwise` on the same card; SCURRY_PROFILE's QC phases
# with their page faults.
PART=none bash bench/gpu_package/run.sh > /dev/null 2>&1
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f /tmp/sim.h5ad ] || timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10 > /dev/null
SCURRY_PROFILE=1 timeout 100 /tmp/bundle/bin/scurry --device gpu bench --synthetic 1306127x27998 --nnz-per-cell 2000 --flavor cell_ranger --on-device --repeat 3 --stepwise > $OUT/bench.log 2>&1
grep -E "^(qc|filter|normalize|log1p|highly|scale|pca|total)" $OUT/bench.log; grep "resident qc" $OUT/bench.log | tail -4
for i in 1 2; do
  SCURRY_PROFILE=1 timeout 120 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_$i.log 2>&1
  grep "^run" $OUT/chain_$i.log; grep "resident qc" $OUT/chain_$i.log | tail -4
done
