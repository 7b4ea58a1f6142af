// normalize_total, log1p and the fused normalize_log1p: against a float64 oracle (given target,
// median target, exclude_highly_expressed, zero-total cells), CSR vs dense, fused vs two steps,
// 1 vs 2 threads bit-identical, Dataset slots, bad input, and scanpy 1.9.6's raw/X on pbmc3k.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "io/h5ad.hpp"
#include "pp/filter.hpp"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// Oracle: scanpy's definition in float64. `exclude`: a gene is left out of the totals when
// x > total * max_fraction in some cell (compared in float32, as scanpy compares).
DenseD oracle(const DenseD& x, std::optional<double> target, bool exclude, double max_fraction,
              std::vector<double>* totals_out = nullptr, std::vector<uint8_t>* included_out = nullptr) {
  const int64_t n = x.n_rows, g = x.n_cols;
  std::vector<double> tot(n, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) tot[i] += x(i, j);
  std::vector<uint8_t> inc(g, 1);
  if (exclude) {
    for (int64_t i = 0; i < n; ++i) {
      const float thr = static_cast<float>(tot[i]) * static_cast<float>(max_fraction);
      for (int64_t j = 0; j < g; ++j)
        if (static_cast<float>(x(i, j)) > thr) inc[j] = 0;
    }
    for (int64_t i = 0; i < n; ++i) {
      tot[i] = 0;
      for (int64_t j = 0; j < g; ++j)
        if (inc[j]) tot[i] += x(i, j);
    }
  }
  double t;
  if (target) {
    t = *target;
  } else {
    std::vector<double> pos;
    for (double v : tot)
      if (v > 0) pos.push_back(v);
    std::sort(pos.begin(), pos.end());
    const size_t m = pos.size();
    t = m % 2 ? pos[m / 2] : (pos[m / 2 - 1] + pos[m / 2]) / 2;
  }
  DenseD y(n, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) y(i, j) = x(i, j) * t / (tot[i] > 0 ? tot[i] : 1.0);
  if (totals_out) *totals_out = tot;
  if (included_out) *included_out = inc;
  return y;
}

void expect_close(const DenseD& got, const DenseD& want, double rel, double abs_tol = 0) {
  ASSERT_EQ(got.n_rows, want.n_rows);
  ASSERT_EQ(got.n_cols, want.n_cols);
  int bad = 0;
  for (size_t k = 0; k < got.data.size(); ++k) {
    const double g = got.data[k], w = want.data[k];
    if (!(std::fabs(g - w) <= rel * std::fabs(w) + abs_tol) && ++bad <= 5)
      ADD_FAILURE() << "entry " << k / want.n_cols << "," << k % want.n_cols << ": got " << g << " want " << w;
  }
  EXPECT_EQ(bad, 0);
}

DenseD log1p_of(DenseD y) {
  for (double& v : y.data) v = std::log1p(v);
  return y;
}

// Random counts with empty cells (rows 0 and 5) and one dominant gene in a few cells.
CsrF make_counts(int64_t n, int64_t g, uint64_t seed) {
  CsrF m = test::random_counts(n, g, 0.3, seed);
  DenseF d = to_dense_f(Matrix(m));
  for (int64_t j = 0; j < g; ++j) d(0, j) = d(5, j) = 0;
  d(2, 3) = 500;
  d(9, 7) = 800;
  return to_csr_f(Matrix(d));
}

}  // namespace

TEST(Normalize, TargetSumAndMedianMatchOracle) {
  const uint64_t seed = test::fresh_seed();
  const CsrF x = make_counts(120, 40, seed);
  const DenseD xd = to_dense_d(Matrix(x));
  for (std::optional<double> target : {std::optional<double>(1e4), std::optional<double>()}) {
    NormalizeTotalOptions opt;
    opt.target_sum = target;
    std::vector<double> tot;
    const DenseD want = oracle(xd, target, false, 0.05, &tot);
    CsrF a = x;
    const NormalizeTotalResult r = normalize_total(Context::cpu(1), a, opt);
    EXPECT_EQ(r.n_zero_cells, 2);
    for (size_t i = 0; i < tot.size(); ++i) EXPECT_EQ(r.counts_per_cell[i], tot[i]);
    expect_close(to_dense_d(Matrix(a)), want, 1e-6);
    DenseF b = to_dense_f(Matrix(x));
    normalize_total(Context::cpu(2), b, opt);
    expect_close(to_dense_d(Matrix(b)), want, 1e-6);
    for (int64_t j = 0; j < 40; ++j) EXPECT_EQ(b(0, j), 0.0f);  // zero cell stays zero, no NaN
    if (!target) {
      std::vector<double> pos;
      for (double t : tot)
        if (t > 0) pos.push_back(t);
      std::sort(pos.begin(), pos.end());
      EXPECT_DOUBLE_EQ(r.target_sum, pos.size() % 2 ? pos[pos.size() / 2]
                                                     : (pos[pos.size() / 2 - 1] + pos[pos.size() / 2]) / 2);
    }
  }
}

TEST(Normalize, ExcludeHighlyExpressed) {
  const uint64_t seed = test::fresh_seed();
  CsrF x = make_counts(120, 40, seed);
  // Cell 11: all its counts in gene 3, which is excluded (cell 2 has 500 of it): total 0 after
  // exclusion, so scanpy multiplies its values by target_sum.
  {
    DenseF d = to_dense_f(Matrix(x));
    for (int64_t j = 0; j < 40; ++j) d(11, j) = 0;
    d(11, 3) = 2;
    x = to_csr_f(Matrix(d));
  }
  const DenseD xd = to_dense_d(Matrix(x));
  NormalizeTotalOptions opt;
  opt.target_sum = 100.0;
  opt.exclude_highly_expressed = true;
  opt.max_fraction = 0.2;
  std::vector<double> tot;
  std::vector<uint8_t> inc;
  const DenseD want = oracle(xd, opt.target_sum, true, 0.2, &tot, &inc);
  EXPECT_EQ(inc[3], 0);
  EXPECT_EQ(inc[7], 0);
  CsrF a = x;
  const NormalizeTotalResult r = normalize_total(Context::cpu(2), a, opt);
  EXPECT_EQ(r.gene_included, inc);
  for (size_t i = 0; i < tot.size(); ++i) EXPECT_EQ(r.counts_per_cell[i], tot[i]);
  EXPECT_EQ(r.n_zero_cells, std::count(tot.begin(), tot.end(), 0.0));
  EXPECT_GE(r.n_zero_cells, 3);
  expect_close(to_dense_d(Matrix(a)), want, 1e-6);
  EXPECT_EQ(to_dense_f(Matrix(a))(11, 3), 200.0f);  // 2 * target_sum
  DenseF b = to_dense_f(Matrix(x));
  normalize_total(Context::cpu(1), b, opt);
  expect_close(to_dense_d(Matrix(b)), want, 1e-6);
}

TEST(Normalize, FusedLog1pAndThreadsAreBitIdentical) {
  const uint64_t seed = test::fresh_seed();
  const CsrF x = test::random_counts(2000, 600, 0.35, seed);  // several blocks
  NormalizeTotalOptions opt;  // median target
  CsrF a = x, b = x, c = x;
  normalize_total(Context::cpu(1), a, opt);
  log1p(Context::cpu(1), a, Log1pOptions{});
  normalize_log1p(Context::cpu(2), b, opt);
  normalize_log1p(Context::cpu(1), c, opt);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(b.data, c.data);
  expect_close(to_dense_d(Matrix(a)), log1p_of(oracle(to_dense_d(Matrix(x)), std::nullopt, false, 0)), 1e-6);
  // base 2
  Log1pOptions l2;
  l2.base = 2.0;
  CsrF d = x;
  const NormalizeTotalResult r = normalize_log1p(Context::cpu(2), d, opt, l2);
  DenseD want = oracle(to_dense_d(Matrix(x)), r.target_sum, false, 0);
  for (double& v : want.data) v = std::log1p(v) / std::log(2.0);
  expect_close(to_dense_d(Matrix(d)), want, 1e-6);
}

TEST(Normalize, DatasetSlotsAndBadInput) {
  const uint64_t seed = test::fresh_seed();
  Dataset d;
  const CsrF x = make_counts(60, 20, seed);
  d.X = Matrix(x, DType::i32);  // counts read from an integer file
  for (int i = 0; i < 60; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int j = 0; j < 20; ++j) d.var.index.push_back("g" + std::to_string(j));
  NormalizeTotalOptions opt;
  opt.target_sum = 1e4;
  opt.key_added = "norm_factor";
  const NormalizeTotalResult r = normalize_log1p(Context::cpu(1), d, opt);
  EXPECT_EQ(d.X.dtype, DType::f32);
  ASSERT_TRUE(d.uns.count("log1p"));
  EXPECT_TRUE(d.uns["log1p"].is_dict());
  EXPECT_TRUE(d.uns["log1p"].dict().empty());
  const auto& nf = d.obs.numeric("norm_factor");
  for (int i = 0; i < 60; ++i) EXPECT_EQ(nf[i], r.counts_per_cell[i]);
  expect_close(to_dense_d(d.X), log1p_of(oracle(to_dense_d(Matrix(x)), 1e4, false, 0)), 1e-6);

  Dataset e;
  e.X = Matrix(x);
  e.obs.index = d.obs.index;
  e.var.index = d.var.index;
  for (double bad : {0.0, -5.0, std::nan("")}) {
    NormalizeTotalOptions b;
    b.target_sum = bad;
    EXPECT_THROW(normalize_total(Context::cpu(1), e, b), InputError) << bad;
  }
  NormalizeTotalOptions mf;
  mf.exclude_highly_expressed = true;
  mf.max_fraction = 1.5;
  EXPECT_THROW(normalize_total(Context::cpu(1), e, mf), InputError);
  Log1pOptions lb;
  lb.base = 1.0;
  EXPECT_THROW(log1p(Context::cpu(1), e, lb), InputError);
  lb.base = -2.0;
  EXPECT_THROW(log1p(Context::cpu(1), e, lb), InputError);
  // All cells empty and no target: no median.
  CsrF z = CsrF::zeros(5, 4);
  EXPECT_THROW(normalize_total(Context::cpu(1), z, NormalizeTotalOptions{}), InputError);
  EXPECT_EQ(e.X.csr_f().data, x.data);  // failed calls left X untouched
}

TEST(Normalize, MatchesScanpyRawXOnPbmc3k) {
  Dataset gold = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  ASSERT_TRUE(gold.raw);
  const CsrF& g = gold.raw->X.csr_f();
  for (bool fused : {false, true}) {
    Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
    FilterCellsOptions co;
    co.min_genes = 200;
    filter_cells(Context::cpu(2), d, co);
    FilterGenesOptions go;
    go.min_cells = 3;
    filter_genes(Context::cpu(2), d, go);
    NormalizeTotalOptions opt;
    opt.target_sum = 1e4;
    if (fused) {
      normalize_log1p(Context::cpu(2), d, opt);
    } else {
      normalize_total(Context::cpu(1), d, opt);
      log1p(Context::cpu(2), d, Log1pOptions{});
    }
    const CsrF& x = d.X.csr_f();
    ASSERT_EQ(x.n_rows, g.n_rows);
    ASSERT_EQ(x.n_cols, g.n_cols);
    ASSERT_EQ(x.indptr, g.indptr);
    ASSERT_EQ(x.indices, g.indices);
    int bad = 0;
    double worst = 0;
    for (size_t k = 0; k < x.data.size(); ++k) {
      const double err = std::fabs(static_cast<double>(x.data[k]) - g.data[k]);
      worst = std::max(worst, err / std::max(1.0, std::fabs(static_cast<double>(g.data[k]))));
      if (err > 1e-6 * std::max(1.0, std::fabs(static_cast<double>(g.data[k]))) && ++bad <= 5)
        ADD_FAILURE() << "value " << k << ": " << x.data[k] << " vs scanpy " << g.data[k];
    }
    EXPECT_EQ(bad, 0);
    std::printf("fused=%d: max |scurry - scanpy| / max(1, |scanpy|) = %.3g\n", fused, worst);
  }
}
