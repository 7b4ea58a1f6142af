"""scurry: scanpy's API on scurry's C++ engine. Switch with one line::

    import scurry as sc      # instead of: import scanpy as sc
    adata = sc.read_h5ad("pbmc3k.h5ad")
    sc.pp.normalize_total(adata, target_sum=1e4); sc.pp.log1p(adata)

``scurry.pp``, ``scurry.tl``, ``scurry.get``, ``scurry.external`` and ``scurry.experimental`` carry scanpy 1.10's functions, parameters and
defaults, and write scanpy's slots of an ``anndata.AnnData`` in memory. The readers return AnnData
objects read by scurry's own readers. ``scurry.cnmf.cNMF``: cNMF 1.7's Python API. ``scurry.settings``: n_jobs (CPU threads), verbosity, device.
"""
from __future__ import annotations

from . import _scurry
from ._version import __version__
from . import pp, tl, get, external, experimental, cnmf
from ._settings import settings
from ._core import _empty
from ._core import to_anndata as _to_anndata
import scipy.sparse as _sp

__all__ = ["pp", "tl", "get", "external", "experimental", "cnmf", "settings", "read_h5ad", "read_10x_h5", "read_10x_mtx", "read_zarr", "__version__"]


def _path(p):
    import os

    return os.fspath(p)


def read_h5ad(filename, backed=None, *, as_sparse=(), as_sparse_fmt=_sp.csr_matrix, chunk_size=6000):
    """anndata.read_h5ad by scurry's reader: the whole file in memory (X CSR or dense; CSC becomes
    CSR), obs/var, obsm/varm/obsp/varp, layers, uns, raw."""
    if backed not in (None, False):
        raise NotImplementedError("read_h5ad: backed mode is not implemented in scurry (the data are read into memory)")
    if as_sparse_fmt is not _sp.csr_matrix:
        raise NotImplementedError("read_h5ad: as_sparse_fmt is not implemented in scurry (csr_matrix)")
    if as_sparse:
        raise NotImplementedError("read_h5ad: as_sparse is not implemented in scurry")
    return _to_anndata(_scurry.read_h5ad(_path(filename)))


def read_zarr(store):
    """anndata.read_zarr by scurry's reader (zarr v2 and v3 stores; blosc, zstd, gzip)."""
    return _to_anndata(_scurry.read_zarr(_path(store)))


def read_10x_h5(filename, *, genome=None, gex_only=True, backup_url=None):
    """sc.read_10x_h5: a Cell Ranger .h5 (v2 or v3)."""
    if backup_url is not None:
        raise NotImplementedError("read_10x_h5: backup_url is not implemented in scurry (no downloads)")
    return _to_anndata(_scurry.read_10x_h5(_path(filename), genome or "", bool(gex_only)))


def read_10x_mtx(path, *, var_names="gene_symbols", make_unique=True, cache=False, cache_compression=_empty,
                 gex_only=True, prefix=None):
    """sc.read_10x_mtx: a Cell Ranger mtx directory (v2 or v3, gzipped or not)."""
    if var_names != "gene_symbols":
        raise NotImplementedError(f"read_10x_mtx: var_names={var_names!r} is not implemented in scurry (gene_symbols)")
    if not make_unique:
        raise NotImplementedError("read_10x_mtx: make_unique=False is not implemented in scurry")
    if cache:
        raise NotImplementedError("read_10x_mtx: cache=True is not implemented in scurry")
    if prefix is not None:
        raise NotImplementedError("read_10x_mtx: prefix is not implemented in scurry")
    return _to_anndata(_scurry.read_10x_mtx(_path(path), bool(gex_only)))
