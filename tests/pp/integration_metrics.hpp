// Integration quality metrics for the Harmony tests (exact kNN, euclidean, self excluded):
// - knn_overlap: mean share of each cell's k nearest neighbours in A found among its k nearest in B;
// - ilisi: batch mixing, the mean over cells of the inverse Simpson index 1 / sum_b p_b^2 of the
//   batch labels among the cell's k nearest neighbours (an unweighted form of LISI, Korsunsky et
//   al. 2019; 1 = one batch only, n_batches = perfectly mixed);
// - knn_purity: cluster purity, the mean share of each cell's k neighbours with its own label.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/matrix.hpp"

namespace scurry::test {

// Each row's k nearest other rows (float64 distances; ties by index).
inline std::vector<std::vector<int32_t>> exact_knn(const DenseD& x, int k) {
  const int64_t n = x.n_rows, d = x.n_cols;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  std::vector<std::pair<double, int32_t>> dist(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < d; ++q) {
        const double t = x(i, q) - x(j, q);
        s += t * t;
      }
      dist[j] = {j == i ? 1e300 : s, static_cast<int32_t>(j)};
    }
    std::partial_sort(dist.begin(), dist.begin() + k, dist.end());
    for (int t = 0; t < k; ++t) out[i].push_back(dist[t].second);
  }
  return out;
}

inline double knn_overlap(const std::vector<std::vector<int32_t>>& a, const std::vector<std::vector<int32_t>>& b) {
  double tot = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<int32_t> x = a[i], y = b[i], z;
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(z));
    tot += static_cast<double>(z.size()) / static_cast<double>(a[i].size());
  }
  return tot / static_cast<double>(a.size());
}

template <class L>
double ilisi(const std::vector<std::vector<int32_t>>& nn, const std::vector<L>& batch) {
  double tot = 0;
  for (size_t i = 0; i < nn.size(); ++i) {
    std::vector<L> labs;
    for (int32_t j : nn[i]) labs.push_back(batch[j]);
    std::sort(labs.begin(), labs.end());
    double simpson = 0;
    for (size_t a = 0; a < labs.size();) {
      size_t b = a;
      while (b < labs.size() && labs[b] == labs[a]) ++b;
      const double p = static_cast<double>(b - a) / static_cast<double>(labs.size());
      simpson += p * p;
      a = b;
    }
    tot += 1.0 / simpson;
  }
  return tot / static_cast<double>(nn.size());
}

template <class L>
double knn_purity(const std::vector<std::vector<int32_t>>& nn, const std::vector<L>& labels) {
  double tot = 0;
  for (size_t i = 0; i < nn.size(); ++i) {
    int same = 0;
    for (int32_t j : nn[i]) same += labels[j] == labels[i];
    tot += static_cast<double>(same) / static_cast<double>(nn[i].size());
  }
  return tot / static_cast<double>(nn.size());
}

}  // namespace scurry::test
