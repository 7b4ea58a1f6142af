// scurry: the weighted kNN graph of scanpy's `sc.pp.neighbors(method='umap')`: umap-learn 0.5.3's
// fuzzy_simplicial_set on a kNN result (smooth_knn_dist, compute_membership_strengths, fuzzy
// union), and scanpy's distances matrix.
//
// Threading: the functions taking a Context split the rows into fixed blocks (parallel_for over
// ctx.threads()); every value is computed by the same float64/float32 operations as the serial
// reference below, so the results are bit-identical for any thread count and to the reference. The
// overloads without a Context run on one thread. The GPU version is connectivities_gpu.hpp's
// fuzzy_simplicial_set_gpu.
//
// Input: a Knn with neighbour indices in [-1, n) (-1 = missing, distance ignored when not finite);
// other indices are an InputError. A neighbour listed twice in a row contributes the sum of its
// memberships (umap builds a COO matrix, which scipy sums), in column order of the kNN row.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
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
SmoothKnn smooth_knn_dist(const Context& ctx, const Knn& knn, const ConnectivitiesOptions& opt = {});
SmoothKnn smooth_knn_dist(const Knn& knn, const ConnectivitiesOptions& opt = {});

// obsp['connectivities']: n x n symmetric float32 CSR, sorted column indices, no explicit zeros.
// Membership exp(-(d - rho) / sigma) (1 when d <= rho or sigma == 0; 0 for the cell itself and for
// missing neighbours, index -1), then A + A^T - A∘A^T (set_op_mix_ratio = 1).
// Rows of A are built in parallel, A^T by a two-pass counting sort on the columns (buckets of
// columns, then columns within a bucket; no atomics, each row of A^T sorted by source row), then A
// and A^T merged row by row; ~28 B per kNN entry of scratch at the peak besides the result.
CsrF fuzzy_simplicial_set(const Context& ctx, const Knn& knn, const ConnectivitiesOptions& opt = {});
CsrF fuzzy_simplicial_set(const Knn& knn, const ConnectivitiesOptions& opt = {});

// The straightforward serial implementation (a vector per row, scurry's transpose, a sorted merge):
// the oracle the threaded and GPU versions are tested against. Same results, several times slower.
SmoothKnn smooth_knn_dist_reference(const Knn& knn, const ConnectivitiesOptions& opt = {});
CsrF fuzzy_simplicial_set_reference(const Knn& knn, const ConnectivitiesOptions& opt = {});

// obsp['distances']: n x n CSR of the kNN distances without the cell itself and without zero
// distances (scanpy eliminates zeros: exact duplicates of a cell vanish), sorted column indices (a
// neighbour listed twice keeps both entries, in kNN order).
CsrF knn_distance_matrix(const Context& ctx, const Knn& knn);
CsrF knn_distance_matrix(const Knn& knn);

// The inverse, for graphs read from a file: a Knn with the cell itself prepended (distance 0) to the
// stored neighbours of each row sorted by (distance, index). Every row must hold exactly k - 1
// entries (InputError naming `where` otherwise).
Knn knn_from_distance_matrix(const CsrF& distances, int64_t k, const std::string& where);

}  // namespace scurry
