"""scanpy.experimental's functions that scurry implements: ``scurry.experimental.pp.highly_variable_genes``
(flavor 'pearson_residuals', Lause et al. 2021: analytic Pearson residuals of a negative binomial
offset model; scanpy 1.10's signature), the C++ step of ``scurry highly-variable-genes --flavor
pearson_residuals``. ``import scurry.experimental`` as with scanpy."""
from __future__ import annotations

import sys
import types

from . import _scurry
from . import pp as _pp

__all__ = ["pp"]

_HVG = _scurry.HvgOptions()


def highly_variable_genes(adata, *, theta=_HVG.theta, clip=None, n_top_genes=None, batch_key=None, chunksize=1000,
                          flavor="pearson_residuals", check_values=_HVG.check_values, layer=None, subset=_HVG.subset,
                          inplace=True):
    """sc.experimental.pp.highly_variable_genes: genes ranked by the variance of their analytic Pearson
    residuals on the counts (X or `layer`), clipped to [-clip, clip] (default sqrt(n_cells)):
    var['highly_variable'], 'highly_variable_rank', 'means', 'variances', 'residual_variances';
    ``inplace=False`` returns them as a DataFrame. chunksize is scanpy's memory chunking: it does
    not change the results, and scurry's step does not chunk by genes."""
    if flavor != "pearson_residuals":
        raise ValueError(f"highly_variable_genes: flavor '{flavor}' is not 'pearson_residuals' "
                         "(the others: scurry.pp.highly_variable_genes)")
    if n_top_genes is None:
        raise ValueError("highly_variable_genes: pearson_residuals needs n_top_genes")
    if int(chunksize) <= 0:
        raise ValueError(f"highly_variable_genes: chunksize={chunksize} must be positive")
    return _pp._hvg(adata, layer=layer, n_top_genes=int(n_top_genes), theta=float(theta),
                    clip=None if clip is None else float(clip), flavor=flavor, subset=subset, inplace=inplace,
                    batch_key=batch_key, check_values=bool(check_values))


pp = types.ModuleType(__name__ + ".pp", "scanpy.experimental.pp's functions in scurry: highly_variable_genes")
pp.highly_variable_genes = highly_variable_genes
pp.__all__ = ["highly_variable_genes"]
sys.modules[pp.__name__] = pp
