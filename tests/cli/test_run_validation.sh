#!/usr/bin/env bash
# `scurry run` checks every step's options before its first step (issue 17 point 8): a bad value of a
# late step (leiden's resolution, UMAP's min_dist, the kNN's n_neighbors, PCA's n_comps, scale's
# ...) exits 2 with the step's one-line message before the input is read (no "[1/9] read"
# line), and leaves no output.
# usage: test_run_validation.sh <scurry-binary> <repo-root>
set -euo pipefail
s=$1
repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
in="$repo/tests/data/pbmc3k_first1000.h5ad"

# run_fails STEP "EXPECTED MESSAGE PART" OPTIONS...: exit 2 with the message, no output, and no
# "[STEP/" line (the step that must not have started); one line when STEP is 1 (nothing was read).
run_fails() {
  local step=$1 want=$2
  shift 2
  set +e
  "$s" run "$in" -o "$tmp/out.h5ad" "$@" 2>"$tmp/err"
  local rc=$?
  set -e
  if [ "$rc" -ne 2 ]; then echo "run $*: exit $rc, expected 2"; cat "$tmp/err"; exit 1; fi
  if ! grep -q -- "$want" "$tmp/err"; then echo "run $*: no '$want' in:"; cat "$tmp/err"; exit 1; fi
  if grep -q "\[$step/" "$tmp/err"; then echo "run $*: step $step ran before the error:"; cat "$tmp/err"; exit 1; fi
  if [ "$step" -eq 1 ]; then
    test "$(wc -l <"$tmp/err")" -eq 1 || { echo "run $*: more than one line:"; cat "$tmp/err"; exit 1; }
  fi
  test ! -e "$tmp/out.h5ad"
}
check() { run_fails 1 "$@"; }        # an option's value: refused before the read
check_slot() { run_fails 3 "$@"; }   # a slot of the input: refused after the read, before the preprocessing

check "leiden: resolution = -1 must be positive" --resolution -1
check "umap: spread = 1, min_dist = -2" --min-dist -2
check "umap: n_components = 0" --n-components 0
check "umap: maxiter = -3" --maxiter -3
check "neighbors: n_neighbors = 1" --n-neighbors 1
check "pca: n_comps = 0" --n-comps 0
check "normalize_total: target_sum=-5" --target-sum -5
check "log1p: base=1" --base 1
check "neighbors: n_pcs = 0 must be at least 1" --n-pcs 0
check "rank_genes_groups: n_genes must be positive" --markers-n-genes 0
check "leiden: flavor igraph cannot use a directed graph" --leiden-flavor igraph --leiden-directed true
# options naming slots of the input: checked right after the read (before the preprocessing)
check_slot "--use-rep 'X_nope': obsm has no such key" --use-rep X_nope
check_slot "--init-pos 'X_nope': obsm has no such key" --init-pos X_nope
check_slot "--markers-groupby 'celltype': obs has no such column" --markers-groupby celltype
check_slot "--markers-layer 'spliced': layers has no such key" --markers-layer spliced
check_slot "--markers-mask-var 'nope': var has no such column" --markers-mask-var nope
check_slot "--batch-key 'sample': obs has no such column" --batch-key sample
# a good run on the same input still works (the checks reject only bad values)
"$s" -q run "$in" -o "$tmp/ok.h5ad" --no-markers --maxiter 20
test -s "$tmp/ok.h5ad"
echo ok
