# On the GPU machine (carry .gpu after prepare.sh): the bundled gpu tests, then the package chain four times in fresh processes, alternately with glibc's malloc tunables (bench/RESULTS.md section 62).
PART=tests bash bench/gpu_package/run.sh 2>&1 | tail -3; cp /tmp/test_*.out $OUT/ 2>/dev/null
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
[ -f /tmp/sim.h5ad ] || timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10 > /dev/null
for v in default tunables default tunables; do
  if [ $v = tunables ]; then export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=68719476736; else unset GLIBC_TUNABLES; fi
  SCURRY_PROFILE=1 timeout 150 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_$v.log 2>&1
  echo "== $v"; grep "^run 1" $OUT/chain_$v.log; grep "resident qc\|resident hvg\|subset_vars" $OUT/chain_$v.log | tail -9
done
