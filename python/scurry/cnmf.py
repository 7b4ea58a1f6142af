"""cNMF's Python API (dylkot/cNMF 1.7, Kotliar et al. 2019) on scurry's consensus NMF:
``from scurry.cnmf import cNMF`` instead of ``from cnmf import cNMF``.

Each method calls the C++ entry point of the matching ``scurry cnmf`` verb (nmf/cnmf_steps.hpp), over
the same run folder (OUTPUT_DIR/NAME/ and OUTPUT_DIR/NAME/cnmf_tmp/) with cNMF's file names and
formats, so a folder made here equals one made by the command line, cNMF's own Python reads it,
and scurry resumes from a folder cNMF wrote. ``device="gpu"`` (or ``scurry.settings.device``) runs
the factorisation and the consensus on a GPU (a CUDA build of scurry); the rest is the same.
"""
from __future__ import annotations

import datetime
import os
import uuid

import numpy as np
import pandas as pd

from . import _scurry

__all__ = ["cNMF"]

_PREP = _scurry.CnmfPrepareArgs()
_CONS = _scurry.CnmfConsensusArgs()


def _ks(components, what):
    if components is None:
        return []
    if isinstance(components, (int, np.integer)):
        return [int(components)]
    ks = [int(k) for k in components]
    if not ks:
        raise ValueError(f"{what}: components is empty")
    return ks


def _unsupported(method, name, value, default):
    if value is not default and value != default:
        raise NotImplementedError(f"cNMF.{method}: {name}={value!r} is not implemented in scurry (only {default!r})")


class cNMF:
    """A cNMF run folder: OUTPUT_DIR/NAME (cNMF's layout). ``name=None``: cNMF's date and random
    suffix. ``device``: "cpu" or "gpu" (None: scurry.settings.device)."""

    def __init__(self, output_dir=".", name=None, *, device=None):
        self.output_dir = output_dir
        if name is None:
            name = "%s_%s" % (datetime.datetime.now().strftime("%Y_%m_%d"), uuid.uuid4().hex[:6])
        self.name = name
        self.device = device
        self._paths = _scurry.CnmfPaths(os.fspath(output_dir), name)
        self._paths.make_dirs()

    def _device(self):
        if self.device is not None:
            if self.device not in ("cpu", "gpu"):
                raise ValueError(f"cNMF: device '{self.device}' is not 'cpu' or 'gpu'")
            return self.device
        from ._settings import settings

        return settings.device

    def prepare(self, counts_fn, components, n_iter=100, densify=False, tpm_fn=None, seed=None,
                beta_loss="frobenius", num_highvar_genes=2000, genes_file=None, alpha_usage=0.0, alpha_spectra=0.0,
                init="random", max_NMF_iter=1000):
        """TPM, over-dispersed genes, variance-scaled counts and the replicates' seeds and parameters
        (cnmf prepare). counts_fn: .h5ad, 10x .h5 / mtx directory, zarr, .df.npz or a cells x genes TSV."""
        _unsupported("prepare", "alpha_usage", float(alpha_usage), 0.0)
        _unsupported("prepare", "alpha_spectra", float(alpha_spectra), 0.0)
        if not isinstance(counts_fn, (str, os.PathLike)):
            raise TypeError(f"cNMF.prepare: counts_fn must be a path, got {type(counts_fn).__name__}")
        if num_highvar_genes is None and genes_file is None:
            raise NotImplementedError("cNMF.prepare: num_highvar_genes=None (genes by the fano threshold) is not "
                                      "implemented in scurry; give a number of genes or genes_file")
        if beta_loss not in ("frobenius", "kullback-leibler", "itakura-saito"):
            raise ValueError(f"cNMF.prepare: beta_loss '{beta_loss}' is not frobenius, kullback-leibler or itakura-saito")
        if init not in ("random", "nndsvd"):
            raise ValueError(f"cNMF.prepare: init '{init}' is not random or nndsvd")
        a = _scurry.CnmfPrepareArgs()
        a.components = _ks(components, "cNMF.prepare")
        a.n_iter = int(n_iter)
        a.seed = None if seed is None else int(seed)
        a.numgenes = int(num_highvar_genes) if num_highvar_genes is not None else _PREP.numgenes
        a.genes_file = "" if genes_file is None else os.fspath(genes_file)
        a.beta_loss = beta_loss
        a.init = init
        a.max_nmf_iter = int(max_NMF_iter)
        a.tpm_file = "" if tpm_fn is None else os.fspath(tpm_fn)
        a.densify = bool(densify)
        _scurry.cnmf_prepare(self._paths, os.fspath(counts_fn), a, self._device())

    def factorize(self, worker_i=0, total_workers=1, skip_completed_runs=False, *, gpus="all", tf32=False):
        """This worker's NMF replicates (cnmf factorize): replicate i runs on worker i % total_workers.
        scurry's own: gpus (with device "gpu": all, a count N, or ordinals "0,2"), tf32."""
        _scurry.cnmf_factorize(self._paths, int(worker_i), int(total_workers), bool(skip_completed_runs),
                               self._device(), str(gpus), bool(tf32))

    def combine(self, components=None, skip_missing_files=False):
        """The replicates' spectra merged per k (cnmf combine); components None: every prepared k."""
        _scurry.cnmf_combine(self._paths, _ks(components, "cNMF.combine"), bool(skip_missing_files))

    def k_selection_plot(self, close_fig=False):
        """Stability (silhouette) and error against k: NAME.k_selection_stats.df.npz and
        NAME.k_selection.png (drawn by scurry, without matplotlib: close_fig has nothing to close)."""
        _scurry.cnmf_k_selection(self._paths, _CONS.local_neighborhood_size, self._device())

    def consensus(self, k, density_threshold=0.5, local_neighborhood_size=0.30, show_clustering=True, build_ref=True,
                  skip_density_and_return_after_stats=False, close_clustergram_fig=False, refit_usage=True,
                  normalize_tpm_spectra=False, norm_counts=None):
        """Consensus spectra, usages, gene scores and TPM spectra of one k (cnmf consensus), with the
        clustergram (show_clustering) and the starCAT reference (build_ref)."""
        _unsupported("consensus", "skip_density_and_return_after_stats", skip_density_and_return_after_stats, False)
        _unsupported("consensus", "refit_usage", refit_usage, True)
        _unsupported("consensus", "normalize_tpm_spectra", normalize_tpm_spectra, False)
        if norm_counts is not None:
            raise NotImplementedError("cNMF.consensus: norm_counts is not implemented in scurry "
                                      "(the run folder's normalised counts are read)")
        a = _scurry.CnmfConsensusArgs()
        a.components = _ks(k, "cNMF.consensus")
        a.local_density_threshold = float(density_threshold)
        a.local_neighborhood_size = float(local_neighborhood_size)
        a.show_clustering = bool(show_clustering)
        a.build_reference = bool(build_ref)
        _scurry.cnmf_consensus(self._paths, a, self._device())

    def load_results(self, K, density_threshold, n_top_genes=100, norm_usage=True):
        """(usage, spectra_scores, spectra_tpm, top_genes) of a consensus, as cNMF returns them: usages
        cells x programs (each cell's usages summing to 1 with norm_usage), the gene scores and TPM
        spectra genes x programs, and each program's n_top_genes genes by score."""
        dt = _scurry.cnmf_dt_tag(float(density_threshold))
        p = self._paths
        for f in (p.gene_spectra_score_txt(int(K), dt), p.gene_spectra_tpm_txt(int(K), dt),
                  p.consensus_usages_txt(int(K), dt)):
            if not os.path.exists(f):
                raise FileNotFoundError(f"cNMF.load_results: {f} is missing; run consensus(k={K}, "
                                        f"density_threshold={density_threshold}) first")
        spectra_scores = pd.read_csv(p.gene_spectra_score_txt(int(K), dt), sep="\t", index_col=0).T
        spectra_tpm = pd.read_csv(p.gene_spectra_tpm_txt(int(K), dt), sep="\t", index_col=0).T
        usage = pd.read_csv(p.consensus_usages_txt(int(K), dt), sep="\t", index_col=0)
        if norm_usage:
            usage = usage.div(usage.sum(axis=1), axis=0)
        try:
            usage.columns = [int(x) for x in usage.columns]
        except ValueError:
            pass
        top = [list(spectra_scores.sort_values(by=c, ascending=False).index[:n_top_genes])
               for c in spectra_scores.columns]
        top_genes = pd.DataFrame(top, index=spectra_scores.columns).T
        return usage, spectra_scores, spectra_tpm, top_genes
