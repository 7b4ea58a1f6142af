"""Every function's parameters (names and defaults) against scanpy 1.10's, from a table written by
hand from scanpy 1.10's source (scanpy/preprocessing/_qc.py, _simple.py, _normalization.py,
_highly_variable_genes.py, _scale.py, _pca.py, neighbors/__init__.py, tools/_umap.py, _leiden.py,
_rank_genes_groups.py, _score_genes.py, get/_aggregated.py, get/get.py, readwrite.py; anndata's
read_h5ad; session 9: external/pp/_harmony_integrate.py, preprocessing/_combat.py, _simple.py
(regress_out), _scrublet/__init__.py, tools/_tsne.py, _diffmap.py, _dpt.py, _paga.py, _dendrogram.py,
_density.py; session 10: tools/_draw_graph.py,
experimental/pp/_highly_variable_genes.py), and cNMF 1.7's cNMF class (dylkot/cNMF src/cnmf/cnmf.py). REQUIRED marks a parameter
without default, SENTINEL scanpy's `_empty`."""
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
    # rapids-singlecell's (not scanpy's): X to the device and back.
    "get.anndata_to_GPU": dict(adata=REQUIRED, layer=None, convert_all=False),
    "get.anndata_to_CPU": dict(adata=REQUIRED, layer=None, convert_all=False),
    "get.rank_genes_groups_df": dict(adata=REQUIRED, group=REQUIRED, key="rank_genes_groups", pval_cutoff=None,
                                     log2fc_min=None, log2fc_max=None, gene_symbols=None),
    "pp.harmony_integrate": dict(adata=REQUIRED, key=REQUIRED, basis="X_pca", adjusted_basis="X_pca_harmony",
                                 kwargs=VARKW),
    "external.pp.harmony_integrate": dict(adata=REQUIRED, key=REQUIRED, basis="X_pca",
                                          adjusted_basis="X_pca_harmony", kwargs=VARKW),
    "pp.combat": dict(adata=REQUIRED, key="batch", covariates=None, inplace=True),
    "pp.regress_out": dict(adata=REQUIRED, keys=REQUIRED, layer=None, n_jobs=None, copy=False),
    "pp.scrublet": dict(adata=REQUIRED, adata_sim=None, batch_key=None, sim_doublet_ratio=2.0,
                        expected_doublet_rate=0.05, stdev_doublet_rate=0.02, synthetic_doublet_umi_subsampling=1.0,
                        knn_dist_metric="euclidean", normalize_variance=True, log_transform=False, mean_center=True,
                        n_prin_comps=30, use_approx_neighbors=True, get_doublet_neighbor_parents=False,
                        n_neighbors=None, threshold=None, verbose=True, copy=False, random_state=0),
    "tl.tsne": dict(adata=REQUIRED, n_pcs=None, use_rep=None, perplexity=30, metric="euclidean",
                    early_exaggeration=12, learning_rate=1000, random_state=0, use_fast_tsne=False, n_jobs=None,
                    copy=False),
    "tl.diffmap": dict(adata=REQUIRED, n_comps=15, neighbors_key=None, random_state=0, copy=False),
    "tl.dpt": dict(adata=REQUIRED, n_dcs=10, n_branchings=0, min_group_size=0.01, allow_kendall_tau_shift=True,
                   neighbors_key=None, copy=False),
    "tl.paga": dict(adata=REQUIRED, groups=None, use_rna_velocity=False, model="v1.2", neighbors_key=None,
                    copy=False),
    "tl.dendrogram": dict(adata=REQUIRED, groupby=REQUIRED, n_pcs=None, use_rep=None, var_names=None, use_raw=None,
                          cor_method="pearson", linkage_method="complete", optimal_ordering=False, key_added=None,
                          inplace=True),
    "tl.draw_graph": dict(adata=REQUIRED, layout="fa", init_pos=None, root=None, random_state=0, n_jobs=None,
                          adjacency=None, key_added_ext=None, neighbors_key=None, obsp=None, copy=False, kwds=VARKW),
    "experimental.pp.highly_variable_genes": dict(adata=REQUIRED, theta=100, clip=None, n_top_genes=None,
                                                  batch_key=None, chunksize=1000, flavor="pearson_residuals",
                                                  check_values=True, layer=None, subset=False, inplace=True),
    "tl.embedding_density": dict(adata=REQUIRED, basis="umap", groupby=None, key_added=None, components=None),
    "read_h5ad": dict(filename=REQUIRED, backed=None, as_sparse=(), as_sparse_fmt=sp.csr_matrix, chunk_size=6000),
    "read_10x_h5": dict(filename=REQUIRED, genome=None, gex_only=True, backup_url=None),
    "read_10x_mtx": dict(path=REQUIRED, var_names="gene_symbols", make_unique=True, cache=False,
                         cache_compression=SENTINEL, gex_only=True, prefix=None),
}


# cNMF 1.7's methods (self left out); scurry's own keyword-only extras after them are allowed
# (EXTRA lists them).
CNMF_1_7 = {
    "__init__": dict(output_dir=".", name=None),
    "prepare": dict(counts_fn=REQUIRED, components=REQUIRED, n_iter=100, densify=False, tpm_fn=None, seed=None,
                    beta_loss="frobenius", num_highvar_genes=2000, genes_file=None, alpha_usage=0.0,
                    alpha_spectra=0.0, init="random", max_NMF_iter=1000),
    "factorize": dict(worker_i=0, total_workers=1, skip_completed_runs=False),
    "combine": dict(components=None, skip_missing_files=False),
    "k_selection_plot": dict(close_fig=False),
    "consensus": dict(k=REQUIRED, density_threshold=0.5, local_neighborhood_size=0.30, show_clustering=True,
                      build_ref=True, skip_density_and_return_after_stats=False, close_clustergram_fig=False,
                      refit_usage=True, normalize_tpm_spectra=False, norm_counts=None),
    "load_results": dict(K=REQUIRED, density_threshold=REQUIRED, n_top_genes=100, norm_usage=True),
}
EXTRA = {"__init__": {"device"}, "factorize": {"gpus", "tf32"}}


@pytest.mark.parametrize("method", sorted(CNMF_1_7))
def test_cnmf_signature_matches_cnmf(method):
    params = dict(inspect.signature(getattr(sc.cnmf.cNMF, method)).parameters)
    params.pop("self")
    table = CNMF_1_7[method]
    extra = EXTRA.get(method, set())
    assert list(params)[:len(table)] == list(table), f"cNMF.{method}: {list(params)} vs cNMF's {list(table)}"
    assert set(params) - set(table) == extra
    for p in extra:
        assert params[p].kind == inspect.Parameter.KEYWORD_ONLY, f"cNMF.{method}({p}) is scurry's: keyword-only"
    for p, want in table.items():
        d = params[p].default
        if want is REQUIRED:
            assert d is inspect.Parameter.empty, f"cNMF.{method}({p}) is required"
        else:
            assert d == want and type(d) is type(want), f"cNMF.{method}({p}): {d!r} vs cNMF's {want!r}"


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
    public |= {f"external.pp.{f}" for f in sc.external.pp.__all__}
    public |= {f"experimental.pp.{f}" for f in sc.experimental.pp.__all__}
    assert public <= set(SCANPY_1_10), f"functions without a scanpy entry: {public - set(SCANPY_1_10)}"


def test_unimplemented_parameters_raise_naming_them(counts):
    cases = [
        (lambda: sc.pp.normalize_total(counts, layers="all"), "layers"),
        (lambda: sc.pp.log1p(counts, obsm="X_pca"), "obsm"),
        (lambda: sc.pp.scale(counts, mask_obs="x"), "mask_obs"),
        (lambda: sc.pp.neighbors(counts, method="gauss"), "method"),
        (lambda: sc.pp.neighbors(counts, knn=False), "knn"),
        (lambda: sc.tl.leiden(counts, partition_type=object()), "partition_type"),
        (lambda: sc.tl.leiden(counts, objective_function="CPM"), "objective_function"),
        (lambda: sc.tl.leiden(counts, bogus=1), "bogus"),
        (lambda: sc.tl.draw_graph(counts, layout="kk"), "layout"),
        (lambda: sc.tl.draw_graph(counts, init_pos=True), "init_pos"),
        (lambda: sc.tl.draw_graph(counts, bogus=1), "bogus"),
        (lambda: sc.tl.umap(counts, method="rapids"), "method"),
        (lambda: sc.tl.score_genes(counts, ["G1"], ctrl_as_ref=False), "ctrl_as_ref"),
        (lambda: sc.get.aggregate(counts, "group", "sum", axis=1), "axis"),
        (lambda: sc.tl.rank_genes_groups(counts, "group", bogus=1), "bogus"),
        (lambda: sc.pp.pca(counts, chunked=True), "chunked"),
        (lambda: sc.pp.scrublet(counts, get_doublet_neighbor_parents=True), "get_doublet_neighbor_parents"),
        (lambda: sc.external.pp.harmony_integrate(counts, "group", bogus=1), "bogus"),
        (lambda: sc.tl.tsne(counts, use_fast_tsne=True), "use_fast_tsne"),
        (lambda: sc.tl.dpt(counts, n_branchings=2), "n_branchings"),
        (lambda: sc.tl.paga(counts, use_rna_velocity=True), "use_rna_velocity"),
        (lambda: sc.tl.dendrogram(counts, "group", optimal_ordering=True), "optimal_ordering"),
    ]
    for call, param in cases:
        with pytest.raises((NotImplementedError, ValueError, KeyError)) as e:
            call()
        assert param in str(e.value), f"{param}: {e.value}"
