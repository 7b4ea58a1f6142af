#!/bin/bash
# The package on the GPU machine, part 2, there (after prepare.sh; carry .gpu): builds the extension
# for this Python (pybind11 from pip) against libscurry_py_core.so, runs the package's tests (the real
# device test included) and the tutorial chain at 1.3M cells through `import scurry as sc`. With what
# prepare.sh bundled: the gpu test binaries each alone (tally in $OUT/gpu_tests.log) and, with a baseline
# scurry, `scurry bench --on-device` at 1.3M of the baseline and this build alternately (A B A B A B),
# the fused chain and --stepwise, logs in $OUT.
set -u
O=${OUT:-/tmp}
PART=${PART:-package tests fused}  # any of: package (its tests and the 1.3M chain; PROFILE=1: cProfile per step
                                   # and SCURRY_PROFILE's phases of the resident steps, then --stepwise's),
                                   # tests (the bundled gpu tests), fused, stream
has() { case " $PART " in *" $1 "*) return 0;; esac; return 1; }
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
if has package; then
(cd tests/python && timeout 180 python3 -m pytest -q -p no:cacheprovider test_gpu_package.py 2>&1 | tail -5)
timeout 120 /tmp/bundle/bin/scurry simulate /tmp/sim.h5ad --n-cells 1306127 --n-genes 27998 --nnz-per-cell 2000 --clusters 10
timeout 300 python3 bench/gpu_package/chain.py /tmp/sim.h5ad 2>&1 | grep -v Warning | tee $O/chain.log
if [ -n "${PROFILE:-}" ]; then  # the same steps from C++ on this card, with the resident steps' phase times (SCURRY_PROFILE)
  SCURRY_PROFILE=1 timeout 120 /tmp/bundle/bin/scurry --device gpu bench --synthetic 1306127x27998 --nnz-per-cell 2000 \
    --flavor cell_ranger --on-device --repeat 2 --stepwise 2>&1 | tee -a $O/chain.log | grep "resident\|total (without"
fi
fi

if has tests && ls /tmp/bundle/bin/test_* >/dev/null 2>&1; then
  pass=0; fail=0; skip=0
  for t in /tmp/bundle/bin/test_*; do
    name=$(basename "$t"); "$t" > /tmp/$name.out 2>&1; rc=$?
    p=$(grep -c '^\[       OK \]' /tmp/$name.out); f=$(grep -c '^\[  FAILED  \].*(' /tmp/$name.out); s=$(grep -c '^\[  SKIPPED \]' /tmp/$name.out)
    echo "$name rc=$rc passed=$p failed=$f skipped=$s" | tee -a $O/gpu_tests.log
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    [ "$rc" -ne 0 ] && grep -B5 -A20 'FAILED\|Failure' /tmp/$name.out | head -80 >> $O/gpu_tests.log
  done
  echo "$pass passed, $fail failed, $skip skipped" | tee -a $O/gpu_tests.log
fi
# A/B (one combined log, $O/ab.log) with a bundled baseline: PART fused (--on-device, 3 x A B) and/or stream
# (--stream from a host-memory copy, 2 x A B).
S="--device gpu bench --synthetic 1306127x27998 --nnz-per-cell 2000 --flavor cell_ranger"
for tag in fused stream; do
  has $tag && [ -x /tmp/bundle/bin/scurry_baseline ] || continue
  if [ $tag = stream ]; then B="$S --stream --repeat 3"; n=2; else B="$S --on-device --repeat 5"; n=3; fi
  for i in $(seq $n); do
    for v in baseline new; do
      exe=/tmp/bundle/bin/scurry; [ $v = baseline ] && exe=/tmp/bundle/bin/scurry_baseline
      echo "=== $tag $v $i: $exe $B" >> $O/ab.log
      timeout 200 $exe $B >> $O/ab.log 2>&1
      grep "total (without upload)\|QC -> PCA" $O/ab.log | tail -1 | sed "s/^/$tag $v $i: /"
    done
  done
  if [ $tag = fused ]; then
    echo "=== stepwise new" >> $O/ab.log
    timeout 120 /tmp/bundle/bin/scurry $B --stepwise >> $O/ab.log 2>&1
    grep "total (without upload)" $O/ab.log | tail -1 | sed "s/^/stepwise new: /"
  fi
done
