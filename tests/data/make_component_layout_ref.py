"""The reference for tests/graph/test_umap.cpp's Umap.ComponentLayoutAsUmapLearns: umap-learn 0.5's
component_layout (umap/spectral.py), i.e. sklearn's SpectralEmbedding of the affinities exp(-d^2)
between the components' centroids, divided by its largest entry, on seeded centroids.

Needs python3-numpy, python3-scipy and python3-sklearn (Debian; sklearn 1.2.1 made the file). The
centroids are given here as the data itself (one point per component), as component_layout's
centroids of one-point components. Writes golden/umap_component_layout.json."""
import json
import os

import numpy as np
from sklearn.manifold import SpectralEmbedding
from sklearn.metrics import pairwise_distances

cases = []
rng = np.random.default_rng(20261207)
for nc, d, dim in ((7, 3, 2), (9, 5, 3), (12, 4, 2)):
    centroids = rng.uniform(0.0, 1.5, size=(nc, d))
    affinity = np.exp(-(pairwise_distances(centroids) ** 2))
    emb = SpectralEmbedding(n_components=dim, affinity="precomputed", random_state=0).fit_transform(affinity)
    emb /= emb.max()
    cases.append({"dim": dim, "centroids": centroids.tolist(), "embedding": emb.tolist()})
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "umap_component_layout.json")
with open(out, "w") as f:
    json.dump({"made_by": "make_component_layout_ref.py", "cases": cases}, f, indent=1)
print(out)
