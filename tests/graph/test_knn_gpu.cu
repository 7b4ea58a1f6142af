// GPU kNN (label gpu): exact search against float64 brute force (every GEMM precision, sizes that
// are not multiples of the tiles, several k and both metrics), IVF-Flat recall against the exact
// search at the defaults, IVF with every list probed equal to float64 brute force, small lists and the
// scalar fallback, determinism, and input errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/knn.hpp"
#include "graph/knn_gpu.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

Context gpu_ctx() {
  ContextOptions o;
  o.device = "gpu";
  return Context::create(o);
}

// Seeded clustered data: Gaussian blobs (centres sd 5, points sd 1) with an offset so that norms are
// large compared with neighbour distances (stresses the GEMM). zero_row >= 0: that row is all zeros
// (cosine: distance 1 from everything).
DenseF clustered(int64_t n, int64_t d, int clusters, uint64_t seed, float offset = 20.0f, int64_t zero_row = -1) {
  DenseF x = test::clustered_points(n, d, clusters, seed, offset);
  if (zero_row >= 0)
    for (int64_t j = 0; j < d; ++j) x(zero_row, j) = 0.f;
  return x;
}

// The oracle for one row: float64 distances to every other row, sorted by (distance, index), the
// first `keep` kept.
using Row = std::vector<std::pair<double, int32_t>>;
Row oracle_row(const DenseF& x, int64_t i, KnnMetric metric, size_t keep) { return test::knn_oracle_row(x, i, metric, keep); }

struct Oracle {
  std::vector<int64_t> rows;
  std::vector<Row> best;
};

// Oracle rows: all rows (n <= all_below) or a seeded sample of `sample` rows plus the first and last.
Oracle make_oracle(const DenseF& x, KnnMetric metric, int64_t k, uint64_t seed, int64_t sample = 1500,
                   int64_t all_below = 4000) {
  Oracle o;
  if (x.n_rows <= all_below) {
    for (int64_t i = 0; i < x.n_rows; ++i) o.rows.push_back(i);
  } else {
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    o.rows = {0, x.n_rows - 1};
    for (int64_t s = 0; s < sample; ++s) o.rows.push_back(static_cast<int64_t>(rng() % x.n_rows));
  }
  for (int64_t i : o.rows) o.best.push_back(oracle_row(x, i, metric, static_cast<size_t>(k + 64)));
  return o;
}

// Compares a result with the oracle rows: self first at 0; distances within 1e-4 relative of the
// oracle's j-th; a neighbour outside the oracle's k - 1 set only as a tie (within 1e-5 relative) with
// the k-th distance. Returns the rows whose set differs otherwise.
int64_t mismatches(const Knn& knn, const Oracle& o, double* max_rel_err) {
  int64_t bad = 0;
  *max_rel_err = 0;
  for (size_t s = 0; s < o.rows.size(); ++s) {
    const int64_t i = o.rows[s];
    const Row& best = o.best[s];
    EXPECT_EQ(knn.index(i, 0), i);
    EXPECT_EQ(knn.distance(i, 0), 0.0f);
    const int64_t m = knn.k - 1;
    if (m == 0) continue;
    const double kth = best[static_cast<size_t>(m - 1)].first;
    std::set<int32_t> want;
    for (int64_t j = 0; j < m; ++j) want.insert(best[static_cast<size_t>(j)].second);
    bool row_bad = false;
    for (int64_t j = 1; j < knn.k; ++j) {
      const double ref = best[static_cast<size_t>(j - 1)].first;
      *max_rel_err = std::max(*max_rel_err, std::fabs(knn.distance(i, j) - ref) / std::max(1e-6, std::fabs(ref)));
      const int32_t c = knn.index(i, j);
      if (want.count(c)) continue;
      auto it = std::find_if(best.begin(), best.end(), [&](const auto& p) { return p.second == c; });
      if (it == best.end() || std::fabs(it->first - kth) > 1e-5 * std::max(1e-6, std::fabs(kth))) row_bad = true;
    }
    bad += row_bad;
  }
  return bad;
}

const char* precision_name(KnnGemmPrecision p) {
  return p == KnnGemmPrecision::fp32     ? "fp32"
         : p == KnnGemmPrecision::tf32x3 ? "tf32x3"
         : p == KnnGemmPrecision::fused  ? "fused"
                                         : "tf32";
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

TEST(KnnGpu, ExactEqualsFloat64BruteForce20000) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(20000, 50, 40, seed, 20.0f, 777);  // 20000: not a multiple of the tiles
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Oracle o = make_oracle(x, metric, 15, seed);
    for (KnnGemmPrecision p :
         {KnnGemmPrecision::fused, KnnGemmPrecision::tf32x3, KnnGemmPrecision::fp32, KnnGemmPrecision::tf32}) {
      int64_t redo = -1;
      const Knn knn = knn_exact_gpu(ctx, x, 15, metric, KnnExactGpuOptions{p, &redo});
      if (p == KnnGemmPrecision::fused) std::printf("fused %s: %lld queries searched again\n", knn_metric_name(metric), static_cast<long long>(redo));
      ASSERT_EQ(knn.n, x.n_rows);
      ASSERT_EQ(knn.k, 15);
      double err = 0;
      const int64_t bad = mismatches(knn, o, &err);
      std::printf("exact gpu %s %s: %lld of %zu rows differ, max distance error %.3g\n", knn_metric_name(metric),
                  precision_name(p), static_cast<long long>(bad), o.rows.size(), err);
      // (plain TF32 may swap in a slightly farther neighbour, so its distance error is not bounded here)
      if (p != KnnGemmPrecision::tf32) EXPECT_LT(err, 1e-4) << knn_metric_name(metric) << " " << precision_name(p);
      if (p == KnnGemmPrecision::tf32) {
        // One TF32 pass: candidates may miss a neighbour within TF32 rounding; most rows are exact.
        EXPECT_LE(bad, static_cast<int64_t>(o.rows.size()) / 50) << knn_metric_name(metric);
      } else {
        EXPECT_EQ(bad, 0) << knn_metric_name(metric) << " " << precision_name(p);
      }
    }
    // k = 1: the cell itself.
    const Knn one = knn_exact_gpu(ctx, x, 1, metric);
    ASSERT_EQ(one.k, 1);
    for (int64_t i = 0; i < x.n_rows; ++i) {
      ASSERT_EQ(one.index(i, 0), i);
      ASSERT_EQ(one.distance(i, 0), 0.0f);
    }
    // k = 2: the single nearest other cell.
    const Knn two = knn_exact_gpu(ctx, x, 2, metric);
    double err = 0;
    EXPECT_EQ(mismatches(two, o, &err), 0) << knn_metric_name(metric);
    EXPECT_LT(err, 1e-4);
  }
}

// The exact search through the IVF lists (first stage: probed lists; second: every list whose
// Voronoi-cell bound does not clear the k-th distance; blocks over the cap searched whole) equals a
// float64 brute force: clustered data at the default probes and at one probe (most of the work in the
// second stage), structureless uniform data (weak bounds: blocks over the cap), and duplicated rows
// (zero distances, ties).
TEST(KnnGpu, ExactThroughListsEqualsFloat64BruteForce) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  DenseF blobs = clustered(20000, 50, 40, seed, 20.0f);
  for (int64_t i = 0; i < 300; ++i)  // duplicates: rows 0..299 copied over rows 10000..10299
    for (int64_t c = 0; c < blobs.n_cols; ++c) blobs(10000 + i, c) = blobs(i, c);
  DenseF uniform(12000, 20);
  {
    std::mt19937_64 rng(seed + 1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (float& v : uniform.data) v = u(rng);
  }
  struct Case {
    const char* name;
    const DenseF* x;
    int64_t probes;
  };
  for (const Case& c : {Case{"blobs, default probes", &blobs, 0}, Case{"blobs, 1 probe", &blobs, 1},
                        Case{"uniform, 2 probes", &uniform, 2}}) {
    const Oracle o = make_oracle(*c.x, KnnMetric::euclidean, 15, seed);
    KnnExactGpuOptions opt;
    int64_t redo = -1;
    std::string report;
    opt.redo_count = &redo;
    opt.report = &report;
    opt.strategy = KnnExactStrategy::lists;
    opt.list_probes = c.probes;
    const Knn knn = knn_exact_gpu(ctx, *c.x, 15, KnnMetric::euclidean, opt);
    double err = 0;
    const int64_t bad = mismatches(knn, o, &err);
    std::printf("exact through lists, %s: %s; %lld queries searched whole; %lld of %zu rows differ, max error %.3g\n",
                c.name, report.c_str(), static_cast<long long>(redo), static_cast<long long>(bad), o.rows.size(), err);
    EXPECT_NE(report.find("lists:"), std::string::npos) << c.name;
    EXPECT_EQ(bad, 0) << c.name;
    EXPECT_LT(err, 1e-4) << c.name;
    // The whole result equals the brute-force strategy's (ties aside: same distances).
    KnnExactGpuOptions bo;
    bo.strategy = KnnExactStrategy::brute;
    const Knn ref = knn_exact_gpu(ctx, *c.x, 15, KnnMetric::euclidean, bo);
    int64_t differ = 0;
    for (int64_t i = 0; i < knn.n; ++i)
      for (int64_t j = 0; j < knn.k; ++j)
        differ += knn.distance(i, j) != ref.distance(i, j);
    EXPECT_EQ(differ, 0) << c.name;
  }
}

// IVF over several GPUs: each part searches its share of the query blocks (same lists everywhere);
// the parts merged equal the whole search, on one GPU (parts run one after the other) and on two.
TEST(KnnGpu, IvfShardsMergeToTheWholeSearch) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(30000, 40, 25, seed, 20.0f);
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Knn whole = knn_ivf_gpu(ctx, x, 15, metric);
    IvfOptions o;
    o.n_shards = 3;
    std::vector<Knn> parts;
    for (int s = 0; s < 3; ++s) {
      o.shard = s;
      parts.push_back(knn_ivf_gpu(ctx, x, 15, metric, o));
    }
    int64_t owned = 0, differ = 0;
    for (int64_t i = 0; i < x.n_rows; ++i) {
      int owners = 0;
      for (const Knn& p : parts) {
        ASSERT_EQ(p.index(i, 0), i);
        if (p.index(i, 1) < 0) continue;
        ++owners;
        for (int64_t j = 0; j < 15; ++j)
          differ += p.index(i, j) != whole.index(i, j) || p.distance(i, j) != whole.distance(i, j);
      }
      EXPECT_EQ(owners, 1) << "row " << i;
      owned += owners == 1;
    }
    EXPECT_EQ(owned, x.n_rows) << knn_metric_name(metric);
    EXPECT_EQ(differ, 0) << knn_metric_name(metric);
    // knn_ivf_gpus (each shard re-ranks and downloads only its own rows): over 2 GPUs when there
    // are, and over 3 contexts (on one GPU, or spread over the GPUs) always.
    const int devices = cuda_device_count();
    std::vector<Context> ctxs = test::three_gpu_contexts();
    for (int parts : {2, 3}) {
      std::vector<Context*> ptrs;
      for (int s = 0; s < parts; ++s) ptrs.push_back(&ctxs[s]);
      const Knn split = knn_ivf_gpus(ptrs, x, 15, metric);
      EXPECT_EQ(split.indices, whole.indices) << knn_metric_name(metric) << " " << parts;
      EXPECT_EQ(split.distances, whole.distances) << knn_metric_name(metric) << " " << parts;
      std::printf("IVF over %d contexts (%d devices) equals one GPU (%s)\n", parts, devices, knn_metric_name(metric));
    }
  }
}

// The exact search split over several GPUs (knn_exact_gpus: equal shares of the queries, parts joined
// on the host) equals one GPU's, bit for bit, and the float64 brute force. With one GPU, three
// contexts on it exercise the same split (sizes that are not multiples of the 128-query blocks).
TEST(KnnGpu, ExactOverSeveralGpusEqualsOneGpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(9001, 50, 20, seed, 20.0f);
  std::vector<Context> ctxs;
  const int devices = cuda_device_count();
  for (int s = 0; s < 3; ++s) {
    ContextOptions co;
    co.device = "gpu";
    co.cuda.device = devices >= 2 ? s % devices : 0;
    ctxs.push_back(Context::create(co));
  }
  std::vector<Context*> ptrs;
  for (Context& c : ctxs) ptrs.push_back(&c);
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Knn one = knn_exact_gpu(ctxs[0], x, 15, metric);
    for (int parts : {2, 3}) {
      int64_t redo = -1;
      const Knn split = knn_exact_gpus(std::vector<Context*>(ptrs.begin(), ptrs.begin() + parts), x, 15, metric,
                                       KnnExactGpuOptions{KnnGemmPrecision::fused, &redo});
      ASSERT_EQ(split.n, x.n_rows);
      EXPECT_EQ(split.indices, one.indices) << knn_metric_name(metric) << " " << parts;
      EXPECT_EQ(split.distances, one.distances) << knn_metric_name(metric) << " " << parts;
      EXPECT_GE(redo, 0);
    }
    const Oracle o = make_oracle(x, metric, 15, seed);
    double err = 0;
    EXPECT_EQ(mismatches(one, o, &err), 0) << knn_metric_name(metric);
    std::printf("exact kNN over %d contexts (%d devices) equals one GPU (%s)\n", 3, devices, knn_metric_name(metric));
  }
}

TEST(KnnGpu, ExactEqualsLibraryBruteForceSmallSizesAndLargeK) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  // Smaller than one tile in both directions, odd dims; k giving candidate widths 32, 128 and 512.
  const DenseF x = clustered(1237, 37, 9, seed, 20.0f, 5);
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    for (int64_t k : {int64_t(15), int64_t(1), int64_t(40), int64_t(200)}) {
      const Knn bf = knn_brute_force(x, k, metric);
      const Knn g = knn_exact_gpu(ctx, x, k, metric);
      ASSERT_EQ(g.k, k);
      int64_t bad = 0;
      double err = 0;
      for (int64_t i = 0; i < x.n_rows; ++i) {
        ASSERT_EQ(g.index(i, 0), i);
        std::set<int32_t> want;
        for (int64_t j = 1; j < k; ++j) want.insert(bf.index(i, j));
        const double kth = bf.distance(i, k - 1);
        bool row_bad = false;
        for (int64_t j = 1; j < k; ++j) {
          const double ref = bf.distance(i, j);
          err = std::max(err, std::fabs(g.distance(i, j) - ref) / std::max(1e-6, ref));
          if (!want.count(g.index(i, j)) && std::fabs(g.distance(i, j) - kth) > 1e-5 * std::max(1e-6, kth))
            row_bad = true;
          if (j > 1) ASSERT_LE(g.distance(i, j - 1), g.distance(i, j));
        }
        bad += row_bad;
      }
      EXPECT_EQ(bad, 0) << knn_metric_name(metric) << " k=" << k;
      EXPECT_LT(err, 1e-4) << knn_metric_name(metric) << " k=" << k;
    }
  }
}

TEST(KnnGpu, IvfRecallAtLeast95Percent) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(50000, 50, 40, seed);  // 224 lists of ~223 cells, 16 probes by default
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Knn exact = knn_exact_gpu(ctx, x, 15, metric);
    IvfOptions opt;
    opt.seed = seed;
    const Knn a = knn_ivf_gpu(ctx, x, 15, metric, opt);
    const double r = recall(a, exact);
    std::printf("ivf recall@15 (%s, default probes) = %.4f\n", knn_metric_name(metric), r);
    EXPECT_GE(r, 0.95) << knn_metric_name(metric);
    // Self first, ascending, and every returned distance is the exact one.
    for (int64_t i = 0; i < a.n; ++i) {
      ASSERT_EQ(a.index(i, 0), i);
      for (int64_t j = 1; j < a.k; ++j) {
        const int32_t c = a.index(i, j);
        ASSERT_GE(c, 0);
        ASSERT_NE(c, i);
        if (j > 1) ASSERT_LE(a.distance(i, j - 1), a.distance(i, j));
      }
    }
    for (int64_t i = 0; i < a.n; i += 97) {
      const Row o = oracle_row(x, i, metric, static_cast<size_t>(x.n_rows));
      for (int64_t j = 1; j < a.k; ++j) {
        const auto it = std::find_if(o.begin(), o.end(), [&](const auto& p) { return p.second == a.index(i, j); });
        ASSERT_NE(it, o.end());
        EXPECT_NEAR(a.distance(i, j), it->first, 1e-4 * std::max(1e-6, it->first));
      }
    }
    // Same seed: identical result (no floating-point atomics).
    const Knn b = knn_ivf_gpu(ctx, x, 15, metric, opt);
    EXPECT_EQ(a.indices, b.indices);
    EXPECT_EQ(a.distances, b.distances);
    // Fewer probes: lower recall, printed for information; all lists probed: exact.
    for (int64_t probes : {int64_t(4), int64_t(16)}) {
      IvfOptions few = opt;
      few.n_probes = probes;
      std::printf("ivf recall@15 (%s, %lld probes of %lld lists) = %.4f\n", knn_metric_name(metric),
                  static_cast<long long>(probes), static_cast<long long>(std::llround(std::sqrt(50000.0))),
                  recall(knn_ivf_gpu(ctx, x, 15, metric, few), exact));
    }
    IvfOptions all = opt;
    all.n_lists = 50;
    all.n_probes = 50;
    EXPECT_EQ(recall(knn_ivf_gpu(ctx, x, 15, metric, all), exact), 1.0) << knn_metric_name(metric);
  }
}

// Checks an IVF result row by row: self first at 0, k - 1 distinct other cells (none missing) by
// ascending distance, each distance the float64 one (oracle rows for the sampled rows).
void expect_valid_ivf(const Knn& a, const DenseF& x, KnnMetric metric, int64_t step) {
  for (int64_t i = 0; i < a.n; ++i) {
    ASSERT_EQ(a.index(i, 0), i);
    ASSERT_EQ(a.distance(i, 0), 0.0f);
    std::set<int32_t> seen;
    for (int64_t j = 1; j < a.k; ++j) {
      const int32_t c = a.index(i, j);
      ASSERT_GE(c, 0) << "row " << i;
      ASSERT_LT(c, a.n);
      ASSERT_NE(c, i);
      ASSERT_TRUE(seen.insert(c).second) << "row " << i << " lists " << c << " twice";
      if (j > 1) ASSERT_LE(a.distance(i, j - 1), a.distance(i, j));
    }
  }
  for (int64_t i = 0; i < a.n; i += step) {
    const Row o = oracle_row(x, i, metric, static_cast<size_t>(x.n_rows));
    for (int64_t j = 1; j < a.k; ++j) {
      const auto it = std::find_if(o.begin(), o.end(), [&](const auto& p) { return p.second == a.index(i, j); });
      ASSERT_NE(it, o.end());
      EXPECT_NEAR(a.distance(i, j), it->first, 1e-4 * std::max(1e-6, it->first));
    }
  }
}

// n_probes = n_lists: every block scans every list, so IVF is the fused TF32 candidate search plus the
// float64 re-rank, and its neighbour sets equal the float64 brute force (ties aside). Sizes not
// multiples of 64 / 128, lists of ~52 cells (smaller than a database tile, blocks of fewer than 64
// queries), a single list, odd depth; k = 15 (W = 32), and the wide lists of the mma kernel with
// their short buffer: k = 92 (t-SNE's 3 perplexity + 1 + the cell: W = 128) and k = 150 (W = 256).
TEST(KnnGpu, IvfAllProbesEqualsExact) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(5003, 37, 20, seed);
  for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
    const Oracle o = make_oracle(x, metric, 150, seed, 1500, 6000);  // every row
    for (int64_t k : {int64_t(15), int64_t(92), int64_t(150)}) {
      const Knn exact = knn_exact_gpu(ctx, x, k, metric);
      for (int64_t lists : {int64_t(97), int64_t(1)}) {
        IvfOptions opt;
        opt.seed = seed;
        opt.n_lists = lists;
        opt.n_probes = lists;
        const Knn a = knn_ivf_gpu(ctx, x, k, metric, opt);
        ASSERT_EQ(a.n, x.n_rows);
        ASSERT_EQ(a.k, k);
        double err = 0;
        const int64_t bad = mismatches(a, o, &err);
        std::printf("ivf %s, k = %lld, %lld lists all probed: %lld of %zu rows differ from float64, max distance "
                    "error %.3g, recall vs exact gpu %.5f\n",
                    knn_metric_name(metric), static_cast<long long>(k), static_cast<long long>(lists),
                    static_cast<long long>(bad), o.rows.size(), err, recall(a, exact));
        EXPECT_EQ(bad, 0) << knn_metric_name(metric) << " k=" << k << " lists=" << lists;
        EXPECT_LT(err, 1e-4) << knn_metric_name(metric) << " k=" << k << " lists=" << lists;
        EXPECT_GE(recall(a, exact), 0.9999) << knn_metric_name(metric) << " k=" << k << " lists=" << lists;
        if (k > 15) expect_valid_ivf(a, x, metric, 997);
      }
    }
  }
}

// The wide lists at the default probes (k = 92: t-SNE's neighbour count): recall against the exact
// search, the same bits run to run.
TEST(KnnGpu, IvfWideListsRecallAndSameBits) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = clustered(20011, 50, 25, seed, 0.0f);
  const Knn exact = knn_exact_gpu(ctx, x, 92, KnnMetric::euclidean);
  IvfOptions opt;
  opt.seed = seed;
  const Knn a = knn_ivf_gpu(ctx, x, 92, KnnMetric::euclidean, opt);
  const double rc = recall(a, exact);
  std::printf("ivf euclidean k = 92, 20011 cells, default probes: recall %.5f\n", rc);
  EXPECT_GE(rc, 0.97);
  expect_valid_ivf(a, x, KnnMetric::euclidean, 1999);
  const Knn b = knn_ivf_gpu(ctx, x, 92, KnnMetric::euclidean, opt);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.distances, b.distances);
}

// Lists much smaller than a database tile (~10 cells: a block's probe set is many short ranges, each one
// partial tile) with fewer probes than lists; and the scalar-scan fallback (k = 300: W = 512 is too wide
// for the mma kernel's lists; depth 70 > 64 too deep). Results are valid rows with exact distances and high
// recall.
TEST(KnnGpu, IvfSmallListsAndFallback) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const uint64_t seed = test::fresh_seed();
  {
    const DenseF x = clustered(3001, 20, 30, seed);
    for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
      const Knn exact = knn_exact_gpu(ctx, x, 15, metric);
      IvfOptions opt;
      opt.seed = seed;
      opt.n_lists = 300;
      opt.n_probes = 24;
      const Knn a = knn_ivf_gpu(ctx, x, 15, metric, opt);
      const double rc = recall(a, exact);
      std::printf("ivf %s, 300 lists of ~10 cells, 24 probes: recall %.5f\n", knn_metric_name(metric), rc);
      EXPECT_GE(rc, 0.97) << knn_metric_name(metric);
      expect_valid_ivf(a, x, metric, 13);
      const Knn b = knn_ivf_gpu(ctx, x, 15, metric, opt);
      EXPECT_EQ(a.indices, b.indices);
      EXPECT_EQ(a.distances, b.distances);
    }
  }
  for (const auto& [n, d, k] : {std::tuple<int64_t, int64_t, int64_t>{4001, 20, 300}, {4001, 70, 15}}) {
    const DenseF x = clustered(n, d, 12, seed + 1);
    for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
      const Knn exact = knn_exact_gpu(ctx, x, k, metric);
      IvfOptions opt;
      opt.seed = seed;
      const Knn a = knn_ivf_gpu(ctx, x, k, metric, opt);
      const double rc = recall(a, exact);
      std::printf("ivf %s fallback d=%lld k=%lld: recall %.5f\n", knn_metric_name(metric), static_cast<long long>(d),
                  static_cast<long long>(k), rc);
      EXPECT_GE(rc, 0.95) << knn_metric_name(metric) << " d=" << d << " k=" << k;
      expect_valid_ivf(a, x, metric, 41);
    }
  }
}

TEST(KnnGpu, BadInput) {
  SCURRY_REQUIRE_GPU();
  const Context ctx = gpu_ctx();
  const DenseF x = clustered(20, 3, 2, 1);
  EXPECT_THROW(knn_exact_gpu(ctx, x, 20, KnnMetric::euclidean), InputError);  // k >= n
  EXPECT_THROW(knn_exact_gpu(ctx, x, 21, KnnMetric::euclidean), InputError);
  EXPECT_THROW(knn_exact_gpu(ctx, x, 0, KnnMetric::euclidean), InputError);
  EXPECT_THROW(knn_ivf_gpu(ctx, x, 20, KnnMetric::cosine), InputError);
  EXPECT_THROW(knn_exact_gpu(ctx, x, 5, "manhattan"), InputError);
  IvfOptions o;
  o.n_lists = 4;
  o.n_probes = 5;  // more probes than lists
  EXPECT_THROW(knn_ivf_gpu(ctx, x, 5, KnnMetric::euclidean, o), InputError);
  o.n_lists = 21;  // more lists than cells
  o.n_probes = 0;
  EXPECT_THROW(knn_ivf_gpu(ctx, x, 5, KnnMetric::euclidean, o), InputError);
  DenseF y = x;
  y(3, 1) = std::nanf("");
  EXPECT_THROW(knn_exact_gpu(ctx, y, 5, KnnMetric::euclidean), InputError);
  EXPECT_THROW(knn_ivf_gpu(ctx, y, 5, KnnMetric::euclidean), InputError);
  // A CPU context is refused with a message, not a crash.
  EXPECT_THROW(knn_exact_gpu(Context::cpu(1), x, 5, KnnMetric::euclidean), InputError);
}

}  // namespace
}  // namespace scurry
