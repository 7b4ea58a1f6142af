#!/bin/bash
# The ctest label `gpu` on the GPU machine, part 2, there (carry one bundle of prepare.sh: .gpu/gpu_label.tar.xz
# or .gpu/gpu_label_N.tar.xz): each bundled test binary alone, with the repository as SCURRY_SOURCE_DIR and the
# bundle's scurry as SCURRY_BINARY; the tally and the failures' output in $OUT/gpu_label.log. On a machine still
# warm from a call with another part, the binaries unpacked then run again too.
set -u
for b in .gpu/gpu_label*.tar.xz; do tar xJf "$b" -C /tmp; done
export LD_LIBRARY_PATH=/tmp/bundle/lib SCURRY_SOURCE_DIR=$PWD SCURRY_BINARY=/tmp/bundle/bin/scurry
log=${OUT:-/tmp}/gpu_label.log
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$log"
pass=0; fail=0; skip=0; failed=""
for t in /tmp/bundle/bin/test_*; do
  name=$(basename "$t")
  "$t" > /tmp/$name.out 2>&1; rc=$?
  p=$(grep -c '^\[       OK \]' /tmp/$name.out); f=$(grep -c '^\[  FAILED  \].*(' /tmp/$name.out); s=$(grep -c '^\[  SKIPPED \]' /tmp/$name.out)
  echo "$name rc=$rc passed=$p failed=$f skipped=$s" | tee -a "$log"
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  if [ "$rc" -ne 0 ]; then failed="$failed $name"; grep -B5 -A20 'FAILED\|Failure' /tmp/$name.out | head -80 >> "$log"; fi
done
echo "$pass passed, $fail failed, $skip skipped; failing binaries:$failed" | tee -a "$log"
