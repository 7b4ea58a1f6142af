"""In-place and copy semantics, views, matrix layouts (int64 indices, CSC, dense, float64), backed
AnnData refused, errors as scanpy's exception types with the CLI's messages."""
import anndata
import numpy as np
import pytest
import scipy.sparse as sp

import scurry as sc
from conftest import assert_same_column, assert_same_matrix, cli_step, roundtrip, run_cli


def _lognorm(a):
    sc.pp.normalize_total(a, target_sum=1e4)
    sc.pp.log1p(a)
    return a


def test_normalize_total_inplace_false_returns_and_leaves_adata(counts):
    before = counts.X.copy()
    res = sc.pp.normalize_total(counts, target_sum=1e4, inplace=False)
    assert set(res) == {"X", "norm_factor"}
    assert_same_matrix(counts.X, before, "X left as it was")
    ref = counts.copy()
    sc.pp.normalize_total(ref, target_sum=1e4)
    assert_same_matrix(res["X"], ref.X, "returned X")
    assert np.allclose(res["norm_factor"], np.asarray(before.sum(1)).ravel(), rtol=1e-6)
    assert np.allclose(np.asarray(ref.X.sum(1)).ravel(), 1e4, rtol=1e-4)


def test_copy_returns_new_and_leaves_original(counts):
    orig = counts.X.copy()
    for f, kw in [(sc.pp.normalize_total, {}), (sc.pp.log1p, {}), (sc.pp.scale, {}),
                  (sc.pp.filter_cells, {"min_genes": 1}), (sc.pp.filter_genes, {"min_cells": 1})]:
        out = f(counts, copy=True, **kw)
        assert isinstance(out, anndata.AnnData) and out is not counts, f.__name__
        assert_same_matrix(counts.X, orig, f"{f.__name__}: original X")
    assert "log1p" not in counts.uns and "mean" not in counts.var


def test_inplace_returns_none(counts):
    assert sc.pp.normalize_total(counts) is None
    assert sc.pp.log1p(counts) is None
    assert "log1p" in counts.uns


def test_view_is_made_actual(counts):
    mask = counts.var["flag"].to_numpy()
    v = counts[:, mask]
    assert v.is_view
    sc.pp.normalize_total(v, target_sum=1e4)
    assert not v.is_view
    ref = counts[:, mask].copy()
    sc.pp.normalize_total(ref, target_sum=1e4)
    assert_same_matrix(v.X, ref.X, "normalised view")
    assert np.allclose(np.asarray(v.X.sum(1)).ravel()[np.asarray(ref.X.sum(1)).ravel() > 0], 1e4, rtol=1e-4)


def test_int64_indices_csc_float64_and_dense_give_the_same_results(counts, tmp_path):
    ref = _lognorm(counts.copy())
    wide = counts.copy()
    X = wide.X.copy()
    X.indices = X.indices.astype(np.int64)  # scipy's constructor would narrow them back to int32
    X.indptr = X.indptr.astype(np.int64)
    wide.X = X
    assert wide.X.indices.dtype == np.int64
    assert_same_matrix(_lognorm(wide).X, ref.X, "int64 indices")
    csc = counts.copy()
    csc.X = csc.X.tocsc()
    _lognorm(csc)
    assert csc.X.format == "csc"  # scanpy keeps CSC
    assert_same_matrix(csc.X.tocsr(), ref.X, "CSC input")
    # float64 and dense: the same as the CLI on the same file (dense divides, CSR multiplies by 1/c)
    for name, X in [("f64", counts.X.astype(np.float64)), ("dense", counts.X.toarray())]:
        a = counts.copy()
        a.X = X
        e = cli_step(tmp_path, a, "normalize-total", "--target-sum", "1e4", name=name)
        a = roundtrip(tmp_path, a, name=name + "_rt")
        sc.pp.normalize_total(a, target_sum=1e4)
        assert a.X.dtype == e.X.dtype, name
        assert_same_matrix(a.X, e.X, name)


def test_filters_subset_every_slot(counts):
    counts.obsm["X_test"] = np.arange(counts.n_obs * 2, dtype=np.float32).reshape(-1, 2)
    counts.layers["counts"] = counts.X.copy()
    n_genes = np.diff(counts.X.indptr)
    t = int(np.median(n_genes))
    sc.pp.filter_cells(counts, min_genes=t)
    keep = n_genes >= t
    assert counts.n_obs == keep.sum()
    assert np.array_equal(counts.obsm["X_test"][:, 0], np.arange(len(keep))[keep] * 2)
    assert np.array_equal(counts.obs["n_genes"].to_numpy(), n_genes[keep])
    assert_same_matrix(counts.layers["counts"], counts.X, "layer subset with X")


def test_a_filter_that_keeps_everything_is_anndatas_subset(counts):
    """Nothing removed: no copy is made, but the AnnData ends as anndata's own subset leaves it (the
    unused categories of obs and var dropped, with their colours)."""
    import pandas as pd

    counts.obs["kind"] = pd.Categorical(["a"] * counts.n_obs, categories=["a", "unused"])
    counts.uns["kind_colors"] = ["#000000", "#ffffff"]
    counts.var["tag"] = pd.Categorical(["g"] * counts.n_vars, categories=["g", "h"])
    # every category used, some cells missing (code -1), colours of the right length and of a wrong one
    counts.obs["full"] = pd.Categorical((["x", "y", None] * counts.n_obs)[: counts.n_obs], categories=["x", "y"])
    counts.uns["full_colors"] = ["#111111", "#222222"]
    counts.var["odd"] = pd.Categorical(["p"] * counts.n_vars, categories=["p"])
    counts.uns["odd_colors"] = ["#1", "#2", "#3"]
    ref = counts.copy()
    X_before = counts.X
    sc.pp.filter_cells(counts, min_genes=0)
    sc.pp.filter_genes(counts, min_cells=0)
    ref._inplace_subset_obs(np.ones(ref.n_obs, dtype=bool))
    ref._inplace_subset_var(np.ones(ref.n_vars, dtype=bool))
    assert counts.X is X_before  # not copied
    assert list(counts.obs["kind"].cat.categories) == list(ref.obs["kind"].cat.categories) == ["a"]
    assert list(counts.var["tag"].cat.categories) == list(ref.var["tag"].cat.categories) == ["g"]
    assert list(counts.uns["kind_colors"]) == list(ref.uns["kind_colors"]) == ["#000000"]
    assert counts.obs["full"].equals(ref.obs["full"]) and list(counts.obs["full"].cat.categories) == ["x", "y"]
    assert list(counts.uns["full_colors"]) == list(ref.uns["full_colors"]) == ["#111111", "#222222"]
    assert ("odd_colors" in counts.uns) == ("odd_colors" in ref.uns)
    assert counts.shape == ref.shape
    assert_same_matrix(counts.X, ref.X, "X")


def test_filter_on_an_array_returns_mask_and_numbers(counts):
    mask, number = sc.pp.filter_cells(counts.X, min_counts=10)
    totals = np.asarray(counts.X.sum(1)).ravel()
    assert np.array_equal(mask, totals >= 10)
    assert np.allclose(number, totals)


def test_layer_and_key_added(counts):
    counts.layers["c"] = counts.X.copy()
    before = counts.X.copy()
    sc.pp.normalize_total(counts, target_sum=100, layer="c", key_added="sz")
    assert_same_matrix(counts.X, before, "X untouched when a layer is normalised")
    assert np.allclose(np.asarray(counts.layers["c"].sum(1)).ravel()[counts.obs["sz"] > 0], 100, rtol=1e-4)
    assert np.allclose(counts.obs["sz"], np.asarray(before.sum(1)).ravel(), rtol=1e-6)


def test_backed_anndata_is_refused(counts, tmp_path):
    path = tmp_path / "b.h5ad"
    counts.write_h5ad(path)
    b = anndata.read_h5ad(path, backed="r")
    with pytest.raises(ValueError, match="backed"):
        sc.pp.normalize_total(b)
    with pytest.raises(NotImplementedError, match="backed"):
        sc.read_h5ad(path, backed="r")


def test_errors_are_scanpys_types_with_the_clis_message(counts, tmp_path):
    path = tmp_path / "e.h5ad"
    counts.write_h5ad(path)
    p = run_cli("normalize-total", path, "-o", tmp_path / "o.h5ad", "--target-sum", "-1")
    assert p.returncode == 2
    cli_msg = p.stderr.strip().splitlines()[-1].removeprefix("scurry: error: ")
    with pytest.raises(ValueError) as e:
        sc.pp.normalize_total(counts, target_sum=-1)
    assert str(e.value) == cli_msg
    with pytest.raises(KeyError, match="nope"):
        sc.tl.rank_genes_groups(counts, "nope")
    with pytest.raises(KeyError, match="nope"):
        sc.pp.highly_variable_genes(counts, batch_key="nope")
    with pytest.raises(ValueError, match="flavor"):
        sc.pp.highly_variable_genes(counts, flavor="bogus")
    with pytest.raises(ValueError, match="svd_solver"):
        sc.pp.pca(counts, svd_solver="bogus")
    with pytest.raises(KeyError, match="neighbors"):
        sc.tl.umap(counts)
    with pytest.raises(TypeError, match="anndata|AnnData"):
        sc.pp.log1p(counts.copy(), layer=None) or sc.pp.normalize_total("not an anndata")
    with pytest.raises(TypeError, match=r"scale: max_value='x' has the wrong type"):
        sc.pp.scale(counts.copy(), max_value="x")
    with pytest.raises(TypeError, match="got list"):
        sc.pp.log1p([[1.0, 2.0]])
    bad = counts.copy()
    bad.X = sp.csr_matrix(bad.X.astype(np.complex64))
    with pytest.raises(TypeError, match="X"):
        sc.pp.normalize_total(bad)
    for v, word in [(np.nan, "NaN"), (-2.0, "negative")]:
        bad = counts.copy()
        bad.X.data[7] = v
        with pytest.raises(ValueError, match=word):
            sc.pp.normalize_total(bad)
        assert np.isnan(bad.X.data[7]) or bad.X.data[7] == v  # left as it was


def test_settings(counts):
    assert sc.settings.device == "cpu"
    with pytest.raises(ValueError):
        sc.settings.device = "tpu"
    with pytest.raises(ValueError):
        sc.settings.memory = "lots"
    old = sc.settings.n_jobs
    sc.settings.n_jobs = 1
    a = _lognorm(counts.copy())
    sc.settings.n_jobs = 2
    b = _lognorm(counts.copy())
    sc.settings.n_jobs = old
    assert_same_matrix(a.X, b.X, "same bits for 1 and 2 threads")
    sc.settings.verbosity = 0
    assert sc._scurry.quiet()
    sc.settings.verbosity = 1
    assert not sc._scurry.quiet()


def test_score_genes_and_cell_cycle(counts):
    a = _lognorm(counts)
    genes = list(a.var_names[10:20])
    sc.tl.score_genes(a, genes, ctrl_size=20, score_name="s")
    assert a.obs["s"].dtype == np.float64 and np.isfinite(a.obs["s"]).all()
    # the score is the set's mean minus the controls' mean: with the set as its own pool the
    # controls are drawn from all genes; check the first part against a direct mean
    X = a.X.toarray()
    set_mean = X[:, 10:20].mean(1)
    assert np.corrcoef(set_mean, a.obs["s"])[0, 1] > 0.5
    sc.tl.score_genes_cell_cycle(a, s_genes=list(a.var_names[20:40]), g2m_genes=list(a.var_names[40:60]))
    assert set(a.obs["phase"].cat.categories) <= {"G1", "S", "G2M"}
    s, g = a.obs["S_score"].to_numpy(), a.obs["G2M_score"].to_numpy()
    expect = np.where((s < 0) & (g < 0), "G1", np.where(g > s, "G2M", "S"))
    assert list(a.obs["phase"].astype(str)) == list(expect)


def _address(a):
    return a.__array_interface__["data"][0]


def test_inplace_steps_write_into_the_anndatas_buffers(counts):
    """normalize_total, log1p and scale (uncentred sparse; dense) read and write X's own buffers: no
    copy (the same memory before and after), with the values of the copying path."""
    ref = counts.copy()
    X = counts.X
    addr = _address(X.data)
    sc.pp.normalize_total(counts, target_sum=1e4)
    sc.pp.log1p(counts)
    sc.pp.scale(counts, zero_center=False, max_value=5)
    assert counts.X is X and _address(counts.X.data) == addr
    # the copying path (a CSC matrix is not viewed by normalize_total and scale) gives the same values
    ref.X = ref.X.tocsc()
    sc.pp.normalize_total(ref, target_sum=1e4)
    sc.pp.log1p(ref)
    sc.pp.scale(ref, zero_center=False, max_value=5)
    assert_same_matrix(counts.X, ref.X.tocsr(), "in place vs copying path")
    assert_same_column(counts.var["std"], ref.var["std"], "var['std']")
    dense = anndata.AnnData(X=counts.X.toarray())
    buf = dense.X
    sc.pp.scale(dense, max_value=3)
    assert dense.X is buf


def test_integer_counts_take_the_copying_path(counts):
    ints = counts.copy()
    ints.X = ints.X.astype(np.int32)
    sc.pp.normalize_total(ints, target_sum=1e4)
    assert ints.X.dtype == np.float32
    ref = counts.copy()
    sc.pp.normalize_total(ref, target_sum=1e4)
    assert_same_matrix(ints.X, ref.X, "int32 counts")


def _rich(counts, rng):
    """counts with every kind of slot: layers, obsm (array and DataFrame), varm, obsp, varp, a raw, a
    categorical obs with colours in uns, and a nested uns."""
    import pandas as pd

    a = counts.copy()
    n, g = a.shape
    a.layers["counts"] = a.X.copy()
    a.layers["dense"] = a.X.toarray()
    a.obsm["X_pca"] = rng.normal(size=(n, 3)).astype(np.float32)
    a.obsm["df"] = pd.DataFrame({"u": rng.normal(size=n)}, index=a.obs_names)
    a.varm["PCs"] = rng.normal(size=(g, 3))
    a.obsp["connectivities"] = sp.random(n, n, density=0.02, format="csr", random_state=int(rng.integers(1 << 30)))
    a.varp["gg"] = sp.random(g, g, density=0.02, format="csr", random_state=int(rng.integers(1 << 30)))
    a.obs["group"] = a.obs["group"].cat.add_categories(["unused"])
    a.uns["group_colors"] = np.array(["#%06x" % int(rng.integers(1 << 24)) for _ in a.obs["group"].cat.categories])
    a.uns["nested"] = {"v": np.arange(3), "s": "x"}
    a.raw = a
    return a


def _same_anndata(a, b):
    assert a.shape == b.shape and not a.is_view and not b.is_view
    assert list(a.obs_names) == list(b.obs_names) and list(a.var_names) == list(b.var_names)
    for df_a, df_b, what in [(a.obs, b.obs, "obs"), (a.var, b.var, "var")]:
        assert list(df_a.columns) == list(df_b.columns), what
        for k in df_b.columns:
            assert str(df_a[k].dtype) == str(df_b[k].dtype), f"{what}['{k}'] dtype"
            if str(df_b[k].dtype) == "category":
                assert list(df_a[k].cat.categories) == list(df_b[k].cat.categories), f"{what}['{k}'] categories"
            assert_same_column(df_a[k], df_b[k], f"{what}['{k}']")
    assert_same_matrix(a.X, b.X, "X")
    assert a.X.dtype == b.X.dtype
    for slot in ("layers", "obsm", "varm", "obsp", "varp"):
        sa, sb = getattr(a, slot), getattr(b, slot)
        assert sorted(sa.keys()) == sorted(sb.keys()), slot
        for k in sb.keys():
            if hasattr(sb[k], "columns"):
                assert sa[k].equals(sb[k]), f"{slot}['{k}']"
            else:
                assert type(sa[k]) is type(sb[k]), f"{slot}['{k}']: {type(sa[k])} vs {type(sb[k])}"
                assert_same_matrix(sa[k], sb[k], f"{slot}['{k}']")
    assert sorted(a.uns.keys()) == sorted(b.uns.keys())
    assert list(a.uns["group_colors"]) == list(b.uns["group_colors"])
    assert np.array_equal(a.uns["nested"]["v"], b.uns["nested"]["v"])
    assert (a.raw is None) == (b.raw is None)
    if b.raw is not None:
        assert_same_matrix(a.raw.X, b.raw.X, "raw.X")
        assert list(a.raw.var_names) == list(b.raw.var_names)


def test_subsets_copy_each_matrix_once_with_anndatas_slots(counts, rng):
    """The filters' and HVG's subset (and the view made actual) give the AnnData anndata's own
    _inplace_subset_obs/var (and copy) give, without its second copies."""
    from scurry._core import actualize, subset_inplace

    base = _rich(counts, rng)
    # the cells of one group but the first removed: a category unused, its colour dropped
    keep = base.obs["group"].to_numpy() != base.obs["group"].cat.categories[0]
    genes = rng.random(base.n_vars) < 0.6
    for obs, var in [(keep, None), (None, genes), (np.flatnonzero(keep)[::-1], None)]:
        a, b = base.copy(), base.copy()
        subset_inplace(a, obs=obs, var=var)
        if obs is not None:
            b._inplace_subset_obs(obs)
        else:
            b._inplace_subset_var(var)
        _same_anndata(a, b)
        assert not np.shares_memory(a.obsm["X_pca"], base.obsm["X_pca"])
    assert len(a.uns["group_colors"]) < len(base.uns["group_colors"])
    import weakref

    parent = base.copy()
    alive = weakref.ref(parent)
    v = parent[keep, genes]
    w = v.copy()
    del parent
    actualize(v)
    _same_anndata(v, w)
    assert alive() is None  # the parent freed once the view no longer needs it (no copy kept)
    # the steps that subset
    a, b = base.copy(), base.copy()
    t = int(np.median(np.diff(a.X.indptr)))
    sc.pp.filter_cells(a, min_genes=t)
    b._inplace_subset_obs(np.diff(b.X.indptr) >= t)
    b.obs["n_genes"] = a.obs["n_genes"].to_numpy()
    _same_anndata(a, b)


def test_every_category_used_reads_past_the_first_rows(rng):
    """The unused-category check (anndata's copy drops unused categories) against a plain count, on
    columns longer than the prefix it reads first: a category present only at the end, one absent,
    missing values (-1)."""
    from scurry._core import _every_category_used

    n, k = 200_000, 7
    for trial in range(6):
        codes = rng.integers(-1, k - 1, n).astype(np.int8)  # category k-1 absent so far
        if trial % 2 == 0:
            codes[rng.integers(70_000, n)] = k - 1  # present once, past the prefix
        if trial >= 4:
            codes[:] = -1
        want = all(np.count_nonzero(codes == c) > 0 for c in range(k))
        assert _every_category_used(codes, k) == want
        assert _every_category_used(codes[:1000], k - 1) == (trial < 4)
    assert _every_category_used(np.zeros(0, np.int8), 0)
