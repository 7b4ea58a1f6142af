"""scanpy.get on scurry's C++ core: aggregate (scanpy 1.10) and rank_genes_groups_df."""
from __future__ import annotations

from . import _scurry
from ._core import check_anndata, dataset, not_implemented, options, to_anndata

__all__ = ["aggregate", "rank_genes_groups_df", "anndata_to_GPU", "anndata_to_CPU"]


def anndata_to_GPU(adata, layer=None, convert_all=False):
    """rapids-singlecell's get.anndata_to_GPU: X to the GPU, where it stays between the steps with a
    GPU path (scurry._gpu's docstring: adata.X is None while X is on the device). RuntimeError where
    no GPU is usable."""
    import anndata

    from . import _gpu

    if not isinstance(adata, anndata.AnnData):
        raise TypeError(f"anndata_to_GPU: expected an AnnData, got {type(adata).__name__}")
    not_implemented("anndata_to_GPU", "layer", layer, None)
    not_implemented("anndata_to_GPU", "convert_all", convert_all, False)
    _gpu.to_gpu(adata)


def anndata_to_CPU(adata, layer=None, convert_all=False):
    """rapids-singlecell's get.anndata_to_CPU: X back from the GPU into adata.X (nothing to do when it
    is on the host)."""
    import anndata

    from . import _gpu

    if not isinstance(adata, anndata.AnnData):
        raise TypeError(f"anndata_to_CPU: expected an AnnData, got {type(adata).__name__}")
    not_implemented("anndata_to_CPU", "layer", layer, None)
    not_implemented("anndata_to_CPU", "convert_all", convert_all, False)
    _gpu.to_cpu(adata)

_AGG = _scurry.AggregateOptions()


def aggregate(adata, by, func, *, axis=None, mask=None, dof=_AGG.dof, layer=None, obsm=None, varm=None):
    """sc.get.aggregate: an AnnData with a row per observed combination of `by`, a layer per function."""
    step = "aggregate"
    check_anndata(adata, step)
    if axis not in (None, 0, "obs"):
        raise NotImplementedError(f"aggregate: axis={axis!r} is not implemented in scurry (cells only: axis=0)")
    not_implemented(step, "obsm", obsm, None)
    not_implemented(step, "varm", varm, None)
    by = [by] if isinstance(by, str) else list(by)
    func = [func] if isinstance(func, str) else list(func)
    obs = list(by)
    mask_col = ""
    if mask is not None:
        if isinstance(mask, str):
            obs.append(mask)
            mask_col = mask
        else:
            mask_col = "__scurry_mask"
    ds = dataset(adata, step=step, layer=layer, obs=obs)
    ds.set_var_df(adata.var)
    if mask_col == "__scurry_mask":
        import numpy as np

        ds.set_obs(mask_col, np.asarray(mask, dtype=bool))
    opt = options(_scurry.AggregateOptions, by=by, func=func, mask=mask_col, dof=int(dof), layer=layer or "")
    return to_anndata(_scurry.aggregate(ds, opt))


def rank_genes_groups_df(adata, group, *, key="rank_genes_groups", pval_cutoff=None, log2fc_min=None,
                         log2fc_max=None, gene_symbols=None):
    """sc.get.rank_genes_groups_df: uns[key] as one DataFrame (all groups when `group` is None)."""
    check_anndata(adata, "rank_genes_groups_df")
    if key not in adata.uns:
        raise KeyError(f"rank_genes_groups_df: uns['{key}'] is missing; run rank_genes_groups first")
    ds = _scurry.Dataset()
    ds.set_uns(key, adata.uns[key])
    df = _scurry.rank_genes_groups_df(ds, key)
    if group is not None:
        groups = [group] if isinstance(group, str) else list(group)
        df = df[df["group"].isin(groups)]
        if len(groups) == 1:
            df = df.drop(columns="group")
    if pval_cutoff is not None:
        df = df[df["pvals_adj"] < pval_cutoff]
    if log2fc_min is not None:
        df = df[df["logfoldchanges"] > log2fc_min]
    if log2fc_max is not None:
        df = df[df["logfoldchanges"] < log2fc_max]
    if gene_symbols is not None:
        df = df.join(adata.var[gene_symbols], on="names")
    return df.reset_index(drop=True)
