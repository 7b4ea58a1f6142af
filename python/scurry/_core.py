"""Between AnnData and scurry's C++ Dataset: build the Dataset a step reads, write back what it wrote.

Every wrapper in pp/tl/get follows one pattern (docs/python.md):

1. check the AnnData (not backed; a view becomes actual before an in-place step, as scanpy does);
2. ``ds = dataset(adata, ...)``: a ``_scurry.Dataset`` holding only the slots the step reads;
3. call the step's C++ entry point (the one the CLI calls) with its ``XxxOptions``;
4. ``write_back(adata, ds, ...)``: the slots the step wrote, moved out of the Dataset into the AnnData.

The step runs on the Dataset, never on the AnnData: an error or Ctrl-C in the middle leaves the
AnnData as it was.
"""
from __future__ import annotations

import gc

import numpy as np
import pandas as pd

from . import _scurry


class _Empty:
    """Marks "not given" where scanpy uses a sentinel (pca's mask_var)."""

    def __repr__(self):
        return "_empty"


_empty = _Empty()


def not_implemented(step, name, value, default):
    """Raises NotImplementedError naming a scanpy parameter scurry does not implement, when it is
    given a value other than its default."""
    same = value is default
    if not same:
        try:
            same = bool(value == default)
        except Exception:  # arrays and the like
            same = False
    if not same:
        raise NotImplementedError(
            f"{step}: parameter {name}={value!r} is not implemented in scurry (only {name}={default!r})"
        )


def collect_garbage(adata):
    """A full garbage collection before a step on a large matrix. AnnData objects hold reference
    cycles, so the old matrices of a replaced AnnData (``adata = adata[:, mask].copy()``) or of a
    subset (``_inplace_subset_obs``) are freed only by the cyclic collector, which runs by object
    counts, not bytes: gigabytes can wait for it. A collection takes milliseconds; the steps
    then start from the memory actually in use."""
    from ._gpu import resident

    if adata.n_obs * adata.n_vars > 10_000_000 and resident(adata) is None:
        gc.collect()  # (not while X is on the GPU: no host matrix to free, and 30-40 ms a step at 1.3M cells)


# Steps that never read X (obsm, obsp, obs and uns only): an X resident on the GPU stays there.
_NO_X = frozenset(("umap", "leiden", "louvain", "draw_graph", "filter_rank_genes_groups", "diffmap", "dpt", "paga",
                   "dendrogram", "embedding_density", "harmony_integrate", "rank_genes_groups_df"))

# Steps with a GPU path (scurry._gpu): they bring X back themselves when a call runs on the CPU.
_GPU_STEPS = frozenset(("calculate_qc_metrics", "filter_cells", "filter_genes", "normalize_total", "log1p",
                        "highly_variable_genes", "scale", "pca"))


def check_anndata(adata, step):
    import anndata

    if not isinstance(adata, anndata.AnnData):
        raise TypeError(f"{step}: expected an AnnData, got {type(adata).__name__}")
    # X on the GPU (scurry.get.anndata_to_GPU) comes back before a step that reads it on the host;
    # neighbors and tsne read X only without obsm['X_pca'].
    if step not in _NO_X and step not in _GPU_STEPS and not (step in ("neighbors", "tsne") and "X_pca" in adata.obsm):
        from . import _gpu

        _gpu.ensure_host(adata)
    if adata.isbacked:
        raise ValueError(
            f"{step}: a backed AnnData ({adata.filename}) is not supported: scurry works on data in memory; "
            "load it with adata = adata.to_memory() or scurry.read_h5ad(path)"
        )
    collect_garbage(adata)


def actualize(adata):
    """An in-place step on a view makes the view actual first (scanpy's view_to_actual: the same slots
    as ``adata._init_as_actual(adata.copy())``), copying each matrix once and keeping the raw the
    view already holds (anndata's copy copies both again: see _actual_slots)."""
    if not adata.is_view:
        return
    slots = _actual_slots(adata._adata_ref, adata._oidx, adata._vidx, adata._raw)
    if slots is None:  # an anndata whose internals differ: its own (copying) path
        adata._init_as_actual(adata.copy())
        return
    adata._init_as_actual(**slots)
    del slots  # the view's raw refers to the parent (anndata's _RawViewHack in its varm)
    gc.collect()  # the parent, when the view held the last reference to it (see collect_garbage)


def subset_inplace(adata, obs=None, var=None):
    """``adata._inplace_subset_obs(obs)`` / ``_inplace_subset_var(var)`` (boolean masks or indices)
    with each matrix copied once: anndata's ``self[index].copy()`` subsets X and every layer, then
    copies them again while the old ones are alive (three X-sized matrices at once), and copies raw
    twice. Here: the subset of each matrix is built once (scipy's fancy indexing allocates the
    result at its final size) and swapped in; raw is subset once along obs and kept as it is (not
    copied) for a subset of genes only, where anndata keeps it unchanged too. The same slots, dtypes,
    categories and uns colours as anndata's."""
    def whole(m, n):  # a boolean mask that keeps everything (the filters' usual answer), before anndata's indexing
        return m is None or (isinstance(m, np.ndarray) and m.dtype == bool and _keeps_all(m, n))

    nothing = whole(obs, adata.n_obs) and whole(var, adata.n_vars)
    if not nothing:
        oidx, vidx = adata._normalize_indices((slice(None) if obs is None else obs, slice(None) if var is None else var))
        nothing = _keeps_all(oidx, adata.n_obs) and _keeps_all(vidx, adata.n_vars)
    if nothing:
        # Nothing removed (filter_cells on cells that all pass, at 1.3M cells 0.5 s of obs copies and
        # anndata's obs_names check): what anndata's copy would still change, its unused categories.
        for df in (adata.obs, adata.var):
            remove_unused_categories(df, df, adata.uns)
        return
    if obs is None and _subset_vars_only(adata, vidx):
        return
    raw = adata._raw
    if raw is not None and obs is not None:
        raw = raw[oidx]  # Raw.__getitem__: the rows, one copy
    slots = _actual_slots(adata, oidx, vidx, raw, share_whole=True)
    if slots is None:
        if obs is not None:
            adata._inplace_subset_obs(obs)
        if var is not None:
            adata._inplace_subset_var(var)
        return
    big = adata.X is not None or len(adata.layers) > 0 or adata._raw is not None
    adata._init_as_actual(**slots)
    del slots, raw  # a subset Raw refers to the old one (anndata's _RawViewHack in its varm)
    if big:  # (X on the GPU and no layers or raw: no host matrix to free, and 30-60 ms at 1.3M cells)
        gc.collect()


def _subset_vars_only(adata, vidx):
    """A subset of the genes only (HVG's subset=True), done on the AnnData's own slots: the var
    frame, X, layers, varm and varp subset as ``_actual_slots`` makes them, uns as anndata's copy
    leaves it, obs, obsm, obsp and raw kept as they are (anndata keeps the same values; its
    ``_init_as_actual`` would also re-check every obs name's type, ~5 ms at 1.3M cells, for a frame
    that does not change). False, nothing done, when this anndata lacks the internals used."""
    try:
        from anndata._core.aligned_mapping import AxisArrays, Layers, PairwiseArrays
    except ImportError:
        return False
    if not all(hasattr(adata, a) for a in ("_X", "_var", "_n_vars", "_varm", "_varp", "_layers", "_uns")):
        return False
    slots = _actual_slots(adata, slice(None), vidx, adata._raw, share_whole=True)
    if slots is None:
        return False
    n_vars = adata._n_vars
    adata._n_vars = len(slots["var"])  # (the new slots check their shapes against it)
    try:  # every new slot made before any is swapped in
        varm = AxisArrays(adata, 1, vals=slots["varm"])
        varp = PairwiseArrays(adata, 1, vals=slots["varp"])
        layers = Layers(adata, slots["layers"])
    except BaseException:
        adata._n_vars = n_vars
        raise
    old_X = adata._X
    adata._X, adata._var = slots["X"], slots["var"]
    adata._varm, adata._varp, adata._layers, adata._uns = varm, varp, layers, slots["uns"]
    if not adata._var.index.is_unique:
        from anndata import utils

        utils.warn_names_duplicates("var")
    del slots, layers, varm, varp
    if old_X is not None:  # the old matrices freed now, not by the cyclic collector later
        del old_X
        gc.collect()
    return True


def remove_unused_categories(df_full, df_sub, uns):
    """anndata's ``AnnData._remove_unused_categories`` (what its copy does to a subset's obs/var and
    the uns colours of their categoricals), with pandas' ``cat.remove_unused_categories`` called only
    where a category is unused (np.bincount of the codes): pandas sorts every code to find out, 0.05 s
    a 1.3M-row column (profiled on the device), on each subset that keeps the cells."""
    for k in df_full:
        if not isinstance(df_full[k].dtype, pd.CategoricalDtype):
            continue
        all_categories = df_full[k].cat.categories
        if not _every_category_used(np.asarray(df_sub[k].cat.codes), len(df_sub[k].cat.categories)):
            with pd.option_context("mode.chained_assignment", None):
                df_sub[k] = df_sub[k].cat.remove_unused_categories()
        color_key = f"{k}_colors"
        if color_key not in uns:
            continue
        color_vec = uns[color_key]
        if np.array(color_vec).ndim == 0:
            uns[color_key] = np.array(color_vec)[(None,)]  # 0-d into 1-d
        elif len(color_vec) != len(all_categories):
            del uns[color_key]  # reset colours
        else:
            idx = np.where(np.isin(all_categories, df_sub[k].cat.categories))[0]
            uns[color_key] = np.array(color_vec)[(idx,)]


def _every_category_used(codes, n_categories):
    """Whether every category's code occurs (codes -1: missing). The first 65,536 rows first: where
    they hold every category (the usual case) the rest need not be read (at 1.3M cells 0.1 ms
    instead of 3-4 ms a column); else the whole column decides."""
    def all_seen(part):
        c = part[part >= 0]
        return bool(np.bincount(c.astype(np.intp, copy=False), minlength=n_categories).all())

    if n_categories == 0:
        return True
    head = codes[:65536]
    return all_seen(head) or (len(head) < len(codes) and all_seen(codes))


def _keeps_all(idx, n):
    """Whether a normalized index (anndata's: a slice or an integer array) selects every position in order."""
    if isinstance(idx, slice):
        return range(*idx.indices(n)) == range(n)
    idx = np.asarray(idx)
    if idx.dtype == bool:
        return idx.shape == (n,) and bool(idx.all())
    return idx.shape == (n,) and bool(np.array_equal(idx, np.arange(n)))


def _actual_slots(ref, oidx, vidx, raw, share_whole=False):
    """The slots of the actual AnnData ref[oidx, vidx].copy() (ref not a view), as keyword arguments
    of ``_init_as_actual``; each matrix subset once (``anndata._core.index._subset``: a new matrix
    for index arrays and masks; numpy slices, which would share memory, are copied). obs/var lose
    their unused categories and uns the colours of those (anndata's _remove_unused_categories);
    `raw` is used as given. None when this anndata lacks the internals used. `share_whole`: an axis
    kept whole (a slice of everything) keeps its own frame and matrices, not copies (subset_inplace:
    ref is the AnnData being replaced, whose old slots nothing else holds; at 1.3M cells a gene subset
    then no longer copies obs)."""
    import copy as _copy

    try:
        from anndata._core.index import _subset
    except ImportError:
        return None
    remove_unused = remove_unused_categories
    try:
        from anndata.compat import _slice_uns_sparse_matrices
    except ImportError:  # removed from later anndata with the behaviour it kept
        def _slice_uns_sparse_matrices(uns, _oidx, _n):
            return uns

    def sub(m, idx):
        r = _subset(m, idx)
        if isinstance(r, np.ndarray) and np.shares_memory(r, m):
            r = r.copy()
        return r

    def whole(idx, n):
        return share_whole and isinstance(idx, slice) and range(*idx.indices(n)) == range(n)

    obs_whole, var_whole = whole(oidx, ref.n_obs), whole(vidx, ref.n_vars)
    def rows(df, idx):  # positions: take() makes the one copy (iloc's result would be copied again)
        return df.take(idx) if isinstance(idx, np.ndarray) and idx.dtype.kind == "i" else df.iloc[idx].copy()

    obs = ref.obs if obs_whole else rows(ref.obs, oidx)
    var = ref.var if var_whole else rows(ref.var, vidx)
    uns = _slice_uns_sparse_matrices(_copy.copy(ref._uns), oidx, ref.n_obs)
    remove_unused(ref.obs, obs, uns)  # (on ref's own frame when whole: the categories anndata's copy drops)
    remove_unused(ref.var, var, uns)
    X = None if ref.X is None else sub(ref.X, (oidx, vidx))
    return dict(X=X, obs=obs, var=var, uns=_copy.deepcopy(uns),
                obsm={k: m if obs_whole else sub(m, (oidx,)) for k, m in ref.obsm.items()},
                varm={k: sub(m, (vidx,)) for k, m in ref.varm.items()},
                obsp={k: sub(m, (oidx, oidx)) for k, m in ref.obsp.items()},
                varp={k: sub(m, (vidx, vidx)) for k, m in ref.varp.items()},
                layers={k: sub(m, (oidx, vidx)) for k, m in ref.layers.items()},
                raw=raw, dtype=None if X is None else X.dtype)


def matrix_of(adata, layer, step, use_raw=False):
    if use_raw and layer is not None:
        raise ValueError(f"{step}: use_raw and layer cannot both be given")
    if use_raw:
        if adata.raw is None:
            raise ValueError(f"{step}: use_raw=True but the AnnData has no raw")
        return adata.raw.X
    if layer is not None:
        if layer not in adata.layers:
            raise KeyError(f"{step}: layers['{layer}'] is not in the AnnData (layers: {list(adata.layers.keys())})")
        return adata.layers[layer]
    if adata.X is None:
        raise ValueError(f"{step}: the AnnData has no X")
    return adata.X


def dataset(adata, *, step, X=True, layer=None, use_raw=False, obs=(), var=(), obsm=(), obsp=(), uns=(),
            raw=False, obs_names=True):
    """A Dataset with obs/var names and the slots a step reads. `X`: put the matrix (X, the layer,
    or raw.X with `use_raw`) in the Dataset's X (or layers[layer]); `obs`/`var`: columns; `obsm`,
    `obsp`, `uns`: keys (missing ones are left out: the step reports what it needs); `raw`: raw.X and
    raw.var; `obs_names=False`: unnamed cells (their number only)."""
    ds = _scurry.Dataset()
    if obs_names:
        ds.set_obs_names(adata.obs_names)
    else:  # a step that never reads them (the GPU steps): the count only
        ds.set_obs_count(adata.n_obs)
    if use_raw:
        ds.set_var_names(adata.raw.var_names)
    else:
        ds.set_var_names(adata.var_names)
    if X:
        m = matrix_of(adata, layer, step, use_raw)
        if layer is not None:
            ds.set_layer(layer, m)
        else:
            ds.set_X(m)
    for k in obs:
        if k not in adata.obs.columns:
            raise KeyError(f"{step}: obs['{k}'] is not in the AnnData (obs columns: {list(adata.obs.columns)})")
        ds.set_obs(k, adata.obs[k])
    source_var = adata.raw.var if use_raw else adata.var
    for k in var:
        if k not in source_var.columns:
            raise KeyError(f"{step}: var['{k}'] is not in the AnnData (var columns: {list(source_var.columns)})")
        ds.set_var(k, source_var[k])
    for k in obsm:
        if k in adata.obsm:
            v = adata.obsm[k]
            ds.set_obsm(k, v.to_numpy() if isinstance(v, pd.DataFrame) else v)
    for k in obsp:
        if k in adata.obsp:
            ds.set_obsp(k, adata.obsp[k])
    for k in uns:
        if k in adata.uns:
            ds.set_uns(k, adata.uns[k])
    if raw and adata.raw is not None:
        ds.set_raw(adata.raw.X, adata.raw.var)
    return ds


def set_column(df, key, values):
    """``df[key] = values`` for a column that nothing else holds (moved out of a Dataset): a numpy
    array goes in as a Series on the frame's own index, which pandas with copy-on-write (pandas 3,
    the GPU machine's) takes without a copy; older pandas copy it once, as for the bare array. At
    1.3M cells QC's eleven columns were 22 copies, ~11 ms (bench/RESULTS.md section 64)."""
    if isinstance(values, np.ndarray) and values.ndim == 1 and len(values) == len(df):
        values = pd.Series(values, index=df.index, copy=False)
    df[key] = values


def write_back(adata, ds, *, X=False, layer=None, obs_in=(), var_in=(), uns_in=(), obsm=True, varm=True,
               obsp=True, uns=True):
    """Moves what the step wrote from `ds` into `adata`: X (or layers[layer]) when `X`, the obs/var
    columns that were not inputs, and every obsm/varm/obsp key and the uns keys that were not inputs."""
    if X:
        was = adata.layers[layer] if layer is not None else adata.X
        m = ds.take_layer(layer) if layer is not None else ds.take_X()
        if getattr(was, "format", None) == "csc" and getattr(m, "format", None) == "csr":
            m = m.tocsc()  # scanpy keeps a CSC matrix CSC (scurry's steps run on CSR)
        if layer is not None:
            adata.layers[layer] = m
        else:
            adata.X = m
    for k in ds.obs_keys():
        if k not in obs_in:
            set_column(adata.obs, k, ds.take_obs(k))  # moved out of ds, then at most pandas' one copy
    for k in ds.var_keys():
        if k not in var_in:
            set_column(adata.var, k, ds.take_var(k))
    if obsm:
        for k in ds.obsm_keys():
            adata.obsm[k] = ds.take_obsm(k)
    if varm:
        for k in ds.varm_keys():
            adata.varm[k] = ds.take_varm(k)
    if obsp:
        for k in ds.obsp_keys():
            adata.obsp[k] = ds.take_obsp(k)
    if uns:
        for k in ds.uns_keys():
            if k not in uns_in:
                adata.uns[k] = ds.get_uns(k)


def to_anndata(ds):
    """An AnnData made of a Dataset's slots (moved out of it: the matrices are not copied)."""
    import anndata

    X = ds.take_X() if ds.has_X() else None
    obs = ds.obs_df()
    var = ds.var_df()
    layers = {k: ds.take_layer(k) for k in ds.layer_keys()}
    obsm = {k: ds.take_obsm(k) for k in ds.obsm_keys()}
    varm = {k: ds.take_varm(k) for k in ds.varm_keys()}
    obsp = {k: ds.take_obsp(k) for k in ds.obsp_keys()}
    varp = {k: ds.take_varp(k) for k in ds.varp_keys()}
    uns = {k: ds.get_uns(k) for k in ds.uns_keys()}
    raw = ds.take_raw()
    a = new_anndata(X=X, obs=obs, var=var, layers=layers or None, obsm=obsm or None, varm=varm or None,
                    obsp=obsp or None, varp=varp or None, uns=uns or None)
    if raw is not None:
        rX, rvar = raw
        a.raw = new_anndata(X=rX, obs=pd.DataFrame(index=a.obs_names), var=rvar)
    return a


def new_anndata(**kw):
    """anndata.AnnData(**kw) keeping X's dtype (anndata < 0.9 converts X to float32 unless told)."""
    import anndata

    if _anndata_converts() and kw.get("X") is not None:
        kw["dtype"] = kw["X"].dtype
    return anndata.AnnData(**kw)


def _anndata_converts():
    import anndata

    major, minor = (int(x) for x in anndata.__version__.split(".")[:2])
    return (major, minor) < (0, 9)


def options(cls, **values):
    """An XxxOptions with the given fields set (None leaves optional fields unset). A value of the
    wrong type raises TypeError naming the parameter and the type it takes (not pybind11's
    overload listing)."""
    import re

    o = cls()
    for k, v in values.items():
        try:
            setattr(o, k, v)
        except TypeError as e:
            m = re.search(r"arg0: ([^)]*?)\) ->", str(e))
            want = m.group(1) if m else "another type"
            step = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__.removesuffix("Options")).lower()
            raise TypeError(f"{step}: {k}={v!r} has the wrong type "
                            f"({type(v).__name__}; it takes {want})") from None
    return o
