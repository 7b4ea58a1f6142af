// scurry: helpers shared by the CPU kNN searches (knn.cpp, knn_ivf.cpp); not a public interface.
#pragma once
#include <algorithm>
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
// Offers candidate c to h, a max-heap of at most n_cand (score, index) pairs; keeps `worst` (the
// heap's top once full, +inf before) for the callers' cheap pre-check. Returns whether c went in.
inline bool offer(std::vector<std::pair<float, int32_t>>& h, int64_t n_cand, const std::pair<float, int32_t>& c,
                  float& worst) {
  if (static_cast<int64_t>(h.size()) < n_cand) {
    h.push_back(c);
    std::push_heap(h.begin(), h.end());
  } else if (c < h.front()) {
    std::pop_heap(h.begin(), h.end());
    h.back() = c;
    std::push_heap(h.begin(), h.end());
  } else {
    return false;
  }
  if (static_cast<int64_t>(h.size()) == n_cand) worst = h.front().first;
  return true;
}
// Rows scaled to unit norm (zero rows stay zero), float32.
DenseF normalized_rows(const DenseF& X, const std::vector<double>& nrm);

}  // namespace scurry::knn_detail
