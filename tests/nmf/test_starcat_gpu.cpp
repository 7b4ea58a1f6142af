// GPU (label gpu): starCAT's exact fit on the device against the CPU's, the oracle (itself checked
// against a brute-force NNLS in test_cnmf_dropin). Both run the one active-set code
// (nmf/nnls_active_set.hpp) in float64 with unfused products on the device, and the gather b = H x
// in the row's order on both, so the usages are expected to be equal bit for bit; the assertion
// allows 1e-6 of the cell's largest usage (16 float32 ulps), so that a difference in the last bit
// of a sqrt or a division would be reported rather than hidden, and a wrong solver (differences of
// the usages' own size) fails. Shapes cover each compile-time bound of k (8, 16, 32, 64) and
// several upload blocks. starcat_fit's device path (the raw query uploaded once; the value check,
// the per-gene sums and the scaling on the device) is held to the CPU's usages bit for bit (memcmp):
// genes missing from either side, a shared gene without counts, unsorted columns, empty and dense
// cells, two ranges of fit columns; and the CPU's error for a negative value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "core/error.hpp"
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

namespace {

// A query for starcat_fit's device path against its CPU path: `cells` cells over `qg` query genes
// (named q<j> in a shuffled order, so the fit's columns, in query order, are not the names' order),
// density `density`, each cell's entries shuffled (unsorted columns), a few empty cells, a few dense
// cells (all genes: rows longer than the device's 4,096-entry tiles when qg > 4,096), and shared gene
// `zero_gene` emptied (sd 0 -> 1). The reference: rg genes, every other one named as a query gene
// (the rest missing from the query), so query genes are missing from the reference too.
struct StarcatCase {
  CsrF Q;
  std::vector<std::string> q_genes, ref_genes;
  DenseD ref;
};

StarcatCase starcat_case(int64_t cells, int64_t qg, int64_t rg, int k, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  StarcatCase c;
  std::vector<int64_t> order(static_cast<size_t>(qg));
  for (int64_t j = 0; j < qg; ++j) order[j] = j;
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t j = 0; j < qg; ++j) c.q_genes.push_back("q" + std::to_string(order[j]));
  for (int64_t j = 0; j < rg; ++j) c.ref_genes.push_back(j % 2 ? "r" + std::to_string(j) : "q" + std::to_string(j));
  c.ref = random_spectra(k, rg, rng);
  // The query column named q0 (a shared gene: reference gene 0) has no counts.
  int32_t zero_col = 0;
  for (int64_t j = 0; j < qg; ++j)
    if (order[j] == 0) zero_col = static_cast<int32_t>(j);
  const CsrF R = test::random_counts(cells, qg, density, seed + 1, 30);
  c.Q = CsrF::zeros(cells, qg);
  for (int64_t i = 0; i < cells; ++i) {
    std::vector<std::pair<int32_t, float>> row;
    if (i % 997 == 5) {  // dense
      for (int32_t j = 0; j < qg; ++j) row.emplace_back(j, static_cast<float>(1 + static_cast<int>(u(rng) * 9)));
    } else if (i % 1009 != 7) {  // else empty
      for (int64_t p = R.indptr[i]; p < R.indptr[i + 1]; ++p) row.emplace_back(R.indices[p], R.data[p]);
    }
    std::shuffle(row.begin(), row.end(), rng);
    for (const auto& [j, v] : row)
      if (j != zero_col) c.Q.indices.push_back(j), c.Q.data.push_back(v);
    c.Q.indptr[i + 1] = static_cast<int64_t>(c.Q.data.size());
  }
  return c;
}

// starcat_fit on the GPU (the whole fit on the device: device_prep) equals the CPU's, bit for bit.
void expect_device_fit_equals_cpu(const StarcatCase& c, bool scale) {
  const Context gpu = test::gpu_context();
  StarcatOptions opt;
  opt.scale = scale;
  const StarcatResult want = starcat_fit(Context::cpu(2), c.Q, c.q_genes, c.ref, c.ref_genes, opt, "query");
  const StarcatResult got = starcat_fit(gpu, c.Q, c.q_genes, c.ref, c.ref_genes, opt, "query");
  EXPECT_TRUE(got.device_prep) << "the check and the sums ran on the host";
  ASSERT_EQ(got.genes, want.genes);
  ASSERT_EQ(got.usages.n_rows, want.usages.n_rows);
  ASSERT_EQ(got.usages.n_cols, want.usages.n_cols);
  int64_t differ = 0, positive = 0;
  double worst = 0;
  for (size_t q = 0; q < want.usages.data.size(); ++q) {
    differ += std::memcmp(&got.usages.data[q], &want.usages.data[q], sizeof(float)) != 0;
    worst = std::max(worst, std::fabs(static_cast<double>(got.usages.data[q]) - want.usages.data[q]));
    positive += want.usages.data[q] > 0;
  }
  EXPECT_EQ(differ, 0) << "usages not bit-identical to the CPU's; largest |difference| " << worst;
  EXPECT_GT(positive, static_cast<int64_t>(want.usages.data.size()) / 10);
  std::printf("%lld cells x %zu shared genes (scale %d): %lld of %zu usages differ from the CPU's\n",
              static_cast<long long>(c.Q.n_rows), want.genes.size(), scale ? 1 : 0, static_cast<long long>(differ),
              want.usages.data.size());
}

}  // namespace

// Three blocks of 16,384 cells for the gene sums (their partials added in block order), one range
// of fit columns; scaled and unscaled.
TEST(StarcatGpu, DeviceFitBitIdenticalToCpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const StarcatCase c = starcat_case(40000, 260, 300, 12, 0.2, seed);
  expect_device_fit_equals_cpu(c, true);
  expect_device_fit_equals_cpu(c, false);
}

// More fit columns than one thread block of the sums holds (2,048: two column ranges), cells longer
// than a staging tile (the dense ones: 5,000 entries), two blocks of cells.
TEST(StarcatGpu, DeviceFitManyGenesBitIdenticalToCpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const StarcatCase c = starcat_case(20000, 5000, 6000, 20, 0.01, seed);
  expect_device_fit_equals_cpu(c, true);
}

// A gene twice in a cell: the device cannot order its sums, so the host sums them (device_prep
// false) and the usages are still the CPU's.
TEST(StarcatGpu, RepeatedGeneSummedOnHost) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  StarcatCase c = starcat_case(3000, 80, 80, 6, 0.3, seed);
  CsrF& Q = c.Q;
  CsrF D = CsrF::zeros(Q.n_rows, Q.n_cols);
  for (int64_t i = 0; i < Q.n_rows; ++i) {
    for (int64_t p = Q.indptr[i]; p < Q.indptr[i + 1]; ++p) D.indices.push_back(Q.indices[p]), D.data.push_back(Q.data[p]);
    if (i == 1234)  // again the cell's first shared gene (q<even>: in the reference)
      for (int64_t p = Q.indptr[i]; p < Q.indptr[i + 1]; ++p)
        if (std::stoi(c.q_genes[Q.indices[p]].substr(1)) % 2 == 0) {
          D.indices.push_back(Q.indices[p]), D.data.push_back(3.0f);
          break;
        }
    D.indptr[i + 1] = static_cast<int64_t>(D.data.size());
  }
  ASSERT_GT(D.nnz(), Q.nnz());
  const StarcatOptions opt;
  const StarcatResult want = starcat_fit(Context::cpu(2), D, c.q_genes, c.ref, c.ref_genes, opt, "query");
  const StarcatResult got = starcat_fit(test::gpu_context(), D, c.q_genes, c.ref, c.ref_genes, opt, "query");
  EXPECT_FALSE(got.device_prep);
  EXPECT_EQ(got.usages.data, want.usages.data);
}

// Larger than one upload block: checked and summed on the host, fitted block-wise; the same bits.
TEST(StarcatGpu, BlockwiseFitBitIdenticalToCpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const StarcatCase c = starcat_case(5000, 150, 150, 10, 0.2, seed);
  StarcatOptions opt;
  opt.gpu_rows_per_block = 1300;
  const StarcatResult want = starcat_fit(Context::cpu(2), c.Q, c.q_genes, c.ref, c.ref_genes, opt, "query");
  const StarcatResult got = starcat_fit(test::gpu_context(), c.Q, c.q_genes, c.ref, c.ref_genes, opt, "query");
  EXPECT_FALSE(got.device_prep);
  EXPECT_EQ(got.usages.data, want.usages.data);
}

// A negative value (and a NaN) in the query: the device's check reports the first one by position
// with the CPU's message, on both paths.
TEST(StarcatGpu, NegativeValueErrorOnDevice) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  StarcatCase c = starcat_case(3000, 60, 60, 5, 0.3, seed);
  ASSERT_GT(c.Q.nnz(), 1000);
  c.Q.data[c.Q.nnz() / 3] = -2.5f;
  c.Q.data[c.Q.nnz() / 2] = std::nanf("");
  for (const int64_t block : {int64_t(1) << 20, int64_t(700)}) {
    StarcatOptions opt;
    opt.gpu_rows_per_block = block;
    std::string cpu_msg, gpu_msg;
    try {
      starcat_fit(Context::cpu(2), c.Q, c.q_genes, c.ref, c.ref_genes, opt, "query.h5ad");
    } catch (const InputError& e) {
      cpu_msg = e.what();
    }
    try {
      starcat_fit(test::gpu_context(), c.Q, c.q_genes, c.ref, c.ref_genes, opt, "query.h5ad");
    } catch (const InputError& e) {
      gpu_msg = e.what();
    }
    EXPECT_NE(gpu_msg.find("query.h5ad: the query has the value -2.5"), std::string::npos) << gpu_msg;
    EXPECT_EQ(gpu_msg, cpu_msg);
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
