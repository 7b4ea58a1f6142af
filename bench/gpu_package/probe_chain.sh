# On the GPU machine (carry .gpu after prepare.sh): the bundled gpu tests, probe.sh, the libraries the package loads, then the chain twice with SCURRY_PROFILE (RESULTS 62).
PART=tests bash bench/gpu_package/run.sh 2>&1 | tail -6; cp $OUT/gpu_tests.log /dev/null
bash bench/gpu_package/probe.sh
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
LD_LIBRARY_PATH=/tmp/bundle/lib LD_PRELOAD= python3 -c "import scurry, numpy; print(open('/proc/self/maps').read())" | awk '{print $NF}' | grep "\.so" | sort -u | grep -i "gomp\|omp\|malloc\|stdc\|blas" 
[ -f /tmp/sim.h5ad ] || timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10 > /dev/null
for i in 1 2; do
  SCURRY_PROFILE=1 timeout 150 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_gc_$i.log 2>&1
  grep "^run" $OUT/chain_gc_$i.log; grep "resident qc\|resident hvg\|subset_vars" $OUT/chain_gc_$i.log | tail -9
done
