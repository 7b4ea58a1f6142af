// The kNN with the index sharded over GPUs and a top-k merge (label gpu; KnnShard::index in
// knn_exact_gpus and knn_ivf_gpus), against one GPU: the exact search over 2 and 3 contexts (on one
// GPU, or spread over the GPUs there are) equals knn_exact_gpu bit for bit (indices and float
// distances) and the float64 brute force on sampled rows; IVF-Flat sharded by lists equals
// knn_ivf_gpu (the same lists scanned, the candidates merged before one float64 re-rank), also with
// the scalar fallback (depth > 64). Seeded clustered data, both metrics, k = 15.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "exec/context.hpp"
#include "graph/knn.hpp"
#include "graph/knn_gpu.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

DenseF clustered(int64_t n, int64_t d, int clusters, uint64_t seed, float offset) {
  return test::clustered_points(n, d, clusters, seed, offset);
}

// Three contexts: on three GPUs when there are, else round robin (several contexts on one GPU run
// the same sharded code).
std::vector<Context> three_contexts(int* devices) {
  *devices = cuda_device_count();
  return test::three_gpu_contexts();
}

// The float64 k - 1 nearest other rows of row i, by (distance, index).
std::vector<std::pair<double, int32_t>> oracle_row(const DenseF& x, int64_t i, KnnMetric metric, int64_t keep) {
  return test::knn_oracle_row(x, i, metric, static_cast<size_t>(keep));
}

// Rows (of a seeded sample) whose neighbour set differs from the float64 oracle's.
int64_t oracle_mismatches(const Knn& knn, const DenseF& x, KnnMetric metric, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x51ed270b27a3c1d5ull);
  int64_t bad = 0;
  for (int s = 0; s < 200; ++s) {
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(x.n_rows));
    const auto o = oracle_row(x, i, metric, knn.k - 1);
    std::set<int32_t> want, got;
    for (const auto& p : o) want.insert(p.second);
    for (int64_t j = 1; j < knn.k; ++j) got.insert(knn.index(i, j));
    bad += want != got;
  }
  return bad;
}

int64_t differing_rows(const Knn& a, const Knn& b) {
  int64_t bad = 0;
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t j = 0; j < a.k; ++j)
      if (a.index(i, j) != b.index(i, j) || a.distance(i, j) != b.distance(i, j)) {
        ++bad;
        break;
      }
  return bad;
}

// Exact, index sharded: every GPU searches all queries against its equal share of the rows (its own
// certificate and redo), the float64 top k - 1 lists merged on the host: one GPU's result exactly.
TEST(KnnShardGpu, ExactIndexShardedEqualsOneGpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  int devices = 0;
  std::vector<Context> ctxs = three_contexts(&devices);
  std::vector<Context*> ptrs;
  for (Context& c : ctxs) ptrs.push_back(&c);
  for (int64_t d : {int64_t(30), int64_t(50)}) {
    const DenseF x = clustered(20011, d, 25, seed + static_cast<uint64_t>(d), 20.0f);
    for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
      const Knn one = knn_exact_gpu(ctxs[0], x, 15, metric);
      EXPECT_EQ(oracle_mismatches(one, x, metric, seed), 0) << knn_metric_name(metric) << " d " << d;
      for (int parts : {2, 3}) {
        KnnExactGpuOptions o;
        int64_t redo = -1;
        std::string report;
        o.redo_count = &redo;
        o.report = &report;
        o.sharding = KnnShard::index;
        const Knn sharded =
            knn_exact_gpus(std::vector<Context*>(ptrs.begin(), ptrs.begin() + parts), x, 15, metric, o);
        ASSERT_EQ(sharded.n, x.n_rows);
        ASSERT_EQ(sharded.k, 15);
        EXPECT_EQ(report, "brute, index sharded");  // the sharded path ran (not a fallback to one GPU)
        EXPECT_GE(redo, 0);
        EXPECT_EQ(differing_rows(sharded, one), 0) << knn_metric_name(metric) << " d " << d << ", " << parts;
        EXPECT_EQ(sharded.indices, one.indices) << knn_metric_name(metric) << " d " << d << ", " << parts;
        EXPECT_EQ(sharded.distances, one.distances) << knn_metric_name(metric) << " d " << d << ", " << parts;
        std::printf("exact, index sharded over %d contexts (%d devices), %s, d %lld: equals one GPU (%lld redone)\n",
                    parts, devices, knn_metric_name(metric), static_cast<long long>(d), static_cast<long long>(redo));
      }
    }
  }
}

// IVF-Flat sharded by lists: the lists dealt to the GPUs, every query block scanning the probed lists
// each GPU owns, the TF32 candidate lists merged, one float64 re-rank: knn_ivf_gpu's result exactly.
// Also the query split (default) for comparison, and the scalar fallback (d = 70: depth > 64).
TEST(KnnShardGpu, IvfIndexShardedEqualsOneGpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  int devices = 0;
  std::vector<Context> ctxs = three_contexts(&devices);
  std::vector<Context*> ptrs;
  for (Context& c : ctxs) ptrs.push_back(&c);
  for (int64_t d : {int64_t(40), int64_t(70)}) {
    const DenseF x = clustered(d == 40 ? 20011 : 6007, d, 30, seed + static_cast<uint64_t>(d), 20.0f);
    for (KnnMetric metric : {KnnMetric::euclidean, KnnMetric::cosine}) {
      IvfOptions o;
      o.seed = seed;
      const Knn one = knn_ivf_gpu(ctxs[0], x, 15, metric, o);
      const Knn exact = knn_exact_gpu(ctxs[0], x, 15, metric);
      int64_t hit = 0;
      for (int64_t i = 0; i < x.n_rows; ++i) {
        std::set<int32_t> truth;
        for (int64_t j = 1; j < 15; ++j) truth.insert(exact.index(i, j));
        for (int64_t j = 1; j < 15; ++j) hit += truth.count(one.index(i, j));
      }
      const double recall = static_cast<double>(hit) / static_cast<double>(x.n_rows * 14);
      for (int parts : {2, 3}) {
        IvfOptions os = o;
        os.sharding = KnnShard::index;
        const Knn sharded = knn_ivf_gpus(std::vector<Context*>(ptrs.begin(), ptrs.begin() + parts), x, 15, metric, os);
        ASSERT_EQ(sharded.n, x.n_rows);
        ASSERT_EQ(sharded.k, 15);
        EXPECT_EQ(differing_rows(sharded, one), 0) << knn_metric_name(metric) << " d " << d << ", " << parts;
        EXPECT_EQ(sharded.indices, one.indices) << knn_metric_name(metric) << " d " << d << ", " << parts;
        EXPECT_EQ(sharded.distances, one.distances) << knn_metric_name(metric) << " d " << d << ", " << parts;
        std::printf("IVF, index sharded over %d contexts (%d devices), %s, d %lld: equals one GPU (recall@15 %.4f)\n",
                    parts, devices, knn_metric_name(metric), static_cast<long long>(d), recall);
      }
    }
  }
}

// The sharded modes fall back cleanly: one context, k = 1 (nothing to merge) and too few cells to
// share give one GPU's result.
TEST(KnnShardGpu, EdgeCasesEqualOneGpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  int devices = 0;
  std::vector<Context> ctxs = three_contexts(&devices);
  std::vector<Context*> ptrs;
  for (Context& c : ctxs) ptrs.push_back(&c);
  const DenseF x = clustered(2500, 20, 8, seed, 20.0f);  // fewer than 1024 cells a GPU at 3 (exact: one GPU)
  KnnExactGpuOptions eo;
  eo.sharding = KnnShard::index;
  IvfOptions io;
  io.seed = seed;
  io.sharding = KnnShard::index;
  for (int64_t k : {int64_t(1), int64_t(15)}) {
    const Knn exact_one = knn_exact_gpu(ctxs[0], x, k, KnnMetric::euclidean);
    const Knn ivf_one = knn_ivf_gpu(ctxs[0], x, k, KnnMetric::euclidean, io);
    for (size_t parts : {size_t(1), size_t(2), size_t(3)}) {
      const std::vector<Context*> p(ptrs.begin(), ptrs.begin() + static_cast<std::ptrdiff_t>(parts));
      const Knn e = knn_exact_gpus(p, x, k, KnnMetric::euclidean, eo);
      EXPECT_EQ(e.indices, exact_one.indices) << "k " << k << ", " << parts;
      EXPECT_EQ(e.distances, exact_one.distances) << "k " << k << ", " << parts;
      const Knn v = knn_ivf_gpus(p, x, k, KnnMetric::euclidean, io);
      EXPECT_EQ(v.indices, ivf_one.indices) << "k " << k << ", " << parts;
      EXPECT_EQ(v.distances, ivf_one.distances) << "k " << k << ", " << parts;
    }
  }
}

}  // namespace
}  // namespace scurry
