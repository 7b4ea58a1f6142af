"""Every function's parameters (names and defaults) against scanpy 1.10's, from a table written by
hand from scanpy 1.10's source (scanpy/preprocessing/_qc.py, _simple.py, _normalization.py,
_highly_variable_genes.py, _scale.py, _pca.py, neighbors/__init__.py, tools/_umap.py, _leiden.py,
_rank_genes_groups.py, _score_genes.py, get/_aggregated.py, get/get.py, readwrite.py; anndata's
read_h5ad). REQUIRED marks a parameter without default, SENTINEL scanpy's `_empty`."""
import inspect
import math
from types import MappingProxyType

import pytest
import scipy.sparse as sp

import scurry as sc

REQUIRED = object()
SENTINEL = object()
VARKW = object()  # **kwargs

SCANPY_1_10 = {
    "pp.calculate_qc_metrics": dict(adata=REQUIRED, expr_type="counts", var_type="genes", qc_vars=(),
                                    percent_top=(50, 100, 200, 500), layer=None, use_raw=False, inplace=False,
                                    log1p=True, parallel=None),
    "pp.filter_cells": dict(data=REQUIRED, min_counts=None, min_genes=None, max_counts=None, max_genes=None,
                            inplace=True, copy=False),
    "pp.filter_genes": dict(data=REQUIRED, min_counts=None, min_cells=None, max_counts=None, max_cells=None,
                            inplace=True, copy=False),
    "pp.normalize_total": dict(adata=REQUIRED, target_sum=None, exclude_highly_expressed=False, max_fraction=0.05,
                               key_added=None, layer=None, layers=None, layer_norm=None, inplace=True, copy=False),
    "pp.log1p": dict(data=REQUIRED, base=None, copy=False, chunked=None, chunk_size=None, layer=None, obsm=None),
    "pp.highly_variable_genes": dict(adata=REQUIRED, layer=None, n_top_genes=None, min_disp=0.5, max_disp=math.inf,
                                     min_mean=0.0125, max_mean=3, span=0.3, n_bins=20, flavor="seurat", subset=False,
                                     inplace=True, batch_key=None, check_values=True),
    "pp.scale": dict(data=REQUIRED, zero_center=True, max_value=None, copy=False, layer=None, obsm=None,
                     mask_obs=None),
    "pp.pca": dict(data=REQUIRED, n_comps=None, layer=None, zero_center=True, svd_solver=None, random_state=0,
                   return_info=False, mask_var=SENTINEL, use_highly_variable=None, dtype="float32", chunked=False,
                   chunk_size=None, copy=False),
    "pp.neighbors": dict(adata=REQUIRED, n_neighbors=15, n_pcs=None, use_rep=None, knn=True, method="umap",
                         transformer=None, metric="euclidean", metric_kwds=MappingProxyType({}), random_state=0,
                         key_added=None, copy=False),
    "tl.umap": dict(adata=REQUIRED, min_dist=0.5, spread=1.0, n_components=2, maxiter=None, alpha=1.0, gamma=1.0,
                    negative_sample_rate=5, init_pos="spectral", random_state=0, a=None, b=None, method="umap",
                    neighbors_key="neighbors", copy=False),
    "tl.leiden": dict(adata=REQUIRED, resolution=1, restrict_to=None, random_state=0, key_added="leiden",
                      adjacency=None, directed=None, use_weights=True, n_iterations=-1, partition_type=None,
                      neighbors_key=None, obsp=None, copy=False, flavor="leidenalg", clustering_args=VARKW),
    "tl.rank_genes_groups": dict(adata=REQUIRED, groupby=REQUIRED, mask_var=None, use_raw=None, groups="all",
                                 reference="rest", n_genes=None, rankby_abs=False, pts=False, key_added=None,
                                 copy=False, method=None, corr_method="benjamini-hochberg", tie_correct=False,
                                 layer=None, kwds=VARKW),
    "tl.filter_rank_genes_groups": dict(adata=REQUIRED, key=None, groupby=None, use_raw=None,
                                        key_added="rank_genes_groups_filtered", min_in_group_fraction=0.25,
                                        min_fold_change=1, max_out_group_fraction=0.5, compare_abs=False),
    "tl.score_genes": dict(adata=REQUIRED, gene_list=REQUIRED, ctrl_as_ref=True, ctrl_size=50, gene_pool=None,
                           n_bins=25, score_name="score", random_state=0, copy=False, use_raw=None),
    "tl.score_genes_cell_cycle": dict(adata=REQUIRED, s_genes=REQUIRED, g2m_genes=REQUIRED, copy=False,
                                      kwargs=VARKW),
    "get.aggregate": dict(adata=REQUIRED, by=REQUIRED, func=REQUIRED, axis=None, mask=None, dof=1, layer=None,
                          obsm=None, varm=None),
    "get.rank_genes_groups_df": dict(adata=REQUIRED, group=REQUIRED, key="rank_genes_groups", pval_cutoff=None,
                                     log2fc_min=None, log2fc_max=None, gene_symbols=None),
    "read_h5ad": dict(filename=REQUIRED, backed=None, as_sparse=(), as_sparse_fmt=sp.csr_matrix, chunk_size=6000),
    "read_10x_h5": dict(filename=REQUIRED, genome=None, gex_only=True, backup_url=None),
    "read_10x_mtx": dict(path=REQUIRED, var_names="gene_symbols", make_unique=True, cache=False,
                         cache_compression=SENTINEL, gex_only=True, prefix=None),
}


def _resolve(name):
    obj = sc
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", sorted(SCANPY_1_10))
def test_signature_matches_scanpy(name):
    params = inspect.signature(_resolve(name)).parameters
    table = SCANPY_1_10[name]
    assert list(params) == list(table) or set(params) == set(table), (
        f"{name}: parameters {list(params)} vs scanpy's {list(table)}")
    for p, want in table.items():
        got = params[p]
        if want is REQUIRED:
            assert got.default is inspect.Parameter.empty and got.kind != got.VAR_KEYWORD, f"{name}({p}) is required"
        elif want is VARKW:
            assert got.kind == got.VAR_KEYWORD, f"{name}(**{p})"
        elif want is SENTINEL:
            assert repr(got.default) == "_empty", f"{name}({p}) defaults to scanpy's _empty sentinel"
        else:
            d = got.default
            assert type(d) is type(want) or (isinstance(d, (int, float)) and isinstance(want, (int, float))), (
                f"{name}({p}): default {d!r} ({type(d).__name__}) vs scanpy's {want!r}")
            assert d == want, f"{name}({p}): default {d!r} vs scanpy's {want!r}"


def test_table_covers_every_public_function():
    public = {f"{m}.{f}" for m in ("pp", "tl", "get") for f in getattr(sc, m).__all__}
    public |= {"read_h5ad", "read_10x_h5", "read_10x_mtx"}
    assert public <= set(SCANPY_1_10), f"functions without a scanpy entry: {public - set(SCANPY_1_10)}"


def test_unimplemented_parameters_raise_naming_them(counts):
    cases = [
        (lambda: sc.pp.normalize_total(counts, layers="all"), "layers"),
        (lambda: sc.pp.log1p(counts, obsm="X_pca"), "obsm"),
        (lambda: sc.pp.scale(counts, mask_obs="x"), "mask_obs"),
        (lambda: sc.pp.neighbors(counts, method="gauss"), "method"),
        (lambda: sc.pp.neighbors(counts, knn=False), "knn"),
        (lambda: sc.tl.leiden(counts, restrict_to=("a", ["0"])), "restrict_to"),
        (lambda: sc.tl.leiden(counts, partition_type=object()), "partition_type"),
        (lambda: sc.tl.umap(counts, method="rapids"), "method"),
        (lambda: sc.tl.score_genes(counts, ["G1"], ctrl_as_ref=False), "ctrl_as_ref"),
        (lambda: sc.get.aggregate(counts, "group", "sum", axis=1), "axis"),
        (lambda: sc.tl.rank_genes_groups(counts, "group", bogus=1), "bogus"),
        (lambda: sc.pp.pca(counts, chunked=True), "chunked"),
    ]
    for call, param in cases:
        with pytest.raises((NotImplementedError, ValueError, KeyError)) as e:
            call()
        assert param in str(e.value), f"{param}: {e.value}"
