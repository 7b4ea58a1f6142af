#include <cmath>
#include <set>

#include "core/error.hpp"
#include "sim/simulate.hpp"
#include "testlib.hpp"

using namespace scurry;

TEST(Simulate, ShapeValidityAndNnzTarget) {
  SimulateOptions o;
  o.n_cells = 3000;
  o.n_genes = 4000;
  o.nnz_per_cell = 500;
  o.n_clusters = 5;
  o.seed = test::fresh_seed();
  Dataset d = simulate(Context::cpu(2), o);
  const CsrF& X = d.X.csr_f();
  EXPECT_EQ(X.n_rows, 3000);
  EXPECT_EQ(X.n_cols, 4000);
  validate_csr(X, "sim");
  for (int64_t r = 0; r < X.n_rows; ++r)
    for (int64_t p = X.indptr[r] + 1; p < X.indptr[r + 1]; ++p) ASSERT_LT(X.indices[p - 1], X.indices[p]);
  for (float v : X.data) {
    ASSERT_GE(v, 1.0f);
    ASSERT_EQ(v, std::floor(v));
  }
  const double mean_nnz = static_cast<double>(X.nnz()) / X.n_rows;
  EXPECT_NEAR(mean_nnz, 500, 500 * 0.05) << "calibration of the library size";
  EXPECT_EQ(d.obs.n_rows(), 3000);
  EXPECT_EQ(d.var.index[0], "MT-1");
  const auto& cl = std::get<CategoricalColumn>(d.obs.at("cluster").c);
  std::set<int32_t> seen(cl.codes.begin(), cl.codes.end());
  EXPECT_EQ(seen.size(), 5u);
}

TEST(Simulate, SameSeedSameDataAnyThreads) {
  SimulateOptions o;
  o.n_cells = 5000;
  o.n_genes = 1000;
  o.nnz_per_cell = 100;
  o.seed = test::fresh_seed();
  Dataset a = simulate(Context::cpu(1), o), b = simulate(Context::cpu(2), o);
  EXPECT_EQ(a.X.csr_f().indptr, b.X.csr_f().indptr);
  EXPECT_EQ(a.X.csr_f().indices, b.X.csr_f().indices);
  EXPECT_EQ(a.X.csr_f().data, b.X.csr_f().data);
  o.seed += 1;
  Dataset c = simulate(Context::cpu(2), o);
  EXPECT_NE(a.X.csr_f().indices, c.X.csr_f().indices);
}

TEST(Simulate, ClustersDifferInMeanExpression) {
  // Cells of one cluster are closer to their own cluster's mean profile than to another's.
  SimulateOptions o;
  o.n_cells = 2000;
  o.n_genes = 2000;
  o.nnz_per_cell = 400;
  o.n_clusters = 2;
  o.de_fraction = 0.2;
  o.de_log_fc_sd = 1.5;
  o.seed = test::fresh_seed();
  Dataset d = simulate(Context::cpu(2), o);
  const CsrF& X = d.X.csr_f();
  const auto& cl = std::get<CategoricalColumn>(d.obs.at("cluster").c).codes;
  std::vector<std::vector<double>> mean(2, std::vector<double>(2000, 0.0));
  std::vector<double> n(2, 0);
  for (int64_t r = 0; r < X.n_rows; ++r) {
    double tot = 0;
    for (int64_t p = X.indptr[r]; p < X.indptr[r + 1]; ++p) tot += X.data[p];
    for (int64_t p = X.indptr[r]; p < X.indptr[r + 1]; ++p) mean[cl[r]][X.indices[p]] += std::log1p(1e4 * X.data[p] / tot);
    n[cl[r]] += 1;
  }
  for (int k = 0; k < 2; ++k)
    for (auto& x : mean[k]) x /= n[k];
  int correct = 0;
  for (int64_t r = 0; r < X.n_rows; ++r) {
    double tot = 0;
    for (int64_t p = X.indptr[r]; p < X.indptr[r + 1]; ++p) tot += X.data[p];
    std::vector<double> v(2000, 0.0);
    for (int64_t p = X.indptr[r]; p < X.indptr[r + 1]; ++p) v[X.indices[p]] = std::log1p(1e4 * X.data[p] / tot);
    double d0 = 0, d1 = 0;
    for (int g = 0; g < 2000; ++g) d0 += (v[g] - mean[0][g]) * (v[g] - mean[0][g]), d1 += (v[g] - mean[1][g]) * (v[g] - mean[1][g]);
    correct += (d0 < d1 ? 0 : 1) == cl[r];
  }
  EXPECT_GT(correct, 0.95 * X.n_rows);
}

TEST(Simulate, RejectsImpossibleTargets) {
  SimulateOptions o;
  o.n_genes = 100;
  o.nnz_per_cell = 90;
  EXPECT_THROW(calibrate_library_size(o), InputError);
  o.nnz_per_cell = 10;
  o.n_clusters = 0;
  EXPECT_THROW(calibrate_library_size(o), InputError);
}
