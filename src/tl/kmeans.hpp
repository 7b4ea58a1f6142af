// scurry: k-means clusters of cells, rapids-singlecell's `tl.kmeans` semantics (sklearn-like
// KMeans on a representation: n_clusters 8, X_pca with n_pcs 50, random_state 0): greedy
// k-means++ seeding and Lloyd iterations (nmf/kmeans.hpp), the best of n_init runs. Labels are
// renumbered by decreasing cluster size (ties by first cell), written as obs[key_added]
// (categorical "0", "1", ...). Our own random stream: labels equal sklearn's up to the seeds' luck.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "exec/context.hpp"

namespace scurry {

struct KmeansClusterOptions {
  int n_clusters = 8;
  std::string use_rep;            // "" = X_pca
  std::optional<int64_t> n_pcs = 50;  // clipped to the representation's columns
  uint64_t random_state = 0;
  int n_init = 1;
  int max_iter = 300;
  double tol = 1e-4;
  std::string key_added = "kmeans";
};

struct KmeansClusterResult {
  std::vector<int32_t> labels;
  double inertia = 0;
};

KmeansClusterResult kmeans_cluster(const Context& ctx, Dataset& d, const KmeansClusterOptions& opt);

}  // namespace scurry
