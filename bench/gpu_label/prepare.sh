#!/bin/bash
# The ctest label `gpu` on the GPU machine, part 1, here: every gpu test binary (tests/*/test_*_gpu.cpp,
# tests/*/test_*.cu) and scurry, stripped and bundled with the libraries they load (git-ignored). The carry
# limit is 64 MiB together with the working tree, and all 32 binaries no longer fit one bundle: they go in
# SPLIT bundles (default 2), .gpu/gpu_label_1.tar.xz, .gpu/gpu_label_2.tar.xz, ... (~42 MB each), the binaries
# dealt out largest first; carry one per call. Names given as arguments: only those binaries, in one bundle
# .gpu/gpu_label.tar.xz (e.g. test_resident_gpu test_preprocess_gpu).
set -eu
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
rm -rf /tmp/gpu_label && mkdir -p /tmp/gpu_label .gpu
rm -f .gpu/gpu_label*.tar.xz
names="$*"
split=${SPLIT:-2}
[ -n "$names" ] && split=1
[ -n "$names" ] || names=$(ls tests/*/test_*_gpu.cpp tests/*/test_*.cu | xargs -n1 basename | sed 's/\.\(cpp\|cu\)$//' | sort -u)
for t in $names; do strip -o /tmp/gpu_label/$t "$(find $B/tests -name "$t" -type f -executable | head -1)"; done
strip -o /tmp/gpu_label/scurry $B/scurry
if [ "$split" -le 1 ]; then
  XZ_OPT="-8 -T2" bash ../shared/gpu/bundle.sh .gpu/gpu_label.tar.xz /tmp/gpu_label/*
  exit 0
fi
i=0
for t in $(cd /tmp/gpu_label && ls -S test_*); do
  part=$((i % split + 1)); i=$((i + 1))
  mkdir -p /tmp/gpu_label/part$part && mv /tmp/gpu_label/$t /tmp/gpu_label/part$part/
done
for part in $(seq $split); do
  XZ_OPT="-8 -T2" bash ../shared/gpu/bundle.sh .gpu/gpu_label_$part.tar.xz /tmp/gpu_label/scurry /tmp/gpu_label/part$part/*
done
