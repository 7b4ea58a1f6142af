// scale: against a dense float64 oracle (ddof=1 std, centred and not, clipping, constant genes),
// CSR vs dense input, 1 vs 2 threads bit-identical, Dataset slots, bad input, and scanpy 1.9.6's
// scaled X / var['mean'] / var['std'] on the pbmc3k HVGs.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "io/h5ad.hpp"
#include "pp/scale.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

struct Oracle {
  std::vector<double> mean, std;
  DenseD y;
};

Oracle oracle(const DenseD& x, bool center, std::optional<double> max_value, bool clip_below = false) {
  const int64_t n = x.n_rows, g = x.n_cols;
  Oracle o;
  o.mean.assign(g, 0);
  o.std.assign(g, 0);
  for (int64_t j = 0; j < g; ++j) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x(i, j);
    const double m = s / n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += (x(i, j) - m) * (x(i, j) - m);
    const double sd = std::sqrt(ss / (n - 1));
    o.mean[j] = m;
    o.std[j] = sd == 0 ? 1 : sd;
  }
  o.y = DenseD(n, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) {
      double v = ((center ? x(i, j) - o.mean[j] : x(i, j))) / o.std[j];
      if (max_value && v > *max_value) v = *max_value;
      if (max_value && clip_below && center && v < -*max_value) v = -*max_value;
      o.y(i, j) = v;
    }
  return o;
}

void expect_vec(const std::vector<double>& got, const std::vector<double>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t j = 0; j < got.size(); ++j)
    if (!(std::fabs(got[j] - want[j]) <= rel * std::fabs(want[j])) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << j << "]: got " << got[j] << " want " << want[j];
  EXPECT_EQ(bad, 0) << what;
}
void expect_mat(const DenseD& got, const DenseD& want, double tol) {
  ASSERT_EQ(got.n_rows, want.n_rows);
  ASSERT_EQ(got.n_cols, want.n_cols);
  int bad = 0;
  for (size_t k = 0; k < got.data.size(); ++k)
    if (!(std::fabs(got.data[k] - want.data[k]) <= tol * std::max(1.0, std::fabs(want.data[k]))) && ++bad <= 5)
      ADD_FAILURE() << "entry " << k / want.n_cols << "," << k % want.n_cols << ": got " << got.data[k] << " want "
                    << want.data[k];
  EXPECT_EQ(bad, 0);
}

// log-like values: random counts, log1p'd, and a constant gene 0 and an all-zero gene 1.
CsrF make_values(int64_t n, int64_t g, double density, uint64_t seed) {
  CsrF m = test::random_counts(n, g, density, seed);
  for (float& v : m.data) v = std::log1p(v);
  DenseF d = to_dense_f(Matrix(m));
  for (int64_t i = 0; i < n; ++i) {
    d(i, 0) = 0.75f;
    d(i, 1) = 0.0f;
  }
  return to_csr_f(Matrix(d));
}

}  // namespace

TEST(Scale, CentredAndClippedMatchesOracle) {
  const uint64_t seed = test::fresh_seed();
  const CsrF x = make_values(150, 30, 0.3, seed);
  const DenseD xd = to_dense_d(Matrix(x));
  for (std::optional<double> mv : {std::optional<double>(), std::optional<double>(0.4)}) {
    ScaleOptions opt;
    opt.max_value = mv;
    const Oracle o = oracle(xd, true, mv);
    const ScaleResult rs = scale(Context::cpu(1), x, opt);
    ASSERT_TRUE(rs.X.is_dense());
    EXPECT_EQ(rs.X.dtype, DType::f32);
    expect_vec(rs.mean, o.mean, 1e-12, "mean");
    expect_vec(rs.std, o.std, 1e-6, "std");
    EXPECT_EQ(rs.std[0], 1.0);  // constant gene
    EXPECT_EQ(rs.std[1], 1.0);  // all-zero gene
    expect_mat(to_dense_d(rs.X), o.y, 1e-5);
    for (int64_t i = 0; i < 150; ++i) EXPECT_EQ(rs.X.dense_f()(i, 0), 0.0f);
    const ScaleResult rd = scale(Context::cpu(2), to_dense_f(Matrix(x)), opt);
    expect_vec(rd.std, o.std, 1e-6, "std dense");
    expect_mat(to_dense_d(rd.X), o.y, 1e-5);
    if (mv) {
      float lo = 0, hi = 0;
      for (float v : rs.X.dense_f().data) lo = std::min(lo, v), hi = std::max(hi, v);
      EXPECT_EQ(hi, 0.4f);
      EXPECT_LT(lo, -0.4f);  // scanpy 1.9.6 clips only from above
    }
  }
  ScaleOptions both;
  both.max_value = 0.4;
  both.clip_below = true;
  const ScaleResult rb = scale(Context::cpu(1), x, both);
  expect_mat(to_dense_d(rb.X), oracle(xd, true, 0.4, true).y, 1e-5);
}

TEST(Scale, UncentredStaysSparse) {
  const uint64_t seed = test::fresh_seed();
  const CsrF x = make_values(150, 30, 0.3, seed);
  const DenseD xd = to_dense_d(Matrix(x));
  ScaleOptions opt;
  opt.zero_center = false;
  opt.max_value = 2.0;
  const Oracle o = oracle(xd, false, 2.0);
  const ScaleResult r = scale(Context::cpu(2), x, opt);
  ASSERT_TRUE(r.X.is_sparse());
  EXPECT_EQ(r.X.csr_f().indices, x.indices);
  expect_vec(r.mean, o.mean, 1e-12, "mean");
  expect_vec(r.std, o.std, 1e-9, "std");  // two-pass in float64
  expect_mat(to_dense_d(r.X), o.y, 1e-6);
  const ScaleResult rd = scale(Context::cpu(1), to_dense_f(Matrix(x)), opt);
  ASSERT_TRUE(rd.X.is_dense());
  expect_mat(to_dense_d(rd.X), o.y, 1e-5);
}

TEST(Scale, ThreadCountDoesNotChangeBits) {
  const uint64_t seed = test::fresh_seed();
  const CsrF x = make_values(2000, 600, 0.3, seed);  // several blocks
  ScaleOptions opt;
  opt.max_value = 10;
  const ScaleResult a = scale(Context::cpu(1), x, opt);
  const ScaleResult b = scale(Context::cpu(2), x, opt);
  EXPECT_EQ(a.mean, b.mean);
  EXPECT_EQ(a.std, b.std);
  EXPECT_EQ(a.X.dense_f().data, b.X.dense_f().data);
  const Oracle o = oracle(to_dense_d(Matrix(x)), true, 10.0);
  expect_vec(b.std, o.std, 1e-6, "std");
}

TEST(Scale, DatasetSlotsAndBadInput) {
  const uint64_t seed = test::fresh_seed();
  Dataset d;
  const CsrF x = make_values(40, 12, 0.4, seed);
  d.X = Matrix(x);
  for (int i = 0; i < 40; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int j = 0; j < 12; ++j) d.var.index.push_back("g" + std::to_string(j));
  ScaleOptions opt;
  opt.max_value = 10;
  const ScaleResult r = scale(Context::cpu(1), d, opt);
  ASSERT_TRUE(std::holds_alternative<DenseF>(d.X.m));
  EXPECT_EQ(d.X.dtype, DType::f32);
  EXPECT_EQ(d.var.numeric("mean"), r.mean);
  EXPECT_EQ(d.var.numeric("std"), r.std);
  EXPECT_EQ(std::get<NumericColumn>(d.var.at("std").c).dtype, DType::f64);
  expect_mat(to_dense_d(d.X), oracle(to_dense_d(Matrix(x)), true, 10.0).y, 1e-5);

  ScaleOptions bad;
  bad.max_value = 0.0;
  EXPECT_THROW(scale(Context::cpu(1), x, bad), InputError);
  const CsrF one = make_values(1, 5, 0.5, seed);
  EXPECT_THROW(scale(Context::cpu(1), one, ScaleOptions{}), InputError);
}

TEST(Scale, MatchesScanpyOnPbmc3kHvgs) {
  Dataset gold = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  ASSERT_TRUE(gold.raw);
  const auto& hv = gold.raw->var.boolean("hvg_seurat_highly_variable");
  std::vector<int64_t> keep;
  for (size_t j = 0; j < hv.size(); ++j)
    if (hv[j]) keep.push_back(static_cast<int64_t>(j));
  ASSERT_EQ(keep.size(), 2000u);
  Dataset d;
  d.X = take_cols(gold.raw->X, keep);
  d.obs.index = gold.obs.index;
  d.var = gold.raw->var.take(keep);
  ASSERT_EQ(d.var.index, gold.var.index);
  ScaleOptions opt;
  opt.max_value = 10;
  scale(Context::cpu(2), d, opt);
  expect_vec(d.var.numeric("mean"), gold.var.numeric("mean"), 1e-6, "var/mean");
  expect_vec(d.var.numeric("std"), gold.var.numeric("std"), 1e-6, "var/std");
  const DenseD got = to_dense_d(d.X), want = to_dense_d(gold.X);
  ASSERT_EQ(got.n_rows, 1000);
  ASSERT_EQ(got.n_cols, 2000);
  double worst = 0;
  int bad = 0;
  for (size_t k = 0; k < got.data.size(); ++k) {
    const double e = std::fabs(got.data[k] - want.data[k]);
    worst = std::max(worst, e);
    if (e > 1e-5 && ++bad <= 5) ADD_FAILURE() << "X entry " << k << ": " << got.data[k] << " vs scanpy " << want.data[k];
  }
  EXPECT_EQ(bad, 0);
  std::printf("max |scurry - scanpy| on scaled X = %.3g\n", worst);
}
