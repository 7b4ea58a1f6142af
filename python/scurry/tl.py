"""scanpy.tl's tools on scurry's C++ core: umap, leiden, rank_genes_groups,
filter_rank_genes_groups, score_genes, score_genes_cell_cycle, tsne, diffmap, dpt, paga, dendrogram,
embedding_density, draw_graph (scanpy 1.10's signatures)."""
from __future__ import annotations

import numpy as np

from . import _scurry
from ._core import check_anndata, dataset, not_implemented, options, write_back

__all__ = ["umap", "leiden", "rank_genes_groups", "filter_rank_genes_groups", "score_genes",
           "score_genes_cell_cycle", "tsne", "diffmap", "dpt", "paga", "dendrogram", "embedding_density", "draw_graph"]

_UMAP = _scurry.UmapOptions()
_LEIDEN = _scurry.LeidenOptions()
_RGG = _scurry.RankGenesGroupsOptions()
_FRGG = _scurry.FilterRankGenesGroupsOptions()
_SCORE = _scurry.ScoreGenesOptions()
_TSNE = _scurry.TsneOptions()
_DIFFMAP = _scurry.DiffmapOptions()
_DPT = _scurry.DptOptions()
_PAGA = _scurry.PagaOptions()
_DENDRO = _scurry.DendrogramOptions()
_DENSITY = _scurry.EmbeddingDensityOptions()
_DRAW = _scurry.DrawGraphOptions()


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
    if init_pos == "spectral":
        # The representation the graph was built from (scanpy hands it to umap-learn as `data`): read
        # only when the graph has more than 2 n_components components (their centroids place them).
        neigh = adata.uns.get(key)
        params = neigh.get("params", {}) if isinstance(neigh, dict) else {}
        rep = params.get("use_rep") or ("X_pca" if "X_pca" in adata.obsm else None)
        if rep is not None and rep != "X" and rep in adata.obsm:
            obsm.append(rep)
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


def _graph_source(adata, step, adjacency, obsp, neighbors_key, **kw):
    """The graph a step reads, as scanpy's _choose_graph: `adjacency` (a matrix, handed over as an
    obsp entry of the scratch Dataset), obsp[obsp], or the connectivities of uns[neighbors_key].
    Returns (neighbors key, obsp key for the C++ step's `obsp` option or "", the uns keys read, the
    Dataset with `kw`'s slots)."""
    if adjacency is not None:
        ds = dataset(adata, step=step, X=False, **kw)
        ds.set_obsp("__scurry_adjacency", adjacency)
        return "neighbors", "__scurry_adjacency", [], ds
    if obsp is not None:
        if obsp not in adata.obsp:
            raise KeyError(f"{step}: obsp['{obsp}'] is not in the AnnData (obsp: {list(adata.obsp.keys())})")
        return "neighbors", obsp, [], dataset(adata, step=step, X=False, obsp=[obsp], **kw)
    key, obsp_keys = _graph_keys(adata, neighbors_key, step)
    return key, "", [key], dataset(adata, step=step, X=False, obsp=obsp_keys[:1], uns=[key], **kw)


def _is_rb_configuration(partition_type):
    """Whether partition_type is leidenalg's RBConfigurationVertexPartition (scanpy's default: the
    modularity with a resolution that scurry optimises), matched by name (leidenalg is not needed)."""
    return getattr(partition_type, "__name__", None) == "RBConfigurationVertexPartition"


def leiden(adata, resolution=_LEIDEN.resolution, *, restrict_to=None, random_state=_LEIDEN.random_state,
           key_added=_LEIDEN.key_added, adjacency=None, directed=None, use_weights=_LEIDEN.use_weights,
           n_iterations=_LEIDEN.n_iterations, partition_type=None, neighbors_key=None, obsp=None, copy=False,
           flavor=_LEIDEN.flavor, **clustering_args):
    """sc.tl.leiden: obs[key_added] (categorical, '0' the largest cluster), uns[key_added]['params'].
    Modularity with resolution on the undirected connectivities (igraph's Leiden; flavor 'leidenalg'
    or 'igraph' as scanpy 1.10, src/graph/leiden.hpp). restrict_to=(obs key, categories): only those
    cells re-clustered (obs key_added + '_R' by default). adjacency: a sparse graph instead of the
    neighbours'. scurry's extension (rapids-singlecell's): ``resolution`` a list of several, one
    graph build, written to obs[key_added + '_' + str(resolution)] each. clustering_args: beta (and
    objective_function='modularity', the only one)."""
    step = "leiden"
    check_anndata(adata, step)
    if flavor not in ("leidenalg", "igraph"):
        raise ValueError(f"leiden: flavor '{flavor}' is not 'leidenalg' or 'igraph'")
    if partition_type is not None and not _is_rb_configuration(partition_type):
        raise NotImplementedError(f"leiden: partition_type={partition_type!r} is not implemented in scurry (only "
                                  "RBConfigurationVertexPartition, the modularity with a resolution)")
    if flavor == "igraph" and partition_type is not None:
        raise ValueError("leiden: do not pass in partition_type argument when using igraph.")
    extra = dict(clustering_args)
    beta = extra.pop("beta", _LEIDEN.beta)
    if extra.pop("objective_function", "modularity") != "modularity":
        raise NotImplementedError("leiden: clustering_args objective_function other than 'modularity' is not "
                                  "implemented in scurry")
    if extra:
        raise NotImplementedError(f"leiden: clustering_args {sorted(extra)} are not implemented in scurry "
                                  "(beta and objective_function='modularity' are)")
    if obsp is not None and neighbors_key is not None:
        raise ValueError("leiden: you can't specify both obsp, neighbors_key at the same time.")
    several = isinstance(resolution, (list, tuple, np.ndarray))
    resolutions = [float(r) for r in resolution] if several else []
    if several and not resolutions:
        raise ValueError("leiden: resolution is an empty list")
    restrict_key, categories = "", []
    if restrict_to is not None:
        try:
            restrict_key, categories = restrict_to
        except (TypeError, ValueError):
            raise ValueError(f"leiden: restrict_to={restrict_to!r} is not (obs key, list of categories)") from None
        if restrict_key not in adata.obs.columns:
            raise KeyError(f"leiden: restrict_to: obs['{restrict_key}'] is not in the AnnData")
        categories = [categories] if isinstance(categories, str) else [str(c) for c in categories]
    adata = adata.copy() if copy else adata
    obs_in = [restrict_key] if restrict_key else []
    key, graph_key, uns_in, ds = _graph_source(adata, step, adjacency, obsp, neighbors_key, obs=obs_in)
    opt = options(_scurry.LeidenOptions, resolution=float(resolutions[0] if several else resolution),
                  resolutions=resolutions, random_state=int(random_state), n_iterations=int(n_iterations),
                  use_weights=bool(use_weights), beta=float(beta), key_added=key_added, neighbors_key=key,
                  flavor=flavor, directed=None if directed is None else bool(directed), restrict_key=restrict_key,
                  restrict_categories=categories, obsp=graph_key)
    _scurry.leiden(ds, opt)
    # the clusterings written: each an obs column with its uns entry (key_added, key_added_R, or
    # key_added_<resolution> for each of several)
    for k in ds.uns_keys():
        if k not in uns_in and k in ds.obs_keys():
            adata.obs[k] = ds.get_obs(k)
            adata.uns[k] = ds.get_uns(k)
    return adata if copy else None


def draw_graph(adata, layout="fa", *, init_pos=None, root=None, random_state=_DRAW.random_state, n_jobs=None,
               adjacency=None, key_added_ext=None, neighbors_key=None, obsp=None, copy=False, **kwds):
    """sc.tl.draw_graph (layout='fa'): ForceAtlas2 (Jacomy et al. 2014) of the neighbours graph with the
    settings scanpy hands fa2 (src/tl/draw_graph.hpp): obsm['X_draw_graph_' + (key_added_ext or
    layout)] (float64) and uns['draw_graph']['params'] (layout, random_state). init_pos: an obsm key,
    or None/False for scanpy's random start (np.random.seed(random_state)); kwds: maxiter or
    iterations (default 500). igraph's layouts and init_pos='paga' are not implemented."""
    step = "draw_graph"
    check_anndata(adata, step)
    igraph_layouts = ("fr", "drl", "kk", "grid_fr", "lgl", "rt", "rt_circular")
    if layout in igraph_layouts:
        raise NotImplementedError(f"draw_graph: layout={layout!r} (igraph's) is not implemented in scurry "
                                  "(only layout='fa', ForceAtlas2)")
    if layout != "fa":
        raise ValueError(f"draw_graph: provide a valid layout, one of {set(igraph_layouts) | {'fa'}}.")
    if random_state is None:
        raise NotImplementedError("draw_graph: random_state=None is not implemented in scurry (an int seed)")
    extra = dict(kwds)
    iterations = extra.pop("maxiter", extra.pop("iterations", _DRAW.iterations))  # maxiter first, as scanpy
    if extra:
        raise NotImplementedError(f"draw_graph: keyword arguments {sorted(extra)} are not implemented in scurry "
                                  "(ForceAtlas2 takes maxiter or iterations)")
    if obsp is not None and neighbors_key is not None:
        raise ValueError("draw_graph: you can't specify both obsp, neighbors_key at the same time.")
    if init_pos is True or init_pos == "paga":
        raise NotImplementedError("draw_graph: init_pos='paga' (positions from pl.paga) is not implemented in scurry "
                                  "(an obsm key, or None for a random start)")
    if init_pos is False:
        init_pos = None
    if init_pos is not None and init_pos not in adata.obsm:
        raise KeyError(f"draw_graph: init_pos '{init_pos}' is not an obsm key (obsm: {list(adata.obsm.keys())})")
    adata = adata.copy() if copy else adata
    key, graph_key, _, ds = _graph_source(adata, step, adjacency, obsp, neighbors_key,
                                          obsm=[init_pos] if init_pos is not None else [])
    opt = options(_scurry.DrawGraphOptions, layout=layout, init_pos=init_pos or "", root=root,
                  random_state=int(random_state), n_jobs=0 if n_jobs is None else int(n_jobs), neighbors_key=key,
                  obsp=graph_key, key_added_ext=key_added_ext or "", iterations=int(iterations))
    k = _scurry.draw_graph(ds, opt)
    adata.obsm[k] = ds.take_obsm(k)
    adata.uns["draw_graph"] = ds.get_uns("draw_graph")
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


# ---- the embedding and graph tools (issue 22): the C++ steps of `scurry tsne | diffmap | dpt | paga |
# dendrogram | embedding-density` (src/cli/cmd_tl.cpp), on the CPU.

def _representation(adata, use_rep, step):
    """What choose_representation reads: X when use_rep is 'X' or there is no X_pca, else the obsm key."""
    if use_rep not in (None, "X") and use_rep not in adata.obsm:
        raise KeyError(f"{step}: use_rep '{use_rep}' is not in obsm (keys: {list(adata.obsm.keys())})")
    use_x = use_rep == "X" or (use_rep is None and "X_pca" not in adata.obsm)
    return use_x, ([] if use_x else [use_rep or "X_pca"])


def tsne(adata, n_pcs=None, *, use_rep=None, perplexity=_TSNE.perplexity, metric=_TSNE.metric,
         early_exaggeration=_TSNE.early_exaggeration, learning_rate=_TSNE.learning_rate,
         random_state=_TSNE.random_state, use_fast_tsne=False, n_jobs=None, copy=False):
    """sc.tl.tsne: obsm['X_tsne'] and uns['tsne'] (params); sklearn's TSNE as scanpy calls it
    (exaggerated phase, then the rest; FFT-interpolated repulsion, Linderman et al. 2019)."""
    step = "tsne"
    check_anndata(adata, step)
    not_implemented(step, "use_fast_tsne", use_fast_tsne, False)
    if random_state is None:
        raise NotImplementedError("tsne: random_state=None is not implemented in scurry (an int seed)")
    adata = adata.copy() if copy else adata
    use_x, obsm = _representation(adata, use_rep, step)
    ds = dataset(adata, step=step, X=use_x, obsm=obsm)
    opt = options(_scurry.TsneOptions, n_pcs=n_pcs, use_rep=use_rep or "", perplexity=float(perplexity),
                  early_exaggeration=float(early_exaggeration), learning_rate=float(learning_rate),
                  random_state=int(random_state), n_jobs=0 if n_jobs is None else int(n_jobs), metric=metric)
    _scurry.tsne(ds, opt)
    adata.obsm["X_tsne"] = ds.take_obsm("X_tsne")
    adata.uns["tsne"] = ds.get_uns("tsne")
    return adata if copy else None


def _graph_dataset(adata, neighbors_key, step, **kw):
    key, obsp = _graph_keys(adata, neighbors_key, step)
    return key, dataset(adata, step=step, X=False, obsp=obsp, uns=[key] + list(kw.pop("uns", ())), **kw)


def diffmap(adata, n_comps=_DIFFMAP.n_comps, *, neighbors_key=None, random_state=_DIFFMAP.random_state, copy=False):
    """sc.tl.diffmap: the diffusion map of the neighbours graph (Coifman et al. 2005, Haghverdi et al.
    2015): obsm['X_diffmap'], uns['diffmap_evals']."""
    step = "diffmap"
    check_anndata(adata, step)
    if n_comps <= 2:
        raise ValueError("Provide any value greater than 2 for `n_comps`. ")
    adata = adata.copy() if copy else adata
    key, ds = _graph_dataset(adata, neighbors_key, step)
    _scurry.diffmap(ds, options(_scurry.DiffmapOptions, n_comps=int(n_comps), neighbors_key=key,
                                random_state=int(random_state)))
    adata.obsm["X_diffmap"] = ds.take_obsm("X_diffmap")
    adata.uns["diffmap_evals"] = ds.get_uns("diffmap_evals")
    return adata if copy else None


def dpt(adata, n_dcs=_DPT.n_dcs, *, n_branchings=0, min_group_size=0.01, allow_kendall_tau_shift=True,
        neighbors_key=None, copy=False):
    """sc.tl.dpt: diffusion pseudotime (Haghverdi et al. 2016) from the root cell uns['iroot']:
    obs['dpt_pseudotime']; runs diffmap first when obsm has no X_diffmap. Branching detection
    (n_branchings > 0) is not implemented; min_group_size and allow_kendall_tau_shift only act on
    branchings (in scanpy too)."""
    step = "dpt"
    check_anndata(adata, step)
    not_implemented(step, "n_branchings", n_branchings, 0)
    if "iroot" not in adata.uns:
        raise ValueError("dpt: no root cell: set adata.uns['iroot'] to a cell index first")
    adata = adata.copy() if copy else adata
    key, ds = _graph_dataset(adata, neighbors_key, step, obsm=["X_diffmap"], uns=["diffmap_evals", "iroot"])
    _scurry.dpt(ds, options(_scurry.DptOptions, n_dcs=int(n_dcs), neighbors_key=key))
    adata.obs["dpt_pseudotime"] = ds.get_obs("dpt_pseudotime")
    if "X_diffmap" not in adata.obsm:  # computed on the way (scanpy's fallback)
        adata.obsm["X_diffmap"] = ds.take_obsm("X_diffmap")
        adata.uns["diffmap_evals"] = ds.get_uns("diffmap_evals")
    return adata if copy else None


def paga(adata, groups=None, *, use_rna_velocity=False, model=_PAGA.model, neighbors_key=None, copy=False):
    """sc.tl.paga (Wolf et al. 2019, model v1.2): uns['paga'] (connectivities, connectivities_tree,
    groups) and uns['<groups>_sizes']."""
    step = "paga"
    check_anndata(adata, step)
    not_implemented(step, "use_rna_velocity", use_rna_velocity, False)
    if model != "v1.2":
        raise ValueError(f"`model` {model!r} needs to be one of ('v1.2',) in scurry (v1.0 is not implemented)")
    if groups is None:
        groups = "leiden" if "leiden" in adata.obs.columns else "louvain" if "louvain" in adata.obs.columns else None
        if groups is None:
            raise ValueError("You need to run `tl.leiden` or `tl.louvain` to compute community labels, "
                             "or specify `groups='an_existing_key'`")
    elif groups not in adata.obs.columns:
        raise KeyError(f"`groups` key {groups!r} not found in `adata.obs`.")
    adata = adata.copy() if copy else adata
    key, ds = _graph_dataset(adata, neighbors_key, step, obs=[groups])
    _scurry.paga(ds, options(_scurry.PagaOptions, groups=groups, model=model, neighbors_key=key))
    write_back(adata, ds, obs_in=[groups], uns_in=[key], obsm=False, varm=False, obsp=False)
    return adata if copy else None


def dendrogram(adata, groupby, *, n_pcs=None, use_rep=None, var_names=None, use_raw=None,
               cor_method=_DENDRO.cor_method, linkage_method=_DENDRO.linkage_method, optimal_ordering=False,
               key_added=None, inplace=True):
    """sc.tl.dendrogram: hierarchical clustering of the groups' mean representation
    (uns['dendrogram_<groupby>']); ``inplace=False`` returns that dict."""
    step = "dendrogram"
    check_anndata(adata, step)
    not_implemented(step, "var_names", var_names, None)
    not_implemented(step, "optimal_ordering", optimal_ordering, False)
    not_implemented(step, "use_raw", use_raw, None)  # acts with var_names only (scanpy)
    groupby = [groupby] if isinstance(groupby, str) else list(groupby)
    if len(groupby) != 1:
        raise NotImplementedError("dendrogram: several groupby columns are not implemented in scurry (one)")
    for g in groupby:
        if g not in adata.obs.columns:
            raise ValueError(f"groupby has to be a valid observation. Given value: {g}, "
                             f"valid observations: {list(adata.obs.columns)}")
    use_x, obsm = _representation(adata, use_rep, step)
    ds = dataset(adata, step=step, X=use_x, obs=groupby, obsm=obsm)
    k = key_added or f"dendrogram_{groupby[0]}"
    _scurry.dendrogram(ds, options(_scurry.DendrogramOptions, groupby=groupby[0], n_pcs=n_pcs, use_rep=use_rep or "",
                                   cor_method=cor_method, linkage_method=linkage_method, key_added=k))
    dat = ds.get_uns(k)
    if not inplace:
        return dat
    adata.uns[k] = dat
    return None


def embedding_density(adata, basis=_DENSITY.basis, *, groupby=None, key_added=None, components=None):
    """sc.tl.embedding_density: Gaussian kernel density of the cells in obsm['X_<basis>'] (within each
    category of obs[groupby]), scaled to [0, 1]: obs['<basis>_density[_<groupby>]'] and its uns params."""
    step = "embedding_density"
    check_anndata(adata, step)
    b = "draw_graph_fa" if basis == "fa" else basis
    if f"X_{b}" not in adata.obsm:
        raise ValueError(f"Cannot find the embedded representation `adata.obsm['X_{b}']`. Compute the embedding first.")
    if groupby is not None and groupby not in adata.obs.columns:
        raise ValueError(f"Could not find {groupby!r} `.obs` column.")
    if components is None:
        comps = _DENSITY.components
    elif isinstance(components, str):
        comps = components
    else:
        comps = ",".join(str(int(c)) for c in components)
    ds = dataset(adata, step=step, X=False, obs=[groupby] if groupby is not None else [], obsm=[f"X_{b}"])
    _scurry.embedding_density(ds, options(_scurry.EmbeddingDensityOptions, basis=basis, groupby=groupby or "",
                                          key_added=key_added or "", components=comps))
    write_back(adata, ds, obs_in=[groupby] if groupby is not None else [], obsm=False, varm=False, obsp=False)
