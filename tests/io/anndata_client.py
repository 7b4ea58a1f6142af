"""The real client: reads an h5ad written by scurry with anndata (warnings are errors, run with
`python3 -W error`) and compares every slot with the JSON sidecar of expected values written next
to it by test_h5ad's H5ad.WriteSampleForPython. Exits non-zero on the first mismatch.

usage: anndata_client.py FILE.h5ad SIDECAR.json
"""
import json
import sys
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp

warnings.simplefilter("error")
import anndata  # noqa: E402

TOL = 1e-6
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("MISMATCH:", what, file=sys.stderr)


def close(a, b, what):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ok = a.shape == b.shape and np.allclose(a, b, rtol=TOL, atol=TOL, equal_nan=True)
    check(ok, f"{what}: {a.ravel()[:5]} vs {b.ravel()[:5]}")


def check_matrix(m, exp, what):
    check(list(m.shape) == exp["shape"], f"{what}: shape {m.shape} vs {exp['shape']}")
    check(sp.issparse(m) == exp["sparse"], f"{what}: sparse={sp.issparse(m)}, expected {exp['sparse']}")
    if sp.issparse(m):
        check(sp.isspmatrix_csr(m), f"{what}: expected a csr_matrix, got {type(m)}")
        check(m.nnz == exp["nnz"], f"{what}: nnz {m.nnz} vs {exp['nnz']}")
    check(str(m.dtype) == exp["dtype"], f"{what}: dtype {m.dtype} vs {exp['dtype']}")
    x = m.astype(np.float64)
    s = x.sum()
    sq = x.multiply(x).sum() if sp.issparse(x) else (x * x).sum()
    check(abs(s - exp["sum"]) <= TOL * max(1.0, abs(exp["sum"])), f"{what}: sum {s} vs {exp['sum']}")
    check(abs(sq - exp["sumsq"]) <= TOL * max(1.0, abs(exp["sumsq"])), f"{what}: sumsq {sq} vs {exp['sumsq']}")
    row0 = x[0].toarray().ravel() if sp.issparse(x) else np.asarray(x[0]).ravel()
    close(row0[: len(exp["row0"])], exp["row0"], f"{what}: row 0")


def check_table(df, exp, what):
    check(isinstance(df, pd.DataFrame), f"{what}: not a DataFrame")
    check(list(df.index) == exp["index"], f"{what}: index differs")
    check(list(df.columns) == exp["columns"], f"{what}: columns {list(df.columns)} vs {exp['columns']}")
    for name, c in exp["cols"].items():
        if name not in df.columns:
            check(False, f"{what}/{name}: missing")
            continue
        col = df[name]
        w = f"{what}/{name}"
        kind = c["kind"]
        if kind == "numeric":
            check(str(col.dtype) == c["dtype"], f"{w}: dtype {col.dtype} vs {c['dtype']}")
            close(col.to_numpy(), c["values"], w)
        elif kind == "bool":
            check(str(col.dtype) == "bool", f"{w}: dtype {col.dtype} vs bool")
            check(list(col.to_numpy().astype(int)) == c["values"], f"{w}: values differ")
        elif kind == "string":
            check(col.dtype == object, f"{w}: dtype {col.dtype} vs object")
            check(list(col) == c["values"], f"{w}: values differ")
        else:
            check(isinstance(col.dtype, pd.CategoricalDtype), f"{w}: dtype {col.dtype} vs category")
            if isinstance(col.dtype, pd.CategoricalDtype):
                check(list(col.cat.categories) == c["categories"], f"{w}: categories differ")
                check(list(col.cat.codes.astype(int)) == c["codes"], f"{w}: codes differ")
                check(bool(col.cat.ordered) == c["ordered"], f"{w}: ordered differs")


def check_value(v, exp, what):
    t = exp["type"]
    if t == "dict":
        check(isinstance(v, dict), f"{what}: {type(v)} is not a dict")
        if isinstance(v, dict):
            check(sorted(v.keys()) == sorted(exp["items"].keys()),
                  f"{what}: keys {sorted(v.keys())} vs {sorted(exp['items'].keys())}")
            for k, e in exp["items"].items():
                if k in v:
                    check_value(v[k], e, f"{what}/{k}")
    elif t == "string":
        check(isinstance(v, str) and v == exp["value"], f"{what}: {v!r} vs {exp['value']!r}")
    elif t == "string-array":
        check(isinstance(v, np.ndarray) and list(v) == exp["value"], f"{what}: {v!r} vs {exp['value']!r}")
    elif t == "float":
        check(isinstance(v, (float, np.floating)), f"{what}: {type(v)} is not a float")
        close(v, exp["value"], what)
    elif t == "int":
        check(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)), f"{what}: {type(v)} not int")
        check(int(v) == exp["value"], f"{what}: {v} vs {exp['value']}")
    elif t == "bool":
        check(isinstance(v, (bool, np.bool_)), f"{what}: {type(v)} is not a bool")
        check(bool(v) == exp["value"], f"{what}: {v} vs {exp['value']}")
    elif t == "array":
        check(isinstance(v, np.ndarray), f"{what}: {type(v)} is not an ndarray")
        if isinstance(v, np.ndarray):
            check(list(v.shape) == exp["shape"], f"{what}: shape {v.shape} vs {exp['shape']}")
            check(str(v.dtype) == exp["dtype"], f"{what}: dtype {v.dtype} vs {exp['dtype']}")
            close(v.ravel(), exp["value"], what)
    else:
        check(False, f"{what}: unknown expected type {t}")


def main():
    path, sidecar = sys.argv[1], sys.argv[2]
    with open(sidecar) as f:
        exp = json.load(f)
    a = anndata.read_h5ad(path)
    check_matrix(a.X, exp["X"], "X")
    check_table(a.obs, exp["obs"], "obs")
    check_table(a.var, exp["var"], "var")
    for slot in ["layers", "obsm", "varm", "obsp", "varp"]:
        got = getattr(a, slot)
        check(sorted(got.keys()) == sorted(exp[slot].keys()), f"{slot}: keys {sorted(got.keys())}")
        for k, e in exp[slot].items():
            if k in got:
                check_matrix(got[k], e, f"{slot}/{k}")
    check_value(dict(a.uns), exp["uns"], "uns")
    check(a.raw is not None, "raw: missing")
    if a.raw is not None:
        check_matrix(a.raw.X, exp["raw"]["X"], "raw/X")
        check_table(a.raw.var, exp["raw"]["var"], "raw/var")
        check_matrix(a.raw.varm["stats"], exp["raw"]["varm"]["stats"], "raw/varm/stats")
    if failures:
        print(f"anndata_client: {len(failures)} mismatches", file=sys.stderr)
        return 1
    print(f"anndata_client: {path} read by anndata {anndata.__version__}: every slot matches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
