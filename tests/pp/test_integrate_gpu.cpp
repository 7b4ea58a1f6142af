// The batch tools on the GPU against their CPU paths (the oracles; themselves tested against
// harmonypy and scanpy in test_harmony.cpp, test_regress_out.cpp, test_combat.cpp), on fresh seeded
// synthetic batches:
// - Harmony (harmony_gpu vs harmony, one key and two keys): the GPU shuffles the cells of the R
//   update with its own RNG and sums in other orders, so the results agree statistically: the 15-NN
//   of X_pca_harmony shared >= 0.95, batch mixing (iLISI) and cell-type purity within 2%, the
//   largest coordinate difference <= 2% of the embedding's spread (two CPU runs with different
//   seeds on these data: overlap 0.980-0.987, largest difference 0.13-0.31% of the spread); and
//   two GPU runs give the same bits;
// - regress_out (numeric design; one categorical key), ComBat (several shapes, 0-2 covariates):
//   within 1e-4 of the CPU, the same bits twice; the Dataset-level entry points dispatch to the GPU;
// - Scrublet with a GPU context (its exact kNN on the device): the doublet scores of the CPU run on
//   >= 99.5% of the cells (an exact search either way; equal distances may order differently) and
//   the same predicted doublets on >= 99.5%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <cmath>
#include <random>
#include <vector>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "exec/context.hpp"
#include "harmony_batches.hpp"
#include "pp/combat.hpp"
#include "pp/harmony.hpp"
#include "pp/harmony_gpu.hpp"
#include "pp/regress_out.hpp"
#include "pp/scrublet.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

using test::Batches;
using test::batches;
using test::expect_harmony_close;

void expect_close(const DenseF& a, const DenseF& b, double tol, const char* what) {
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  double worst = 0;
  for (size_t k = 0; k < a.data.size(); ++k) {
    const double e = std::fabs(static_cast<double>(a.data[k]) - b.data[k]) / std::max(1.0, std::fabs(static_cast<double>(b.data[k])));
    worst = std::max(worst, e);
  }
  EXPECT_LE(worst, tol) << what;
}

bool same_bits(const DenseF& a, const DenseF& b) {
  return a.data.size() == b.data.size() && std::equal(a.data.begin(), a.data.end(), b.data.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof(float)) == 0;
         });
}

// Dense cells x genes: 4 cell types, per-batch location and scale per gene, two numeric covariates
// entering linearly, one constant gene (left unchanged by both tools).
struct Expr {
  DenseF Y;
  std::vector<int32_t> batch;
  DenseD design, cov;
};
Expr expression(uint64_t seed, int64_t n, int64_t g, int nb) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  Expr e{DenseF(n, g), {}, DenseD(n, 3), DenseD(n, 1)};
  std::vector<double> mu(static_cast<size_t>(4 * g)), loc(static_cast<size_t>(nb * g)), sc(static_cast<size_t>(nb * g));
  for (auto& x : mu) x = 2 + nd(rng);
  for (auto& x : loc) x = 0.5 * nd(rng);
  for (auto& x : sc) x = std::exp(0.3 * nd(rng));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = static_cast<int32_t>(rng() % nb), t = static_cast<int32_t>(rng() % 4);
    const double c1 = 1000 + 300 * nd(rng), c2 = 5 + nd(rng);
    e.batch.push_back(b);
    e.design(i, 0) = 1, e.design(i, 1) = c1, e.design(i, 2) = c2;
    e.cov(i, 0) = c2;
    for (int64_t j = 0; j < g; ++j)
      e.Y(i, j) = j == 3 ? 1.25f
                         : static_cast<float>(mu[t * g + j] + loc[b * g + j] + sc[b * g + j] * nd(rng) + 1e-3 * c1 +
                                              0.2 * c2);
  }
  return e;
}

}  // namespace

TEST(IntegrateGpu, HarmonyOneKeyMatchesCpuAndIsReproducible) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  const Batches b = batches(test::fresh_seed(), 5000, 20, 3);
  HarmonyOptions opt;
  opt.keys = {"batch"};
  const HarmonyResult g1 = harmony_gpu(gpu, b.Z, {b.batch}, {3}, opt);
  const HarmonyResult c = harmony(cpu, b.Z, {b.batch}, {3}, opt);
  expect_harmony_close(g1.Z_corr, c.Z_corr, b.batch, b.type, "one key");
  EXPECT_GE(g1.iterations, 1);
  EXPECT_LE(g1.objective_harmony.back(), g1.objective_harmony.front());  // the objective went down
  const HarmonyResult g2 = harmony_gpu(gpu, b.Z, {b.batch}, {3}, opt);
  ASSERT_EQ(g1.Z_corr.data.size(), g2.Z_corr.data.size());
  EXPECT_TRUE(std::memcmp(g1.Z_corr.data.data(), g2.Z_corr.data.data(), g1.Z_corr.data.size() * sizeof(double)) == 0)
      << "two GPU runs differ";
  EXPECT_EQ(g1.objective_harmony, g2.objective_harmony);
}

TEST(IntegrateGpu, HarmonyTwoKeysMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  const Batches b = batches(test::fresh_seed(), 3000, 15, 3);
  HarmonyOptions opt;
  opt.keys = {"batch", "donor"};
  opt.theta = {2.0, 1.0};
  const HarmonyResult g = harmony_gpu(gpu, b.Z, {b.batch, b.donor}, {3, 2}, opt);
  const HarmonyResult c = harmony(cpu, b.Z, {b.batch, b.donor}, {3, 2}, opt);
  expect_harmony_close(g.Z_corr, c.Z_corr, b.batch, b.type, "two keys");
}

TEST(IntegrateGpu, HarmonyIntegrateDispatchesToTheGpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const Batches b = batches(test::fresh_seed(), 1500, 10, 2);
  Dataset d;
  d.obs.index.resize(1500);
  for (int64_t i = 0; i < 1500; ++i) d.obs.index[i] = "c" + std::to_string(i);
  CategoricalColumn cat;
  cat.categories = {"a", "b"};
  cat.codes = b.batch;
  d.obs.set("batch", Column(cat));
  DenseF zf(1500, 10);
  for (size_t k = 0; k < zf.data.size(); ++k) zf.data[k] = static_cast<float>(b.Z.data[k]);
  d.obsm["X_pca"] = Matrix(std::move(zf));
  HarmonyOptions opt;
  opt.keys = {"batch"};
  const HarmonyResult r = harmony_integrate(gpu, d, opt);
  const DenseF& out = d.obsm.at("X_pca_harmony").dense_f();
  ASSERT_EQ(out.n_rows, 1500);
  ASSERT_EQ(out.n_cols, 10);
  // The float32 basis goes through harmony_gpu's float32 entry (widened and narrowed on the device):
  // the same as harmony_gpu on the basis widened to float64 on the host, narrowed.
  DenseD z(1500, 10);
  const DenseF& basis = d.obsm.at("X_pca").dense_f();
  for (size_t k = 0; k < z.data.size(); ++k) z.data[k] = basis.data[k];
  const HarmonyResult g = harmony_gpu(gpu, z, {b.batch}, {2}, opt);
  ASSERT_EQ(g.Z_corr.data.size(), out.data.size());
  for (size_t k = 0; k < out.data.size(); ++k) ASSERT_EQ(out.data[k], static_cast<float>(g.Z_corr.data[k])) << k;
  EXPECT_EQ(r.objective_harmony, g.objective_harmony);
  EXPECT_EQ(r.iterations, g.iterations);
  // A non-finite value is an input error on this path too.
  DenseF bad = basis;
  bad.data[17] = std::numeric_limits<float>::quiet_NaN();
  d.obsm["X_pca"] = Matrix(std::move(bad));
  EXPECT_THROW(harmony_integrate(gpu, d, opt), InputError);
}

TEST(IntegrateGpu, RegressOutMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  const Expr e = expression(test::fresh_seed(), 4000, 97, 5);
  DenseF a = e.Y, b = e.Y, c = e.Y;
  double dev = -1;
  regress_out_design_gpu(gpu, a, e.design, &dev);
  regress_out_design(cpu, b, e.design);
  expect_close(a, b, 1e-4, "numeric design");
  EXPECT_GE(dev, 0.0);
  for (int64_t i = 0; i < a.n_rows; ++i) EXPECT_EQ(a(i, 3), 1.25f);  // the constant gene unchanged
  regress_out_design_gpu(gpu, c, e.design);
  EXPECT_TRUE(same_bits(a, c)) << "two GPU runs differ";
  DenseF ca = e.Y, cb = e.Y, cc = e.Y;
  regress_out_categorical_gpu(gpu, ca, e.batch, 5);
  regress_out_categorical(cpu, cb, e.batch, 5);
  expect_close(ca, cb, 1e-4, "categorical key");
  regress_out_categorical_gpu(gpu, cc, e.batch, 5);
  EXPECT_TRUE(same_bits(ca, cc)) << "two GPU runs differ (categorical)";
}

TEST(IntegrateGpu, RegressOutDatasetDispatchesToTheGpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  const Expr e = expression(test::fresh_seed(), 1000, 20, 3);
  Dataset d;
  d.obs.index.resize(1000);
  for (int64_t i = 0; i < 1000; ++i) d.obs.index[i] = "c" + std::to_string(i);
  NumericColumn c1, c2;
  for (int64_t i = 0; i < 1000; ++i) c1.values.push_back(e.design(i, 1)), c2.values.push_back(e.design(i, 2));
  d.obs.set("total_counts", Column(c1));
  d.obs.set("pct", Column(c2));
  d.X = Matrix(DenseF(e.Y));
  Dataset d2 = d;
  RegressOutOptions o;
  o.keys = {"total_counts", "pct"};
  regress_out(gpu, d, o);
  regress_out(cpu, d2, o);
  expect_close(d.X.dense_f(), d2.X.dense_f(), 1e-4, "dataset");
}

// ComBat on the GPU against the CPU path on the shapes of session 9's failure (4,000 x 83, 4
// batches, a constant gene, a covariate) and beyond: rows not a multiple of the chunk (several
// chunks, a short last one), 7 and 30 batches (30: fewer threads per block for the shared
// accumulators, two blocks of genes), 0, 1 and 2 covariates (c1 ~ 1000 +- 300 uncentred: an
// ill-conditioned design). Session 9's failure (gamma* 0.65 off) was the constant gene's rounding
// noise standardised (noise / noise) and changing with the order of the sums; the CPU path did the
// same under a row permutation (test_combat's RowOrderChangesOnlyRounding). gamma*, delta* within
// 1e-6, the matrix within 1e-4, the constant gene unchanged, two GPU runs the same bits; and
// combat() on a Dataset dispatches to the GPU (the same bits as combat_dense_gpu).
TEST(IntegrateGpu, CombatMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  struct Shape { int64_t n, g; int nb; };
  for (const Shape sh : {Shape{4000, 83, 4}, Shape{5003, 300, 7}, Shape{6001, 70, 30}}) {
    const Expr e = expression(test::fresh_seed(), sh.n, sh.g, sh.nb);
    for (int n_cov = 0; n_cov <= 2; ++n_cov) {
      DenseD cov(sh.n, n_cov);
      for (int64_t i = 0; i < sh.n; ++i) {
        if (n_cov >= 1) cov(i, 0) = e.cov(i, 0);
        if (n_cov >= 2) cov(i, 1) = e.design(i, 1);
      }
      char what[96];
      std::snprintf(what, sizeof what, "combat %lld x %lld, %d batches, %d covariates", static_cast<long long>(sh.n),
                    static_cast<long long>(sh.g), sh.nb, n_cov);
      DenseF a = e.Y, b = e.Y, c = e.Y;
      const CombatResult ra = combat_dense_gpu(gpu, a, e.batch, sh.nb, cov);
      const CombatResult rb = combat_dense(cpu, b, e.batch, sh.nb, cov);
      expect_close(a, b, 1e-4, what);
      ASSERT_EQ(ra.gamma_star.size(), rb.gamma_star.size()) << what;
      double wg = 0, wd = 0;
      for (size_t k = 0; k < ra.gamma_star.size(); ++k) {
        wg = std::max(wg, std::fabs(ra.gamma_star[k] - rb.gamma_star[k]) / std::max(1.0, std::fabs(rb.gamma_star[k])));
        wd = std::max(wd, std::fabs(ra.delta_star[k] - rb.delta_star[k]) / std::max(1.0, std::fabs(rb.delta_star[k])));
      }
      EXPECT_LE(wg, 1e-6) << what;
      EXPECT_LE(wd, 1e-6) << what;
      EXPECT_EQ(ra.var_pooled[3], 0.0) << what << ": the constant gene";
      for (int64_t i = 0; i < a.n_rows; ++i) ASSERT_EQ(a(i, 3), 1.25f) << what << ": the constant gene changed";
      combat_dense_gpu(gpu, c, e.batch, sh.nb, cov);
      EXPECT_TRUE(same_bits(a, c)) << what << ": two GPU runs differ";
      std::printf("%s: gamma* %.3g, delta* %.3g (relative)\n", what, wg, wd);
    }
  }
  // The Dataset entry point under a GPU context runs combat_dense_gpu.
  const Expr e = expression(test::fresh_seed(), 1200, 25, 3);
  Dataset d;
  d.obs.index.resize(1200);
  for (int64_t i = 0; i < 1200; ++i) d.obs.index[i] = "c" + std::to_string(i);
  CategoricalColumn cat;
  cat.categories = {"a", "b", "c"};
  cat.codes = e.batch;
  d.obs.set("batch", Column(cat));
  d.X = Matrix(DenseF(e.Y));
  combat(gpu, d, CombatOptions{});
  DenseF want = e.Y;
  combat_dense_gpu(gpu, want, e.batch, 3, DenseD(1200, 0));
  EXPECT_TRUE(same_bits(d.X.dense_f(), want)) << "combat() under a GPU context did not run combat_dense_gpu";
}

TEST(IntegrateGpu, ScrubletKnnOnTheGpuMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context(), cpu = Context::cpu(0);
  Dataset a = test::simulated_counts(3000, 1500, 300), b = a;
  ScrubletOptions o;
  scrublet(gpu, a, o);
  scrublet(cpu, b, o);
  const auto& sa = std::get<NumericColumn>(a.obs.at("doublet_score").c).values;
  const auto& sb = std::get<NumericColumn>(b.obs.at("doublet_score").c).values;
  const auto& pa = std::get<BoolColumn>(a.obs.at("predicted_doublet").c).values;
  const auto& pb = std::get<BoolColumn>(b.obs.at("predicted_doublet").c).values;
  ASSERT_EQ(sa.size(), sb.size());
  int64_t same_score = 0, same_pred = 0, finite = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (std::isnan(sb[i])) continue;
    ++finite;
    same_score += std::fabs(sa[i] - sb[i]) <= 1e-12 * std::max(1.0, std::fabs(sb[i]));
    same_pred += pa[i] == pb[i];
  }
  ASSERT_GT(finite, 2900);
  EXPECT_GE(static_cast<double>(same_score), 0.995 * finite);
  EXPECT_GE(static_cast<double>(same_pred), 0.995 * finite);
}
