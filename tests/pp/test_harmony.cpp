// harmony_integrate: against harmonypy 0.0.9 run on seeded synthetic batches (one key and two keys;
// tests/data/make_harmony_ref.py) and scanpy's harmony_integrate(adata, 'batch') on pbmc3k's PCA
// (the golden X_pca_harmony): the 15-NN of the corrected embedding shared >= 85% with harmonypy's,
// batch mixing (iLISI) and cluster purity within 2% of harmonypy's; 1 vs 2 threads bit-identical;
// the objective decreasing; bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "integrate_golden.hpp"
#include "integration_metrics.hpp"
#include "pp/harmony.hpp"
#include "pp/harmony_exp.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

struct Synthetic {
  DenseD X;
  std::vector<int32_t> batch, donor, celltype;
  DenseD ref_batch, ref_batch_donor;
};

DenseD read_matrix(h5::File& f, const std::string& name) {
  h5::Dataset ds = f.dataset(name);
  const auto sh = ds.shape();
  DenseD m(sh[0], sh[1]);
  m.data = ds.read<double>();
  return m;
}

const Synthetic& synthetic() {
  static const Synthetic s = [] {
    h5::File f = h5::File::open(test::test_data("golden/harmony_synthetic.h5"));
    Synthetic s;
    s.X = read_matrix(f, "X_pca");
    s.batch = f.dataset("batch").read<int32_t>();
    s.donor = f.dataset("donor").read<int32_t>();
    s.celltype = f.dataset("celltype").read<int32_t>();
    s.ref_batch = read_matrix(f, "harmony_batch");
    s.ref_batch_donor = read_matrix(f, "harmony_batch_donor");
    return s;
  }();
  return s;
}

int32_t levels(const std::vector<int32_t>& c) { return *std::max_element(c.begin(), c.end()) + 1; }

struct Quality {
  double overlap, ilisi_ours, ilisi_ref, purity_ours, purity_ref;
};

template <class B, class L>
Quality quality(const DenseD& ours, const DenseD& ref, const std::vector<B>& batch, const std::vector<L>& labels) {
  const auto a = test::exact_knn(ours, 15), b = test::exact_knn(ref, 15);
  const auto a30 = test::exact_knn(ours, 30), b30 = test::exact_knn(ref, 30);
  return {test::knn_overlap(a, b), test::ilisi(a30, batch), test::ilisi(b30, batch), test::knn_purity(a, labels),
          test::knn_purity(b, labels)};
}

void expect_quality(const Quality& q, const char* what) {
  EXPECT_GE(q.overlap, 0.85) << what << ": 15-NN overlap with harmonypy";
  EXPECT_NEAR(q.ilisi_ours / q.ilisi_ref, 1.0, 0.02) << what << ": iLISI " << q.ilisi_ours << " vs harmonypy " << q.ilisi_ref;
  EXPECT_NEAR(q.purity_ours / q.purity_ref, 1.0, 0.02) << what << ": purity " << q.purity_ours << " vs harmonypy " << q.purity_ref;
  std::printf("%s: 15-NN overlap %.4f, iLISI %.4f (harmonypy %.4f), purity %.4f (harmonypy %.4f)\n", what, q.overlap,
              q.ilisi_ours, q.ilisi_ref, q.purity_ours, q.purity_ref);
}

TEST(Harmony, MatchesHarmonypyOneKey) {
  const Synthetic& s = synthetic();
  HarmonyOptions opt;
  const HarmonyResult r = harmony(Context::cpu(2), s.X, {s.batch}, {levels(s.batch)}, opt);
  // The correction mixes the batches: iLISI rises well above the uncorrected embedding's.
  const double before = test::ilisi(test::exact_knn(s.X, 30), s.batch);
  const Quality q = quality(r.Z_corr, s.ref_batch, s.batch, s.celltype);
  EXPECT_GT(q.ilisi_ours, before + 0.5) << "uncorrected iLISI " << before;
  expect_quality(q, "synthetic, key batch");
  for (size_t i = 1; i < r.objective_harmony.size(); ++i)
    EXPECT_LT(r.objective_harmony[i], r.objective_harmony[i - 1] + 1e-9 * std::fabs(r.objective_harmony[i - 1]));
}

TEST(Harmony, MatchesHarmonypyTwoKeys) {
  const Synthetic& s = synthetic();
  HarmonyOptions opt;
  const HarmonyResult r = harmony(Context::cpu(2), s.X, {s.batch, s.donor}, {levels(s.batch), levels(s.donor)}, opt);
  expect_quality(quality(r.Z_corr, s.ref_batch_donor, s.batch, s.celltype), "synthetic, keys batch+donor (batch iLISI)");
  expect_quality(quality(r.Z_corr, s.ref_batch_donor, s.donor, s.celltype), "synthetic, keys batch+donor (donor iLISI)");
}

TEST(Harmony, SameBitsForAnyThreadCount) {
  const Synthetic& s = synthetic();
  HarmonyOptions opt;
  opt.max_iter_harmony = 2;
  opt.random_state = test::fresh_seed();
  const HarmonyResult a = harmony(Context::cpu(1), s.X, {s.batch}, {levels(s.batch)}, opt);
  const HarmonyResult b = harmony(Context::cpu(2), s.X, {s.batch}, {levels(s.batch)}, opt);
  const HarmonyResult c = harmony(Context::cpu(3), s.X, {s.batch}, {levels(s.batch)}, opt);
  EXPECT_EQ(a.Z_corr.data, b.Z_corr.data);
  EXPECT_EQ(a.Z_corr.data, c.Z_corr.data);
  EXPECT_EQ(a.objective_harmony, c.objective_harmony);
}

TEST(Harmony, MatchesScanpyOnPbmc) {
  Dataset d = test::integrate_input();
  const Dataset g = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  HarmonyOptions opt;
  opt.keys = {"batch"};
  harmony_integrate(Context::cpu(2), d, opt);
  ASSERT_TRUE(d.obsm.count("X_pca_harmony"));
  const DenseD ours = to_dense_d(d.obsm.at("X_pca_harmony"));
  const DenseD ref = test::integrate_reference("X_pca_harmony");
  std::vector<int32_t> batch(1000);
  for (int i = 0; i < 1000; ++i) batch[i] = i < 500 ? 0 : 1;
  const auto& leiden = std::get<CategoricalColumn>(g.obs.at("leiden").c).codes;
  expect_quality(quality(ours, ref, batch, leiden), "pbmc3k, key batch");
}

// The soft assignments' exp (a Cody-Waite reduction and a degree-11 polynomial, run 4 doubles a
// step in the R update) against libm on fresh seeded exponents over [-700, 0] and at the edges.
TEST(Harmony, ExpIsAccurate) {
  std::mt19937_64 rng(test::fresh_seed());
  std::uniform_real_distribution<double> wide(-700, 0), narrow(-2, 0);
  double worst = 0;
  for (int t = 0; t < 200000; ++t) {
    const double x = t % 2 ? wide(rng) : narrow(rng);
    const double want = std::exp(x);
    worst = std::max(worst, std::fabs(detail::harmony_exp_neg(x) - want) / want);
  }
  for (double x : {0.0, -0.0, -1e-300, -0.34657359027997264, -0.6931471805599453, -699.999, -700.0}) {
    const double want = std::exp(x);
    worst = std::max(worst, std::fabs(detail::harmony_exp_neg(x) - want) / want);
  }
  EXPECT_LT(worst, 2e-14);
  EXPECT_EQ(detail::harmony_exp_neg(-700.5), 0.0);
  EXPECT_EQ(detail::harmony_exp_neg(-1e308), 0.0);
  std::printf("exp: largest relative error %.3g\n", worst);
}

TEST(Harmony, BadInputNamesTheProblem) {
  Dataset d = test::integrate_input();
  HarmonyOptions opt;
  opt.keys = {"sample"};
  try {
    harmony_integrate(Context::cpu(1), d, opt);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'sample'"), std::string::npos) << e.what();
  }
  opt.keys = {"batch"};
  opt.basis = "X_umap";
  EXPECT_THROW(harmony_integrate(Context::cpu(1), d, opt), InputError);
  opt.basis = "X_pca";
  opt.theta = {1, 2, 3};
  EXPECT_THROW(harmony_integrate(Context::cpu(1), d, opt), InputError);
  opt.theta = {2};
  opt.block_size = 0;
  EXPECT_THROW(harmony_integrate(Context::cpu(1), d, opt), InputError);
}

}  // namespace
