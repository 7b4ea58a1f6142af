"""The batch tools (harmony_integrate, combat, regress_out, scrublet) and the embedding/graph tools
(tsne, diffmap, dpt, paga, dendrogram, embedding_density, draw_graph, leiden's options) of the package against the CLI's
commands on the same file: the slots each writes must be identical (same dtype, same bits)."""
import anndata
import numpy as np
import pytest

import scurry as sc
from conftest import SEED, assert_same_column, assert_same_matrix, run_cli, synthetic


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """counts.h5ad (with obs 'batch' and a numeric 'score') and, through the CLI, the log data
    with X_pca, the neighbours, leiden, X_umap and uns['iroot'] (graph.h5ad)."""
    d = tmp_path_factory.mktemp("tools")
    rng = np.random.default_rng(SEED)
    a = synthetic(rng, n_obs=300, n_vars=200)
    a.obs["batch"] = np.where(rng.random(a.n_obs) < 0.5, "b1", "b2")
    a.obs["batch"] = a.obs["batch"].astype("category")
    a.obs["score"] = rng.normal(size=a.n_obs)
    out = {"counts": d / "counts.h5ad"}
    a.write_h5ad(out["counts"])
    prev = out["counts"]
    for name, cmd, opts in [("norm", "normalize-total", ["--target-sum", "1e4"]), ("log", "log1p", []),
                            ("pca", "pca", ["--n-comps", "15", "--svd-solver", "arpack"]),
                            ("nn", "neighbors", ["--n-neighbors", "10"]), ("leiden", "leiden", []),
                            ("umap", "umap", ["--maxiter", "50"])]:
        f = d / f"{name}.h5ad"
        p = run_cli(cmd, prev, "-o", f, *opts)
        assert p.returncode == 0, f"scurry {cmd}: {p.stderr}"
        out[name], prev = f, f
    g = anndata.read_h5ad(prev)
    g.uns["iroot"] = 3
    out["graph"] = d / "graph.h5ad"
    g.write_h5ad(out["graph"])
    out["dir"] = d
    return out


def cli(files, cmd, src, *opts):
    out = files["dir"] / f"{cmd}.{abs(hash(opts)) % 10**8}.out.h5ad"
    p = run_cli(cmd, files[src], "-o", out, *opts)
    assert p.returncode == 0, f"scurry {cmd}: {p.stderr}"
    return anndata.read_h5ad(out)


def same_value(a, b, what):
    """uns entries: dicts, arrays, scalars, strings, identical."""
    if isinstance(b, dict):
        assert isinstance(a, dict) and set(a) == set(b), f"{what}: keys {sorted(a)} vs {sorted(b)}"
        for k in b:
            same_value(a[k], b[k], f"{what}['{k}']")
    elif hasattr(b, "shape") and not np.isscalar(b) and np.asarray(b).dtype.kind in "OUS":
        assert np.asarray(a).tolist() == np.asarray(b).tolist(), f"{what}: {a!r} vs {b!r}"
    elif hasattr(b, "shape") and not np.isscalar(b):
        assert_same_matrix(a, b, what)
    else:
        assert a == b or (a != a and b != b), f"{what}: {a!r} vs {b!r}"


def test_harmony_integrate(files):
    e = cli(files, "harmony-integrate", "pca", "--key", "batch", "--max-iter-harmony", "5")
    a = anndata.read_h5ad(files["pca"])
    sc.external.pp.harmony_integrate(a, "batch", max_iter_harmony=5)
    assert_same_matrix(a.obsm["X_pca_harmony"], e.obsm["X_pca_harmony"], "obsm['X_pca_harmony']")
    assert not np.array_equal(a.obsm["X_pca_harmony"], a.obsm["X_pca"])
    assert sc.pp.harmony_integrate is sc.external.pp.harmony_integrate
    with pytest.raises(NotImplementedError, match="reference_values"):
        sc.external.pp.harmony_integrate(a, "batch", reference_values=["b1"])
    with pytest.raises(KeyError, match="nope"):
        sc.external.pp.harmony_integrate(a, "batch", basis="nope")


def test_combat(files):
    e = cli(files, "combat", "log", "--key", "batch", "--covariates", "score")
    a = anndata.read_h5ad(files["log"])
    X = sc.pp.combat(a, key="batch", covariates=["score"], inplace=False)
    assert a.X is not X and hasattr(a.X, "indptr")  # inplace=False leaves X alone
    assert_same_matrix(X, e.X, "combat X (returned)")
    sc.pp.combat(a, key="batch", covariates=["score"])
    assert_same_matrix(a.X, e.X, "combat X")
    with pytest.raises(ValueError, match="nope"):
        sc.pp.combat(a, key="nope")


def test_regress_out(files):
    e = cli(files, "regress-out", "log", "--keys", "score")
    a = anndata.read_h5ad(files["log"])
    b = sc.pp.regress_out(a, "score", copy=True)
    assert hasattr(a.X, "indptr")  # copy=True leaves a alone
    assert_same_matrix(b.X, e.X, "regress_out X")
    sc.pp.regress_out(a, ["score"], n_jobs=1)
    assert_same_matrix(a.X, e.X, "regress_out X (n_jobs=1)")


def test_scrublet(files):
    e = cli(files, "scrublet", "counts", "--batch-key", "batch")
    a = anndata.read_h5ad(files["counts"])
    sc.pp.scrublet(a, batch_key="batch", use_approx_neighbors=False)
    for k in ("doublet_score", "predicted_doublet"):
        assert_same_column(a.obs[k], e.obs[k], f"obs['{k}']")
    same_value(a.uns["scrublet"], e.uns["scrublet"], "uns['scrublet']")
    with pytest.raises(NotImplementedError, match="adata_sim"):
        sc.pp.scrublet(a, adata_sim=a)


def test_tsne(files):  # 300 cells: method auto's all-pairs repulsion, well under a second
    e = cli(files, "tsne", "pca", "--perplexity", "20", "--learning-rate", "200")
    a = anndata.read_h5ad(files["pca"])
    b = sc.tl.tsne(a, perplexity=20, learning_rate=200, copy=True)
    assert "X_tsne" not in a.obsm
    assert_same_matrix(b.obsm["X_tsne"], e.obsm["X_tsne"], "obsm['X_tsne']")
    same_value(b.uns["tsne"], e.uns["tsne"], "uns['tsne']")
    with pytest.raises(NotImplementedError, match="use_fast_tsne"):
        sc.tl.tsne(a, use_fast_tsne=True)


def test_diffmap_and_dpt(files):
    e = cli(files, "diffmap", "graph", "--n-comps", "10")
    a = anndata.read_h5ad(files["graph"])
    sc.tl.diffmap(a, n_comps=10)
    assert_same_matrix(a.obsm["X_diffmap"], e.obsm["X_diffmap"], "obsm['X_diffmap']")
    assert_same_matrix(a.uns["diffmap_evals"], e.uns["diffmap_evals"], "uns['diffmap_evals']")
    with pytest.raises(ValueError, match="n_comps"):
        sc.tl.diffmap(a, n_comps=2)
    # dpt on the CLI's diffmap, and dpt computing the diffmap itself (scanpy's fallback)
    src = files["dir"] / "dm.h5ad"
    e.write_h5ad(src)
    files["dm"] = src
    e2 = cli(files, "dpt", "dm", "--n-dcs", "8")
    sc.tl.dpt(a, n_dcs=8)
    assert_same_column(a.obs["dpt_pseudotime"], e2.obs["dpt_pseudotime"], "obs['dpt_pseudotime']")
    e3 = cli(files, "dpt", "graph")
    b = anndata.read_h5ad(files["graph"])
    sc.tl.dpt(b)
    assert_same_column(b.obs["dpt_pseudotime"], e3.obs["dpt_pseudotime"], "obs['dpt_pseudotime'] (fallback)")
    assert "X_diffmap" in b.obsm
    with pytest.raises(NotImplementedError, match="n_branchings"):
        sc.tl.dpt(b, n_branchings=1)


def test_paga(files):
    e = cli(files, "paga", "graph")
    a = anndata.read_h5ad(files["graph"])
    sc.tl.paga(a)
    same_value(a.uns["paga"], e.uns["paga"], "uns['paga']")
    assert_same_matrix(a.uns["leiden_sizes"], e.uns["leiden_sizes"], "uns['leiden_sizes']")
    with pytest.raises(KeyError, match="nope"):
        sc.tl.paga(a, groups="nope")


def test_dendrogram(files):
    e = cli(files, "dendrogram", "graph", "--groupby", "leiden", "--linkage-method", "average")
    a = anndata.read_h5ad(files["graph"])
    d = sc.tl.dendrogram(a, "leiden", linkage_method="average", inplace=False)
    assert "dendrogram_leiden" not in a.uns
    same_value(d, e.uns["dendrogram_leiden"], "dendrogram (returned)")
    sc.tl.dendrogram(a, "leiden", linkage_method="average")
    same_value(a.uns["dendrogram_leiden"], e.uns["dendrogram_leiden"], "uns['dendrogram_leiden']")
    with pytest.raises(NotImplementedError, match="var_names"):
        sc.tl.dendrogram(a, "leiden", var_names=["G10"])


def test_embedding_density(files):
    e = cli(files, "embedding-density", "graph", "--basis", "umap", "--groupby", "batch")
    a = anndata.read_h5ad(files["graph"])
    sc.tl.embedding_density(a, basis="umap", groupby="batch")
    k = "umap_density_batch"
    assert_same_column(a.obs[k], e.obs[k], f"obs['{k}']")
    same_value(a.uns[k + "_params"], e.uns[k + "_params"], f"uns['{k}_params']")
    with pytest.raises(ValueError, match="X_tsne"):
        sc.tl.embedding_density(a, basis="tsne")


def test_draw_graph(files):
    e = cli(files, "draw-graph", "graph", "--iterations", "60")
    a = anndata.read_h5ad(files["graph"])
    b = sc.tl.draw_graph(a, maxiter=60, copy=True)
    assert "X_draw_graph_fa" not in a.obsm  # copy=True leaves a alone
    assert_same_matrix(b.obsm["X_draw_graph_fa"], e.obsm["X_draw_graph_fa"], "obsm['X_draw_graph_fa']")
    assert b.obsm["X_draw_graph_fa"].dtype == np.float64 and b.obsm["X_draw_graph_fa"].shape == (a.n_obs, 2)
    same_value(b.uns["draw_graph"], e.uns["draw_graph"], "uns['draw_graph']")
    assert b.uns["draw_graph"]["params"]["layout"] == "fa"
    # from X_umap, another seed, an extension key, two threads; the graph through obsp and adjacency
    e2 = cli(files, "draw-graph", "graph", "--iterations", "40", "--init-pos", "X_umap", "--random-state", "3",
             "--key-added-ext", "fa_umap", "--obsp", "connectivities")
    sc.tl.draw_graph(a, init_pos="X_umap", random_state=3, key_added_ext="fa_umap", n_jobs=2, iterations=40,
                     obsp="connectivities")
    assert_same_matrix(a.obsm["X_draw_graph_fa_umap"], e2.obsm["X_draw_graph_fa_umap"], "X_draw_graph_fa_umap")
    same_value(a.uns["draw_graph"], e2.uns["draw_graph"], "uns['draw_graph'] (random_state 3)")
    c = anndata.read_h5ad(files["graph"])
    sc.tl.draw_graph(c, maxiter=60, adjacency=c.obsp["connectivities"])
    assert_same_matrix(c.obsm["X_draw_graph_fa"], e.obsm["X_draw_graph_fa"], "X_draw_graph_fa (adjacency)")
    for call, param in [(lambda: sc.tl.draw_graph(c, layout="fr"), "layout"),
                        (lambda: sc.tl.draw_graph(c, init_pos="paga"), "init_pos"),
                        (lambda: sc.tl.draw_graph(c, random_state=None), "random_state"),
                        (lambda: sc.tl.draw_graph(c, weights="weight"), "weights")]:
        with pytest.raises(NotImplementedError, match=param):
            call()
    with pytest.raises(ValueError, match="layout"):
        sc.tl.draw_graph(c, layout="nope")
    with pytest.raises(KeyError, match="X_nope"):
        sc.tl.draw_graph(c, init_pos="X_nope")
    with pytest.raises(ValueError, match="obsp, neighbors_key"):
        sc.tl.draw_graph(c, obsp="connectivities", neighbors_key="neighbors")


@pytest.mark.parametrize("case", ["igraph", "resolutions", "restrict", "obsp_unweighted"])
def test_leiden_options(files, case):
    """Leiden as scanpy 1.10 calls it (issue 22 point 4): each option against `scurry leiden`."""
    a = anndata.read_h5ad(files["graph"])
    if case == "igraph":
        e = cli(files, "leiden", "graph", "--flavor", "igraph", "--n-iterations", "2", "--key-added", "lg",
                "--random-state", "5")
        sc.tl.leiden(a, flavor="igraph", n_iterations=2, key_added="lg", random_state=5, directed=False)
        keys = ["lg"]
        with pytest.raises(ValueError, match="directed"):
            sc.tl.leiden(a, flavor="igraph", directed=True)
    elif case == "resolutions":
        e = cli(files, "leiden", "graph", "--resolution", "0.5,1.0,2.0")
        b = sc.tl.leiden(a, resolution=[0.5, 1.0, 2.0], copy=True)
        assert "leiden_0.5" not in a.obs.columns
        a = b
        keys = ["leiden_0.5", "leiden_1.0", "leiden_2.0"]
        assert a.obs["leiden_2.0"].cat.categories.size >= a.obs["leiden_0.5"].cat.categories.size
    elif case == "restrict":
        e = cli(files, "leiden", "graph", "--restrict-to", "leiden:0,1", "--resolution", "0.8")
        sc.tl.leiden(a, restrict_to=("leiden", ["0", "1"]), resolution=0.8)
        keys = ["leiden_R"]
        assert any(c.startswith("0-1,") for c in a.obs["leiden_R"].cat.categories)
    else:
        e = cli(files, "leiden", "graph", "--obsp", "connectivities", "--use-weights", "false", "--key-added", "u")
        sc.tl.leiden(a, obsp="connectivities", use_weights=False, key_added="u")
        keys = ["u"]
        b = anndata.read_h5ad(files["graph"])
        sc.tl.leiden(b, adjacency=b.obsp["connectivities"], use_weights=False, key_added="u")
        assert_same_column(b.obs["u"], e.obs["u"], "obs['u'] (adjacency)")
    for k in keys:
        assert_same_column(a.obs[k], e.obs[k], f"obs['{k}']")
        assert a.obs[k].cat.categories.size > 1
        same_value(a.uns[k], e.uns[k], f"uns['{k}']")
    assert list(a.obs["leiden"]) == list(anndata.read_h5ad(files["graph"]).obs["leiden"])  # the input column kept


def test_experimental_pearson_residuals_hvg(files):
    e = cli(files, "highly-variable-genes", "counts", "--flavor", "pearson_residuals", "--n-top-genes", "40",
            "--theta", "50", "--batch-key", "batch")
    a = anndata.read_h5ad(files["counts"])
    df = sc.experimental.pp.highly_variable_genes(a, n_top_genes=40, theta=50, batch_key="batch", inplace=False)
    assert "highly_variable" not in a.var.columns  # inplace=False leaves a alone
    sc.experimental.pp.highly_variable_genes(a, n_top_genes=40, theta=50, batch_key="batch")
    cols = [c for c in e.var.columns if c not in ("flag",)]
    assert {"highly_variable", "residual_variances", "highly_variable_rank"} <= set(cols)
    for k in cols:
        assert_same_column(a.var[k], e.var[k], f"var['{k}']")
        assert_same_column(df[k], e.var[k], f"returned ['{k}']")
    assert a.var["highly_variable"].sum() == 40
    same_value(a.uns["hvg"], e.uns["hvg"], "uns['hvg']")
    with pytest.raises(ValueError, match="n_top_genes"):
        sc.experimental.pp.highly_variable_genes(a)
