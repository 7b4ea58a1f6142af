# On the GPU machine (carry .gpu after prepare.sh): where the package's host phases lose to the C++ bench
# (RESULTS 63). SCURRY_PROFILE's phase lines carry the process's CPU time, minor page faults and involuntary
# context switches per phase; the bench once, then the chain under OpenMP variants.
PART=none bash bench/gpu_package/run.sh > /dev/null 2>&1
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
[ -f /tmp/sim.h5ad ] || timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10 > /dev/null
SCURRY_PROFILE=1 timeout 100 /tmp/bundle/bin/scurry --device gpu bench --synthetic 1306127x27998 --nnz-per-cell 2000 --flavor cell_ranger --on-device --repeat 3 --stepwise > $OUT/bench.log 2>&1
grep -E "^(qc|filter|highly|scale|pca|total)" $OUT/bench.log; grep "resident qc\|resident filter_cells" $OUT/bench.log | tail -8
for v in default passive omp4 spin0; do
  case $v in default) e="";; passive) e="OMP_WAIT_POLICY=PASSIVE";; omp4) e="OMP_NUM_THREADS=4";; spin0) e="GOMP_SPINCOUNT=0";; esac
  env $e SCURRY_PROFILE=1 timeout 120 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_$v.log 2>&1
  echo "== $v"; grep "^run 1" $OUT/chain_$v.log; grep "resident qc\|resident filter_cells" $OUT/chain_$v.log | tail -8
done
# logreg on the device (issue 18 point 5): resident, then streamed in chunks of 1e8 entries (SCURRY_RGG_GPU_CHUNK)
for c in "" 100000000; do
  echo "== logreg, chunk '${c:-resident}'"
  env ${c:+SCURRY_RGG_GPU_CHUNK=$c} timeout 200 /tmp/bundle/bin/scurry --device gpu bench --synthetic 200000x27998 --nnz-per-cell 2000 \
    --markers logreg --marker-groups 10 --repeat 1 2>&1 | grep -E "markers:|logreg" | tail -3
done
