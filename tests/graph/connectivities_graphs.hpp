// kNN graphs for the connectivities tests (CPU and GPU), seeded, with the awkward cases: exact
// duplicate points (zero distances; a group of more than k copies gives rows whose neighbours are
// all at distance 0, so rho = 0 and sigma's floor is the mean of all distances), missing neighbours
// (index -1, distance +inf; some rows lose all of them), neighbourhoods that are not symmetric, and
// (random_knn) neighbours listed twice in a row. Plus the checks both tests share.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "exec/context.hpp"
#include "graph/knn.hpp"
#include "testlib.hpp"

namespace scurry::test_conn {

// Exact kNN (k neighbours, self first) of n points in d dims around 12 Gaussian centres, where ~2% of
// the points copy another point, one group of k + 5 points is a single point repeated, ~3% of the
// rows lose their last 1..k-2 neighbours and 3 rows lose all but themselves.
inline Knn clustered_knn(const Context& ctx, int64_t n, int64_t d, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  const int n_centres = 12;
  std::vector<double> centres(static_cast<size_t>(n_centres * d));
  for (double& c : centres) c = 3.0 * z(rng);
  DenseF x(n, d);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(rng() % n_centres);
    for (int64_t j = 0; j < d; ++j) x(i, j) = static_cast<float>(centres[c * d + j] + z(rng));
  }
  for (int64_t i = 0; i < n / 50; ++i) {
    const int64_t a = static_cast<int64_t>(rng() % n), b = static_cast<int64_t>(rng() % n);
    for (int64_t j = 0; j < d; ++j) x(a, j) = x(b, j);
  }
  const int64_t g0 = static_cast<int64_t>(rng() % (n - k - 5));
  for (int64_t i = g0 + 1; i < g0 + k + 5; ++i)
    for (int64_t j = 0; j < d; ++j) x(i, j) = x(g0, j);
  Knn knn = knn_exact(ctx, x, k, KnnMetric::euclidean);
  auto drop_tail = [&](int64_t i, int64_t keep) {
    for (int64_t j = keep; j < k; ++j) {
      knn.indices[i * k + j] = -1;
      knn.distances[i * k + j] = std::numeric_limits<float>::infinity();
    }
  };
  for (int64_t i = 0; i < n; ++i)
    if (rng() % 100 < 3) drop_tail(i, k - 1 - static_cast<int64_t>(rng() % static_cast<uint64_t>(k - 2)));
  for (int r = 0; r < 3; ++r) drop_tail(static_cast<int64_t>(rng() % n), 1);
  return knn;
}

// n x k neighbours without geometry: the cell itself first, then uniform random cells (distinct unless
// `repeats`; ~1 in 50 listed twice when it is) at sorted distances uniform in [0, 2), ~5% of them 0;
// ~2% of the rows end in 1..k-2 missing neighbours.
inline Knn random_knn(int64_t n, int64_t k, uint64_t seed, bool repeats) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  Knn knn;
  knn.n = n;
  knn.k = k;
  knn.indices.resize(static_cast<size_t>(n * k));
  knn.distances.resize(static_cast<size_t>(n * k));
  std::vector<float> d(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    int32_t* ri = knn.indices.data() + i * k;
    float* di = knn.distances.data() + i * k;
    ri[0] = static_cast<int32_t>(i);
    for (int64_t j = 1; j < k; ++j) {
      int32_t c;
      bool again;
      do {
        c = static_cast<int32_t>(rng() % static_cast<uint64_t>(n));
        again = c == i;
        if (repeats && j > 1 && rng() % 50 == 0) c = ri[1 + rng() % static_cast<uint64_t>(j - 1)], again = false;
        else
          for (int64_t q = 1; q < j && !again; ++q) again = ri[q] == c;
      } while (again);
      ri[j] = c;
    }
    d[0] = 0.0f;
    for (int64_t j = 1; j < k; ++j) d[j] = rng() % 20 == 0 ? 0.0f : u(rng);
    std::sort(d.begin() + 1, d.end());
    std::copy(d.begin(), d.end(), di);
    if (rng() % 50 == 0)
      for (int64_t j = k - 1 - static_cast<int64_t>(rng() % static_cast<uint64_t>(k - 2)); j < k; ++j)
        ri[j] = -1, di[j] = std::numeric_limits<float>::infinity();
  }
  return knn;
}

// Bit-identical CSR matrices.
inline void expect_identical(const CsrF& a, const CsrF& b, const char* what) {
  ASSERT_EQ(a.n_rows, b.n_rows) << what;
  ASSERT_EQ(a.n_cols, b.n_cols) << what;
  ASSERT_EQ(a.indptr, b.indptr) << what;
  ASSERT_EQ(a.indices, b.indices) << what;
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  size_t differ = 0;
  for (size_t p = 0; p < a.data.size(); ++p) differ += std::memcmp(&a.data[p], &b.data[p], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << what << ": values that differ in some bit";
}

// Square, sorted strictly increasing columns, no explicit zeros, symmetric bit for bit.
inline void expect_symmetric_graph(const CsrF& m) {
  ASSERT_EQ(m.n_rows, m.n_cols);
  int64_t bad_order = 0, zeros = 0, asym = 0;
  for (int64_t i = 0; i < m.n_rows; ++i)
    for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) {
      if (p > m.indptr[i] && m.indices[p] <= m.indices[p - 1]) ++bad_order;
      if (m.data[p] == 0.0f) ++zeros;
      const int32_t j = m.indices[p];
      const auto b = m.indices.begin() + m.indptr[j], e = m.indices.begin() + m.indptr[j + 1];
      const auto it = std::lower_bound(b, e, static_cast<int32_t>(i));
      if (it == e || *it != i || m.data[it - m.indices.begin()] != m.data[p]) ++asym;
    }
  EXPECT_EQ(bad_order, 0);
  EXPECT_EQ(zeros, 0);
  EXPECT_EQ(asym, 0);
}

// Median wall seconds of `reps` runs of f.
template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace scurry::test_conn
