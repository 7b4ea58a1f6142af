"""Compares two h5ad files slot by slot (X, obs, var, layers, obsm, varm, obsp, raw, uns): prints
"identical" and exits 0, or lists the slots that differ and exits 1.
usage: compare_h5ad.py A.h5ad B.h5ad"""
import sys, numpy as np, anndata, scipy.sparse as sp
a, b = anndata.read_h5ad(sys.argv[1]), anndata.read_h5ad(sys.argv[2])
bad = []
def same(x, y, what):
    if sp.issparse(x) != sp.issparse(y): bad.append(what + ": sparse vs dense"); return
    if sp.issparse(x):
        x, y = x.tocsr(), y.tocsr()
        if x.shape != y.shape or (x != y).nnz: bad.append(what)
        return
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=x.dtype.kind == 'f'): bad.append(what)
def same_df(x, y, what):
    if list(x.columns) != list(y.columns): bad.append(f"{what} columns {list(x.columns)} vs {list(y.columns)}"); return
    if list(x.index) != list(y.index): bad.append(what + " index")
    for c in x.columns:
        u, v = x[c], y[c]
        if str(u.dtype) != str(v.dtype) or not (u.astype(str) == v.astype(str)).all(): bad.append(f"{what}[{c}]")
same(a.X, b.X, "X")
same_df(a.obs, b.obs, "obs"); same_df(a.var, b.var, "var")
for slot in ("layers", "obsm", "varm", "obsp"):
    ka, kb = set(getattr(a, slot).keys()), set(getattr(b, slot).keys())
    if ka != kb: bad.append(f"{slot} keys {sorted(ka)} vs {sorted(kb)}")
    for k in ka & kb: same(getattr(a, slot)[k], getattr(b, slot)[k], f"{slot}[{k}]")
if (a.raw is None) != (b.raw is None): bad.append("raw")
elif a.raw is not None:
    same(a.raw.X, b.raw.X, "raw.X"); same_df(a.raw.var, b.raw.var, "raw.var")
# uns['scurry'] is run's record of itself (command, version, filters: the report's), not a step's result
ua, ub = set(a.uns.keys()) - {"scurry"}, set(b.uns.keys()) - {"scurry"}
if ua != ub: bad.append(f"uns keys {sorted(ua)} vs {sorted(ub)}")
def same_uns(x, y, what):
    if isinstance(x, dict):
        if not isinstance(y, dict) or set(x) != set(y): bad.append(f"{what} keys"); return
        for k in x: same_uns(x[k], y[k], f"{what}/{k}")
    elif hasattr(x, "columns"): same_df(x, y, what)
    elif isinstance(x, np.ndarray) and x.dtype.names:
        for n in x.dtype.names:
            u, v = np.asarray(x[n]), np.asarray(y[n])
            if not np.array_equal(u, v, equal_nan=u.dtype.kind == 'f'): bad.append(f"{what}[{n}]")
    elif isinstance(x, np.ndarray): same(x, y, what)
    elif x != y and not (x != x and y != y): bad.append(f"{what}: {x!r} vs {y!r}")
for k in ua & ub: same_uns(a.uns[k], b.uns[k], f"uns/{k}")
print("\n".join(bad) if bad else "identical")
sys.exit(1 if bad else 0)
