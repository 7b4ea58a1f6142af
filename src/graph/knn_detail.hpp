// scurry: helpers shared by the CPU kNN searches (knn.cpp, knn_ivf.cpp); not a public interface.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/matrix.hpp"
#include "graph/knn.hpp"

namespace scurry::knn_detail {

using Cand = std::pair<double, int32_t>;  // (distance, index): lexicographic order breaks ties

// InputError unless X has rows and columns, finite values, and 1 <= k <= n.
void check_input(const DenseF& X, int64_t k, const char* where);
// Row norms in float64.
std::vector<double> row_norms(const DenseF& X);
// Exact float64 distance between rows i and j (nrm: row norms, cosine only).
double exact_distance(const DenseF& X, const std::vector<double>& nrm, KnnMetric metric, int64_t i, int64_t j);
// Writes the result for cell i into row i - row0 of `out`: self first, then the best k - 1 of
// `cands` (self excluded), re-ranked by exact float64 distance; missing ones -1 / +inf.
void finish_row(const DenseF& X, const std::vector<double>& nrm, KnnMetric metric, int64_t i,
                std::vector<Cand>& cands, Knn& out, int64_t row0 = 0);
// n x k result, every entry 0.
Knn empty_result(int64_t n, int64_t k);
// Rows scaled to unit norm (zero rows stay zero), float32.
DenseF normalized_rows(const DenseF& X, const std::vector<double>& nrm);

}  // namespace scurry::knn_detail
