// GPU tests (label gpu) of Scrublet's neighbour count (scrublet_knn_gpu.hpp) and of scrublet on a
// GPU context:
// - exact mode (every list) equals a float64 brute force (the simulated rows among the k - 1 nearest
//   other rows by (distance, index)) on seeded clustered points without ties: k 300 and 1,713 over
//   20,000 x 30 (rows in shared memory), several chunks and lists split over them (a small buffer),
//   rows over the shared memory (60,000 points, read from global memory), 40 dims (64-wide rows);
// - the default IVF probes within +-1 of the exact counts on >= 99% of the points; two runs the same;
// - scrublet on a GPU context (the device pipeline: 20,000 planted cells are above its 8,192-cell
//   cut) against the CPU's exact search: scores correlated >= 0.99 and predictions agreeing on
//   >= 99% with the default (exact on the device at this size) and the exact option (the device
//   PCA's rounding moves a few cells across the k_adj-th neighbour, so not every score is the
//   CPU's); the IVF lists forced (SCURRY_SCRUBLET_KNN=ivf) >= 0.95 and >= 98% (the CPU's IVF
//   against its exact search printed beside it); the doublet pairs the CPU's; two GPU runs the same bits;
// - the host pipeline with the GPU count (SCURRY_SCRUBLET_PIPELINE=host) and exact search gives the
//   CPU's scores on >= 99.5% of the cells (the same embedding; equal distances aside).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "exec/context.hpp"
#include "pp/scrublet.hpp"
#include "pp/scrublet_knn_gpu.hpp"
#include "scrublet_planted.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// The oracle: rows >= n_obs among the k - 1 nearest other rows of row i (float64, ties by index).
int32_t brute_count(const DenseF& x, int64_t i, int64_t n_obs, int64_t k) {
  int32_t c = 0;
  for (const auto& [dist, id] : test::knn_oracle_row(x, i, KnnMetric::euclidean, static_cast<size_t>(k - 1)))
    c += id >= n_obs;
  return c;
}

// Checks the exact counts of every `stride`-th row (from a seeded start) against the oracle.
void expect_exact(const Context& gpu, const DenseF& x, int64_t n_obs, int64_t k, const ScrubletKnnOptions& o,
                  int64_t stride, const char* what) {
  ScrubletKnnStats st;
  const std::vector<int32_t> c = scrublet_sim_neighbor_counts_gpu(gpu, x, n_obs, k, o, &st);
  ASSERT_EQ(static_cast<int64_t>(c.size()), x.n_rows);
  int64_t bad = 0, checked = 0;
  for (int64_t i = stride / 2; i < x.n_rows; i += stride, ++checked) {
    const int32_t want = brute_count(x, i, n_obs, k);
    if (c[i] != want && bad++ < 5) ADD_FAILURE() << what << ": row " << i << " count " << c[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << checked << " rows differ";
  std::printf("%s: %lld lists, %lld chunks, %.0f candidates a point, %lld re-ranked on the host\n", what,
              static_cast<long long>(st.lists), static_cast<long long>(st.chunks), st.mean_candidates,
              static_cast<long long>(st.boundary_overflow));
}

}  // namespace

TEST(ScrubletKnnGpu, ExactEqualsBruteForce) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = test::clustered_points(20000, 30, 12, seed);
  ScrubletKnnOptions o;
  o.exact = true;
  o.seed = seed;
  expect_exact(gpu, x, 6667, 300, o, 7, "20,000 x 30, k 300");
  expect_exact(gpu, x, 6667, 1713, o, 11, "20,000 x 30, k 1,713");
  ScrubletKnnOptions small = o;
  small.buffer_entries = 3 * 20000 + 77;  // 3 queries a chunk: lists split over chunks
  small.n_lists = 37;
  expect_exact(gpu, x, 6667, 300, small, 97, "20,000 x 30, k 300, small buffer");
  const DenseF big = test::clustered_points(60000, 20, 8, seed + 1);  // rows over shared memory
  expect_exact(gpu, big, 20000, 50, o, 331, "60,000 x 20, k 50");
  const DenseF wide = test::clustered_points(5000, 40, 6, seed + 2);
  expect_exact(gpu, wide, 1700, 120, o, 13, "5,000 x 40, k 120");
}

TEST(ScrubletKnnGpu, DefaultProbesWithinOneOfExact) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = test::clustered_points(20000, 30, 12, seed);
  for (int64_t k : {300, 1713}) {
    ScrubletKnnOptions o;
    o.seed = seed;
    const std::vector<int32_t> a = scrublet_sim_neighbor_counts_gpu(gpu, x, 6667, k, o);
    const std::vector<int32_t> a2 = scrublet_sim_neighbor_counts_gpu(gpu, x, 6667, k, o);
    EXPECT_EQ(a, a2) << "two runs, k " << k;
    o.exact = true;
    const std::vector<int32_t> e = scrublet_sim_neighbor_counts_gpu(gpu, x, 6667, k, o);
    int64_t close = 0;
    for (size_t i = 0; i < e.size(); ++i) close += std::abs(a[i] - e[i]) <= 1;
    const double share = static_cast<double>(close) / static_cast<double>(e.size());
    EXPECT_GE(share, 0.99) << "k " << k << ", seed " << seed;
    std::printf("k %lld: default probes within 1 of exact on %.4f of the points\n", static_cast<long long>(k), share);
  }
}

TEST(ScrubletKnnGpu, BadInputNamesTheProblem) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const DenseF x = test::clustered_points(100, 5, 2, 1);
  EXPECT_THROW(scrublet_sim_neighbor_counts_gpu(gpu, x, 30, 100, {}), InputError);  // k >= n
  EXPECT_THROW(scrublet_sim_neighbor_counts_gpu(gpu, x, 300, 10, {}), InputError);  // n_obs > n
  EXPECT_THROW(scrublet_sim_neighbor_counts_gpu(Context::cpu(1), x, 30, 10, {}), InputError);
  const DenseF wide = test::clustered_points(100, 65, 2, 1);
  EXPECT_THROW(scrublet_sim_neighbor_counts_gpu(gpu, wide, 30, 10, {}), InputError);
}

namespace {
struct Agreement {
  double r = 0, agree = 0, same = 0;
  size_t cells = 0;
};
// Scores (Pearson) and predictions of a against the reference b, over b's scored cells.
Agreement agreement(const Dataset& a, const Dataset& b) {
  const auto& sa = a.obs.numeric("doublet_score");
  const auto& sb = b.obs.numeric("doublet_score");
  const auto& pa = std::get<BoolColumn>(a.obs.at("predicted_doublet").c).values;
  const auto& pb = std::get<BoolColumn>(b.obs.at("predicted_doublet").c).values;
  std::vector<double> fa, fb;
  int64_t agree = 0, same = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (std::isnan(sb[i])) continue;
    fa.push_back(sa[i]);
    fb.push_back(sb[i]);
    agree += pa[i] == pb[i];
    same += std::fabs(sa[i] - sb[i]) <= 1e-12 * std::max(1.0, std::fabs(sb[i]));
  }
  Agreement g;
  g.cells = fa.size();
  g.r = test::pearson(fa, fb);
  g.agree = static_cast<double>(agree) / static_cast<double>(fa.size());
  g.same = static_cast<double>(same) / static_cast<double>(fa.size());
  return g;
}
}  // namespace

// The device pipeline against the CPU's exact search (the reference): its default (exact on the
// device at this size), its exact mode, and its IVF lists forced (SCURRY_SCRUBLET_KNN=ivf; the CPU's
// own IVF against its exact search printed beside it).
TEST(ScrubletGpu, MatchesCpuOnPlantedCells) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  const uint64_t seed = test::fresh_seed();
  const test::Planted p = test::planted(seed, 20000, 300);
  ScrubletOptions o;
  o.random_state = seed;
  Dataset cpu_default = test::dataset_of(p), ref = test::dataset_of(p);
  scrublet(cpu, cpu_default, o);
  ScrubletOptions oe = o;
  oe.use_approx_neighbors = false;
  scrublet(cpu, ref, oe);
  const Agreement cal = agreement(cpu_default, ref);
  std::printf("CPU default (IVF) vs CPU exact, 20,000 cells: correlation %.4f, predictions agree %.4f\n", cal.r,
              cal.agree);
  for (const char* mode : {"default", "exact", "ivf"}) {
    const ScrubletOptions& om = std::string(mode) == "exact" ? oe : o;
    if (std::string(mode) == "ivf") setenv("SCURRY_SCRUBLET_KNN", "ivf", 1);
    Dataset a = test::dataset_of(p), a2 = test::dataset_of(p);
    scrublet(gpu, a, om);
    scrublet(gpu, a2, om);
    unsetenv("SCURRY_SCRUBLET_KNN");
    const auto& sa = a.obs.numeric("doublet_score");
    const auto& sa2 = a2.obs.numeric("doublet_score");
    ASSERT_EQ(sa.size(), sa2.size());
    int64_t same_bits = 0;
    for (size_t i = 0; i < sa.size(); ++i) same_bits += std::memcmp(&sa[i], &sa2[i], sizeof(double)) == 0;
    EXPECT_EQ(same_bits, static_cast<int64_t>(sa.size())) << mode << ": two GPU runs";
    const auto& ua = a.uns.at("scrublet").dict(), &ub = ref.uns.at("scrublet").dict();
    EXPECT_EQ(std::get<NumArray>(ua.at("doublet_parents").v).data, std::get<NumArray>(ub.at("doublet_parents").v).data);
    const Agreement g = agreement(a, ref);
    ASSERT_GT(g.cells, 19000u);
    std::printf("GPU %s vs CPU exact, 20,000 cells: score correlation %.4f, predictions agree %.4f, same score %.4f\n",
                mode, g.r, g.agree, g.same);
    // The IVF lists (their queries share one candidate set) are looser than the CPU's per-query probes.
    const bool ivf = std::string(mode) == "ivf";
    EXPECT_GE(g.r, ivf ? 0.95 : 0.99) << mode << ", seed " << seed;
    EXPECT_GE(g.agree, ivf ? 0.98 : 0.99) << mode << ", seed " << seed;
  }
}

TEST(ScrubletGpu, HostPipelineWithGpuCountIsTheCpus) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  const uint64_t seed = test::fresh_seed();
  const test::Planted p = test::planted(seed, 9000, 300);
  Dataset a = test::dataset_of(p), b = test::dataset_of(p);
  ScrubletOptions o;
  o.random_state = seed;
  o.use_approx_neighbors = false;
  setenv("SCURRY_SCRUBLET_PIPELINE", "host", 1);
  scrublet(gpu, a, o);
  unsetenv("SCURRY_SCRUBLET_PIPELINE");
  scrublet(cpu, b, o);
  const auto& sa = a.obs.numeric("doublet_score");
  const auto& sb = b.obs.numeric("doublet_score");
  int64_t same = 0, finite = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (std::isnan(sb[i])) continue;
    ++finite;
    same += std::fabs(sa[i] - sb[i]) <= 1e-12 * std::max(1.0, std::fabs(sb[i]));
  }
  ASSERT_GT(finite, 8500);
  EXPECT_GE(static_cast<double>(same), 0.995 * static_cast<double>(finite)) << "seed " << seed;
}
