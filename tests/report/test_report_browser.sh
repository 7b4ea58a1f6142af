#!/usr/bin/env bash
# The run report in a real browser (headless Chromium; ctest label `browser`): the report of
# `scurry run --report` on the bundled pbmc3k subset and of `scurry report` on scanpy's own result
# (tests/data/golden) are opened from a file; every figure (each <svg>, drawn onto a canvas, and
# each PNG inside it) must have a non-zero size and be drawn (several colours, some ink), the
# sections the data allow must be there, and the page must log nothing to the console (it has no
# script; a console line would be a failed resource or a parse error). Chromium is installed with
# apt-get where it is missing and this runs as root; otherwise the test is skipped (exit 77).
# usage: test_report_browser.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

find_chromium() { command -v chromium || command -v chromium-browser || command -v google-chrome || true; }
chrome=$(find_chromium)
if [ -z "$chrome" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "test_report_browser: chromium is missing; installing Debian's chromium with apt-get"
  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
   { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }) || true
  chrome=$(find_chromium)
fi
if [ -z "$chrome" ]; then
  echo "test_report_browser: SKIPPED: no chromium found and it could not be installed (apt-get install chromium)"
  exit 77
fi
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-extensions
       --user-data-dir="$tmp/profile" --window-size=1300,2000)

"$scurry" -q run "$repo/tests/data/pbmc3k_first1000.h5ad" -o "$tmp/run.h5ad" --report "$tmp/run.html"
# A result as scanpy writes it (anndata 0.8): the golden file of scanpy 1.9.6's pipeline with the
# slot names scanpy gives them (obs total_counts from its calculate_qc_metrics table; raw.var
# highly_variable/means/dispersions(_norm) of its seurat flavour) and its t-test rank_genes_groups
# (tests/data/golden/*_tl.h5) as uns['rank_genes_groups'] record arrays.
"$py" -W ignore - "$repo/tests/data/golden" "$tmp/scanpy.h5ad" <<'PY'
import sys
import anndata as ad, h5py, numpy as np, pandas as pd
g, out = sys.argv[1], sys.argv[2]
a = ad.read_h5ad(f"{g}/pbmc3k_first1000.scanpy.h5ad")
qc = pd.read_csv(f"{g}/pbmc3k_first1000.scanpy.qc_obs.csv.gz", index_col=0)
a.obs["total_counts"] = qc.loc[a.obs_names, "total_counts"].values.astype(np.float32)
raw = a.raw.to_adata()
for k in ["means", "dispersions", "dispersions_norm", "highly_variable", "mean_bin"]:
    raw.var[k] = raw.var["hvg_seurat_" + k]
a.raw = raw
with h5py.File(f"{g}/pbmc3k_first1000.scanpy_tl.h5") as f:
    t = f["rgg_t_test"]
    groups = [x.decode() for x in t["groups"][:]]
    rec = {}
    for key in ["names", "scores", "pvals", "pvals_adj", "logfoldchanges"]:
        v = t[key][:]
        if v.dtype == object:
            v = v.astype(str)
            dt = [(gr, "O") for gr in groups]
            rec[key] = np.rec.fromarrays([v[:, j].astype(object) for j in range(len(groups))], dtype=dt)
        else:
            rec[key] = np.rec.fromarrays([v[:, j] for j in range(len(groups))], dtype=[(gr, "float32") for gr in groups])
rec["params"] = {"groupby": "leiden", "reference": "rest", "method": "t-test", "use_raw": True, "corr_method": "benjamini-hochberg"}
a.uns["rank_genes_groups"] = rec
a.write_h5ad(out)
PY
"$scurry" -q report "$tmp/scanpy.h5ad" -o "$tmp/scanpy.html"
"$scurry" -q report "$tmp/run.h5ad" -o "$tmp/again.html"

check() {  # check NAME.html MIN_FIGURES SECTION...
  local page=$1 min=$2; shift 2
  # 1. the page as written: nothing on the console
  timeout 120 "$chrome" "${flags[@]}" --enable-logging=stderr --v=0 --virtual-time-budget=5000 \
    --dump-dom "file://$tmp/$page" >"$tmp/$page.dom" 2>"$tmp/$page.log" || true
  if grep -E "CONSOLE|Uncaught|Failed to load resource|net::ERR" "$tmp/$page.log"; then
    echo "FAIL: $page: console output or a failed load (above)"; exit 1
  fi
  grep -q "</html>\|</body>" "$tmp/$page.dom" || { echo "FAIL: $page: chromium rendered no DOM"; cat "$tmp/$page.log"; exit 1; }
  # 2. a copy with the checking script: every figure drawn
  "$py" - "$tmp/$page" "$repo/tests/report/check_figures.js" "$tmp/check-$page" <<'PY'
import sys
html = open(sys.argv[1], encoding="utf-8").read()
js = open(sys.argv[2], encoding="utf-8").read()
assert html.count("</body>") == 1
open(sys.argv[3], "w", encoding="utf-8").write(html.replace("</body>", "<script>" + js + "</script></body>"))
PY
  timeout 180 "$chrome" "${flags[@]}" --enable-logging=stderr --v=0 --virtual-time-budget=60000 \
    --dump-dom "file://$tmp/check-$page" >"$tmp/check-$page.dom" 2>"$tmp/check-$page.log" || true
  "$py" - "$tmp/check-$page.dom" "$tmp/$page" "$min" "$@" <<'PY'
import html as H, json, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
page = open(sys.argv[2], encoding="utf-8").read()
minfig = int(sys.argv[3]); sections = sys.argv[4:]
m = re.search(r'<pre id="scurry-check">(.*?)</pre>', dom, re.S)
assert m, "the checking script wrote no result (did it run?)"
res = json.loads(H.unescape(m.group(1)))
bad = []
outside = [r["title"] for r in res if r["kind"] == "outside"]
assert not outside, "the page refers to something outside itself: %s" % outside[:5]
for r in res:
    if r.get("error"): bad.append((r["title"], r["kind"], r["error"])); continue
    if r["width"] <= 0 or r["height"] <= 0: bad.append((r["title"], r["kind"], "zero size"))
    elif r["colours"] < (3 if r["kind"] == "svg" else 2) or r["ink"] < 0.002: bad.append((r["title"], r["kind"], "blank: %d colours, %.4f ink" % (r["colours"], r["ink"])))
svgs = [r for r in res if r["kind"] == "svg"]
pngs = [r for r in res if r["kind"] == "png"]
assert not bad, "figures not drawn: %s" % bad
assert len(svgs) >= minfig, "%d figures, expected at least %d" % (len(svgs), minfig)
for s in sections:
    assert ('id="%s"' % s) in page, "section %s missing" % s
print("%s: %d figures and %d rasters drawn (%s)" % (sys.argv[2].split("/")[-1], len(svgs), len(pngs),
      ", ".join("%s %dx%d" % (r["title"][:18], r["width"], r["height"]) for r in svgs[:4]) + ", ..."))
PY
}

# scurry run's report: QC (3 violins + scatter), highest expressed, HVG (2), PCA, UMAP (cluster,
# total_counts, pct_counts_mt, 4 genes), dotplot, timing bars: 17 figures.
check run.html 17 summary parameters qc filters highest hvg pca umap markers timings warnings
grep -q "min_genes 200" "$tmp/run.html" || { echo "FAIL: the filter threshold is not drawn"; exit 1; }
# scanpy's result: no uns['scurry'] (no filters or timings), the rest drawn from its slots: 3
# violins, scatter, highest, 2 HVG, PCA, 7 UMAPs, dotplot.
check scanpy.html 16 summary qc highest hvg pca umap markers
grep -q "not written by scurry run" "$tmp/scanpy.html" || { echo "FAIL: the scanpy result is not told apart"; exit 1; }
# scurry report on scurry run's result: the same figures as the run's own report.
check again.html 17 summary qc filters highest hvg pca umap markers timings
grep -q "No timings recorded" "$tmp/again.html" && { echo "FAIL: the timings stored in uns['scurry'] were not read back"; exit 1; }
# cNMF: a k-selection table in cNMF's layout and usages of 3 programs in obsm (seeded Dirichlet).
"$py" -W ignore - "$tmp/run.h5ad" "$tmp/cnmf.h5ad" "$tmp/k_selection_stats.df.txt" <<'PY'
import sys
import anndata as ad, numpy as np
a = ad.read_h5ad(sys.argv[1])
a.obsm["cnmf_usages_k3"] = np.random.default_rng(0).dirichlet([0.3, 0.3, 0.3], a.n_obs).astype(np.float32)
a.write_h5ad(sys.argv[2])
with open(sys.argv[3], "w") as f:
    f.write("\tk\tlocal_density_threshold\tstability\tprediction_error\n")
    for i, (k, s, e) in enumerate([(3, 0.91, 9.1e5), (4, 0.85, 8.9e5), (5, 0.88, 8.8e5), (6, 0.79, 8.75e5)]):
        f.write(f"{i}\t{k}.0\t0.5\t{s}\t{e}\n")
PY
"$scurry" -q report "$tmp/cnmf.h5ad" -o "$tmp/cnmf.html" --cnmf-stats "$tmp/k_selection_stats.df.txt"
check cnmf.html 21 cnmf umap
grep -q "prediction error" "$tmp/cnmf.html" && grep -q "stability (silhouette" "$tmp/cnmf.html"
echo "report in headless chromium: ok"
