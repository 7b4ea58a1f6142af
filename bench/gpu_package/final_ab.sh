# On the GPU machine (carry .gpu after prepare.sh): scurry bench --stepwise and the package chain on the same card (RESULTS 62).
PART=none bash bench/gpu_package/run.sh > /dev/null 2>&1
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f /tmp/sim.h5ad ] || timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10 > /dev/null
timeout 100 /tmp/bundle/bin/scurry --device gpu bench --synthetic 1306127x27998 --nnz-per-cell 2000 --flavor cell_ranger --on-device --repeat 3 --stepwise 2>&1 | grep -E "^(qc|filter|normalize|log1p|highly|scale|pca|total)" > $OUT/bench.log; cat $OUT/bench.log
export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=68719476736
SCURRY_PROFILE=1 timeout 120 python3 bench/gpu_package/chain.py /tmp/sim.h5ad > $OUT/chain_gc_tun.log 2>&1
grep "^run" $OUT/chain_gc_tun.log; grep "resident qc" $OUT/chain_gc_tun.log | tail -5
