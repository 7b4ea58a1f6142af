"""The package's GPU path (issue 17 point 4): X resident on the device between the steps
(scurry.get.anndata_to_GPU / anndata_to_CPU, settings.device='gpu').

Where no GPU is usable (CI): settings.device='gpu' and anndata_to_GPU raise RuntimeError saying why.
The wrappers' bookkeeping (X None while resident, filters and the HVG subset applied to the
AnnData, views of a resident AnnData, copy=True, X brought back before a step that reads it) is
tested everywhere against the CPU path through a stand-in for the device: the resident_* entry points
replaced by the CPU steps on a host matrix, so that the results must be identical. The device's own
steps are compared with the CPU steps in C++ (tests/pp/test_resident_gpu.cpp, label gpu), and on a
machine with a GPU the last test here runs the chain on it."""
import numpy as np
import pytest
import scipy.sparse as sp

import scurry as sc
from scurry import _gpu, _scurry

from conftest import synthetic


class _HostResident:
    """A resident X kept on the host: the stand-in for the device."""

    def __init__(self, X):
        self.X = X

    @property
    def shape(self):
        return self.X.shape

    def release(self):
        self.X = None


def _on(h, ds, fn, keep=True):
    ds.set_X(h.X)
    out = fn()
    X = ds.take_X()
    if keep:
        h.X = X
    return out


def _check_counts(h, where):
    ds = _scurry.Dataset()
    ds.set_obs_count(h.X.shape[0])
    ds.set_var_names([str(j) for j in range(h.X.shape[1])])
    ds.set_X(h.X)
    _scurry.check_counts(ds, "", where)


@pytest.fixture
def host_device(monkeypatch):
    fake = {
        "gpu_unavailable": lambda: "",
        "resident_upload": lambda X: _HostResident(sp.csr_matrix(X, dtype=np.float32, copy=True)),
        "resident_download": lambda h: h.X.copy(),
        "resident_subset": lambda h, rows, cols: _HostResident(
            h.X[slice(None) if rows is None else np.asarray(rows)][:, slice(None) if cols is None else np.asarray(cols)]),
        "resident_subset_vars": lambda h, cols: setattr(h, "X", h.X[:, np.asarray(cols)]),
        "resident_check_counts": lambda h, where: _check_counts(h, where),
        "resident_qc": lambda h, ds, o: _on(h, ds, lambda: _scurry.calculate_qc_metrics(ds, o), keep=False),
        "resident_filter_cells": lambda h, ds, o: _on(h, ds, lambda: _scurry.filter_cells(ds, o))[0],
        "resident_filter_genes": lambda h, ds, o: _on(h, ds, lambda: _scurry.filter_genes(ds, o))[0],
        "resident_normalize_total": lambda h, ds, o: _on(h, ds, lambda: _scurry.normalize_total(ds, o)),
        "resident_log1p": lambda h, ds: _on(h, ds, lambda: _scurry.log1p(ds, _scurry.Log1pOptions())),
        "resident_highly_variable_genes": lambda h, ds, o: _on(h, ds, lambda: _scurry.highly_variable_genes(ds, o),
                                                               keep=False),
        "resident_scale": lambda h, ds, o: _on(h, ds, lambda: _scurry.scale(ds, o)),
        "resident_pca": lambda h, ds, o: _on(h, ds, lambda: _scurry.pca(ds, o), keep=False),
    }
    for k, v in fake.items():
        monkeypatch.setattr(_scurry, k, v)
    yield
    sc.settings.device = "cpu"


def _chain(a, *, view_subset):
    sc.pp.calculate_qc_metrics(a, qc_vars=["flag"], percent_top=[20, 50], inplace=True)
    sc.pp.filter_cells(a, min_genes=20)
    sc.pp.filter_genes(a, min_cells=3)
    sc.pp.normalize_total(a, target_sum=1e4, key_added="norm")
    sc.pp.log1p(a)
    if view_subset:
        sc.pp.highly_variable_genes(a, n_top_genes=60)
        a = a[:, a.var.highly_variable]  # the tutorial's view
    else:
        sc.pp.highly_variable_genes(a, n_top_genes=60, subset=True)
    sc.pp.scale(a, max_value=10)
    sc.pp.pca(a, n_comps=10)
    return a


def _same(g, c):
    assert list(g.obs_names) == list(c.obs_names)
    assert list(g.var_names) == list(c.var_names)
    for df_g, df_c in ((g.obs, c.obs), (g.var, c.var)):
        assert list(df_g.columns) == list(df_c.columns)
        for k in df_c.columns:
            np.testing.assert_array_equal(df_g[k].to_numpy(), df_c[k].to_numpy(), err_msg=k)
    np.testing.assert_array_equal(g.obsm["X_pca"], c.obsm["X_pca"])
    np.testing.assert_array_equal(g.varm["PCs"], c.varm["PCs"])
    assert set(g.uns.keys()) == set(c.uns.keys())
    np.testing.assert_array_equal(g.uns["pca"]["variance"], c.uns["pca"]["variance"])


@pytest.mark.parametrize("view_subset", [False, True])
def test_resident_chain_equals_the_cpu(rng, host_device, view_subset):
    c = synthetic(rng, n_obs=300, n_vars=250)
    g = c.copy()
    sc.get.anndata_to_GPU(g)
    assert g.X is None and _gpu.resident(g) is not None
    c = _chain(c, view_subset=view_subset)
    g = _chain(g, view_subset=view_subset)
    assert g.X is None and _gpu.resident(g).shape == (g.n_obs, g.n_vars)
    _same(g, c)
    sc.get.anndata_to_CPU(g)
    assert _gpu.resident(g) is None
    np.testing.assert_array_equal(np.asarray(g.X), np.asarray(c.X))


def test_settings_device_uploads_once_and_steps_that_read_x_bring_it_back(rng, host_device):
    c = synthetic(rng, n_obs=200, n_vars=150)
    g = c.copy()
    sc.pp.normalize_total(c)
    sc.pp.log1p(c)
    uploads = []
    up = _scurry.resident_upload
    _scurry.resident_upload = lambda X: uploads.append(1) or up(X)
    sc.settings.device = "gpu"
    sc.pp.normalize_total(g)
    sc.pp.log1p(g)
    assert len(uploads) == 1 and g.X is None
    # A step without a device path brings X back first: the same result as the CPU's.
    sc.settings.device = "cpu"
    sc.tl.score_genes(g, gene_list=list(g.var_names[:10]), random_state=0)
    sc.tl.score_genes(c, gene_list=list(c.var_names[:10]), random_state=0)
    assert _gpu.resident(g) is None and g.X is not None
    np.testing.assert_array_equal(g.obs["score"].to_numpy(), c.obs["score"].to_numpy())
    np.testing.assert_array_equal(g.X.toarray(), c.X.toarray())


def test_copy_on_the_device_leaves_the_source(rng, host_device):
    a = synthetic(rng, n_obs=150, n_vars=120)
    ref = a.X.toarray()
    sc.get.anndata_to_GPU(a)
    b = sc.pp.log1p(a, copy=True)
    assert b is not a and _gpu.resident(b) is not None and b.X is None
    sc.get.anndata_to_CPU(a)
    sc.get.anndata_to_CPU(b)
    np.testing.assert_array_equal(a.X.toarray(), ref)
    np.testing.assert_allclose(b.X.toarray(), np.log1p(ref), rtol=1e-6)


def test_copy_of_a_host_anndata_leaves_it_on_the_host(rng, host_device):
    a = synthetic(rng, n_obs=100, n_vars=80)
    ref = a.X.toarray()
    sc.settings.device = "gpu"
    b = sc.pp.normalize_total(a, target_sum=100.0, copy=True)
    assert _gpu.resident(a) is None and a.X is not None
    np.testing.assert_array_equal(a.X.toarray(), ref)
    assert _gpu.resident(b) is not None and b.X is None


def test_calls_without_a_device_path_run_on_the_cpu(rng, host_device):
    c = synthetic(rng, n_obs=150, n_vars=120)
    g = c.copy()
    sc.get.anndata_to_GPU(g)
    out_c = sc.pp.highly_variable_genes(c, flavor="seurat_v3", n_top_genes=30, inplace=False)
    out_g = sc.pp.highly_variable_genes(g, flavor="seurat_v3", n_top_genes=30, inplace=False)
    assert _gpu.resident(g) is None  # X came back
    np.testing.assert_array_equal(out_g["highly_variable"].to_numpy(), out_c["highly_variable"].to_numpy())


def test_bad_counts_raise_the_cpu_error(rng, host_device):
    a = synthetic(rng, n_obs=80, n_vars=60)
    a.X.data[5] = np.nan
    c = a.copy()
    with pytest.raises(ValueError) as cpu_err:
        sc.pp.normalize_total(c)
    sc.get.anndata_to_GPU(a)
    with pytest.raises(ValueError) as gpu_err:
        sc.pp.normalize_total(a)
    assert str(gpu_err.value) == str(cpu_err.value) and "NaN" in str(gpu_err.value)
    assert _gpu.resident(a) is not None  # nothing happened to the AnnData


def test_without_a_gpu_the_device_is_refused():
    why = _scurry.gpu_unavailable()
    if not why:
        pytest.skip("a GPU is usable here")
    with pytest.raises(RuntimeError, match="settings.device='gpu'"):
        sc.settings.device = "gpu"
    assert sc.settings.device == "cpu"
    a = synthetic(np.random.default_rng(0), n_obs=50, n_vars=40)
    with pytest.raises(RuntimeError, match="scurry on the GPU"):
        sc.get.anndata_to_GPU(a)
    assert a.X is not None and _gpu.resident(a) is None


@pytest.mark.parametrize("view_subset", [False, True])
def test_the_device_chain_against_the_cpu(rng, view_subset):
    """On a machine with a GPU: the real device steps, against the CPU within the C++ tests' tolerances."""
    if _scurry.gpu_unavailable():
        pytest.skip("no GPU usable here")
    c = synthetic(rng, n_obs=600, n_vars=400)
    g = c.copy()
    sc.get.anndata_to_GPU(g)
    c = _chain(c, view_subset=view_subset)
    g = _chain(g, view_subset=view_subset)
    assert list(g.var_names) == list(c.var_names)
    np.testing.assert_array_equal(g.var["highly_variable"].to_numpy(), c.var["highly_variable"].to_numpy())
    np.testing.assert_allclose(g.obs["total_counts"].to_numpy(), c.obs["total_counts"].to_numpy(), rtol=1e-5)
    np.testing.assert_allclose(g.uns["pca"]["variance_ratio"], c.uns["pca"]["variance_ratio"], rtol=1e-4)
    for j in range(5):
        r = np.corrcoef(g.obsm["X_pca"][:, j], c.obsm["X_pca"][:, j])[0, 1]
        assert abs(r) > 0.999
    sc.get.anndata_to_CPU(g)
    np.testing.assert_allclose(g.X, c.X, atol=1e-4)


def test_graph_steps_on_the_device(rng):
    """On a machine with a GPU, settings.device='gpu': neighbors (exact kNN), umap and leiden on the device;
    the same neighbours as the CPU's, a finite embedding, a partition that agrees with the CPU's."""
    if _scurry.gpu_unavailable():
        pytest.skip("no GPU usable here")
    c = synthetic(rng, n_obs=800, n_vars=300)
    c = _chain(c, view_subset=False)
    g = c.copy()
    for a, dev in ((c, "cpu"), (g, "gpu")):
        sc.settings.device = dev
        try:
            sc.pp.neighbors(a, n_neighbors=15)
            sc.tl.umap(a)
            sc.tl.leiden(a)
        finally:
            sc.settings.device = "cpu"
    dc, dg = c.obsp["distances"].tocsr(), g.obsp["distances"].tocsr()
    same = np.mean([len(set(dc[i].indices) & set(dg[i].indices)) / max(1, len(dc[i].indices))
                    for i in range(c.n_obs)])
    assert same > 0.99, same
    assert g.obsm["X_umap"].shape == (g.n_obs, 2) and np.isfinite(g.obsm["X_umap"]).all()
    lc, lg = c.obs["leiden"].to_numpy(), g.obs["leiden"].to_numpy()
    pairs = rng.integers(0, c.n_obs, size=(20000, 2))
    agree = np.mean((lc[pairs[:, 0]] == lc[pairs[:, 1]]) == (lg[pairs[:, 0]] == lg[pairs[:, 1]]))
    assert agree > 0.9, agree  # pair agreement (Rand index on sampled pairs)
