#!/usr/bin/env bash
# scurry rank-genes-groups and run --markers end to end: exit codes, a bad groupby named in one line
# with no output left behind, and the output read by anndata 0.8 (warnings as errors) with
# uns['rank_genes_groups'] laid out as scanpy writes it: record arrays with one field per group
# (names 'O', scores/logfoldchanges float32, pvals/pvals_adj float64), params, pts/pts_rest
# dataframes; the --tsv table equal to a pandas reconstruction of sc.get.rank_genes_groups_df.
# usage: test_rank_genes_groups_cli.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
golden="$repo/tests/data/golden/pbmc3k_first1000.scanpy.h5ad"

"$scurry" -q rank-genes-groups "$golden" -o "$tmp/w.h5ad" --method wilcoxon --pts --n-genes 40 --tsv "$tmp/w.tsv"
test -s "$tmp/w.h5ad" && test -s "$tmp/w.tsv"

# bad groupby: exit 2, the column named, no output
set +e
"$scurry" -q rank-genes-groups "$golden" -o "$tmp/bad.h5ad" --groupby louvain 2>"$tmp/err"
rc=$?
set -e
test "$rc" -eq 2 || { echo "bad groupby: exit $rc, expected 2" >&2; exit 1; }
grep -q "'louvain'" "$tmp/err" || { echo "bad groupby: the message does not name the column:" >&2; cat "$tmp/err" >&2; exit 1; }
test "$(wc -l <"$tmp/err")" -eq 1
test ! -e "$tmp/bad.h5ad"
ls "$tmp" | grep -q tmp- && { echo "a temporary was left behind" >&2; exit 1; }
# bad method, bad reference: exit 2
set +e
"$scurry" -q rank-genes-groups "$golden" -o "$tmp/bad.h5ad" --method magic 2>/dev/null; rc1=$?
"$scurry" -q rank-genes-groups "$golden" -o "$tmp/bad.h5ad" --reference 99 2>"$tmp/err"; rc2=$?
set -e
test "$rc1" -eq 2 && test "$rc2" -eq 2 && grep -q "'99'" "$tmp/err"
test ! -e "$tmp/bad.h5ad"

# run ends with markers (t-test by default); --no-markers leaves them out
"$scurry" -q run "$repo/data/pbmc3k_first1000_10x_mtx" -o "$tmp/r.h5ad" --markers t-test_overestim_var \
  --markers-tsv "$tmp/r.tsv"
"$scurry" -q run "$repo/data/pbmc3k_first1000_10x_mtx" -o "$tmp/n.h5ad" --no-markers

# the C++ writers (h5ad and zarr) of a seeded result, read by anndata
SCURRY_WRITE_RGG="$tmp/api" "$(dirname "$scurry")/tests/test_rank_genes_groups" --gtest_filter='*WriteForPython' >/dev/null
test -s "$tmp/api.h5ad" && test -d "$tmp/api.zarr"

"$py" -W error - "$tmp" <<'PY'
import sys
import numpy as np
import pandas as pd
import anndata as ad

tmp = sys.argv[1]
a = ad.read_h5ad(f"{tmp}/w.h5ad")
u = a.uns["rank_genes_groups"]
groups = list(a.obs["leiden"].cat.categories)
for k, dt in [("names", "O"), ("scores", "float32"), ("logfoldchanges", "float32"), ("pvals", "float64"),
              ("pvals_adj", "float64")]:
    assert list(u[k].dtype.names) == groups, (k, u[k].dtype.names)
    assert all(u[k].dtype[g] == np.dtype(dt) for g in groups), (k, u[k].dtype)
    assert u[k].shape == (40,), (k, u[k].shape)
p = u["params"]
assert p["groupby"] == "leiden" and p["method"] == "wilcoxon" and p["reference"] == "rest", p
assert p["corr_method"] == "benjamini-hochberg" and bool(p["use_raw"]) is True, p
assert isinstance(u["pts"], pd.DataFrame) and list(u["pts"].columns) == groups
assert u["pts"].shape == (a.raw.n_vars, len(groups)) and list(u["pts"].index) == list(a.raw.var_names)
assert isinstance(u["pts_rest"], pd.DataFrame)
# the top gene of group 2 (monocytes) is a monocyte marker, its score positive
assert u["names"]["2"][0] in ("LYZ", "S100A9", "S100A8", "FTL", "CST3"), u["names"]["2"][:5]
assert float(u["scores"]["2"][0]) > 10

# sc.get.rank_genes_groups_df(adata, group=None), as scanpy 1.9.6 builds it
d = pd.concat([pd.DataFrame(u[c])[groups].melt(var_name="group", value_name=c) for c in
               ["names", "scores", "logfoldchanges", "pvals", "pvals_adj"]], axis=1)
d = d.loc[:, ~d.columns.duplicated()]
d["pct_nz_group"] = [u["pts"].loc[n, g] for n, g in zip(d["names"], d["group"])]
d["pct_nz_reference"] = [u["pts_rest"].loc[n, g] for n, g in zip(d["names"], d["group"])]
t = pd.read_csv(f"{tmp}/w.tsv", sep="\t", dtype={"group": str})
assert list(t.columns) == ["group", "names", "scores", "logfoldchanges", "pvals", "pvals_adj", "pct_nz_group",
                           "pct_nz_reference"], list(t.columns)
assert (t["group"].values == d["group"].values).all() and (t["names"].values == d["names"].values).all()
for c in ["scores", "logfoldchanges", "pvals_adj", "pct_nz_group"]:
    np.testing.assert_allclose(t[c].values, d[c].values.astype(float), rtol=1e-6, atol=1e-300, err_msg=c)

r = ad.read_h5ad(f"{tmp}/r.h5ad")
ur = r.uns["rank_genes_groups"]
assert ur["params"]["method"] == "t-test_overestim_var"
assert list(ur["names"].dtype.names) == list(r.obs["leiden"].cat.categories)
assert len(ur["names"]) == r.raw.n_vars  # n_genes unset: every gene
t = pd.read_csv(f"{tmp}/r.tsv", sep="\t")
assert len(t) == r.raw.n_vars * len(ur["names"].dtype.names)
n = ad.read_h5ad(f"{tmp}/n.h5ad")
assert "rank_genes_groups" not in n.uns and "leiden" in n.obs
h, z = ad.read_h5ad(f"{tmp}/api.h5ad"), ad.read_zarr(f"{tmp}/api.zarr")
for k in ["names", "scores", "pvals", "pvals_adj", "logfoldchanges"]:
    a, b = h.uns["rank_genes_groups"][k], z.uns["rank_genes_groups"][k]
    assert a.dtype.names == b.dtype.names == ("a", "b", "c", "d"), (k, a.dtype, b.dtype)
    for g in a.dtype.names:
        assert a.dtype[g].kind == b.dtype[g].kind, (k, g, a.dtype[g], b.dtype[g])
        if k == "names":
            assert list(a[g]) == list(b[g]), (k, g)
        else:
            np.testing.assert_array_equal(a[g], b[g], err_msg=k)
pd.testing.assert_frame_equal(h.uns["rank_genes_groups"]["pts"], z.uns["rank_genes_groups"]["pts"])
print("rank-genes-groups CLI: ok")
PY
