"""Every function of the package against the CLI on the same data: the CLI runs a step on an h5ad
file, the package runs it on that file read by anndata; the slots the step writes must be
identical (same dtype, same bits)."""
import anndata
import numpy as np
import pytest

import scurry as sc
from conftest import SEED, assert_same_column, assert_same_matrix, run_cli, synthetic


MIN_GENES, MIN_CELLS = [0], [0]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The tutorial chain through the CLI, one file per stage: {stage: path}."""
    d = tmp_path_factory.mktemp("chain")
    a = synthetic(np.random.default_rng(SEED), n_obs=500, n_vars=400)
    files = {"counts": d / "counts.h5ad"}
    a.write_h5ad(files["counts"])
    # thresholds that remove some cells and genes of this draw
    MIN_GENES[0] = int(np.percentile(np.diff(a.X.indptr), 10))
    MIN_CELLS[0] = int(np.percentile(np.bincount(a.X.indices, minlength=a.n_vars), 5)) + 1
    steps = [
        ("qc", "qc", ["--qc-vars", "mt", "--percent-top", "20,50"]),
        ("filter_cells", "filter-cells", ["--min-genes", MIN_GENES[0]]),
        ("filter_genes", "filter-genes", ["--min-cells", MIN_CELLS[0]]),
        ("normalize_total", "normalize-total", ["--target-sum", "1e4", "--key-added", "norm"]),
        ("log1p", "log1p", []),
        ("hvg", "highly-variable-genes", ["--n-top-genes", "150"]),
        ("scale", "scale", ["--max-value", "3", "--clip-below"]),
        ("pca", "pca", ["--n-comps", "20", "--svd-solver", "arpack"]),
        ("neighbors", "neighbors", ["--n-neighbors", "10", "--n-pcs", "15"]),
        ("umap", "umap", ["--maxiter", "60"]),
        ("leiden", "leiden", []),
    ]
    prev = files["counts"]
    for name, cmd, opts in steps:
        out = d / f"{name}.h5ad"
        p = run_cli(cmd, prev, "-o", out, *opts)
        assert p.returncode == 0, f"scurry {cmd}: {p.stderr}"
        files[name] = out
        prev = out
    # markers on the log data (not the scaled X) with the clusters: log1p's X, leiden's obs
    m = anndata.read_h5ad(files["log1p"])
    m.obs["leiden"] = anndata.read_h5ad(files["leiden"]).obs["leiden"]
    files["markers_in"] = d / "markers_in.h5ad"
    m.write_h5ad(files["markers_in"])
    files["rank_genes_groups"] = d / "rank_genes_groups.h5ad"
    p = run_cli("rank-genes-groups", files["markers_in"], "-o", files["rank_genes_groups"], "--groupby", "leiden",
                "--method", "wilcoxon", "--pts")
    assert p.returncode == 0, p.stderr
    return files


def before(chain, stage):
    """The package's input for a stage: the CLI's output of the stage before, read by anndata."""
    order = list(chain)
    return anndata.read_h5ad(chain[order[order.index(stage) - 1]])


def expect(chain, stage):
    return anndata.read_h5ad(chain[stage])


def same_obs_var(a, b, obs=(), var=()):
    for k in obs:
        assert_same_column(a.obs[k], b.obs[k], f"obs['{k}']")
    for k in var:
        assert_same_column(a.var[k], b.var[k], f"var['{k}']")
    assert list(a.obs_names) == list(b.obs_names)
    assert list(a.var_names) == list(b.var_names)


def test_calculate_qc_metrics(chain):
    a, e = before(chain, "qc"), expect(chain, "qc")
    a.var["mt"] = a.var_names.str.startswith("MT-") | a.var_names.str.startswith("mt-")
    sc.pp.calculate_qc_metrics(a, qc_vars=["mt"], percent_top=[20, 50], inplace=True)
    new_obs = [k for k in e.obs.columns if k != "group"]
    new_var = [k for k in e.var.columns if k not in ("flag", "mt")]
    assert "pct_counts_mt" in new_obs and "n_cells_by_counts" in new_var
    same_obs_var(a, e, new_obs, new_var)
    assert list(a.obs.columns[-len(new_obs):]) == new_obs  # scanpy's column order


def test_calculate_qc_metrics_returns_frames(chain):
    a, e = before(chain, "qc"), expect(chain, "qc")
    a.var["mt"] = a.var_names.str.startswith("MT-")
    obs, var = sc.pp.calculate_qc_metrics(a, qc_vars="mt", percent_top=[20, 50])
    assert "total_counts" not in a.obs  # inplace=False (scanpy's default) leaves adata alone
    for k in obs.columns:
        assert_same_column(obs[k], e.obs[k], f"obs['{k}']")
    for k in var.columns:
        assert_same_column(var[k], e.var[k], f"var['{k}']")


def test_filter_cells(chain):
    a, e = before(chain, "filter_cells"), expect(chain, "filter_cells")
    n0 = a.n_obs
    sc.pp.filter_cells(a, min_genes=MIN_GENES[0])
    assert a.n_obs == e.n_obs < n0
    same_obs_var(a, e, ["n_genes"])
    assert_same_matrix(a.X, e.X, "X")


def test_filter_genes(chain):
    a, e = before(chain, "filter_genes"), expect(chain, "filter_genes")
    n0 = a.n_vars
    sc.pp.filter_genes(a, min_cells=MIN_CELLS[0])
    assert a.n_vars == e.n_vars < n0
    same_obs_var(a, e, var=["n_cells"])
    assert_same_matrix(a.X, e.X, "X")


def test_normalize_total(chain):
    a, e = before(chain, "normalize_total"), expect(chain, "normalize_total")
    sc.pp.normalize_total(a, target_sum=1e4, key_added="norm")
    assert_same_matrix(a.X, e.X, "X")
    same_obs_var(a, e, ["norm"])


def test_log1p(chain):
    a, e = before(chain, "log1p"), expect(chain, "log1p")
    sc.pp.log1p(a)
    assert_same_matrix(a.X, e.X, "X")
    assert "log1p" in a.uns


def test_highly_variable_genes(chain):
    a, e = before(chain, "hvg"), expect(chain, "hvg")
    sc.pp.highly_variable_genes(a, n_top_genes=150)
    cols = ["highly_variable", "means", "dispersions", "dispersions_norm"]
    same_obs_var(a, e, var=cols)
    assert a.var["highly_variable"].sum() == 150
    df = sc.pp.highly_variable_genes(before(chain, "hvg"), n_top_genes=150, inplace=False)
    assert np.array_equal(df["highly_variable"].to_numpy(), e.var["highly_variable"].to_numpy())


def test_scale(chain):
    a, e = before(chain, "scale"), expect(chain, "scale")
    sc.pp.scale(a, max_value=3)
    assert_same_matrix(a.X, e.X, "X")
    same_obs_var(a, e, var=["mean", "std"])
    assert a.X.min() >= -3 and a.X.max() <= 3


def test_pca(chain):
    a, e = before(chain, "pca"), expect(chain, "pca")
    sc.pp.pca(a, n_comps=20, svd_solver="arpack")
    assert_same_matrix(a.obsm["X_pca"], e.obsm["X_pca"], "obsm['X_pca']")
    assert_same_matrix(a.varm["PCs"], e.varm["PCs"], "varm['PCs']")
    for k in ("variance", "variance_ratio"):
        assert np.array_equal(a.uns["pca"][k], e.uns["pca"][k]), k


def test_neighbors(chain):
    a, e = before(chain, "neighbors"), expect(chain, "neighbors")
    sc.pp.neighbors(a, n_neighbors=10, n_pcs=15)
    for k in ("distances", "connectivities"):
        assert_same_matrix(a.obsp[k], e.obsp[k], f"obsp['{k}']")
    assert a.uns["neighbors"]["params"]["n_neighbors"] == 10


def test_umap(chain):
    a, e = before(chain, "umap"), expect(chain, "umap")
    sc.tl.umap(a, maxiter=60)
    assert_same_matrix(a.obsm["X_umap"], e.obsm["X_umap"], "obsm['X_umap']")
    assert a.uns["umap"]["params"]["a"] == e.uns["umap"]["params"]["a"]


def test_leiden(chain):
    a, e = before(chain, "leiden"), expect(chain, "leiden")
    sc.tl.leiden(a)
    assert_same_column(a.obs["leiden"], e.obs["leiden"], "obs['leiden']")
    assert a.obs["leiden"].cat.categories.size > 1


def test_rank_genes_groups(chain):
    a, e = before(chain, "rank_genes_groups"), expect(chain, "rank_genes_groups")
    sc.tl.rank_genes_groups(a, "leiden", method="wilcoxon", pts=True)
    r, x = a.uns["rank_genes_groups"], e.uns["rank_genes_groups"]
    for k in ("names", "scores", "pvals", "pvals_adj", "logfoldchanges"):
        for g in r[k].dtype.names:
            u, v = np.asarray(r[k][g]), np.asarray(x[k][g])
            assert np.array_equal(u, v, equal_nan=u.dtype.kind == "f"), f"{k}[{g}]"
    assert np.array_equal(r["pts"].to_numpy(), x["pts"].to_numpy())
    df = sc.get.rank_genes_groups_df(a, None)
    assert len(df) == len(r["names"]) * len(r["names"].dtype.names)
    one = sc.get.rank_genes_groups_df(a, r["names"].dtype.names[0])
    assert list(one["names"]) == list(r["names"][r["names"].dtype.names[0]])


def test_filter_rank_genes_groups(chain):
    a = expect(chain, "rank_genes_groups")
    sc.tl.filter_rank_genes_groups(a, min_fold_change=1.5)
    f = a.uns["rank_genes_groups_filtered"]["names"]
    names = a.uns["rank_genes_groups"]["names"]
    kept = sum(int(np.sum(np.asarray(f[g]).astype(str) != "nan")) for g in f.dtype.names)
    assert 0 < kept < len(names) * len(names.dtype.names)


def test_aggregate(chain, tmp_path):
    src = chain["log1p"]
    out = tmp_path / "agg.h5ad"
    p = run_cli("aggregate", src, "-o", out, "--by", "group", "--func", "sum,mean,count_nonzero")
    assert p.returncode == 0, p.stderr
    e = anndata.read_h5ad(out)
    a = sc.get.aggregate(anndata.read_h5ad(src), by="group", func=["sum", "mean", "count_nonzero"])
    assert list(a.obs_names) == list(e.obs_names)
    for k in ("sum", "mean", "count_nonzero"):
        assert_same_matrix(a.layers[k], e.layers[k], f"layers['{k}']")


def test_read_h5ad_equals_anndata(chain):
    a = sc.read_h5ad(chain["leiden"])
    e = anndata.read_h5ad(chain["leiden"])
    assert_same_matrix(a.X, e.X, "X")
    for k in e.obs.columns:
        assert_same_column(a.obs[k], e.obs[k], f"obs['{k}']")
    for k in e.obsm:
        assert_same_matrix(a.obsm[k], e.obsm[k], f"obsm['{k}']")
    for k in e.obsp:
        assert_same_matrix(a.obsp[k], e.obsp[k], f"obsp['{k}']")
    assert set(a.uns.keys()) == set(e.uns.keys())


def test_read_only_steps_on_every_layout(chain):
    """QC and the filters read the AnnData's buffers in place (CSR with int32 or int64 indices,
    dense float32/float64) or copy them (CSC): the same columns as on the CLI's input every time."""
    import scipy.sparse as sp

    base = before(chain, "qc")
    base.var["mt"] = base.var_names.str.startswith("MT-")
    ref = base.copy()
    sc.pp.calculate_qc_metrics(ref, qc_vars=["mt"], percent_top=[20, 50], inplace=True)
    X = base.X
    x64 = X.copy()
    x64.indices, x64.indptr = x64.indices.astype(np.int64), x64.indptr.astype(np.int64)
    for what, m in [("int64 indices", x64), ("dense float32", X.toarray()), ("dense float64", X.toarray().astype(np.float64)),
                    ("csc", sp.csc_matrix(X))]:
        a = base.copy()
        a.X = m
        sc.pp.calculate_qc_metrics(a, qc_vars=["mt"], percent_top=[20, 50], inplace=True)
        for k in ("n_genes_by_counts", "pct_counts_mt", "pct_counts_in_top_20_genes", "n_cells_by_counts"):
            col = a.obs[k] if k in a.obs else a.var[k]
            want = ref.obs[k] if k in ref.obs else ref.var[k]
            if m.dtype == np.float64 and col.dtype.kind == "f":
                assert np.array_equal(col.to_numpy(), want.to_numpy().astype(np.float64)) or np.allclose(col, want), k
            else:
                assert_same_column(col, want, f"{what}: {k}")
        b = base.copy()
        b.X = m
        sc.pp.filter_cells(b, min_genes=MIN_GENES[0])
        sc.pp.filter_genes(b, min_cells=MIN_CELLS[0])
        e = expect(chain, "filter_genes")
        assert list(b.obs_names) == list(e.obs_names) and list(b.var_names) == list(e.var_names), what
        assert np.array_equal(b.obs["n_genes"].to_numpy(), e.obs["n_genes"].to_numpy()), what
        assert np.array_equal(b.var["n_cells"].to_numpy(), e.var["n_cells"].to_numpy()), what
    bad = base.copy()
    bad.X = X.copy()
    bad.X.data[3] = -1
    with pytest.raises(ValueError, match="negative"):
        sc.pp.calculate_qc_metrics(bad, inplace=True)


def test_umap_of_a_graph_of_several_components(tmp_path):
    """Six separate blobs: more than 2 n_components components, so the start places them by the
    representation's centroids (umap-learn's component_layout): the package must hand umap the
    representation as the CLI's Dataset has it, and give the CLI's embedding."""
    import scipy.sparse
    from conftest import cli_step

    rng = np.random.default_rng(SEED)
    a = synthetic(rng, n_obs=240, n_vars=50)
    centres = rng.normal(0.0, 30.0, (6, 10))
    a.obsm["X_pca"] = (centres[np.arange(240) % 6] + rng.normal(0.0, 1.0, (240, 10))).astype(np.float32)
    sc.pp.neighbors(a, n_neighbors=10)
    n_comp, _ = scipy.sparse.csgraph.connected_components(a.obsp["connectivities"])
    assert n_comp == 6
    e = cli_step(tmp_path, a, "umap", "--maxiter", "30")
    sc.tl.umap(a, maxiter=30)
    assert_same_matrix(a.obsm["X_umap"], e.obsm["X_umap"], "obsm['X_umap']")
