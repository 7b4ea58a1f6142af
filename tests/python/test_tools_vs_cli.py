"""The batch tools (harmony_integrate, combat, regress_out, scrublet) and the embedding/graph tools
(tsne, diffmap, dpt, paga, dendrogram, embedding_density) of the package against the CLI's
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
