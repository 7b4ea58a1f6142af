// scurry: density of cells in an embedding, scanpy 1.9.6's `sc.tl.embedding_density(basis,
// groupby, key_added, components)`: scipy.stats.gaussian_kde of the two components (Scott's
// bandwidth n^(-1/6) times the data covariance, ddof 1) evaluated at every cell (all cells, or per
// category of groupby over that category's cells), scaled to [0, 1] by (z - min) / (max - min).
// Exact O(n^2) sums per group (as scipy), rows in fixed parallel blocks.
// Written: obs[<basis>_density(_<groupby>)] (or key_added), uns[<key>_params] = {covariate,
// components} (components 1-based except for diffmap, as scanpy writes them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "exec/context.hpp"

namespace scurry {

struct EmbeddingDensityOptions {
  std::string basis = "umap";  // obsm X_<basis>; 'fa' means draw_graph_fa
  std::string groupby;         // "" = all cells together
  std::string key_added;
  std::string components = "1,2";  // two 1-based components
};

// gaussian_kde of the points (x, y) evaluated at themselves, scaled to [0, 1].
std::vector<double> kde_density(const std::vector<double>& x, const std::vector<double>& y, int threads);

std::vector<double> embedding_density(const Context& ctx, Dataset& d, const EmbeddingDensityOptions& opt);

}  // namespace scurry
