// scurry: k-means and the silhouette score as sklearn computes them for cNMF's consensus
// (KMeans(n_clusters=k, n_init=10, random_state=1), algorithm 'lloyd'; silhouette_score, euclidean).
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct KMeansOptions {
  int n_init = 10;      // sklearn's n_init (cNMF passes 10); the run of least inertia wins
  int max_iter = 300;   // sklearn's default
  double tol = 1e-4;    // relative: the centre shift limit is tol * mean over columns of var(X)
  uint64_t seed = 1;    // cNMF's random_state=1 (our own stream, so labels differ from sklearn's)
};

struct KMeansResult {
  std::vector<int> labels;  // per point, 0-based
  DenseD centers;           // k x d
  double inertia = 0;       // sum of squared distances to the assigned centres
};

// Greedy k-means++ seeding (2 + log(k) local trials, as sklearn) and Lloyd iterations (stop when the
// labels repeat or the total squared centre shift <= tol'); empty clusters get the points farthest
// from their centres. Throws InputError when k is not in [1, n_points].
KMeansResult kmeans(const Context& ctx, const DenseD& X, int k, const KMeansOptions& opt = {});

// Mean silhouette coefficient (euclidean): s = (b - a) / max(a, b), 0 for points alone in their
// cluster. Distances are computed in row chunks (no n x n matrix). Needs 2 <= clusters <= n - 1.
double silhouette_score(const Context& ctx, const DenseD& X, const std::vector<int>& labels);

// Euclidean distances from rows [r0, r1) of X to all rows, into out ((r1 - r0) x n), by the Gram
// trick as sklearn (sqrt(max(|x|^2 - 2 x.y + |y|^2, 0)), exact 0 on the diagonal).
void euclidean_rows(const DenseD& X, const std::vector<double>& sqnorm, int64_t r0, int64_t r1, std::vector<double>& out);

}  // namespace scurry
