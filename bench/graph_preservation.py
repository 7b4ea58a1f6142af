#!/usr/bin/env python3
"""15-NN preservation of the graph by 2-D layouts of an h5ad (bench/RESULTS.md section 23).

For each cell: its k strongest neighbours in obsp['connectivities'] (self excluded, ties by index)
against its k nearest cells in the layout (exact, scipy's cKDTree); the mean fraction shared, over
cells with a neighbour. The same measure as scurry's graph_preservation (tl/draw_graph.hpp).
usage: graph_preservation.py FILE.h5ad [OBSM_KEY ...] (default: every 2-D obsm)
"""
import sys

import anndata as ad
import numpy as np
from scipy.spatial import cKDTree


def preservation(conn, layout, k=15):
    conn = conn.tocsr()
    tree = cKDTree(layout)
    _, nn = tree.query(layout, k=k + 1)
    tot, rows = 0.0, 0
    for i in range(conn.shape[0]):
        lo, hi = conn.indptr[i], conn.indptr[i + 1]
        idx, w = conn.indices[lo:hi], conn.data[lo:hi]
        keep = (idx != i) & (w > 0)
        idx, w = idx[keep], w[keep]
        if idx.size == 0:
            continue
        order = np.lexsort((idx, -w))[:k]
        graph = set(idx[order].tolist())
        near = [j for j in nn[i] if j != i][:k]
        tot += len(graph.intersection(near)) / len(graph)
        rows += 1
    return tot / rows


def main():
    a = ad.read_h5ad(sys.argv[1], backed="r")
    conn = a.obsp["connectivities"]
    keys = sys.argv[2:] or [k for k in a.obsm.keys() if a.obsm[k].shape[1] == 2]
    for key in keys:
        print(f"{key}: 15-NN preservation of the graph {preservation(conn, np.asarray(a.obsm[key], dtype=np.float64)):.4f}")


if __name__ == "__main__":
    main()
