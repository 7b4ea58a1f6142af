// scurry: helpers shared by the CPU kNN searches (knn.cpp, knn_ivf.cpp); not a public interface.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
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
// The score a candidate must not exceed to enter h, a max-heap of at most n_cand pairs: its top once
// full, +inf before.
inline float heap_worst(const std::vector<std::pair<float, int32_t>>& h, int64_t n_cand) {
  return static_cast<int64_t>(h.size()) < n_cand ? std::numeric_limits<float>::infinity() : h.front().first;
}
// Offers candidate c to h, a max-heap of at most n_cand (score, index) pairs; keeps `worst` (the
// heap's top once full, +inf before) for the callers' cheap pre-check. Returns whether c went in.
inline bool offer(std::vector<std::pair<float, int32_t>>& h, int64_t n_cand, const std::pair<float, int32_t>& c,
                  float& worst) {
  if (static_cast<int64_t>(h.size()) < n_cand) {
    h.push_back(c);
    std::push_heap(h.begin(), h.end());
  } else if (c < h.front()) {
    // c replaces the top, sifted down in one pass (pop_heap then push_heap sift twice): the same
    // elements, a valid max-heap for std's heap algorithms
    const size_t n = h.size();
    size_t i = 0;
    for (size_t l = 1; l < n; l = 2 * i + 1) {
      const size_t m = l + 1 < n && h[l] < h[l + 1] ? l + 1 : l;
      if (!(c < h[m])) break;
      h[i] = h[m];
      i = m;
    }
    h[i] = c;
  } else {
    return false;
  }
  if (static_cast<int64_t>(h.size()) == n_cand) worst = h.front().first;
  return true;
}
// Offers the scores dq[r] + bsq[r] (dq[r] alone where bsq is null; r < nr) to a query's heap, in
// order of r, each one only when it is at or below the heap's current worst: the same offers as
// testing them one by one, with runs of kScanRun scores above the worst skipped after one vectorised
// count (the exact search and the IVF lists' scans; the scores of a GEMM tile are read once).
constexpr int64_t kScanRun = 16;
inline void scan_row(const float* dq, const float* bsq, int64_t nr, const int32_t* ids,
                     std::vector<std::pair<float, int32_t>>& h, int64_t n_cand, int32_t id0 = 0) {
  float worst = heap_worst(h, n_cand);
  auto score = [&](int64_t j) { return bsq ? dq[j] + bsq[j] : dq[j]; };
  auto id = [&](int64_t j) { return ids ? ids[j] : static_cast<int32_t>(id0 + j); };
  int64_t r = 0;
  for (; r + kScanRun <= nr; r += kScanRun) {
    int hits = 0;
    if (bsq) {
      for (int64_t j = 0; j < kScanRun; ++j) hits += (dq[r + j] + bsq[r + j] <= worst) ? 1 : 0;
    } else {
      for (int64_t j = 0; j < kScanRun; ++j) hits += (dq[r + j] <= worst) ? 1 : 0;
    }
    if (hits == 0) continue;
    for (int64_t j = r; j < r + kScanRun; ++j) {
      const float v = score(j);
      if (v <= worst) offer(h, n_cand, std::pair<float, int32_t>(v, id(j)), worst);
    }
  }
  for (; r < nr; ++r) {
    const float v = score(r);
    if (v <= worst) offer(h, n_cand, std::pair<float, int32_t>(v, id(r)), worst);
  }
}
// Rows scaled to unit norm (zero rows stay zero), float32.
DenseF normalized_rows(const DenseF& X, const std::vector<double>& nrm);

}  // namespace scurry::knn_detail
