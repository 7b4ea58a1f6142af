// kNN search: exact (GEMM + float64 re-rank) against a float64 brute force written here, thread
// independence, hnsw recall.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/knn.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

// Seeded clustered data: `clusters` Gaussian blobs (centres sd 5, points sd 1) in d dims, with an
// offset so that norms are large compared with neighbour distances (stresses the float32 GEMM).
DenseF clustered(int64_t n, int64_t d, int clusters, uint64_t seed, float offset = 20.0f) {
  return test::clustered_points(n, d, clusters, seed, offset);
}

// The oracle: float64 distances to every other cell, sorted by (distance, index).
std::vector<std::pair<double, int32_t>> oracle_row(const DenseF& x, int64_t i, KnnMetric metric) {
  std::vector<std::pair<double, int32_t>> r;
  for (int64_t j = 0; j < x.n_rows; ++j) {
    if (j == i) continue;
    double dd = 0, dot = 0, ni = 0, nj = 0;
    for (int64_t c = 0; c < x.n_cols; ++c) {
      const double a = x(i, c), b = x(j, c);
      dd += (a - b) * (a - b);
      dot += a * b;
      ni += a * a;
      nj += b * b;
    }
    const double dist = metric == KnnMetric::euclidean ? std::sqrt(dd) : 1.0 - dot / std::sqrt(ni * nj);
    r.emplace_back(dist, static_cast<int32_t>(j));
  }
  std::sort(r.begin(), r.end());
  return r;
}

// Rows whose neighbour set differs from the oracle by more than ties at the k-th distance.
int64_t mismatched_rows(const DenseF& x, const Knn& knn, KnnMetric metric, double* max_dist_err) {
  int64_t bad = 0;
  *max_dist_err = 0;
  for (int64_t i = 0; i < x.n_rows; ++i) {
    EXPECT_EQ(knn.index(i, 0), i);
    EXPECT_EQ(knn.distance(i, 0), 0.0f);
    const auto o = oracle_row(x, i, metric);
    const int64_t m = knn.k - 1;
    const double kth = o[m - 1].first;
    std::set<int32_t> want;
    for (int64_t j = 0; j < m; ++j) want.insert(o[j].second);
    for (int64_t j = 1; j < knn.k; ++j) {
      const int32_t c = knn.index(i, j);
      *max_dist_err = std::max(*max_dist_err, std::fabs(knn.distance(i, j) - o[j - 1].first) / std::max(1e-12, o[j - 1].first));
      if (!want.count(c)) {
        // allowed only as a tie with the k-th distance
        const auto it = std::find_if(o.begin(), o.end(), [&](const auto& p) { return p.second == c; });
        if (std::fabs(it->first - kth) > 1e-12 * std::max(1.0, kth)) {
          ++bad;
          break;
        }
      }
    }
  }
  return bad;
}

TEST(Knn, ExactEqualsFloat64BruteForceEuclideanAndCosine) {
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(1333, 24, 7, seed);  // not a multiple of the blocks
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Knn knn = knn_exact(Context::cpu(2), x, 15, metric);
    double err = 0;
    EXPECT_EQ(mismatched_rows(x, knn, metric, &err), 0) << knn_metric_name(metric);
    EXPECT_LT(err, 1e-6) << knn_metric_name(metric);
    // The library's own brute force agrees too.
    const Knn bf = knn_brute_force(x, 15, metric);
    EXPECT_EQ(mismatched_rows(x, bf, metric, &err), 0);
  }
}

TEST(Knn, ExactIsIdenticalForAnyThreadCount) {
  const DenseF x = clustered(700, 13, 4, test::fresh_seed());
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Knn a = knn_exact(Context::cpu(1), x, 10, metric);
    const Knn b = knn_exact(Context::cpu(2), x, 10, metric);
    EXPECT_EQ(a.indices, b.indices);
    EXPECT_EQ(a.distances, b.distances);
  }
}

// Share of the true k - 1 non-self neighbours found.
double recall(const Knn& approx, const Knn& exact) {
  int64_t hit = 0, total = 0;
  for (int64_t i = 0; i < exact.n; ++i) {
    std::set<int32_t> truth;
    for (int64_t j = 1; j < exact.k; ++j) truth.insert(exact.index(i, j));
    for (int64_t j = 1; j < approx.k; ++j) hit += truth.count(approx.index(i, j));
    total += exact.k - 1;
  }
  return static_cast<double>(hit) / static_cast<double>(total);
}

TEST(Knn, HnswRecallAtLeast95Percent) {
  const DenseF x = clustered(4000, 30, 12, test::fresh_seed());
  const Knn exact = knn_exact(Context::cpu(2), x, 15, KnnMetric::euclidean);
  const Knn a = knn_hnsw(Context::cpu(2), x, 15, KnnMetric::euclidean);
  const double r = recall(a, exact);
  std::printf("hnsw recall@15 (euclidean) = %.4f\n", r);
  EXPECT_GE(r, 0.95);
  const Knn ec = knn_exact(Context::cpu(2), x, 15, KnnMetric::cosine);
  const Knn ac = knn_hnsw(Context::cpu(2), x, 15, KnnMetric::cosine);
  const double rc = recall(ac, ec);
  std::printf("hnsw recall@15 (cosine) = %.4f\n", rc);
  EXPECT_GE(rc, 0.95);
  // Self first; distances exact for the neighbours found.
  for (int64_t i = 0; i < a.n; ++i) {
    ASSERT_EQ(a.index(i, 0), i);
    for (int64_t j = 2; j < a.k; ++j) ASSERT_LE(a.distance(i, j - 1), a.distance(i, j));
  }
  // Same seed, other thread count: same result.
  const Knn b = knn_hnsw(Context::cpu(1), x, 15, KnnMetric::euclidean);
  EXPECT_EQ(a.indices, b.indices);
}

// IVF-Flat on the CPU (knn_ivf): recall@15 >= 0.97 against the exact search (the default probes),
// distances exact for the neighbours it finds, the same result for 1, 2 and 3 threads, a query
// range equal to those rows of the full search, and both list scans.
TEST(Knn, IvfRecallAtLeast97PercentAndThreadIndependent) {
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(6000, 30, 12, seed);
  IvfCpuOptions opt;
  opt.seed = seed;
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Knn exact = knn_exact(Context::cpu(2), x, 15, metric);
    const Knn a = knn_ivf(Context::cpu(2), x, 15, metric, opt);
    const double r = recall(a, exact);
    std::printf("ivf recall@15 (%s) = %.4f\n", knn_metric_name(metric), r);
    EXPECT_GE(r, 0.97) << knn_metric_name(metric);
    for (int64_t i = 0; i < a.n; ++i) {
      ASSERT_EQ(a.index(i, 0), i);
      ASSERT_EQ(a.distance(i, 0), 0.0f);
      for (int64_t j = 2; j < a.k; ++j) ASSERT_LE(a.distance(i, j - 1), a.distance(i, j));
    }
    // A neighbour found at the exact search's rank has the exact search's distance.
    int64_t same = 0;
    for (size_t e = 0; e < a.indices.size(); ++e)
      if (a.indices[e] == exact.indices[e]) {
        ASSERT_EQ(a.distances[e], exact.distances[e]);
        ++same;
      }
    EXPECT_GT(same, static_cast<int64_t>(a.indices.size() / 2));
    for (int threads : {1, 3}) {
      const Knn b = knn_ivf(Context::cpu(threads), x, 15, metric, opt);
      EXPECT_EQ(a.indices, b.indices) << threads << " threads";
      EXPECT_EQ(a.distances, b.distances) << threads << " threads";
    }
    const Knn part = knn_ivf(Context::cpu(2), x, 15, metric, opt, 1000, 2500);
    ASSERT_EQ(part.n, 1500);
    EXPECT_TRUE(std::equal(part.indices.begin(), part.indices.end(), a.indices.begin() + 1000 * 15));
  }
  // Both list scans (the fused AVX2/FMA tiles where the CPU has them, sgemm and a scan otherwise):
  // the same rules, float32 scores rounded differently, so the same neighbours but where two
  // candidates' float32 scores cross at the margin of the re-ranked candidates.
  {
    IvfCpuOptions blas = opt;
    blas.blas_scan = true;
    const Knn f = knn_ivf(Context::cpu(2), x, 15, KnnMetric::euclidean, opt);
    const Knn g = knn_ivf(Context::cpu(2), x, 15, KnnMetric::euclidean, blas);
    const Knn exact = knn_exact(Context::cpu(2), x, 15, KnnMetric::euclidean);
    EXPECT_GE(recall(g, exact), 0.97);
    int64_t same = 0;
    for (size_t e = 0; e < f.indices.size(); ++e) same += f.indices[e] == g.indices[e];
    std::printf("ivf scans: %ld of %zu neighbour entries the same\n", static_cast<long>(same), f.indices.size());
    EXPECT_GE(static_cast<double>(same), 0.999 * static_cast<double>(f.indices.size()));
    EXPECT_EQ(knn_ivf(Context::cpu(3), x, 15, KnnMetric::euclidean, blas).indices, g.indices);
    // The fused scan's AVX-512 form (where the CPU has it) and its AVX2 form: the same FMA chain per
    // score, so the same bits.
    knn_ivf_scan_isa(0);
    const Knn f2 = knn_ivf(Context::cpu(2), x, 15, KnnMetric::euclidean, opt);
    knn_ivf_scan_isa(-1);
    EXPECT_EQ(f2.indices, f.indices);
    EXPECT_EQ(f2.distances, f.distances);
  }
  // Every list probed: exact.
  IvfCpuOptions all = opt;
  all.n_lists = 20;
  all.n_probes = 20;
  const Knn e = knn_exact(Context::cpu(2), x, 10, KnnMetric::euclidean);
  EXPECT_EQ(knn_ivf(Context::cpu(2), x, 10, KnnMetric::euclidean, all).indices, e.indices);
  // Bad parameters: an InputError naming them.
  IvfCpuOptions bad = opt;
  bad.n_lists = x.n_rows + 1;
  EXPECT_THROW(knn_ivf(Context::cpu(1), x, 15, KnnMetric::euclidean, bad), InputError);
}

// hnsw's distance functions are our own (knn.cpp: SSE2 blocks of 16 and 4 floats, then a scalar
// tail): every path through them, for dimensions below, at and between the block sizes, must rank as
// the exact search does. On 500 cells the default ef (64) makes hnsw all but exact, so a distance
// that dropped or misread a tail would show as lost recall (and, in the ASan build, a read past a
// row as a report).
TEST(Knn, HnswDistancesForEveryDimensionRemainder) {
  const uint64_t seed = test::fresh_seed();
  for (int64_t d : {1, 2, 3, 4, 5, 8, 15, 16, 17, 20, 35, 50}) {
    const DenseF x = clustered(500, d, 5, seed + static_cast<uint64_t>(d), 3.0f);
    for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
      if (metric == KnnMetric::cosine && d == 1) continue;  // every unit vector is +-1: all ties
      const Knn e = knn_exact(Context::cpu(2), x, 10, metric);
      const Knn a = knn_hnsw(Context::cpu(2), x, 10, metric);
      EXPECT_GE(recall(a, e), 0.99) << "d = " << d << ", " << knn_metric_name(metric);
    }
  }
}

// join_rows puts the rows of parts (several GPUs, MPI ranks) in cell order and refuses parts that do
// not hold every cell exactly once.
TEST(Knn, JoinRowsPutsThePartsInCellOrder) {
  const int64_t n = 7, k = 2;
  std::vector<std::vector<int32_t>> cells{{4, 0, 6}, {1, 5, 2, 3}};
  std::vector<Knn> parts(2);
  for (size_t p = 0; p < 2; ++p)
    for (int32_t c : cells[p])
      for (int64_t j = 0; j < k; ++j) {
        parts[p].indices.push_back(c * 10 + static_cast<int32_t>(j));
        parts[p].distances.push_back(static_cast<float>(c) + 0.5f * static_cast<float>(j));
      }
  const Knn all = join_rows(n, k, cells, parts);
  ASSERT_EQ(all.n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(all.index(i, j), i * 10 + j);
      EXPECT_EQ(all.distance(i, j), static_cast<float>(i) + 0.5f * static_cast<float>(j));
    }
  std::vector<std::vector<int32_t>> missing{{4, 0, 6}, {1, 5, 2, 2}};
  EXPECT_THROW(join_rows(n, k, missing, parts), Error);
  std::vector<std::vector<int32_t>> short_list{{4, 0}, {1, 5, 2, 3}};
  EXPECT_THROW(join_rows(n, k, short_list, parts), Error);
}

TEST(Knn, BadInput) {
  const DenseF x = clustered(20, 3, 2, 1);
  EXPECT_THROW(knn_exact(Context::cpu(1), x, 21, KnnMetric::euclidean), InputError);
  EXPECT_THROW(knn_exact(Context::cpu(1), x, 0, KnnMetric::euclidean), InputError);
  DenseF y = x;
  y(3, 1) = std::nanf("");
  EXPECT_THROW(knn_exact(Context::cpu(1), y, 5, KnnMetric::euclidean), InputError);
  EXPECT_THROW(parse_knn_metric("manhattan", "neighbors"), InputError);
}

}  // namespace
}  // namespace scurry
