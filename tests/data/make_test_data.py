#!/usr/bin/env python3
"""Makes the test suite's data files (tests/data/) from the project's real data set.

usage: python3 tests/data/make_test_data.py SOURCE_DIR [OUT_DIR]

SOURCE_DIR is the folder that holds pbmc3k_first1000.h5ad and golden/ (the pbmc3k subset and
scanpy 1.9.6's results on it; provenance in tests/data/README.md). OUT_DIR defaults to the folder
of this script. Needs h5py and numpy (Debian's python3-h5py).

  pbmc3k_first1000.h5ad                        every slot of the source, recompressed
  golden/pbmc3k_first1000.scanpy.h5ad          the slots the tests read (DATAFRAME_KEEP), compressed
  golden/pbmc3k_first1000.scanpy.qc_obs.csv.gz copied unchanged
  golden/pbmc3k_first1000.scanpy.qc_var.csv.gz copied unchanged
  golden/pbmc3k_first1000.scanpy_rgg.h5        scanpy's rank_genes_groups, score_genes, score_genes_cell_cycle (make_rgg)
  golden/pbmc3k_first1000.scanpy_embed.h5      scanpy's tsne, diffmap, paga, dendrogram, embedding_density (make_embed)

The h5ad files are copied object by object with h5py: the same groups, datasets, dtypes, shapes,
values (bit for bit) and attributes as the source; only the storage changes: every dataset of 100
or more elements is chunked (about 64 KiB for 2-D arrays, whole columns; up to 262,144 elements for
1-D ones) and deflate-compressed (gzip level 9, with the shuffle filter for integer types). The
script checks every copy against its source before it returns, and prints the sha256 of each file.
"""
import hashlib
import os
import shutil
import sys

import h5py
import numpy as np

GOLDEN = "golden/pbmc3k_first1000.scanpy.h5ad"
PBMC = "pbmc3k_first1000.h5ad"
# scanpy 1.9.6's tools on the golden file (the downstream file): copied as a plain HDF5 file,
# rgg_<method>/{groups, names, scores, pvals, pvals_adj, logfoldchanges} (uns['rgg_<method>']) and
# score_genes/{score, S_score, G2M_score, phase_codes, phase_categories, gene_list} (obs, uns).
DOWNSTREAM = "golden/pbmc3k_first1000.scanpy_downstream.h5ad"
RGG = "golden/pbmc3k_first1000.scanpy_tl.h5"
SCRUBLET = "golden/pbmc3k_first1000.scanpy1.10_scrublet.h5ad"
INTEGRATE = "golden/pbmc3k_first1000.scanpy_integrate.h5"
INTEGRATE_GENES = 100  # the first genes of the stored regress_out/combat layers that are kept
# X_tsne, X_diffmap, paga_connectivities, dendrogram_linkage, umap_density of the downstream file.
EMBED = "golden/pbmc3k_first1000.scanpy_embed.h5"
COPIES = ["golden/pbmc3k_first1000.scanpy.qc_obs.csv.gz", "golden/pbmc3k_first1000.scanpy.qc_var.csv.gz"]

# The dataframe columns of the golden file that the tests read (each dataframe's _index is always
# kept); every other slot (X, layers, obsm, varm, obsp, raw/X, uns) is kept whole.
DATAFRAME_KEEP = {
    # test_filter (n_genes), test_h5ad (the dtypes of n_genes, n_genes_by_counts), test_preprocess
    # (pct_counts_mt), test_leiden (leiden)
    "obs": ["n_genes_by_counts", "pct_counts_mt", "n_genes", "leiden"],
    # test_h5ad (mt is boolean), test_scale (mean, std)
    "var": ["mt", "mean", "std"],
    # test_filter (n_cells), test_hvg (the three flavours' results), test_scale (the seurat flags)
    "raw/var": [
        "n_cells",
        "hvg_seurat_means", "hvg_seurat_dispersions", "hvg_seurat_mean_bin", "hvg_seurat_dispersions_norm",
        "hvg_seurat_highly_variable",
        "hvg_cell_ranger_means", "hvg_cell_ranger_dispersions", "hvg_cell_ranger_mean_bin",
        "hvg_cell_ranger_dispersions_norm", "hvg_cell_ranger_highly_variable",
        "hvg_seurat_v3_means", "hvg_seurat_v3_variances", "hvg_seurat_v3_variances_norm",
        "hvg_seurat_v3_highly_variable",
    ],
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def storage(ds):
    """create_dataset keywords for a copy of `ds`: chunks and filters."""
    if ds.shape == () or ds.size < 100:
        return {}
    if ds.ndim == 1:
        chunks = (min(ds.shape[0], 262144),)
    else:
        rows = ds.shape[0]
        cols = max(1, min(ds.shape[1], 65536 // max(1, rows * ds.dtype.itemsize)))
        chunks = (rows, cols) + tuple(ds.shape[2:])
    return {"chunks": chunks, "compression": "gzip", "compression_opts": 9, "shuffle": ds.dtype.kind in "iu"}


def copy_attrs(src, dst, drop_columns=()):
    for name in src.attrs:
        value = src.attrs[name]
        if name == "column-order" and drop_columns:
            value = np.array([c for c in value if c not in drop_columns], dtype=value.dtype)
        dst.attrs.create(name, value, dtype=src.attrs.get_id(name).dtype)


def dropped(path, keep):
    """The dataframe columns under `path` (a group's name) that the copy leaves out."""
    parent, _, col = path.rpartition("/")
    return parent in keep and col != "_index" and col not in keep[parent]


def make_h5ad(src_path, out_path, keep):
    with h5py.File(src_path, "r") as src, h5py.File(out_path, "w") as out:
        copy_attrs(src, out)

        def visit(name, obj):
            if any(dropped("/".join(name.split("/")[:k]), keep) for k in range(1, name.count("/") + 2)):
                return
            if isinstance(obj, h5py.Group):
                g = out.create_group(name)
                drop = [c for c in obj.keys() if dropped(name + "/" + c, keep)]
                copy_attrs(obj, g, drop)
            else:
                d = out.create_dataset(name, shape=obj.shape, dtype=obj.dtype, **storage(obj))
                if obj.size:
                    d[()] = obj[()]
                copy_attrs(obj, d)

        src.visititems(visit)
    check_h5ad(src_path, out_path, keep)


def same_values(a, b):
    a, b = a[()], b[()]
    if isinstance(a, np.ndarray) and a.dtype.kind != "O":
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))


def check_h5ad(src_path, out_path, keep):
    """The copy holds exactly the kept objects of the source, with equal types, values and attributes."""
    with h5py.File(src_path, "r") as src, h5py.File(out_path, "r") as out:
        want, got = [], []
        src.visit(want.append)
        out.visit(got.append)
        want = [n for n in want
                if not any(dropped("/".join(n.split("/")[:k]), keep) for k in range(1, n.count("/") + 2))]
        assert want == got, f"{out_path}: objects differ from the source"
        for name in [""] + got:
            a, b = (src[name], out[name]) if name else (src, out)
            assert type(a) is type(b), name
            drop = [c for c in a.keys() if dropped(name + "/" + c, keep)] if isinstance(a, h5py.Group) else []
            assert sorted(a.attrs) == sorted(b.attrs), name
            for k in a.attrs:
                assert a.attrs.get_id(k).get_type() == b.attrs.get_id(k).get_type(), f"{name} attribute {k}"
                va, vb = a.attrs[k], b.attrs[k]
                if k == "column-order" and drop:
                    va = [c for c in va if c not in drop]
                assert np.array_equal(np.asarray(va, dtype=object), np.asarray(vb, dtype=object)), f"{name} {k}"
            if isinstance(a, h5py.Dataset):
                assert a.id.get_type() == b.id.get_type(), f"{name}: type"
                assert a.shape == b.shape, f"{name}: shape"
                assert same_values(a, b), f"{name}: values"


def make_rgg(src_path, out_path):
    """Copies uns['rgg_*'] of the downstream golden file (top 300 genes x 7 groups each) and the
    score_genes / score_genes_cell_cycle results, gzipped."""
    with h5py.File(src_path, "r") as src, h5py.File(out_path, "w") as dst:
        sg = dst.create_group("score_genes")
        for name in ["score", "S_score", "G2M_score"]:
            sg.create_dataset(name, data=src["obs"][name][()], compression="gzip", compression_opts=9)
        sg.create_dataset("phase_codes", data=src["obs/phase/codes"][()], compression="gzip", compression_opts=9)
        sg.create_dataset("phase_categories", data=src["obs/phase/categories"][()])
        sg.create_dataset("gene_list", data=src["uns/score_gene_list"][()])
        for key in sorted(src["uns"].keys()):
            if not key.startswith("rgg_"):
                continue
            g = dst.create_group(key)
            for name, d in src["uns"][key].items():
                g.create_dataset(name, data=d[()], dtype=d.dtype, compression="gzip", compression_opts=9)
    with h5py.File(src_path, "r") as src, h5py.File(out_path, "r") as dst:
        for name in ["score", "S_score", "G2M_score"]:
            assert (src["obs"][name][()] == dst["score_genes"][name][()]).all(), name
        for key in dst:
            if key == "score_genes":
                continue
            for name in dst[key]:
                a, b = src["uns"][key][name][()], dst[key][name][()]
                assert a.shape == b.shape and (a == b).all(), f"{key}/{name}: values"


def make_integrate(src_dir, out_path):
    """The batch tools' references (issue 21), gzipped: from the downstream file, the first
    INTEGRATE_GENES columns of layers['regress_out'] and layers['combat'] and obsm['X_pca_harmony'];
    obs total_counts (the QC table) for regress_out's input; the raw-gene positions of the 2,000 HVGs
    (the input matrix is raw.X of the golden h5ad at those positions); scanpy 1.10.4's Scrublet
    outputs from the scrublet file (obs doublet_score, predicted_doublet, every uns['scrublet'] entry)."""
    import csv
    import gzip

    def put(g, name, data):
        data = np.asarray(data)
        kw = dict(compression="gzip", compression_opts=9, shuffle=True) if data.ndim and data.size > 16 else {}
        g.create_dataset(name, data=data, track_times=False, **kw)

    with h5py.File(os.path.join(src_dir, DOWNSTREAM), "r") as ds, \
            h5py.File(os.path.join(src_dir, GOLDEN), "r") as gd, \
            h5py.File(os.path.join(src_dir, SCRUBLET), "r") as sc, \
            h5py.File(out_path, "w", track_order=False) as dst:
        raw_names = [x.decode() for x in gd["raw/var/_index"][()]]
        pos = {n: i for i, n in enumerate(raw_names)}
        hvg = [x.decode() for x in gd["var/_index"][()]]
        assert [x.decode() for x in ds["var/_index"][()]] == hvg[: ds["var/_index"].shape[0]]
        put(dst, "hvg_raw_index", np.array([pos[n] for n in hvg], dtype=np.int32))
        put(dst, "regress_out", ds["layers/regress_out"][:, :INTEGRATE_GENES])
        put(dst, "combat", ds["layers/combat"][:, :INTEGRATE_GENES])
        put(dst, "X_pca_harmony", ds["obsm/X_pca_harmony"][()])
        with gzip.open(os.path.join(src_dir, COPIES[0]), "rt") as f:
            rows = list(csv.DictReader(f))
        obs_names = [x.decode() for x in gd["obs/_index"][()]]
        assert [r[""] for r in rows] == obs_names
        put(dst, "total_counts", np.array([float(r["total_counts"]) for r in rows]))
        g = dst.create_group("scrublet")
        put(g, "doublet_score", sc["obs/doublet_score"][()])
        put(g, "predicted_doublet", sc["obs/predicted_doublet"][()].astype(np.uint8))
        for name in ["threshold", "doublet_scores_sim", "doublet_parents"]:
            put(g, name, sc["uns/scrublet"][name][()])
        for name, d in sc["uns/scrublet/parameters"].items():
            put(g, "parameters_" + name, d[()])
    with h5py.File(os.path.join(src_dir, DOWNSTREAM), "r") as ds, h5py.File(out_path, "r") as dst:
        assert (dst["regress_out"][()] == ds["layers/regress_out"][:, :INTEGRATE_GENES]).all()
        assert (dst["combat"][()] == ds["layers/combat"][:, :INTEGRATE_GENES]).all()
        assert (dst["X_pca_harmony"][()] == ds["obsm/X_pca_harmony"][()]).all()
def make_embed(src_path, out_path):
    """Copies scanpy's embedding and graph tools of the downstream golden file (issue 22): obsm
    X_tsne and X_diffmap, uns paga_connectivities and dendrogram_linkage, obs umap_density, as they
    are (plain HDF5 datasets of the same names, dtypes and values, gzipped)."""
    names = {"X_tsne": "obsm/X_tsne", "X_diffmap": "obsm/X_diffmap", "paga_connectivities": "uns/paga_connectivities",
             "dendrogram_linkage": "uns/dendrogram_linkage", "umap_density": "obs/umap_density"}
    with h5py.File(src_path, "r") as src, h5py.File(out_path, "w") as dst:
        for name, at in names.items():
            d = src[at]
            dst.create_dataset(name, data=d[()], dtype=d.dtype, compression="gzip", compression_opts=9)
    with h5py.File(src_path, "r") as src, h5py.File(out_path, "r") as dst:
        for name, at in names.items():
            a, b = src[at][()], dst[name][()]
            assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all(), name


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    source = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(os.path.join(out, "golden"), exist_ok=True)
    make_h5ad(os.path.join(source, PBMC), os.path.join(out, PBMC), {})
    make_h5ad(os.path.join(source, GOLDEN), os.path.join(out, GOLDEN), DATAFRAME_KEEP)
    make_rgg(os.path.join(source, DOWNSTREAM), os.path.join(out, RGG))
    make_integrate(source, os.path.join(out, INTEGRATE))
    make_embed(os.path.join(source, DOWNSTREAM), os.path.join(out, EMBED))
    for rel in COPIES:
        shutil.copyfile(os.path.join(source, rel), os.path.join(out, rel))
    for rel in [PBMC, GOLDEN] + COPIES:
        print(f"{sha256(os.path.join(out, rel))}  {rel}  (source {sha256(os.path.join(source, rel))})")
    print(f"{sha256(os.path.join(out, EMBED))}  {EMBED}  (source {DOWNSTREAM}: {sha256(os.path.join(source, DOWNSTREAM))})")
    print(f"{sha256(os.path.join(out, RGG))}  {RGG}  (source {DOWNSTREAM}: {sha256(os.path.join(source, DOWNSTREAM))})")
    print(f"{sha256(os.path.join(out, INTEGRATE))}  {INTEGRATE}  (sources {DOWNSTREAM}, {SCRUBLET}: "
          f"{sha256(os.path.join(source, SCRUBLET))})")


if __name__ == "__main__":
    main()
