#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/), small valid inputs each reader
accepts, from the repository's real test data cut down to a few cells and genes:
tests/data/pbmc3k_first1000.h5ad (pbmc3k's first 1,000 cells; see tests/data/README.md).

  /usr/bin/python3 fuzz/make_corpus.py [BUILD_DIR]

h5ad and 10x .h5 seeds are written with anndata 0.8 / h5py, mtx and zarr-metadata seeds as
'=== NAME' records (fuzz/fuzz_common.hpp unpack_tree) of directories written with scipy/gzip and
anndata 0.8 + zarr 2 (uncompressed chunks, so the mutations reach the metadata and the raw chunk
bytes). The seeds of fuzz_zarr_{blosc,zstd,gzip} are the chunks of each target's own template store
(written by scurry's zarr writer), dumped by the built target (SCURRY_FUZZ_DUMP_SEEDS); they need
BUILD_DIR (default build-fuzz), and are skipped with a message when it has no fuzz targets.
Deterministic: the same files every run (fixed seeds, no timestamps in the HDF5 object headers).
"""
import gzip, io, os, shutil, subprocess, sys, tempfile
import numpy as np, scipy.sparse as sp, h5py, anndata as ad, pandas as pd, zarr, scipy.io
from anndata._io.zarr import write_zarr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-fuzz")


def fresh(name):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def small(n_cells=12, n_genes=20):
    a = ad.read_h5ad(os.path.join(ROOT, "tests", "data", "pbmc3k_first1000.h5ad"))
    # the genes with the most counts, so that the cut-down matrix is not empty
    tot = np.asarray(a.X[:200].sum(axis=0)).ravel()
    genes = np.sort(np.argsort(-tot)[:n_genes])
    b = a[:n_cells, genes].copy()
    b.X = sp.csr_matrix(b.X, dtype=np.float32)
    b.obs = pd.DataFrame(index=b.obs_names.astype(str))
    b.var = pd.DataFrame(index=b.var_names.astype(str))
    return b


def h5_write(adata, path, **kw):
    adata.write_h5ad(path, **kw)


def pack(tree_dir, out_path):
    """Packs a directory as '=== NAME' records."""
    parts = []
    for base, dirs, files in os.walk(tree_dir):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(base, f)
            rel = os.path.relpath(p, tree_dir)
            parts.append(b"=== " + rel.encode() + b"\n" + open(p, "rb").read())
    open(out_path, "wb").write(b"\n".join(parts))


def h5ad_seeds(b):
    d = fresh("fuzz_h5ad")
    c = b.copy()
    c.obs["n_counts"] = np.asarray(c.X.sum(axis=1)).ravel().astype(np.float32)
    c.obs["group"] = pd.Categorical(["a", "b", "c"] * (c.n_obs // 3))
    c.obs["flag"] = np.arange(c.n_obs) % 2 == 0
    c.var["gene_ids"] = ["ENSG%05d" % i for i in range(c.n_vars)]
    c.obsm["X_pca"] = np.random.default_rng(0).normal(size=(c.n_obs, 3)).astype(np.float32)
    c.uns["params"] = {"k": 3, "name": "x"}
    c.layers["counts"] = c.X.copy()
    h5_write(c, os.path.join(d, "csr_full.h5ad"))
    h5_write(b, os.path.join(d, "csr_plain.h5ad"))
    e = b.copy(); e.X = b.X.toarray(); h5_write(e, os.path.join(d, "dense.h5ad"))
    f = b.copy(); f.X = sp.csc_matrix(b.X); h5_write(f, os.path.join(d, "csc.h5ad"))
    g = b.copy(); g.raw = b; h5_write(g, os.path.join(d, "raw.h5ad"))
    h5_write(b, os.path.join(d, "csr_gzip.h5ad"), compression="gzip")


def tenx_h5_seeds(b):
    d = fresh("fuzz_tenx_h5")
    csc = sp.csc_matrix(b.X.T.astype(np.int32))  # genes x cells, CSC over cells: 10x's layout
    bc = np.array(b.obs_names, dtype="S")
    ids = np.array(["ENSG%05d" % i for i in range(b.n_vars)], dtype="S")
    names = np.array(b.var_names, dtype="S")
    with h5py.File(os.path.join(d, "v3.h5"), "w") as f:
        m = f.create_group("matrix")
        m["data"], m["indices"], m["indptr"] = csc.data, csc.indices.astype(np.int64), csc.indptr.astype(np.int64)
        m["shape"] = np.array(csc.shape, dtype=np.int32)
        m["barcodes"] = bc
        ft = m.create_group("features")
        ft["id"], ft["name"] = ids, names
        ft["feature_type"] = np.array(["Gene Expression"] * (b.n_vars - 2) + ["Antibody Capture"] * 2, dtype="S")
        ft["genome"] = np.array(["GRCh38"] * b.n_vars, dtype="S")
    with h5py.File(os.path.join(d, "v2.h5"), "w") as f:
        g = f.create_group("hg19")
        g["data"], g["indices"], g["indptr"] = csc.data, csc.indices, csc.indptr
        g["shape"] = np.array(csc.shape, dtype=np.int32)
        g["barcodes"], g["genes"], g["gene_names"] = bc, ids, names
    with h5py.File(os.path.join(d, "v3_vlen.h5"), "w") as f:  # variable-length strings (global heap)
        m = f.create_group("matrix")
        m["data"], m["indices"], m["indptr"] = csc.data, csc.indices, csc.indptr
        m["shape"] = np.array(csc.shape, dtype=np.int64)
        s = h5py.string_dtype()
        m.create_dataset("barcodes", data=list(b.obs_names), dtype=s)
        ft = m.create_group("features")
        ft.create_dataset("id", data=[x.decode() for x in ids], dtype=s)
        ft.create_dataset("name", data=list(b.var_names), dtype=s)


def mtx_seeds(b):
    d = fresh("fuzz_tenx_mtx")
    with tempfile.TemporaryDirectory() as t:
        for variant in ("v3_gz", "v3", "v2"):
            v = os.path.join(t, variant); os.makedirs(v)
            buf = io.BytesIO()
            scipy.io.mmwrite(buf, sp.coo_matrix(b.X.T.astype(np.int32)), field="integer")
            mtx = buf.getvalue()
            bcs = "".join(x + "\n" for x in b.obs_names).encode()
            feats = "".join("ENSG%05d\t%s\tGene Expression\n" % (i, g) for i, g in enumerate(b.var_names)).encode()
            if variant == "v3_gz":
                for name, data in (("matrix.mtx.gz", mtx), ("barcodes.tsv.gz", bcs), ("features.tsv.gz", feats)):
                    open(os.path.join(v, name), "wb").write(gzip.compress(data, mtime=0))
            elif variant == "v3":
                for name, data in (("matrix.mtx", mtx), ("barcodes.tsv", bcs), ("features.tsv", feats)):
                    open(os.path.join(v, name), "wb").write(data)
            else:
                genes = "".join("ENSG%05d\t%s\n" % (i, g) for i, g in enumerate(b.var_names)).encode()
                for name, data in (("matrix.mtx", mtx), ("barcodes.tsv", bcs), ("genes.tsv", genes)):
                    open(os.path.join(v, name), "wb").write(data)
            pack(v, os.path.join(d, variant))


def zarr_meta_seeds(b):
    d = fresh("fuzz_zarr_meta")
    with tempfile.TemporaryDirectory() as t:
        c = b.copy()
        c.obs["n_counts"] = np.asarray(c.X.sum(axis=1)).ravel().astype(np.float32)
        c.obs["group"] = pd.Categorical(["a", "b", "c"] * (c.n_obs // 3))
        c.obsm["X_pca"] = np.random.default_rng(0).normal(size=(c.n_obs, 3)).astype(np.float32)
        variants = {"csr": c, "dense": None, "csc": None}
        e = b.copy(); e.X = b.X.toarray(); variants["dense"] = e
        f = b.copy(); f.X = sp.csc_matrix(b.X); variants["csc"] = f
        for name, a in variants.items():
            p = os.path.join(t, name + ".zarr")
            write_zarr(p, a, compressor=None)
            pack(p, os.path.join(d, name))


def chunk_seeds():
    for short in ("blosc", "zstd", "gzip"):
        exe = os.path.join(BUILD, "fuzz", "fuzz_zarr_" + short)
        if not os.path.exists(exe):
            print("make_corpus: %s not built; its seeds left as they are" % exe)
            continue
        d = fresh("fuzz_zarr_" + short)
        env = dict(os.environ, SCURRY_FUZZ_DUMP_SEEDS=d, ASAN_OPTIONS="detect_leaks=0")
        subprocess.run([exe], env=env, check=True, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    b = small()
    h5ad_seeds(b)
    tenx_h5_seeds(b)
    mtx_seeds(b)
    zarr_meta_seeds(b)
    chunk_seeds()
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    print("make_corpus: %d bytes in %s" % (total, OUT))
