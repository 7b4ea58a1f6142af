"""scanpy.tl's tools on scurry's C++ core: umap, leiden, rank_genes_groups,
filter_rank_genes_groups, score_genes, score_genes_cell_cycle (scanpy 1.10's signatures)."""
from __future__ import annotations

import numpy as np

from . import _scurry
from ._core import check_anndata, dataset, not_implemented, options, write_back

__all__ = ["umap", "leiden", "rank_genes_groups", "filter_rank_genes_groups", "score_genes",
           "score_genes_cell_cycle"]

_UMAP = _scurry.UmapOptions()
_LEIDEN = _scurry.LeidenOptions()
_RGG = _scurry.RankGenesGroupsOptions()
_FRGG = _scurry.FilterRankGenesGroupsOptions()
_SCORE = _scurry.ScoreGenesOptions()


def _graph_keys(adata, neighbors_key, step):
    """The obsp keys and uns entry a graph step reads for `neighbors_key` (scanpy's naming)."""
    key = neighbors_key or "neighbors"
    if key not in adata.uns:
        raise KeyError(f"{step}: uns['{key}'] is missing; run neighbors first (neighbors_key '{key}')")
    u = adata.uns[key]
    conn = u.get("connectivities_key", "connectivities" if key == "neighbors" else key + "_connectivities")
    dist = u.get("distances_key", "distances" if key == "neighbors" else key + "_distances")
    return key, [conn, dist]


def umap(adata, *, min_dist=_UMAP.min_dist, spread=_UMAP.spread, n_components=_UMAP.n_components, maxiter=None,
         alpha=_UMAP.alpha, gamma=_UMAP.gamma, negative_sample_rate=int(_UMAP.negative_sample_rate),
         init_pos=_UMAP.init_pos, random_state=_UMAP.random_state, a=None, b=None, method="umap",
         neighbors_key=_UMAP.neighbors_key, copy=False):
    """sc.tl.umap: obsm['X_umap'] from the neighbours' connectivities, uns['umap'] (a, b)."""
    step = "umap"
    check_anndata(adata, step)
    not_implemented(step, "method", method, "umap")
    adata = adata.copy() if copy else adata
    key, obsp = _graph_keys(adata, neighbors_key, step)
    obsm = [init_pos] if isinstance(init_pos, str) and init_pos not in ("spectral", "random", "paga") else []
    if init_pos == "paga":
        raise NotImplementedError("umap: init_pos='paga' is not implemented in scurry")
    if not isinstance(init_pos, str):
        raise NotImplementedError("umap: init_pos as an array is not implemented in scurry (an obsm key is)")
    ds = dataset(adata, step=step, X=False, obsm=obsm, obsp=obsp, uns=[key])
    opt = options(_scurry.UmapOptions, min_dist=float(min_dist), spread=float(spread), n_components=int(n_components),
                  maxiter=maxiter, alpha=float(alpha), gamma=float(gamma),
                  negative_sample_rate=float(negative_sample_rate), init_pos=init_pos,
                  random_state=int(random_state), a=a, b=b, neighbors_key=key)
    _scurry.umap(ds, opt)
    for k in ds.obsm_keys():
        if k not in obsm:
            adata.obsm[k] = ds.take_obsm(k)
    adata.uns["umap"] = ds.get_uns("umap")
    return adata if copy else None


def leiden(adata, resolution=_LEIDEN.resolution, *, restrict_to=None, random_state=_LEIDEN.random_state,
           key_added=_LEIDEN.key_added, adjacency=None, directed=None, use_weights=_LEIDEN.use_weights,
           n_iterations=_LEIDEN.n_iterations, partition_type=None, neighbors_key=None, obsp=None, copy=False,
           flavor="leidenalg", **clustering_args):
    """sc.tl.leiden: obs[key_added] (categorical, '0' the largest cluster), uns[key_added]['params'].
    Modularity with resolution on the undirected connectivities (igraph's Leiden, as scanpy's
    flavor='igraph'); clustering_args may hold beta."""
    step = "leiden"
    check_anndata(adata, step)
    not_implemented(step, "restrict_to", restrict_to, None)
    not_implemented(step, "adjacency", adjacency, None)
    not_implemented(step, "partition_type", partition_type, None)
    if directed:
        raise NotImplementedError("leiden: directed=True is not implemented in scurry (the graph is undirected)")
    if flavor not in ("leidenalg", "igraph"):
        raise ValueError(f"leiden: flavor '{flavor}' is not 'leidenalg' or 'igraph'")
    extra = dict(clustering_args)
    beta = extra.pop("beta", _LEIDEN.beta)
    if extra:
        raise NotImplementedError(f"leiden: clustering_args {sorted(extra)} are not implemented in scurry (beta is)")
    if obsp is not None and neighbors_key is not None:
        raise ValueError("leiden: give obsp or neighbors_key, not both")
    adata = adata.copy() if copy else adata
    if obsp is not None:
        if obsp not in adata.obsp:
            raise KeyError(f"leiden: obsp['{obsp}'] is not in the AnnData")
        ds = dataset(adata, step=step, X=False)
        ds.set_obsp("connectivities", adata.obsp[obsp])
        ds.set_uns("neighbors", {"connectivities_key": "connectivities"})
        key, uns_in = "neighbors", ["neighbors"]
    else:
        key, obsp_keys = _graph_keys(adata, neighbors_key, step)
        ds = dataset(adata, step=step, X=False, obsp=obsp_keys[:1], uns=[key])
        uns_in = [key]
    opt = options(_scurry.LeidenOptions, resolution=float(resolution), random_state=int(random_state),
                  n_iterations=int(n_iterations), use_weights=bool(use_weights), beta=float(beta),
                  key_added=key_added, neighbors_key=key)
    _scurry.leiden(ds, opt)
    write_back(adata, ds, uns_in=uns_in, obsp=False, obsm=False, varm=False)
    return adata if copy else None


def rank_genes_groups(adata, groupby, *, mask_var=None, use_raw=None, groups="all", reference=_RGG.reference,
                      n_genes=None, rankby_abs=_RGG.rankby_abs, pts=_RGG.pts, key_added=None, copy=False, method=None,
                      corr_method=_RGG.corr_method, tie_correct=_RGG.tie_correct, layer=None, **kwds):
    """sc.tl.rank_genes_groups (t-test, t-test_overestim_var, wilcoxon, logreg): uns[key_added]
    as scanpy writes it; kwds: logreg's C, max_iter, tol."""
    step = "rank_genes_groups"
    check_anndata(adata, step)
    adata = adata.copy() if copy else adata
    if groupby not in adata.obs.columns:
        raise KeyError(f"rank_genes_groups: groupby '{groupby}' is not an obs column")
    extra = dict(kwds)
    logreg = dict(logreg_C=float(extra.pop("C", _RGG.logreg_C)), logreg_max_iter=int(extra.pop("max_iter", _RGG.logreg_max_iter)),
                  logreg_tol=float(extra.pop("tol", _RGG.logreg_tol)))
    if extra:
        raise NotImplementedError(f"rank_genes_groups: keyword arguments {sorted(extra)} are not implemented in scurry")
    var = []
    mask_col = ""
    if mask_var is not None:
        if isinstance(mask_var, str):
            var, mask_col = [mask_var], mask_var
        else:
            mask_col = "__scurry_mask_var"
    if groups == "all" or groups is None:
        groups = []
    elif isinstance(groups, str):
        groups = [groups]
    # the matrix tested: raw.X (use_raw, or unset with a raw present: scanpy's default), else X or the
    # layer; only that one is handed to the step
    on_raw = layer is None and (use_raw if use_raw is not None else adata.raw is not None)
    if on_raw and adata.raw is None:
        raise ValueError("rank_genes_groups: use_raw=True but the AnnData has no raw")
    ds = dataset(adata, step=step, layer=layer, X=not on_raw, obs=[groupby], var=var, raw=on_raw)
    if mask_col == "__scurry_mask_var":
        ds.set_var(mask_col, np.asarray(mask_var, dtype=bool))
    opt = options(_scurry.RankGenesGroupsOptions, groupby=groupby, groups=[str(g) for g in groups],
                  reference=str(reference), method=method or _RGG.method, n_genes=n_genes, rankby_abs=bool(rankby_abs),
                  pts=bool(pts), tie_correct=bool(tie_correct), corr_method=corr_method, use_raw=use_raw,
                  layer=layer or "", mask_var=mask_col, key_added=key_added or _RGG.key_added, **logreg)
    _scurry.rank_genes_groups(ds, opt)
    k = key_added or _RGG.key_added
    adata.uns[k] = ds.get_uns(k)
    return adata if copy else None


def filter_rank_genes_groups(adata, *, key=None, groupby=None, use_raw=None, key_added=_FRGG.key_added,
                             min_in_group_fraction=_FRGG.min_in_group_fraction, min_fold_change=_FRGG.min_fold_change,
                             max_out_group_fraction=_FRGG.max_out_group_fraction, compare_abs=_FRGG.compare_abs):
    """sc.tl.filter_rank_genes_groups: uns[key_added], uns[key] with failing genes' names NaN."""
    step = "filter_rank_genes_groups"
    check_anndata(adata, step)
    key = key or _FRGG.key
    if key not in adata.uns:
        raise KeyError(f"filter_rank_genes_groups: uns['{key}'] is missing; run rank_genes_groups first")
    gb = groupby or adata.uns[key]["params"]["groupby"]
    if gb not in adata.obs.columns:
        raise KeyError(f"filter_rank_genes_groups: groupby '{gb}' is not an obs column")
    ds = dataset(adata, step=step, obs=[gb], uns=[key], raw=True)
    opt = options(_scurry.FilterRankGenesGroupsOptions, key=key, groupby=groupby or "", use_raw=use_raw,
                  key_added=key_added, min_in_group_fraction=float(min_in_group_fraction),
                  min_fold_change=float(min_fold_change), max_out_group_fraction=float(max_out_group_fraction),
                  compare_abs=bool(compare_abs))
    _scurry.filter_rank_genes_groups(ds, opt)
    adata.uns[key_added] = ds.get_uns(key_added)


def score_genes(adata, gene_list, *, ctrl_as_ref=True, ctrl_size=_SCORE.ctrl_size, gene_pool=None,
                n_bins=_SCORE.n_bins, score_name=_SCORE.score_name, random_state=_SCORE.random_state, copy=False,
                use_raw=None):
    """sc.tl.score_genes: obs[score_name], the set's mean minus control genes' mean (Satija et al. 2015)."""
    step = "score_genes"
    check_anndata(adata, step)
    not_implemented(step, "ctrl_as_ref", ctrl_as_ref, True)
    adata = adata.copy() if copy else adata
    if isinstance(gene_list, str):
        gene_list = [gene_list]
    ds = dataset(adata, step=step, raw=True)
    opt = options(_scurry.ScoreGenesOptions, gene_list=[str(g) for g in gene_list], ctrl_size=int(ctrl_size),
                  gene_pool=[str(g) for g in (gene_pool or [])], n_bins=int(n_bins), score_name=score_name,
                  random_state=random_state, use_raw=use_raw)
    score, _, _ = _scurry.score_genes(ds, opt)
    adata.obs[score_name] = score
    return adata if copy else None


def score_genes_cell_cycle(adata, *, s_genes, g2m_genes, copy=False, **kwargs):
    """sc.tl.score_genes_cell_cycle: obs S_score, G2M_score and phase (Tirosh et al. 2016).
    kwargs: score_genes' n_bins, random_state, use_raw, gene_pool."""
    step = "score_genes_cell_cycle"
    check_anndata(adata, step)
    extra = dict(kwargs)
    base = options(_scurry.ScoreGenesOptions, n_bins=int(extra.pop("n_bins", _SCORE.n_bins)),
                   random_state=extra.pop("random_state", _SCORE.random_state), use_raw=extra.pop("use_raw", None),
                   gene_pool=[str(g) for g in (extra.pop("gene_pool", None) or [])])
    if extra:
        raise NotImplementedError(f"score_genes_cell_cycle: keyword arguments {sorted(extra)} are not implemented "
                                  "in scurry (n_bins, random_state, use_raw, gene_pool are)")
    adata = adata.copy() if copy else adata
    ds = dataset(adata, step=step, raw=True)
    _scurry.score_genes_cell_cycle(ds, [str(g) for g in s_genes], [str(g) for g in g2m_genes], base)
    write_back(adata, ds)
    return adata if copy else None
