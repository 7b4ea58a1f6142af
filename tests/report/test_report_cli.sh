#!/usr/bin/env bash
# scurry report and run --report from the command line (no browser): bad output paths are refused
# before any work (exit 2, nothing written), a missing or unsupported input is exit 2 naming it; the
# report written is one HTML file with no temporary left; the result of run carries uns['scurry']
# (filters, timings, warnings) and still opens in anndata 0.8 with warnings as errors, its values
# equal to the run's own shape and thresholds.
# usage: test_report_cli.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
in="$repo/tests/data/pbmc3k_first1000.h5ad"

expect_fail() {  # expect_fail CODE PATTERN -- command...
  local code=$1 pat=$2; shift 3
  set +e
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  set -e
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$pat" "$tmp/err"; then
    echo "FAIL: '$*' gave $rc (expected $code) and stderr:"; cat "$tmp/err"; exit 1
  fi
}
expect_fail 2 "must end in .html" -- "$scurry" -q run "$in" -o "$tmp/r.h5ad" --report "$tmp/r.txt"
test ! -e "$tmp/r.h5ad"
expect_fail 2 "no-such-dir" -- "$scurry" -q run "$in" -o "$tmp/r.h5ad" --report /proc/no-such-dir/r.html
test ! -e "$tmp/r.h5ad"
touch "$tmp/file"
expect_fail 2 "not a directory" -- "$scurry" -q run "$in" -o "$tmp/r.h5ad" --report "$tmp/file/r.html"
test ! -e "$tmp/r.h5ad"
expect_fail 2 "no such file" -- "$scurry" -q report "$tmp/missing.h5ad" -o "$tmp/m.html"
expect_fail 2 "h5ad file or a zarr store" -- "$scurry" -q report "$repo/data/pbmc3k_first1000_10x_mtx" -o "$tmp/m.html"
expect_fail 2 "must end in .html" -- "$scurry" -q report "$in" -o "$tmp/m.htm"
test ! -e "$tmp/m.html"
printf '\tk\tstability\n0\t5\t0.9\n' > "$tmp/bad_stats.txt"   # no prediction_error column
expect_fail 2 "prediction_error" -- "$scurry" -q report "$in" -o "$tmp/m.html" --cnmf-stats "$tmp/bad_stats.txt"
test ! -e "$tmp/m.html"

"$scurry" -q run "$in" -o "$tmp/r.h5ad" --report "$tmp/r.html" --min-genes 300 --max-counts 20000
test -s "$tmp/r.html"
ls "$tmp" | grep -q "tmp-" && { echo "FAIL: a temporary was left"; ls "$tmp"; exit 1; }
head -c 15 "$tmp/r.html" | grep -q "<!DOCTYPE html>"
grep -q "min_genes 300" "$tmp/r.html" && grep -q "max_counts 20000" "$tmp/r.html"
"$scurry" -q report "$in" -o "$tmp/input.html"   # the raw input: QC slots absent, noted
grep -q "Not shown" "$tmp/input.html"

"$scurry" -q run "$in" -o "$tmp/plain.h5ad"   # without --report: filters but no timings in uns['scurry']
"$py" -W error - "$tmp/plain.h5ad" <<'PY'
import sys
import anndata as ad
s = ad.read_h5ad(sys.argv[1]).uns["scurry"]
assert "timings" not in s and s["filters"]["min_genes"] == 200, s
PY
"$py" -W error - "$tmp/r.h5ad" "$in" <<'PY'
import sys
import anndata as ad
r = ad.read_h5ad(sys.argv[1])
i = ad.read_h5ad(sys.argv[2], backed="r")
s = r.uns["scurry"]
f = s["filters"]
assert f["n_obs_input"] == i.n_obs and f["n_vars_input"] == i.n_vars, f
assert f["n_obs_kept"] == r.n_obs and f["n_vars_kept"] == r.raw.n_vars, f
assert f["min_genes"] == 300 and f["max_counts"] == 20000 and f["min_cells"] == 3, f
assert (r.obs["n_genes_by_counts"] >= 300).all() and (r.obs["total_counts"] <= 20000).all()
t = s["timings"]
assert list(t["step"])[:3] == ["read", "check_counts", "qc"] and "write" not in list(t["step"]), list(t["step"])
assert (t["wall_s"] >= 0).all() and (t["peak_rss_mb"] > 0).all()
assert s["version"] and s["command"].split()[1:3] == ["-q", "run"], s["command"]
print("report CLI: ok (uns['scurry']: %d timed steps, %d cells of %d kept)" % (len(t), f["n_obs_kept"], f["n_obs_input"]))
PY
