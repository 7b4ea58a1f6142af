"""scanpy.pp's preprocessing steps on scurry's C++ core: scanpy 1.10's names, parameters, defaults,
return values and slots. Defaults come from the C++ Options structs (``_scurry.XxxOptions()``)
where scanpy's and scurry's agree; a scanpy parameter scurry does not implement raises
NotImplementedError naming it when given a value other than its default."""
from __future__ import annotations

import warnings
from types import MappingProxyType

import numpy as np
import pandas as pd

from . import _gpu, _scurry
from ._core import (_empty, actualize, check_anndata, dataset, matrix_of, not_implemented, options, subset_inplace,
                    write_back)

__all__ = ["calculate_qc_metrics", "filter_cells", "filter_genes", "normalize_total", "log1p",
           "highly_variable_genes", "scale", "pca", "neighbors", "harmony_integrate", "combat", "regress_out",
           "scrublet"]

_QC = _scurry.QcOptions()
_NORM = _scurry.NormalizeTotalOptions()
_HVG = _scurry.HvgOptions()
_SCALE = _scurry.ScaleOptions()
_PCA = _scurry.PcaOptions()
_NN = _scurry.NeighborsOptions()
_HARMONY = _scurry.HarmonyOptions()
_COMBAT = _scurry.CombatOptions()
_SCRUB = _scurry.ScrubletOptions()


def _is_anndata(x):
    import anndata

    return isinstance(x, anndata.AnnData)


def _as_anndata(X):
    """A bare AnnData around a matrix (for the functions scanpy lets take an array)."""
    import scipy.sparse as sp

    from ._core import new_anndata

    if not isinstance(X, np.ndarray) and not sp.issparse(X):
        raise TypeError(f"expected an AnnData, a numpy array or a scipy sparse matrix, got {type(X).__name__}")
    return new_anndata(X=X)


def calculate_qc_metrics(adata, *, expr_type="counts", var_type="genes", qc_vars=(),
                         percent_top=tuple(_QC.percent_top), layer=None, use_raw=False, inplace=False,
                         log1p=_QC.log1p, parallel=None):
    """sc.pp.calculate_qc_metrics: obs/var QC columns; ``inplace=False`` returns (obs_df, var_df)."""
    step = "calculate_qc_metrics"
    check_anndata(adata, step)
    if parallel is not None:
        warnings.warn("calculate_qc_metrics: parallel is deprecated in scanpy and has no effect", FutureWarning)
    if isinstance(qc_vars, str):
        qc_vars = [qc_vars]
    qc_vars = list(qc_vars)
    pt = [] if percent_top is None else [int(n) for n in percent_top]
    if _gpu.wants_gpu(adata):
        r = _gpu.calculate_qc_metrics(adata, expr_type=expr_type, var_type=var_type, qc_vars=qc_vars, percent_top=pt,
                                      layer=layer, use_raw=use_raw, inplace=inplace, log1p=log1p)
        if r is not _gpu.CPU:
            return r
    opt = options(_scurry.QcOptions, qc_vars=qc_vars, percent_top=pt, log1p=bool(log1p),
                  layer="", expr_type=expr_type, var_type=var_type)
    # on the AnnData's own buffers (no copy) when their layout allows it, else on a copy
    ds = dataset(adata, step=step, X=False, use_raw=use_raw, var=qc_vars)
    if not _scurry.calculate_qc_metrics_view(ds, matrix_of(adata, layer, step, use_raw), opt):
        ds = dataset(adata, step=step, layer=layer, use_raw=use_raw, var=qc_vars)
        _scurry.check_counts(ds, layer or "", step)
        opt.layer = layer or ""
        _scurry.calculate_qc_metrics(ds, opt)
    obs = pd.DataFrame({k: ds.get_obs(k) for k in ds.obs_keys()}, index=adata.obs_names)
    var_names = adata.raw.var_names if use_raw else adata.var_names
    var = pd.DataFrame({k: ds.get_var(k) for k in ds.var_keys() if k not in qc_vars}, index=var_names)
    if not inplace:
        return obs, var
    for k in obs.columns:
        adata.obs[k] = obs[k].to_numpy()
    if use_raw:
        # scanpy writes the var metrics into adata.var, over the genes of raw (they must match)
        var = var.reindex(adata.var_names)
    for k in var.columns:
        adata.var[k] = var[k].to_numpy()
    return None


def _one_criterion(step, names_values):
    given = [n for n, v in names_values if v is not None]
    if len(given) != 1:
        names = ", ".join(f"`{n}`" for n, _ in names_values)
        raise ValueError(f"{step}: provide exactly one of the optional parameters {names} per call")


def filter_cells(data, *, min_counts=None, min_genes=None, max_counts=None, max_genes=None, inplace=True,
                 copy=False):
    """sc.pp.filter_cells: obs['n_genes'] or obs['n_counts'], then the cells that pass. On an array
    (or with ``inplace=False``) returns (cells_subset, number_per_cell)."""
    step = "filter_cells"
    _one_criterion(step, [("min_counts", min_counts), ("min_genes", min_genes), ("max_counts", max_counts),
                          ("max_genes", max_genes)])
    opt = options(_scurry.FilterCellsOptions, min_counts=min_counts, min_genes=min_genes, max_counts=max_counts,
                  max_genes=max_genes)
    if not _is_anndata(data):
        return filter_cells(_as_anndata(data), min_counts=min_counts, min_genes=min_genes, max_counts=max_counts,
                            max_genes=max_genes, inplace=False)
    col = "n_genes" if (min_genes is not None or max_genes is not None) else "n_counts"
    if _gpu.wants_gpu(data):
        r = _gpu.filter_cells(data, opt, col, inplace, copy)
        if r is not _gpu.CPU:
            return r
    check_anndata(data, step)
    adata = data.copy() if copy else data
    # the statistics on the AnnData's own buffers (no copy) when their layout allows it
    ds = dataset(adata, step=step, X=False)
    r = _scurry.filter_cells_view(ds, matrix_of(adata, None, step), opt)
    if r is None:
        ds = dataset(adata, step=step)
        r = _scurry.filter_cells(ds, opt)
        ds.take_X()  # the Dataset's copy, dropped before the AnnData is subset (peak memory)
    keep, n_genes, n_counts = r
    number = n_genes if (min_genes is not None or max_genes is not None) else n_counts
    if not inplace:
        return keep, number
    col = "n_genes" if (min_genes is not None or max_genes is not None) else "n_counts"
    subset_inplace(adata, obs=keep)  # anndata's _inplace_subset_obs, each matrix copied once
    adata.obs[col] = ds.get_obs(col)  # the kept cells' column, in the dtype the C++ step writes
    return adata if copy else None


def filter_genes(data, *, min_counts=None, min_cells=None, max_counts=None, max_cells=None, inplace=True,
                 copy=False):
    """sc.pp.filter_genes: var['n_cells'] or var['n_counts'], then the genes that pass. On an array
    (or with ``inplace=False``) returns (gene_subset, number_per_gene)."""
    step = "filter_genes"
    _one_criterion(step, [("min_counts", min_counts), ("min_cells", min_cells), ("max_counts", max_counts),
                          ("max_cells", max_cells)])
    opt = options(_scurry.FilterGenesOptions, min_counts=min_counts, min_cells=min_cells, max_counts=max_counts,
                  max_cells=max_cells)
    if not _is_anndata(data):
        return filter_genes(_as_anndata(data), min_counts=min_counts, min_cells=min_cells, max_counts=max_counts,
                            max_cells=max_cells, inplace=False)
    col = "n_cells" if (min_cells is not None or max_cells is not None) else "n_counts"
    if _gpu.wants_gpu(data):
        r = _gpu.filter_genes(data, opt, col, inplace, copy)
        if r is not _gpu.CPU:
            return r
    check_anndata(data, step)
    adata = data.copy() if copy else data
    ds = dataset(adata, step=step, X=False)
    r = _scurry.filter_genes_view(ds, matrix_of(adata, None, step), opt)
    if r is None:
        ds = dataset(adata, step=step)
        r = _scurry.filter_genes(ds, opt)
        ds.take_X()
    keep, n_cells, n_counts = r
    number = n_cells if (min_cells is not None or max_cells is not None) else n_counts
    if not inplace:
        return keep, number
    col = "n_cells" if (min_cells is not None or max_cells is not None) else "n_counts"
    subset_inplace(adata, var=keep)
    adata.var[col] = ds.get_var(col)
    return adata if copy else None


def normalize_total(adata, *, target_sum=_NORM.target_sum, exclude_highly_expressed=_NORM.exclude_highly_expressed,
                    max_fraction=_NORM.max_fraction, key_added=None, layer=None, layers=None, layer_norm=None,
                    inplace=True, copy=False):
    """sc.pp.normalize_total: every cell to the same total, in place on X (or the layer);
    ``inplace=False`` returns dict(X=..., norm_factor=...)."""
    step = "normalize_total"
    check_anndata(adata, step)
    not_implemented(step, "layers", layers, None)
    not_implemented(step, "layer_norm", layer_norm, None)
    if copy and not inplace:
        raise ValueError("normalize_total: `copy=True` cannot be used with `inplace=False`")
    opt = options(_scurry.NormalizeTotalOptions, target_sum=target_sum,
                  exclude_highly_expressed=bool(exclude_highly_expressed), max_fraction=float(max_fraction),
                  key_added=key_added or "", layer=layer or "")
    if _gpu.wants_gpu(adata):
        r = _gpu.normalize_total(adata, opt, inplace=inplace, copy=copy)
        if r is not _gpu.CPU:
            return r
    if copy:
        adata = adata.copy()
    if inplace:
        # in place on the AnnData's own buffers (no copy) when their layout allows it
        actualize(adata)
        m = matrix_of(adata, layer, step)
        if _scurry.counts_ok_inplace(m):
            ds = dataset(adata, step=step, X=False)
            if _scurry.normalize_total_inplace(ds, m, opt) is not None:
                write_back(adata, ds)
                return adata if copy else None
    ds = dataset(adata, step=step, layer=layer)
    _scurry.check_counts(ds, layer or "", step)
    counts, _ = _scurry.normalize_total(ds, opt)
    if not inplace:
        X = ds.take_layer(layer) if layer is not None else ds.take_X()
        return dict(X=X, norm_factor=counts)
    write_back(adata, ds, X=True, layer=layer)
    return adata if copy else None


def log1p(data, *, base=None, copy=False, chunked=None, chunk_size=None, layer=None, obsm=None):
    """sc.pp.log1p: log(1 + x) (base e unless `base`), uns['log1p']; on an array returns the result."""
    step = "log1p"
    not_implemented(step, "chunked", chunked, None) if chunked else None
    not_implemented(step, "chunk_size", chunk_size, None)
    not_implemented(step, "obsm", obsm, None)
    if not _is_anndata(data):
        a = _as_anndata(data)
        log1p(a, base=base)
        return a.X
    if _gpu.wants_gpu(data):
        r = _gpu.log1p(data, base=base, layer=layer, copy=copy)
        if r is not _gpu.CPU:
            return r
    check_anndata(data, step)
    adata = data.copy() if copy else data
    actualize(adata)
    opt = options(_scurry.Log1pOptions, base=base, layer=layer or "")
    ds = dataset(adata, step=step, X=False, uns=["log1p"])
    if _scurry.log1p_inplace(ds, matrix_of(adata, layer, step), opt):  # on the AnnData's buffers
        write_back(adata, ds, uns_in=())
        return adata if copy else None
    ds = dataset(adata, step=step, layer=layer, uns=["log1p"])
    _scurry.log1p(ds, opt)
    write_back(adata, ds, X=True, layer=layer)
    return adata if copy else None


def highly_variable_genes(adata, *, layer=None, n_top_genes=_HVG.n_top_genes, min_disp=_HVG.min_disp,
                          max_disp=_HVG.max_disp, min_mean=_HVG.min_mean, max_mean=_HVG.max_mean, span=_HVG.span,
                          n_bins=_HVG.n_bins, flavor=_HVG.flavor, subset=_HVG.subset, inplace=True, batch_key=None,
                          check_values=_HVG.check_values):
    """sc.pp.highly_variable_genes (seurat, cell_ranger, seurat_v3): var['highly_variable'] and the
    statistics; ``inplace=False`` returns them as a DataFrame."""
    if flavor not in ("seurat", "cell_ranger", "seurat_v3"):
        raise ValueError(f"highly_variable_genes: flavor '{flavor}' is not one of 'seurat', 'cell_ranger', "
                         "'seurat_v3' (pearson_residuals: scurry.experimental.pp.highly_variable_genes, as scanpy)")
    return _hvg(adata, layer=layer, n_top_genes=n_top_genes, min_disp=min_disp, max_disp=max_disp, min_mean=min_mean,
                max_mean=max_mean, span=span, n_bins=n_bins, flavor=flavor, subset=subset, inplace=inplace,
                batch_key=batch_key, check_values=check_values)


def _hvg(adata, *, inplace, subset, batch_key, layer, **kw):
    step = "highly_variable_genes"
    if _gpu.wants_gpu(adata):
        opt = options(_scurry.HvgOptions, batch_key="", layer="", subset=False, **kw)
        r = _gpu.highly_variable_genes(adata, inplace=inplace, subset=subset, batch_key=batch_key, layer=layer,
                                       flavor=kw.get("flavor"), opt=opt)
        if r is not _gpu.CPU:
            return r
    check_anndata(adata, step)
    obs = [batch_key] if batch_key is not None else []
    ds = dataset(adata, step=step, layer=layer, obs=obs, uns=["log1p"])
    opt = options(_scurry.HvgOptions, batch_key=batch_key or "", layer=layer or "", subset=False, **kw)
    _scurry.highly_variable_genes(ds, opt)
    cols = {k: ds.get_var(k) for k in ds.var_keys()}
    df = pd.DataFrame(cols, index=adata.var_names)
    if not inplace:
        if subset:
            df = df[df["highly_variable"]]
        return df
    for k, v in cols.items():
        adata.var[k] = v
    for k in ds.uns_keys():
        if k != "log1p":
            adata.uns[k] = ds.get_uns(k)
    if subset:
        subset_inplace(adata, var=df["highly_variable"].to_numpy())
    return None


def scale(data, *, zero_center=_SCALE.zero_center, max_value=_SCALE.max_value, copy=False, layer=None, obsm=None,
          mask_obs=None):
    """sc.pp.scale: each gene to unit variance (and zero mean), clipped to [-max_value, max_value]
    when centred (scanpy 1.10); var['mean'], var['std']. On an array returns the result."""
    step = "scale"
    not_implemented(step, "obsm", obsm, None)
    not_implemented(step, "mask_obs", mask_obs, None)
    if not _is_anndata(data):
        a = _as_anndata(data)
        scale(a, zero_center=zero_center, max_value=max_value)
        return a.X
    opt = options(_scurry.ScaleOptions, zero_center=bool(zero_center), max_value=max_value,
                  clip_below=bool(zero_center), layer=layer or "")
    if _gpu.wants_gpu(data):
        r = _gpu.scale(data, opt, layer=layer, copy=copy)
        if r is not _gpu.CPU:
            return r
    check_anndata(data, step)
    adata = data.copy() if copy else data
    actualize(adata)
    ds = dataset(adata, step=step, X=False)
    r = _scurry.scale_inplace(ds, matrix_of(adata, layer, step), opt)  # on the AnnData's buffers
    if r is not False:
        if r is not None:  # a sparse matrix centred: the new dense one
            if layer is not None:
                adata.layers[layer] = r
            else:
                adata.X = r
        write_back(adata, ds)
        return adata if copy else None
    ds = dataset(adata, step=step, layer=layer)
    _scurry.scale(ds, opt)
    write_back(adata, ds, X=True, layer=layer)
    return adata if copy else None


def pca(data, n_comps=None, *, layer=None, zero_center=_PCA.zero_center, svd_solver=None,
        random_state=_PCA.random_state, return_info=False, mask_var=_empty, use_highly_variable=None,
        dtype=_PCA.dtype, chunked=False, chunk_size=None, copy=False):
    """sc.pp.pca: obsm['X_pca'], varm['PCs'], uns['pca'] (variance, variance_ratio). svd_solver:
    None/'auto', 'arpack' (exact, scurry's Gram solver), 'randomized'. On an array returns X_pca."""
    step = "pca"
    not_implemented(step, "chunked", chunked, False)
    not_implemented(step, "chunk_size", chunk_size, None)
    if zero_center is None:
        raise NotImplementedError("pca: zero_center=None (chosen by sparsity) is not implemented in scurry; "
                                  "pass True or False")
    # sklearn's exact solvers (arpack, full, covariance_eigh, lobpcg) all give the exact components:
    # scurry's exact Gram solver; randomized is scurry's randomized solver.
    exact = ("arpack", "full", "covariance_eigh", "lobpcg", "gram")
    if svd_solver not in (None, "auto", "randomized") + exact:
        raise ValueError(f"pca: svd_solver '{svd_solver}' is not one of None, 'auto', 'arpack', 'randomized', "
                         "'full', 'covariance_eigh', 'lobpcg'")
    if not _is_anndata(data):
        a = _as_anndata(data)
        pca(a, n_comps, zero_center=zero_center, svd_solver=svd_solver, random_state=random_state, dtype=dtype,
            mask_var=None)
        if return_info:
            u = a.uns["pca"]
            return a.obsm["X_pca"], a.varm["PCs"].T, u["variance_ratio"], u["variance"]
        return a.obsm["X_pca"]
    gpu = _gpu.wants_gpu(data) and layer is None
    if not gpu:
        check_anndata(data, step)
        _gpu.ensure_host(data)
        adata = data.copy() if copy else data
    else:
        adata = _gpu._target(data, copy)[0]
    if mask_var is not _empty and use_highly_variable is not None:
        raise ValueError("pca: give mask_var or use_highly_variable, not both")
    # mask_var: scanpy 1.10. _empty: var['highly_variable'] when present; None: every gene; a var
    # column name or a boolean array: those genes. The C++ step reads the mask from
    # var['highly_variable'] of its Dataset.
    mask = None
    uhv = use_highly_variable
    if mask_var is not _empty:
        if mask_var is None:
            uhv = False
        elif isinstance(mask_var, str):
            if mask_var not in adata.var.columns:
                raise KeyError(f"pca: mask_var '{mask_var}' is not a var column")
            mask, uhv = adata.var[mask_var].to_numpy(), True
        else:
            mask, uhv = np.asarray(mask_var), True
    elif uhv is None and "highly_variable" in adata.var.columns:
        uhv = True
    if uhv and mask is None:
        if "highly_variable" not in adata.var.columns:
            raise ValueError("pca: use_highly_variable=True but var has no 'highly_variable' column; "
                             "run highly_variable_genes first")
        mask = adata.var["highly_variable"].to_numpy()
    if layer is not None:
        raise NotImplementedError("pca: layer is not implemented in scurry (PCA of X only)")
    ds = dataset(adata, step=step, layer=layer, X=not gpu, obs_names=not gpu)
    if mask is not None:
        if mask.dtype != bool or mask.shape != (adata.n_vars,):
            raise ValueError(f"pca: mask_var must be a boolean mask of {adata.n_vars} genes")
        ds.set_var("highly_variable", mask)
    solver = "auto" if svd_solver in (None, "auto") else "randomized" if svd_solver == "randomized" else "gram"
    opt = options(_scurry.PcaOptions, n_comps=n_comps, zero_center=bool(zero_center), svd_solver=solver,
                  random_state=int(random_state), use_highly_variable=bool(uhv), dtype=np.dtype(dtype).name)
    if gpu:  # the exact Gram solver on the device, whatever svd_solver asks
        return _gpu.pca(adata, ds, opt, copy=copy)
    _scurry.pca(ds, opt)
    write_back(adata, ds, var_in=["highly_variable"])
    return adata if copy else None


def neighbors(adata, n_neighbors=_NN.n_neighbors, n_pcs=None, *, use_rep=None, knn=True, method="umap",
              transformer=None, metric=_NN.metric, metric_kwds=MappingProxyType({}), random_state=_NN.random_state, key_added=None,
              copy=False):
    """sc.pp.neighbors: the kNN graph with UMAP connectivities: obsp['distances'],
    obsp['connectivities'], uns['neighbors'] (or key_added's names)."""
    step = "neighbors"
    check_anndata(adata, step)
    not_implemented(step, "knn", knn, True)
    not_implemented(step, "method", method, "umap")
    not_implemented(step, "metric_kwds", dict(metric_kwds), {})
    algorithm = "auto"
    if transformer is not None:
        if transformer in ("sklearn", "exact"):
            algorithm = "exact"
        elif transformer in ("pynndescent", "hnsw"):
            algorithm = "hnsw"
        else:
            raise NotImplementedError(f"neighbors: transformer={transformer!r} is not implemented in scurry "
                                      "(None, 'sklearn' for an exact search, 'pynndescent' for the approximate one)")
    adata = adata.copy() if copy else adata
    obsm = [use_rep] if use_rep not in (None, "X") else ["X_pca"]
    ds = dataset(adata, step=step, X=(use_rep == "X" or (use_rep is None and "X_pca" not in adata.obsm)),
                 obsm=obsm)
    if use_rep not in (None, "X") and use_rep not in adata.obsm:
        raise KeyError(f"neighbors: use_rep '{use_rep}' is not in obsm (keys: {list(adata.obsm.keys())})")
    opt = options(_scurry.NeighborsOptions, n_neighbors=int(n_neighbors), n_pcs=n_pcs, use_rep=use_rep or "",
                  metric=metric, random_state=int(random_state), algorithm=algorithm,
                  key_added=key_added or "neighbors")
    _scurry.neighbors(ds, opt)
    write_back(adata, ds, obsm=False)
    return adata if copy else None


# ---- the batch tools (issue 21): scanpy.external.pp.harmony_integrate, pp.combat, pp.regress_out,
# pp.scrublet (scanpy 1.10). The C++ steps are those of `scurry harmony-integrate | combat |
# regress-out | scrublet` (src/cli/cmd_integrate.cpp), on the CPU.

# harmonypy.run_harmony's keyword arguments that scurry implements (HarmonyOptions' fields), and
# those that only change its logging.
_HARMONY_KW = ("theta", "lamb", "sigma", "nclust", "tau", "block_size", "max_iter_harmony", "max_iter_kmeans",
               "epsilon_cluster", "epsilon_harmony", "random_state")


def _per_key(name, v):
    return [float(x) for x in (v if isinstance(v, (list, tuple, np.ndarray)) else [v])]


def harmony_integrate(adata, key, *, basis="X_pca", adjusted_basis="X_pca_harmony", **kwargs):
    """scanpy.external.pp.harmony_integrate: Harmony (Korsunsky et al. 2019) on obsm[basis], the
    result in obsm[adjusted_basis]. `key`: an obs column or a list of them; kwargs: harmonypy's
    run_harmony parameters theta, lamb, sigma, nclust, tau, block_size, max_iter_harmony,
    max_iter_kmeans, epsilon_cluster, epsilon_harmony, random_state (verbose: logging only)."""
    step = "harmony_integrate"
    check_anndata(adata, step)
    keys = [key] if isinstance(key, str) else list(key)
    extra = dict(kwargs)
    extra.pop("verbose", None)
    unknown = sorted(k for k in extra if k not in _HARMONY_KW)
    if unknown:
        raise NotImplementedError(f"harmony_integrate: keyword arguments {unknown} are not implemented in scurry "
                                  f"(harmonypy's {', '.join(_HARMONY_KW)} are)")
    if basis not in adata.obsm:
        raise KeyError(f"harmony_integrate: obsm['{basis}'] is not in the AnnData (obsm: {list(adata.obsm.keys())})")
    vals = {}
    for k, v in extra.items():
        if v is None:
            continue  # harmonypy's None: its default
        if k in ("theta", "lamb"):
            vals[k] = _per_key(k, v)
        elif k in ("nclust", "max_iter_harmony", "max_iter_kmeans", "random_state"):
            vals[k] = int(v)
        else:
            vals[k] = float(v)
    ds = dataset(adata, step=step, X=False, obs=keys, obsm=[basis])
    opt = options(_scurry.HarmonyOptions, keys=keys, basis=basis, adjusted_basis=adjusted_basis, **vals)
    _scurry.harmony_integrate(ds, opt)
    adata.obsm[adjusted_basis] = ds.take_obsm(adjusted_basis)


def combat(adata, key=_COMBAT.key, *, covariates=None, inplace=True):
    """sc.pp.combat: ComBat (Johnson et al. 2007) on X, batches in obs[key], covariates kept in the
    model; X becomes the dense corrected matrix, or ``inplace=False`` returns it."""
    step = "combat"
    check_anndata(adata, step)
    covariates = [] if covariates is None else ([covariates] if isinstance(covariates, str) else list(covariates))
    if key not in adata.obs.columns:
        raise ValueError(f"Could not find the key {key!r} in adata.obs")
    for c in covariates:
        if c not in adata.obs.columns:
            raise ValueError(f"Could not find the covariate {c!r} in adata.obs")
    ds = dataset(adata, step=step, obs=[key] + [c for c in covariates if c != key])
    _scurry.combat(ds, options(_scurry.CombatOptions, key=key, covariates=covariates))
    X = ds.take_X()
    if not inplace:
        return X
    actualize(adata)
    adata.X = X
    return None


def regress_out(adata, keys, *, layer=None, n_jobs=None, copy=False):
    """sc.pp.regress_out: X (or the layer) becomes the least-squares residuals on obs[keys] (numeric
    columns, or one categorical). n_jobs: the threads of this call (results are identical for any)."""
    step = "regress_out"
    check_anndata(adata, step)
    keys = [keys] if isinstance(keys, str) else list(keys)
    adata = adata.copy() if copy else adata
    for k in keys:
        if k not in adata.obs.columns:
            raise KeyError(f"regress_out: obs['{k}'] is not in the AnnData (obs columns: {list(adata.obs.columns)})")
    ds = dataset(adata, step=step, layer=layer, obs=keys)
    opt = options(_scurry.RegressOutOptions, keys=keys, layer=layer or "")
    with _threads(n_jobs):
        _scurry.regress_out(ds, opt)
    actualize(adata)
    write_back(adata, ds, X=True, layer=layer, obs_in=keys)
    return adata if copy else None


class _threads:
    """A step's own thread count (scanpy's per-call n_jobs), settings.n_jobs again afterwards."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        if self.n is not None:
            from ._settings import settings

            self.old = settings.n_jobs
            _scurry.set_threads(0 if int(self.n) == -1 else int(self.n))

    def __exit__(self, *exc):
        if self.n is not None:
            _scurry.set_threads(0 if self.old == -1 else self.old)


def scrublet(adata, adata_sim=None, *, batch_key=None, sim_doublet_ratio=_SCRUB.sim_doublet_ratio,
             expected_doublet_rate=_SCRUB.expected_doublet_rate, stdev_doublet_rate=_SCRUB.stdev_doublet_rate,
             synthetic_doublet_umi_subsampling=_SCRUB.synthetic_doublet_umi_subsampling,
             knn_dist_metric=_SCRUB.knn_dist_metric, normalize_variance=_SCRUB.normalize_variance,
             log_transform=_SCRUB.log_transform, mean_center=_SCRUB.mean_center, n_prin_comps=_SCRUB.n_prin_comps,
             use_approx_neighbors=True, get_doublet_neighbor_parents=False, n_neighbors=None, threshold=None,
             verbose=True, copy=False, random_state=_SCRUB.random_state):
    """sc.pp.scrublet (scanpy 1.10): Scrublet (Wolock et al. 2019) on the raw counts in X:
    obs['doublet_score'], obs['predicted_doublet'], uns['scrublet']. use_approx_neighbors=True (scanpy
    1.10's default): scurry's approximate kNN (hnsw); False: the exact search. verbose: logging only."""
    step = "scrublet"
    check_anndata(adata, step)
    not_implemented(step, "adata_sim", adata_sim, None)
    not_implemented(step, "get_doublet_neighbor_parents", get_doublet_neighbor_parents, False)
    if batch_key is not None and batch_key not in adata.obs.columns:
        raise ValueError("`batch_key` must be a column of .obs in the input annData object.")
    if not isinstance(knn_dist_metric, str):
        raise NotImplementedError("scrublet: knn_dist_metric as a function is not implemented in scurry "
                                  "('euclidean' or 'cosine')")
    adata = adata.copy() if copy else adata
    ds = dataset(adata, step=step, obs=[batch_key] if batch_key is not None else [])
    opt = options(_scurry.ScrubletOptions, batch_key=batch_key or "", sim_doublet_ratio=float(sim_doublet_ratio),
                  expected_doublet_rate=float(expected_doublet_rate), stdev_doublet_rate=float(stdev_doublet_rate),
                  synthetic_doublet_umi_subsampling=float(synthetic_doublet_umi_subsampling),
                  knn_dist_metric=knn_dist_metric, normalize_variance=bool(normalize_variance),
                  log_transform=bool(log_transform), mean_center=bool(mean_center), n_prin_comps=int(n_prin_comps),
                  use_approx_neighbors=bool(use_approx_neighbors),
                  n_neighbors=None if n_neighbors is None else int(n_neighbors),
                  threshold=None if threshold is None else float(threshold), random_state=int(random_state))
    _scurry.scrublet(ds, opt)
    ds.take_X()
    write_back(adata, ds, obs_in=[batch_key] if batch_key is not None else [])
    return adata if copy else None
