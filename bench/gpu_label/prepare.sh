#!/bin/bash
# The ctest label `gpu` on the GPU machine, part 1, here: every gpu test binary (tests/*/test_*_gpu.cpp,
# tests/*/test_*.cu) and scurry, stripped and bundled with the libraries they load into .gpu/gpu_label.tar.xz
# (git-ignored; ~45 MB: the carry limit is 64 MiB with the working tree). Names given as arguments: only those
# binaries (e.g. test_resident_gpu test_preprocess_gpu).
set -eu
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
rm -rf /tmp/gpu_label && mkdir -p /tmp/gpu_label .gpu
names="$*"
[ -n "$names" ] || names=$(ls tests/*/test_*_gpu.cpp tests/*/test_*.cu | xargs -n1 basename | sed 's/\.\(cpp\|cu\)$//' | sort -u)
for t in $names; do strip -o /tmp/gpu_label/$t "$(find $B/tests -name "$t" -type f -executable | head -1)"; done
strip -o /tmp/gpu_label/scurry $B/scurry
XZ_OPT="-8 -T2" bash ../shared/gpu/bundle.sh .gpu/gpu_label.tar.xz /tmp/gpu_label/*
