#!/bin/bash
# On the GPU machine (carry .gpu after prepare.sh): isolate the segmentation fault of
# tests/python/test_gpu_package.py::test_graph_steps_on_the_device (bench/RESULTS.md section 65): the CLI's
# GPU run on a small file (the core alone), the test alone (no earlier test's uploads or heap set-up in the
# process), the whole file, and gdb's backtrace where gdb exists. Logs in $OUT.
[ -f /tmp/pkg/scurry/_core.py ] || PART=none bash bench/gpu_package/run.sh > /dev/null 2>&1
export LD_LIBRARY_PATH=/tmp/bundle/lib PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
O=${OUT:-/tmp}
S=/tmp/bundle/bin/scurry
$S simulate /tmp/s.h5ad --n-cells 800 --n-genes 300 --clusters 4 > /dev/null
$S --device gpu run /tmp/s.h5ad -o /tmp/o.h5ad > $O/cli.log 2>&1; echo "cli --device gpu run: rc=$?"; tail -2 $O/cli.log
cd tests/python
timeout 100 python3 -m pytest -x -q -p no:cacheprovider test_gpu_package.py -k graph_steps > $O/alone.log 2>&1
echo "the graph test alone: rc=$?"; tail -3 $O/alone.log
timeout 200 python3 -m pytest -q -p no:cacheprovider test_gpu_package.py > $O/all.log 2>&1; echo "the whole file: rc=$?"; tail -3 $O/all.log
if command -v gdb > /dev/null; then
  timeout 200 gdb -q -batch -ex run -ex bt --args python3 -m pytest -x -q -p no:cacheprovider test_gpu_package.py > $O/gdb.log 2>&1
  grep -A30 SIGSEGV $O/gdb.log | head -40
fi
