#!/usr/bin/env bash
# Screenshots of a run report's sections (headless Chromium), one small PNG each, for docs/ and
# bench/RESULTS.md: report_screenshots.sh REPORT.html OUTDIR [PREFIX] [SECTIONS...]
# Each PNG shows one section alone (the others hidden by a style added to a temporary copy), at
# 1300 CSS pixels wide rendered at 0.7 scale. Default sections: summary qc highest hvg umap markers timings.
set -euo pipefail
report=$1; out=$2; prefix=${3:-report}; shift $(( $# < 3 ? $# : 3 ))
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(summary qc highest hvg umap markers timings)
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "report_screenshots: no chromium (apt-get install chromium)" >&2; exit 2; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A height=([summary]=900 [parameters]=520 [qc]=1100 [filters]=300 [highest]=720 [hvg]=610 [pca]=520 [umap]=1560 [markers]=760 [timings]=1000 [warnings]=260)
for s in "${sections[@]}"; do
  keep="#$s"
  [ "$s" = summary ] && keep="#summary,#parameters"
  sed "s|</head>|<style>section{display:none} nav{display:none} $keep{display:block}</style></head>|" "$report" >"$tmp/$s.html"
  h=${height[$s]:-1000}
  "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --user-data-dir="$tmp/profile" \
    --force-device-scale-factor=0.7 --window-size=1300,$h --screenshot="$out/$prefix-$s.png" "file://$tmp/$s.html" >/dev/null 2>&1
  echo "$out/$prefix-$s.png ($(stat -c %s "$out/$prefix-$s.png") bytes)"
done
