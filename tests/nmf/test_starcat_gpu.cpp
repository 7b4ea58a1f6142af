// GPU (label gpu): starCAT's exact fit on the device against the CPU's, the oracle (itself checked
// against a brute-force NNLS in test_cnmf_dropin). Both run the one active-set code
// (nmf/nnls_active_set.hpp) in float64 with unfused products on the device, and the gather b = H x
// in the row's order on both, so the usages are expected to be equal bit for bit; the assertion
// allows 1e-6 of the cell's largest usage (16 float32 ulps), so that a difference in the last bit
// of a sqrt or a division would be reported rather than hidden, and a wrong solver (differences of
// the usages' own size) fails. Shapes cover each compile-time bound of k (8, 16, 32, 64) and
// several upload blocks.
#include <cmath>
#include <random>

#include "nmf/starcat.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// Spectra with shared genes (near-collinear programs make active sets change) and zero entries.
DenseD random_spectra(int k, int64_t g, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  DenseD H(k, g);
  std::vector<double> base(static_cast<size_t>(g));
  for (auto& b : base) b = u(rng);
  for (int a = 0; a < k; ++a)
    for (int64_t j = 0; j < g; ++j) H(a, j) = u(rng) < 0.3 ? 0.0 : static_cast<float>(0.5 * base[j] + u(rng));
  return H;
}

// Gene names g0, g<step>, g<2 step>, ...: n of them.
std::vector<std::string> gene_names(int64_t n, int64_t step = 1) {
  std::vector<std::string> v;
  for (int64_t j = 0; j < n; ++j) v.push_back("g" + std::to_string(j * step));
  return v;
}

void expect_gpu_equals_cpu(const Context& gpu, const CsrF& X, const DenseD& H, int64_t block) {
  const DenseF want = nnls_fixed_spectra(Context::cpu(2), X, H, 256);
  const DenseF got = nnls_fixed_spectra_gpu(gpu, X, H, block);
  ASSERT_EQ(got.n_rows, want.n_rows);
  ASSERT_EQ(got.n_cols, want.n_cols);
  int64_t equal = 0, positive = 0;
  for (int64_t i = 0; i < want.n_rows; ++i) {
    double scale = 0;
    for (int64_t a = 0; a < want.n_cols; ++a) scale = std::max(scale, static_cast<double>(want(i, a)));
    for (int64_t a = 0; a < want.n_cols; ++a) {
      ASSERT_NEAR(got(i, a), want(i, a), 1e-6 * scale) << "cell " << i << " program " << a << " (k " << H.n_rows << ")";
      equal += got(i, a) == want(i, a);
      positive += want(i, a) > 0;
    }
  }
  // The fit is not degenerate: a fair share of the usages is positive, and some are zero.
  EXPECT_GT(positive, static_cast<int64_t>(want.data.size()) / 10);
  EXPECT_LT(positive, static_cast<int64_t>(want.data.size()));
  std::printf("k %lld, %lld cells: %lld of %zu usages bit-identical to the CPU's\n", static_cast<long long>(H.n_rows),
              static_cast<long long>(X.n_rows), static_cast<long long>(equal), want.data.size());
}

}  // namespace

TEST(StarcatGpu, ExactFitEqualsCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t g = 300;
  for (const int k : {5, 12, 20, 40, 64}) {
    const CsrF X = test::random_counts(2500, g, 0.25, seed + static_cast<uint64_t>(k));
    const DenseD H = random_spectra(k, g, rng);
    expect_gpu_equals_cpu(gpu, X, H, k == 20 ? 700 : 1 << 20);
  }
}

TEST(StarcatGpu, FitThroughStarcatEqualsCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int k = 9;
  const int64_t g = 120;
  const CsrF Q = test::random_counts(1800, g + 30, 0.3, seed + 1);
  const std::vector<std::string> q_genes = gene_names(g + 30), ref_genes = gene_names(g, 2);  // ~half shared
  const DenseD ref = random_spectra(k, g, rng);
  StarcatOptions opt;
  opt.gpu_rows_per_block = 500;
  const StarcatResult want = starcat_fit(Context::cpu(2), Q, q_genes, ref, ref_genes, opt, "query");
  const StarcatResult got = starcat_fit(gpu, Q, q_genes, ref, ref_genes, opt, "query");
  ASSERT_EQ(got.genes, want.genes);
  ASSERT_EQ(got.usages.data.size(), want.usages.data.size());
  for (int64_t i = 0; i < want.usages.n_rows; ++i) {
    double scale = 0;
    for (int64_t a = 0; a < k; ++a) scale = std::max(scale, static_cast<double>(want.usages(i, a)));
    for (int64_t a = 0; a < k; ++a) ASSERT_NEAR(got.usages(i, a), want.usages(i, a), 1e-6 * scale) << i << " " << a;
  }
}

// starCAT's own solver on the GPU (nmf_fit_gpu with H fixed: float32 products, sklearn's stopping
// rule every 10 iterations) against the CPU's (float64 sums): both stop near the same point of the
// same iterations; a rounding difference can move the stop by 10 iterations, so the check is on the
// usages as a whole: relative Frobenius difference <= 1e-2 (a wrong update differs by O(1)).
TEST(StarcatGpu, MuSolverNearCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int k = 7;
  const int64_t g = 90;
  const CsrF Q = test::random_counts(1500, g, 0.35, seed + 2);
  const std::vector<std::string> genes = gene_names(g);
  const DenseD ref = random_spectra(k, g, rng);
  StarcatOptions opt;
  opt.exact = false;
  const StarcatResult want = starcat_fit(Context::cpu(2), Q, genes, ref, genes, opt, "query");
  const StarcatResult got = starcat_fit(gpu, Q, genes, ref, genes, opt, "query");
  ASSERT_EQ(got.usages.data.size(), want.usages.data.size());
  double d2 = 0, n2 = 0;
  for (size_t q = 0; q < want.usages.data.size(); ++q) {
    const double d = static_cast<double>(got.usages.data[q]) - want.usages.data[q];
    d2 += d * d, n2 += static_cast<double>(want.usages.data[q]) * want.usages.data[q];
  }
  ASSERT_GT(n2, 0);
  EXPECT_LE(std::sqrt(d2 / n2), 1e-2);
}
