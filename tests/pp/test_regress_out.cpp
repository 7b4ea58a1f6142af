// regress_out: against a direct per-gene least-squares oracle (normal equations in long double) on
// seeded random data, numeric and categorical keys, constant genes left unchanged, 1 vs 2 threads
// bit-identical, bad keys, and scanpy 1.9.6's regress_out(['total_counts', 'pct_counts_mt']) of
// pbmc3k's log-normalised HVGs within 1e-4.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "integrate_golden.hpp"
#include "pp/regress_out.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// Solves the p x p system A x = b (Gaussian elimination with partial pivoting, long double).
std::vector<long double> solve(std::vector<std::vector<long double>> A, std::vector<long double> b) {
  const size_t p = b.size();
  for (size_t c = 0; c < p; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < p; ++r)
      if (std::fabs(A[r][c]) > std::fabs(A[piv][c])) piv = r;
    std::swap(A[c], A[piv]);
    std::swap(b[c], b[piv]);
    for (size_t r = c + 1; r < p; ++r) {
      const long double f = A[r][c] / A[c][c];
      for (size_t k = c; k < p; ++k) A[r][k] -= f * A[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<long double> x(p);
  for (size_t c = p; c-- > 0;) {
    long double s = b[c];
    for (size_t k = c + 1; k < p; ++k) s -= A[c][k] * x[k];
    x[c] = s / A[c][c];
  }
  return x;
}

// Residuals of column j of Y regressed on the columns of D (n x p), as scanpy's per-gene GLM fit.
std::vector<double> ols_residual(const DenseF& Y, int64_t j, const std::vector<std::vector<double>>& D) {
  const size_t n = static_cast<size_t>(Y.n_rows), p = D.size();
  std::vector<std::vector<long double>> A(p, std::vector<long double>(p, 0));
  std::vector<long double> b(p, 0);
  for (size_t a = 0; a < p; ++a) {
    for (size_t c = 0; c < p; ++c)
      for (size_t i = 0; i < n; ++i) A[a][c] += static_cast<long double>(D[a][i]) * D[c][i];
    for (size_t i = 0; i < n; ++i) b[a] += static_cast<long double>(D[a][i]) * Y(i, j);
  }
  const auto beta = solve(A, b);
  std::vector<double> r(n);
  for (size_t i = 0; i < n; ++i) {
    long double f = 0;
    for (size_t a = 0; a < p; ++a) f += beta[a] * D[a][i];
    r[i] = static_cast<double>(Y(i, j) - f);
  }
  return r;
}

DenseF random_matrix(int64_t n, int64_t g, std::mt19937_64& rng) {
  std::gamma_distribution<double> gam(0.7, 1.5);
  std::bernoulli_distribution zero(0.4);
  DenseF Y(n, g);
  for (auto& v : Y.data) v = zero(rng) ? 0.0f : static_cast<float>(std::log1p(gam(rng)));
  return Y;
}

TEST(RegressOut, NumericKeysMatchLeastSquares) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t n = 700, g = 37;
  DenseF Y = random_matrix(n, g, rng);
  std::normal_distribution<double> nd(0, 1);
  std::vector<double> k1(n), k2(n);
  for (int64_t i = 0; i < n; ++i) {
    k1[i] = 2000 + 800 * nd(rng);
    k2[i] = std::fabs(3 + 2 * nd(rng));
    Y(i, 3) += static_cast<float>(1e-4 * k1[i]);  // a gene that depends on key 1
  }
  for (int64_t i = 0; i < n; ++i) Y(i, 5) = 1.25f;  // constant gene: unchanged
  Dataset d;
  d.X = Matrix(Y);
  d.obs.index.resize(n);
  d.var.index.resize(g);
  d.obs.set("total_counts", Column::numeric(k1));
  d.obs.set("pct_counts_mt", Column::numeric(k2));
  RegressOutOptions opt;
  opt.keys = {"total_counts", "pct_counts_mt"};
  Dataset d1 = d, d2 = d;
  regress_out(Context::cpu(1), d1, opt);
  regress_out(Context::cpu(2), d2, opt);
  const DenseF& r1 = d1.X.dense_f();
  EXPECT_EQ(r1.data, d2.X.dense_f().data) << "1 vs 2 threads differ (seed " << seed << ")";
  std::vector<std::vector<double>> D = {std::vector<double>(n, 1.0), k1, k2};
  double worst = 0;
  for (int64_t j = 0; j < g; ++j) {
    if (j == 5) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r1(i, j), 1.25f) << "constant gene changed";
      continue;
    }
    const auto want = ols_residual(Y, j, D);
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(r1(i, j) - want[i]));
  }
  EXPECT_LT(worst, 2e-6) << "seed " << seed;
}

TEST(RegressOut, CategoricalKeyMatchesLeastSquaresOnCategoryMeans) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t n = 900, g = 23, k = 4;
  DenseF Y = random_matrix(n, g, rng);
  CategoricalColumn cat;
  cat.categories = {"s0", "s1", "s2", "s3", "unused"};
  std::uniform_int_distribution<int> pick(0, k - 1);
  for (int64_t i = 0; i < n; ++i) {
    cat.codes.push_back(pick(rng));
    for (int64_t j = 0; j < g; ++j) Y(i, j) += 0.3f * static_cast<float>(cat.codes.back()) * (j % 3);
  }
  Dataset d;
  d.X = Matrix(Y);
  d.obs.index.resize(n);
  d.var.index.resize(g);
  d.obs.set("sample", Column(cat));
  RegressOutOptions opt;
  opt.keys = {"sample"};
  Dataset d2 = d;
  regress_out(Context::cpu(2), d, opt);
  regress_out(Context::cpu(1), d2, opt);
  EXPECT_EQ(d.X.dense_f().data, d2.X.dense_f().data);
  double worst = 0;
  for (int64_t j = 0; j < g; ++j) {
    std::vector<double> s(k, 0), c(k, 0);
    for (int64_t i = 0; i < n; ++i) {
      s[cat.codes[i]] += Y(i, j);
      c[cat.codes[i]] += 1;
    }
    std::vector<std::vector<double>> D = {std::vector<double>(n, 1.0), std::vector<double>(n)};
    for (int64_t i = 0; i < n; ++i) D[1][i] = static_cast<float>(s[cat.codes[i]] / c[cat.codes[i]]);
    const auto want = ols_residual(Y, j, D);
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(d.X.dense_f()(i, j) - want[i]));
  }
  EXPECT_LT(worst, 2e-6) << "seed " << seed;
}

TEST(RegressOut, BadKeysNameTheColumn) {
  Dataset d;
  d.X = Matrix(DenseF(3, 2, 1.0f));
  d.obs.index = {"a", "b", "c"};
  d.var.index = {"g1", "g2"};
  d.obs.set("num", Column::numeric({1, 2, 3}));
  d.obs.set("cat", Column::strings({"x", "y", "x"}));
  RegressOutOptions opt;
  opt.keys = {"nope"};
  try {
    regress_out(Context::cpu(1), d, opt);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
  opt.keys = {"cat", "num"};
  EXPECT_THROW(regress_out(Context::cpu(1), d, opt), InputError);
  opt.keys = {"num", "cat"};
  EXPECT_THROW(regress_out(Context::cpu(1), d, opt), InputError);
  opt.keys = {"num"};
  opt.layer = "absent";
  EXPECT_THROW(regress_out(Context::cpu(1), d, opt), InputError);
}

TEST(RegressOut, MatchesScanpyOnPbmc) {
  Dataset d = test::integrate_input();
  RegressOutOptions opt;
  opt.keys = {"total_counts", "pct_counts_mt"};
  regress_out(Context::cpu(2), d, opt);
  const DenseD ref = test::integrate_reference("regress_out");
  const DenseF& got = d.X.dense_f();
  ASSERT_EQ(got.n_rows, ref.n_rows);
  double worst = 0;
  for (int64_t i = 0; i < ref.n_rows; ++i)
    for (int64_t j = 0; j < ref.n_cols; ++j) worst = std::max(worst, std::fabs(got(i, j) - ref(i, j)));
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
