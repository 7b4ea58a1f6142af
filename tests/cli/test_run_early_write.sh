#!/usr/bin/env bash
# A CPU `scurry run` writes raw/X, layers['counts'] and X into its output as soon as each is final
# and lets them go (issue 19 point 5; cmd_run.cpp start_cpu_early_writes), reading raw/X back for
# the markers: the output is the same as with everything written at the end
# (SCURRY_RUN_LATE_WRITE=1): h5diff finds no difference outside uns/scurry (the command line), and
# compare_h5ad.py (anndata) none either. Also with the mapped write in one-page windows and the pread
# read-back forced, and with the markers on the counts layer (kept in memory) without raw.
# usage: test_run_early_write.sh <scurry-binary> <repo-root>
set -euo pipefail
s=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
in="$repo/tests/data/pbmc3k_first1000.h5ad"
cd "$tmp"

same() {  # the two files hold the same slots and values
  h5diff -r --exclude-path /uns/scurry "$1" "$2" > h5diff.txt || { head -20 h5diff.txt; echo "h5diff: $1 and $2 differ"; exit 1; }
  "$py" "$repo/tests/cli/compare_h5ad.py" "$1" "$2"
}
check() {  # run with the arguments twice: early writes (the default) and all at the end
  mkdir -p early late
  "$s" -q run "$in" -o early/o.h5ad "$@"
  SCURRY_RUN_LATE_WRITE=1 "$s" -q run "$in" -o late/o.h5ad "$@"
  same early/o.h5ad late/o.h5ad
  [ "$(ls early late | grep -c tmp)" = 0 ] || { echo "a temporary was left behind"; exit 1; }
  rm -rf early late
}
SCURRY_H5_MMAP_WRITE=force SCURRY_H5_MMAP_WINDOW=4096 SCURRY_H5_PREAD=force check
check --markers-layer counts --no-raw
# the check can fail: a different run differs
"$s" -q run "$in" -o a.h5ad --no-graph
"$s" -q run "$in" -o b.h5ad --no-graph --n-top-genes 1500
! h5diff -q -r --exclude-path /uns/scurry a.h5ad b.h5ad > /dev/null
echo ok
