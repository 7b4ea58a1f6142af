#!/bin/bash
# The package on the GPU machine, part 2, there (after prepare.sh; carry .gpu): builds the extension
# for this Python (pybind11 from pip) against libscurry_py_core.so, runs the package's tests (the real
# device test included) and the tutorial chain at 1.3M cells through `import scurry as sc`.
set -u
tar xJf .gpu/pkg.tar.xz -C /tmp
so=$(find /tmp/bundle -name libscurry_py_core.so | head -1); cp "$so" /tmp/bundle/lib/ 2>/dev/null
rm -f /tmp/bundle/lib/libstdc++.so.6* /tmp/bundle/lib/libgcc_s.so.1  # the extension is built by this machine's newer g++
export LD_LIBRARY_PATH=/tmp/bundle/lib
PYINC=$(python3 -m pybind11 --includes); EXT=$(python3 -c "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))")
mkdir -p /tmp/pkg/scurry /tmp/obj; cp python/scurry/*.py /tmp/pkg/scurry/; echo '__version__ = "0.1.0"' > /tmp/pkg/scurry/_version.py
for f in python/src/*.cpp; do g++ -O2 -DNDEBUG -fPIC -fvisibility=hidden -fopenmp -std=c++20 -DSCURRY_HAVE_MPI=1 \
  -DSCURRY_VERSION=\"0.1.0\" -DSCURRY_WITH_CUDA=1 -Isrc -Ipython/src $PYINC -c $f -o /tmp/obj/$(basename $f).o & done; wait
g++ -shared -o /tmp/pkg/scurry/_scurry$EXT /tmp/obj/*.o -L/tmp/bundle/lib -lscurry_py_core -fopenmp -Wl,-rpath,/tmp/bundle/lib
export PYTHONPATH=/tmp/pkg:$PWD/.gpu/py SCURRY_BINARY=/tmp/bundle/bin/scurry SCURRY_SOURCE_DIR=$PWD
(cd tests/python && timeout 180 python3 -m pytest -q -p no:cacheprovider test_gpu_package.py 2>&1 | tail -5)
timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10
timeout 300 python3 bench/gpu_package/chain.py /tmp/sim.h5ad 2>&1 | grep -v Warning
