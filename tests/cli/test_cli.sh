#!/usr/bin/env bash
# End-to-end test of the `scurry` command: bash test_cli.sh SCURRY_BINARY REPO_ROOT
# (input: the repository's data/pbmc3k_first1000_10x_mtx and tests/data/pbmc3k_first1000.h5ad)
# Prints each check; exits non-zero at the first failure.
set -u
SCURRY=$1
REPO=$2
MTX="$REPO/data/pbmc3k_first1000_10x_mtx"
H5AD="$REPO/tests/data/pbmc3k_first1000.h5ad"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/scurry_cli_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
n=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
die() { echo "FAIL - $1"; [ -s "$WORK/stdout" ] && sed 's/^/  stdout: /' "$WORK/stdout" | head -20
        [ -s "$WORK/stderr" ] && sed 's/^/  stderr: /' "$WORK/stderr" | head -20; exit 1; }

# run_cmd ARGS...: runs scurry, stdout/stderr to files, sets $rc
run_cmd() { "$SCURRY" "$@" >"$WORK/stdout" 2>"$WORK/stderr"; rc=$?; }

expect_ok() {  # description, args...
  local what=$1; shift
  run_cmd "$@"
  [ "$rc" -eq 0 ] || die "$what: exit code $rc, expected 0"
  pass "$what"
}

# expect_result FILE: `scurry info FILE` shows a pipeline result: 1000 x 2000 scaled X, the counts
# layer, raw, X_pca and uns/pca
expect_result() {
  run_cmd info "$1"
  [ "$rc" -eq 0 ] || die "info $1: exit code $rc"
  grep -Eq '^shape +1000 x 2000 ' "$WORK/stdout" || die "info $1: shape is not 1000 x 2000"
  for slot in 'layers/counts +csr_matrix' 'obsm/X_pca +array +float32 +1000 x 50' 'raw/X +csr_matrix' \
              'uns/pca/variance_ratio' 'var/highly_variable ' 'obs/pct_counts_mt '; do
    grep -Eq "^$slot" "$WORK/stdout" || die "info $1: no slot matching '$slot'"
  done
  pass "info $(basename "$1"): 1000 x 2000 with counts, raw, X_pca"
}

# expect_shape FILE: `scurry info FILE` reports 1000 x 13714 and nnz 845352
expect_shape() {
  run_cmd info "$1"
  [ "$rc" -eq 0 ] || die "info $1: exit code $rc"
  grep -Eq '^shape +1000 x 13714 ' "$WORK/stdout" || die "info $1: shape is not 1000 x 13714"
  grep -Eq '^nnz +845352 ' "$WORK/stdout" || die "info $1: nnz is not 845352"
  pass "info $(basename "$1"): 1000 x 13714, nnz 845352"
}

# expect_fail DESCRIPTION MENTION OUTDIR ARGS...: non-zero exit (1 or 2, no crash), exactly one
# stderr line "scurry: error: ..." and it contains MENTION, no stderr line other than scurry's own
# "scurry: ..." messages (no library error dumps), and nothing left in OUTDIR.
expect_fail() {
  local what=$1 mention=$2 outdir=$3; shift 3
  mkdir -p "$outdir"
  run_cmd "$@"
  [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ] || die "$what: exit code $rc, expected 1 or 2"
  [ "$(grep -c '^scurry: error: ' "$WORK/stderr")" -eq 1 ] || die "$what: not exactly one 'scurry: error:' line"
  grep -qv '^scurry: ' "$WORK/stderr" && die "$what: stderr has lines other than 'scurry: ...' messages"
  grep '^scurry: error: ' "$WORK/stderr" | grep -qF -- "$mention" || die "$what: the error does not mention '$mention'"
  [ -z "$(ls -A "$outdir")" ] || die "$what: output left behind: $(ls -A "$outdir" | tr '\n' ' ')"
  pass "$what: exit $rc, one-line error naming $(basename -- "$mention"), no output left"
}

# ---- global flags -------------------------------------------------------------------------------
run_cmd --version
[ "$rc" -eq 0 ] || die "--version: exit code $rc"
grep -Eq '^scurry 0\.1\.0 \((CUDA|CPU)' "$WORK/stdout" || die "--version: expected 'scurry 0.1.0 (CUDA...|CPU...)'"
pass "--version: $(head -1 "$WORK/stdout")"

run_cmd --help
[ "$rc" -eq 0 ] || die "--help: exit code $rc"
for s in info convert run --threads --device --quiet --version; do
  grep -q -- "$s" "$WORK/stdout" || die "--help does not mention $s"
done
pass "--help lists the subcommands and global options"
for s in info convert run; do
  expect_ok "$s --help" "$s" --help
done

# ---- info, convert, run on the pbmc3k subset ------------------------------------------------------
expect_shape "$MTX"
grep -Eq '^format +10x-mtx' "$WORK/stdout" || die "info on the mtx directory does not say format 10x-mtx"
expect_shape "$H5AD"
grep -Eq '^format +h5ad' "$WORK/stdout" || die "info on the h5ad does not say format h5ad"

mkdir -p "$WORK/out"
expect_ok "convert 10x mtx -> h5ad" convert "$MTX" "$WORK/out/from_mtx.h5ad"
[ -f "$WORK/out/from_mtx.h5ad" ] || die "convert: output missing"
expect_shape "$WORK/out/from_mtx.h5ad"
expect_ok "convert h5ad -> h5ad" --quiet convert "$H5AD" "$WORK/out/from_h5ad.h5ad"
expect_shape "$WORK/out/from_h5ad.h5ad"

expect_ok "run on 10x mtx with --timings" run "$MTX" -o "$WORK/out/run_mtx.h5ad" --timings "$WORK/out/timings.json" --threads 2
[ -f "$WORK/out/run_mtx.h5ad" ] || die "run: output missing"
grep -q 'total' "$WORK/stdout" || die "run: no timing table with a total line on stdout"
grep -q '"steps"' "$WORK/out/timings.json" || die "run: timings.json has no steps"
grep -q '"read"' "$WORK/out/timings.json" || die "run: timings.json has no read step"
expect_result "$WORK/out/run_mtx.h5ad"
expect_ok "run on h5ad (global options after the subcommand)" run "$H5AD" -o "$WORK/out/run_h5ad.h5ad" --threads 1 --quiet
[ -s "$WORK/stdout" ] && die "run --quiet printed to stdout"
expect_result "$WORK/out/run_h5ad.h5ad"
ls "$WORK/out" | grep -q '\.tmp' && die "temporary files left in the output directory"
pass "no .tmp leftovers after successful runs"

# ---- bad inputs -----------------------------------------------------------------------------------
echo "just some text" >"$WORK/notes.txt"
head -c 1000000 "$H5AD" >"$WORK/truncated.h5ad"
expect_fail "convert a missing file" "$WORK/missing.h5ad" "$WORK/o1" convert "$WORK/missing.h5ad" "$WORK/o1/x.h5ad"
expect_fail "run on a missing file" "$WORK/missing.h5ad" "$WORK/o2" run "$WORK/missing.h5ad" -o "$WORK/o2/x.h5ad"
expect_fail "info on a text file" "$WORK/notes.txt" "$WORK/o3" info "$WORK/notes.txt"
expect_fail "convert a text file" "$WORK/notes.txt" "$WORK/o4" convert "$WORK/notes.txt" "$WORK/o4/x.h5ad"
expect_fail "convert a truncated h5ad" "$WORK/truncated.h5ad" "$WORK/o5" convert "$WORK/truncated.h5ad" "$WORK/o5/x.h5ad"
expect_fail "run on a truncated h5ad" "$WORK/truncated.h5ad" "$WORK/o6" run "$WORK/truncated.h5ad" -o "$WORK/o6/x.h5ad" --timings "$WORK/o6/t.json"
expect_fail "--threads abc" "--threads" "$WORK/o7" --threads abc run "$MTX" -o "$WORK/o7/x.h5ad"
expect_fail "--device tpu" "--device" "$WORK/o8" --device tpu convert "$MTX" "$WORK/o8/x.h5ad"
expect_fail "output not .h5ad" "$WORK/o9/x.csv" "$WORK/o9" convert "$MTX" "$WORK/o9/x.csv"
expect_fail "unknown subcommand option" "--no-such-option" "$WORK/o10" run "$MTX" -o "$WORK/o10/x.h5ad" --no-such-option
expect_fail "--percent-top with a non-integer" "--percent-top" "$WORK/o10b" run "$MTX" -o "$WORK/o10b/x.h5ad" --percent-top 50,x
# A FIFO as input is refused at once (stat before any open), never read: `timeout 10` turns a
# blocked open into exit 124, which fails the check below (exit 2 is wanted).
mkfifo "$WORK/pipe.h5ad"
for sub in info convert run; do
  case $sub in
    info) args=(info "$WORK/pipe.h5ad") ;;
    convert) args=(convert "$WORK/pipe.h5ad" "$WORK/ofifo/x.h5ad") ;;
    run) args=(run "$WORK/pipe.h5ad" -o "$WORK/ofifo/x.h5ad") ;;
  esac
  mkdir -p "$WORK/ofifo"
  timeout 10 "$SCURRY" "${args[@]}" >"$WORK/stdout" 2>"$WORK/stderr"; rc=$?
  [ "$rc" -eq 2 ] || die "$sub on a FIFO: exit code $rc, expected 2 (124: it blocked)"
  [ "$(grep -c '^scurry: error: ' "$WORK/stderr")" -eq 1 ] || die "$sub on a FIFO: not exactly one 'scurry: error:' line"
  grep -qv '^scurry: ' "$WORK/stderr" && die "$sub on a FIFO: stderr has lines other than 'scurry: ...' messages"
  grep -q "^scurry: error: .*pipe.h5ad.*FIFO" "$WORK/stderr" || die "$sub on a FIFO: the error does not name the path and FIFO"
  [ -z "$(ls -A "$WORK/ofifo")" ] || die "$sub on a FIFO: output left behind"
  pass "$sub on a FIFO: exit 2 at once, one-line error"
done
# --percent-top none (scanpy's percent_top=None): no pct_counts_in_top_n_genes columns, the rest as usual.
mkdir -p "$WORK/pt"
expect_ok "run --percent-top none" run "$MTX" -o "$WORK/pt/x.h5ad" --percent-top none --no-graph
run_cmd info "$WORK/pt/x.h5ad"
grep -Eq '^obs/pct_counts_mt ' "$WORK/stdout" || die "--percent-top none: obs/pct_counts_mt missing"
! grep -Eq '^obs/pct_counts_in_top' "$WORK/stdout" || die "--percent-top none: pct_counts_in_top columns written"
pass "--percent-top none writes no pct_counts_in_top columns"
# an mtx directory with a negative count
mkdir -p "$WORK/badmtx"
printf 'g1\tA\ng2\tB\n' >"$WORK/badmtx/genes.tsv"
printf 'c1\n' >"$WORK/badmtx/barcodes.tsv"
printf '%%%%MatrixMarket matrix coordinate integer general\n2 1 2\n1 1 3\n2 1 -4\n' >"$WORK/badmtx/matrix.mtx"
expect_fail "run on an mtx with a negative count" "$WORK/badmtx/matrix.mtx" "$WORK/o11" run "$WORK/badmtx" -o "$WORK/o11/x.h5ad"
# an h5ad whose X holds a negative value: read fine, rejected by the qc-check step
if /usr/bin/python3 -c "import anndata" 2>/dev/null; then
  /usr/bin/python3 - "$WORK/negative.h5ad" <<'PY'
import sys, numpy as np, scipy.sparse as sp, anndata
X = sp.csr_matrix(np.array([[1, 0, 2], [0, -3, 0]], dtype=np.float32))
anndata.AnnData(X).write_h5ad(sys.argv[1])
PY
  expect_fail "run on counts with a negative value" "$WORK/negative.h5ad" "$WORK/o12" run "$WORK/negative.h5ad" -o "$WORK/o12/x.h5ad"
fi

# bench: the graph half on the CPU with the approximate search only, on the first PCs, and a check
# of --graph-knn's values
run_cmd bench --synthetic 3000x2000 --nnz-per-cell 300 --repeat 1 --n-comps 30 --graph --graph-knn both \
  --graph-pcs 20 --umap-min-dist 0.3
[ "$rc" -eq 0 ] || die "bench --graph: exit code $rc"
grep -Eq 'graph: [0-9]+ cells x 20 PCs' "$WORK/stdout" || die "bench --graph-pcs 20: graph not on 20 PCs"
grep -Eq 'recall@15 +0\.9[0-9]+' "$WORK/stdout" || die "bench --graph-knn both: no recall of hnsw >= 0.9 against exact"
grep -Eq 'leiden: [0-9]+ clusters' "$WORK/stdout" || die "bench --graph: no Leiden result"
pass "bench --graph --graph-knn both --graph-pcs 20 (CPU)"
run_cmd bench --synthetic 3000x2000 --graph --graph-knn nearest
[ "$rc" -eq 2 ] || die "bench --graph-knn nearest: exit code $rc, expected 2"
pass "bench --graph-knn with a bad value is refused"

echo "all $n checks passed"
