"""The package on the GPU (issue 17 point 4): X resident on the device between the steps.

Design (docs/python.md, "The GPU"): ``scurry.get.anndata_to_GPU(adata)`` uploads X once to the
package's GPU context and attaches the device copy to the AnnData; ``adata.X`` becomes None while X
lives on the device, so that nothing reads a stale host copy, and ``scurry.get.anndata_to_CPU(adata)``
brings it back. (rapids-singlecell keeps a CuPy array in X instead; anndata 0.8, Debian's, takes no
device array in X.) With ``scurry.settings.device = "gpu"`` the first step with a GPU path uploads X
itself. The steps with a GPU path: calculate_qc_metrics, filter_cells, filter_genes, normalize_total,
log1p, highly_variable_genes (seurat, cell_ranger; one batch), scale, pca: each runs on the device
(the same entry points the CLI's GPU chain composes: src/pp/resident.hpp) and writes obs, var, obsm,
varm and uns on the host as the CPU step does; only per-cell and per-gene numbers cross. A call the
device does not take (a layer, inplace=False, a flavour or option without a GPU path) and every other
step that reads X (markers, scores, regress_out, ...) bring X back first and run on the CPU: the
result is always the CPU's, never a silent difference. neighbors, umap and leiden read obsm/obsp
(X stays on the device); with settings.device='gpu' they run on the package's GPU context.

A view of a resident AnnData (``adata[:, mask]``) gets its own device copy of the rows and columns it
shows when a GPU step makes it actual. ``adata.copy()`` of a resident AnnData has no X: bring X back
first, or use the steps' ``copy=True``, which copies on the device. A Ctrl-C during a device step is
delivered once the step and its write-back are done (a step takes well under a second).
"""
from __future__ import annotations

import signal
import threading

import numpy as np
import pandas as pd

from . import _scurry
from ._core import dataset, options, write_back

_ATTR = "_scurry_resident"
CPU = object()  # a GPU wrapper's answer: run the CPU path (X is back on the host)


class _DeferInterrupt:
    """Holds a Ctrl-C until the block ends (main thread only), then raises KeyboardInterrupt."""

    def __enter__(self):
        self.hit = False
        self.old = None
        if threading.current_thread() is threading.main_thread():
            try:
                self.old = signal.signal(signal.SIGINT, self._hold)
            except ValueError:
                self.old = None
        return self

    def _hold(self, signum, frame):
        self.hit = True

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        if self.hit and exc[0] is None:
            raise KeyboardInterrupt
        return False


def resident(adata):
    """The Resident handle of an AnnData whose X is on the GPU (None otherwise)."""
    return adata.__dict__.get(_ATTR)


def _ref_resident(adata):
    if adata.is_view:
        ref = adata._adata_ref
        return ref.__dict__.get(_ATTR) if ref is not None else None
    return resident(adata)


def wants_gpu(adata):
    """Whether a step with a GPU path takes the GPU for this AnnData: X resident (or a view of a
    resident AnnData), or settings.device == 'gpu'."""
    import anndata

    from ._settings import settings

    if not isinstance(adata, anndata.AnnData) or adata.isbacked:
        return False
    return _ref_resident(adata) is not None or settings.device == "gpu"


def _positions(idx, n):
    return np.arange(n, dtype=np.int64)[idx]


def _attach(adata, handle):
    adata.__dict__[_ATTR] = handle
    adata.X = None


def to_gpu(adata):
    """X to the GPU (once): the AnnData's own, or a view's rows and columns of its resident parent."""
    if resident(adata) is not None:
        return resident(adata)
    if adata.is_view and _ref_resident(adata) is not None:
        parent = _ref_resident(adata)
        ref = adata._adata_ref
        rows = _positions(adata._oidx, ref.n_obs)
        cols = _positions(adata._vidx, ref.n_vars)
        all_rows = len(rows) == ref.n_obs and np.array_equal(rows, np.arange(ref.n_obs))
        all_cols = len(cols) == ref.n_vars and np.array_equal(cols, np.arange(ref.n_vars))
        handle = _scurry.resident_subset(parent, None if all_rows else rows.tolist(), None if all_cols else cols.tolist())
        adata._init_as_actual(adata.copy())  # X None: obs, var, obsm, ... of the view
        _attach(adata, handle)
        return handle
    if adata.is_view:
        adata._init_as_actual(adata.copy())
    if adata.X is None:
        raise ValueError("anndata_to_GPU: the AnnData has no X")
    why = _scurry.gpu_unavailable()
    if why:
        raise RuntimeError(f"scurry on the GPU: {why}")
    handle = _scurry.resident_upload(adata.X)
    _attach(adata, handle)
    return handle


def to_cpu(adata):
    """X back to the host (adata.X), the device copy released."""
    h = resident(adata)
    if h is None:
        if adata.is_view and _ref_resident(adata) is not None:
            to_cpu(adata._adata_ref)
        return
    X = _scurry.resident_download(h)
    del adata.__dict__[_ATTR]
    adata.X = X
    h.release()


def ensure_host(adata):
    """Before a step that reads X on the host: X back from the GPU if it is there."""
    if _ref_resident(adata) is not None:
        to_cpu(adata._adata_ref if adata.is_view and resident(adata) is None else adata)


def _target(adata, copy):
    """The AnnData the step writes (a copy on the device with copy=True) and its handle."""
    if copy:
        if _ref_resident(adata) is None:  # X on the host: the copy goes to the device, the source stays
            out = adata.copy()
            return out, to_gpu(out)
        h = to_gpu(adata)
        out = adata.copy()  # X None: every other slot
        _attach(out, _scurry.resident_subset(h, None, None))
        return out, resident(out)
    return adata, to_gpu(adata)


# ----------------------------------------------------------------------------------------------
# The steps. Each returns CPU when the call must run on the CPU (X is then back on the host).


def calculate_qc_metrics(adata, *, expr_type, var_type, qc_vars, percent_top, layer, use_raw, inplace, log1p):
    if layer is not None or use_raw:
        ensure_host(adata)
        return CPU
    h = to_gpu(adata)
    opt = options(_scurry.QcOptions, qc_vars=qc_vars, percent_top=percent_top, log1p=bool(log1p), layer="",
                  expr_type=expr_type, var_type=var_type)
    ds = dataset(adata, step="calculate_qc_metrics", X=False, var=qc_vars, obs_names=False)
    _scurry.resident_check_counts(h, "calculate_qc_metrics")
    with _DeferInterrupt():
        _scurry.resident_qc(h, ds, opt)
        if not inplace:
            obs = pd.DataFrame({k: ds.get_obs(k) for k in ds.obs_keys()}, index=adata.obs_names)
            var = pd.DataFrame({k: ds.get_var(k) for k in ds.var_keys() if k not in qc_vars}, index=adata.var_names)
            return obs, var
        write_back(adata, ds, var_in=qc_vars)  # each column converted once, straight into obs (no frame between)
    return None


def _filter(adata, opt, col, inplace, copy, axis):
    """filter_cells (axis 'obs') or filter_genes ('var') on the device: the step returns its mask over
    the rows or columns, and the AnnData is subset the same way."""
    from ._core import set_column, subset_inplace

    if not inplace:
        ensure_host(adata)
        return CPU
    adata, h = _target(adata, copy)
    cells = axis == "obs"
    ds = dataset(adata, step="filter_cells" if cells else "filter_genes", X=False, obs_names=False)
    with _DeferInterrupt():
        keep = (_scurry.resident_filter_cells if cells else _scurry.resident_filter_genes)(h, ds, opt)
        vals = (ds.take_obs if cells else ds.take_var)(col)
        subset_inplace(adata, **{axis: keep})
        set_column(getattr(adata, axis), col, vals)
    return adata if copy else None


def filter_cells(adata, opt, col, inplace, copy):
    return _filter(adata, opt, col, inplace, copy, "obs")


def filter_genes(adata, opt, col, inplace, copy):
    return _filter(adata, opt, col, inplace, copy, "var")


def normalize_total(adata, opt, *, inplace, copy):
    if not inplace or opt.layer or opt.exclude_highly_expressed:
        ensure_host(adata)
        return CPU
    adata, h = _target(adata, copy)
    ds = dataset(adata, step="normalize_total", X=False, obs_names=False)
    _scurry.resident_check_counts(h, "normalize_total")
    with _DeferInterrupt():
        _scurry.resident_normalize_total(h, ds, opt)
        write_back(adata, ds)
    return adata if copy else None


def log1p(adata, *, base, layer, copy):
    if base is not None or layer is not None:
        ensure_host(adata)
        return CPU
    adata, h = _target(adata, copy)
    ds = dataset(adata, step="log1p", X=False, uns=["log1p"], obs_names=False)
    with _DeferInterrupt():
        _scurry.resident_log1p(h, ds)
        write_back(adata, ds)
    return adata if copy else None


def highly_variable_genes(adata, *, inplace, subset, batch_key, layer, flavor, opt):
    from ._core import subset_inplace

    if not inplace or batch_key is not None or layer is not None or flavor not in ("seurat", "cell_ranger"):
        ensure_host(adata)
        return CPU
    h = to_gpu(adata)
    ds = dataset(adata, step="highly_variable_genes", X=False, uns=["log1p"], obs_names=False)
    opt.subset = False
    with _DeferInterrupt():
        _scurry.resident_highly_variable_genes(h, ds, opt)
        write_back(adata, ds, uns_in=("log1p",))
        if subset:
            keep = adata.var["highly_variable"].to_numpy(dtype=bool)
            _scurry.resident_subset_vars(h, np.flatnonzero(keep).tolist())  # in place: no second X on the device
            del adata.__dict__[_ATTR]
            subset_inplace(adata, var=keep)
            _attach(adata, h)
    return None


def scale(adata, opt, *, layer, copy):
    if layer is not None:
        ensure_host(adata)
        return CPU
    adata, h = _target(adata, copy)
    ds = dataset(adata, step="scale", X=False, obs_names=False)
    with _DeferInterrupt():
        _scurry.resident_scale(h, ds, opt)
        write_back(adata, ds)
    return adata if copy else None


def pca(adata, ds, opt, *, copy):
    h = to_gpu(adata)
    with _DeferInterrupt():
        _scurry.resident_pca(h, ds, opt)
        write_back(adata, ds, var_in=["highly_variable"])  # (the mask the wrapper gave the step)
    return adata if copy else None
