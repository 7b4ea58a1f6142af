"""The real zarr client, two ways (used by test_zarr_client.sh):

  zarr_client.py make OUTDIR SEED
      Writes a random AnnData with anndata (zarr-python 2) as OUTDIR/py_anndata.zarr and the same
      AnnData as OUTDIR/py.h5ad, plus OUTDIR/py_variants.zarr: a copy whose arrays are re-encoded
      with zarr directly in every codec and layout scurry reads (zstd, gzip, zlib, blosc with
      lz4/zstd/zlib/blosclz and no/byte/bit shuffle, no compressor, "/" dimension separator,
      big-endian dtypes, small chunks, partly missing chunks = fill value).
  zarr_client.py check STORE SIDECAR.json
      Reads a store written by scurry with anndata.read_zarr (run with `python3 -W error`) and
      compares every slot with the JSON sidecar (the checks of anndata_client.py).
"""
import os
import sys
import warnings

import numpy as np


def make(outdir, seed):
    import anndata
    import numcodecs
    import pandas as pd
    import scipy.sparse as sp
    import zarr

    rng = np.random.default_rng(seed)
    n, g = 157, 43
    X = sp.random(n, g, density=0.2, format="csr", dtype=np.float32, random_state=seed)
    X.data = np.round(X.data * 50).astype(np.float32) + 1
    obs = pd.DataFrame(
        {
            "cluster": pd.Categorical(rng.choice(["T cell", "B cell", "NK é"], n)),
            "level": pd.Categorical(rng.choice(["lo", "hi"], n), categories=["lo", "hi"], ordered=True),
            "label": [f"w{rng.integers(1000)}ü" for _ in range(n)],
            "flag": rng.random(n) < 0.3,
            "n_genes": rng.integers(0, 10000, n).astype(np.int64),
            "n_i32": rng.integers(-500, 500, n).astype(np.int32),
            "score": rng.normal(size=n).astype(np.float32),
            "score64": rng.normal(size=n),
        },
        index=[f"cell_{i}_Ж" for i in range(n)],
    )
    var = pd.DataFrame(
        {"gene_ids": [f"ENSG{i:05d}" for i in range(g)], "highly_variable": rng.random(g) < 0.5},
        index=[f"gene{i}" for i in range(g)],
    )
    a = anndata.AnnData(X, obs=obs, var=var)
    a.layers["counts"] = X.copy().astype(np.float64)
    a.layers["dense"] = rng.normal(size=(n, g)).astype(np.float32)
    a.obsm["X_pca"] = rng.normal(size=(n, 7)).astype(np.float32)
    a.obsm["X_csr"] = sp.random(n, 5, density=0.3, format="csr", dtype=np.float64, random_state=seed + 1)
    a.varm["PCs"] = rng.normal(size=(g, 7))
    a.obsp["distances"] = sp.random(n, n, density=0.05, format="csr", dtype=np.float64, random_state=seed + 2)
    a.uns["title"] = "hello é"
    a.uns["n"] = 42
    a.uns["x"] = 2.5
    a.uns["on"] = True
    a.uns["arr"] = np.arange(6, dtype=np.int64).reshape(2, 3)
    a.uns["colors"] = np.array(["#1f77b4", "#ff7f0e"], dtype=object)
    a.uns["params"] = {"method": "umap", "k": 15, "deeper": {"r": 0.5}}
    a.raw = a[:, :30].copy()
    os.makedirs(outdir, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata 0.8 + zarr 2.13 warn about 'maxshape'
        a.write_zarr(os.path.join(outdir, "py_anndata.zarr"))
        a.write_h5ad(os.path.join(outdir, "py.h5ad"))

    # The variants: every array re-encoded, cycling through codecs and layouts.
    src = zarr.open_group(os.path.join(outdir, "py_anndata.zarr"), mode="r")
    dst_path = os.path.join(outdir, "py_variants.zarr")
    zarr.copy_store(src.store, zarr.DirectoryStore(dst_path))
    Blosc = numcodecs.Blosc
    compressors = [
        numcodecs.Zstd(level=3),
        numcodecs.GZip(level=6),
        numcodecs.Zlib(level=4),
        Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE),
        Blosc(cname="zlib", clevel=4, shuffle=Blosc.NOSHUFFLE),
        Blosc(cname="blosclz", clevel=9, shuffle=Blosc.SHUFFLE),
        Blosc(cname="lz4", clevel=5, shuffle=Blosc.AUTOSHUFFLE),
        None,
    ]
    arrays = []
    src.visititems(lambda name, obj: arrays.append(name) if isinstance(obj, zarr.Array) else None)
    for i, name in enumerate(sorted(arrays)):
        arr = src[name]
        data = arr[...]
        attrs = dict(arr.attrs)
        kw = {"compressor": compressors[i % len(compressors)]}
        if data.ndim >= 1 and data.shape[0] > 1:
            kw["chunks"] = (max(1, data.shape[0] // 5 + (i % 3)),) + data.shape[1:]
        if data.ndim == 2 and data.shape[1] > 3:
            kw["chunks"] = (kw["chunks"][0], max(1, data.shape[1] // 2))
        if i % 2 == 1 and data.ndim >= 1:
            kw["dimension_separator"] = "/"
        if data.dtype.kind == "O":
            kw["object_codec"] = numcodecs.VLenUTF8()
        elif data.dtype.kind in "fiu" and data.dtype.itemsize > 1 and i % 4 == 3:
            data = data.astype(data.dtype.newbyteorder(">"))
        z = zarr.open_array(
            os.path.join(dst_path, name), mode="w", shape=data.shape, dtype=data.dtype, fill_value=0
            if data.dtype.kind != "O" else None, **kw
        )
        z[...] = data
        z.attrs.update(attrs)
    # Missing chunks read as the fill value: drop the all-zero chunks of a dense layer.
    dense = zarr.open_array(os.path.join(dst_path, "layers/dense"), mode="r+")
    dense[: dense.chunks[0], :] = 0  # writes zero chunks...
    a.layers["dense"][: dense.chunks[0], :] = 0
    for f in os.listdir(os.path.join(dst_path, "layers/dense")):
        if f.startswith("0.") or f.startswith("0/") or f == "0":
            p = os.path.join(dst_path, "layers/dense", f)
            (os.remove if os.path.isfile(p) else __import__("shutil").rmtree)(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.write_h5ad(os.path.join(outdir, "py_variants.h5ad"))
    print(f"zarr_client: wrote {outdir}/py_anndata.zarr, py_variants.zarr ({len(arrays)} arrays re-encoded)")
    return 0


def check(store, sidecar):
    import json

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import anndata
    import anndata_client as c  # the same checks as for h5ad

    with open(sidecar) as f:
        exp = json.load(f)
    a = anndata.read_zarr(store)
    c.check_matrix(a.X, exp["X"], "X")
    c.check_table(a.obs, exp["obs"], "obs")
    c.check_table(a.var, exp["var"], "var")
    for slot in ["layers", "obsm", "varm", "obsp", "varp"]:
        got = getattr(a, slot)
        c.check(sorted(got.keys()) == sorted(exp[slot].keys()), f"{slot}: keys {sorted(got.keys())}")
        for k, e in exp[slot].items():
            if k in got:
                c.check_matrix(got[k], e, f"{slot}/{k}")
    c.check_value(dict(a.uns), exp["uns"], "uns")
    c.check(a.raw is not None, "raw: missing")
    if a.raw is not None:
        c.check_matrix(a.raw.X, exp["raw"]["X"], "raw/X")
        c.check_table(a.raw.var, exp["raw"]["var"], "raw/var")
        c.check_matrix(a.raw.varm["stats"], exp["raw"]["varm"]["stats"], "raw/varm/stats")
    if c.failures:
        print(f"zarr_client: {store}: {len(c.failures)} mismatches", file=sys.stderr)
        return 1
    print(f"zarr_client: {store} read by anndata {anndata.__version__}: every slot matches")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make":
        sys.exit(make(sys.argv[2], int(sys.argv[3])))
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
