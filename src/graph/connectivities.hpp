// scurry: the weighted kNN graph of scanpy's `sc.pp.neighbors(method='umap')`: umap-learn 0.5.3's
// fuzzy_simplicial_set on a kNN result (smooth_knn_dist, compute_membership_strengths, fuzzy
// union), and scanpy's distances matrix.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "graph/knn.hpp"

namespace scurry {

struct ConnectivitiesOptions {
  double local_connectivity = 1.0;  // umap's local_connectivity (neighbours assumed fully connected)
  double bandwidth = 1.0;           // umap's bandwidth (target = log2(k) * bandwidth)
  double set_op_mix_ratio = 1.0;    // 1 = fuzzy union A + A^T - A∘A^T; 0 = intersection A∘A^T
  int n_iter = 64;                  // binary-search iterations for sigma
};

// umap's smooth_knn_dist: per cell, rho (distance to the nearest non-zero neighbour, interpolated
// by local_connectivity) and sigma (binary search, tolerance 1e-5, so that
// sum_{j>=1} exp(-max(0, d_j - rho) / sigma) = log2(k) * bandwidth; floored at 1e-3 times the mean
// distance of the row, or of all rows when rho = 0). Column 0 of each row (the cell itself) is
// skipped in the sum, as umap does. Computed in float64, results rounded to float32 as umap stores
// them.
struct SmoothKnn {
  std::vector<float> sigma, rho;
};
SmoothKnn smooth_knn_dist(const Knn& knn, const ConnectivitiesOptions& opt = {});

// obsp['connectivities']: n x n symmetric float32 CSR, sorted column indices, no explicit zeros.
// Membership exp(-(d - rho) / sigma) (1 when d <= rho or sigma == 0; 0 for the cell itself and for
// missing neighbours, index -1), then A + A^T - A∘A^T (set_op_mix_ratio = 1).
CsrF fuzzy_simplicial_set(const Knn& knn, const ConnectivitiesOptions& opt = {});

// obsp['distances']: n x n CSR of the kNN distances without the cell itself and without zero
// distances (scanpy eliminates zeros: exact duplicates of a cell vanish), sorted column indices.
CsrF knn_distance_matrix(const Knn& knn);

// The inverse, for graphs read from a file: a Knn with the cell itself prepended (distance 0) to the
// stored neighbours of each row sorted by (distance, index). Every row must hold exactly k - 1
// entries (InputError naming `where` otherwise).
Knn knn_from_distance_matrix(const CsrF& distances, int64_t k, const std::string& where);

}  // namespace scurry
