// scrublet: skimage's threshold_minimum reproduced on scanpy's own simulated scores (exactly its
// threshold) and on a bimodal sample; scanpy 1.10.4's scrublet(random_state=0) on pbmc3k (scores
// correlated >= 0.95, predicted doublets agreeing on >= 95% of cells, uns['scrublet'] as scanpy
// writes it); planted doublets in seeded synthetic counts scored above the singlets; batch_key;
// 1 vs 2 threads bit-identical; bad input.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "integrate_golden.hpp"
#include "pp/filter.hpp"
#include "pp/scrublet.hpp"
#include "scrublet_planted.hpp"
#include "testlib.hpp"

using namespace scurry;
using scurry::test::dataset_of;
using scurry::test::pearson;
using scurry::test::planted;
using scurry::test::Planted;

namespace {

struct Golden {
  std::vector<double> score, sim;
  std::vector<int32_t> predicted;
  double threshold;
};

Golden golden() {
  h5::File f = h5::File::open(test::integrate_golden_path());
  Golden g;
  g.score = f.dataset("scrublet/doublet_score").read<double>();
  g.sim = f.dataset("scrublet/doublet_scores_sim").read<double>();
  g.predicted = f.dataset("scrublet/predicted_doublet").read<int32_t>();
  g.threshold = f.dataset("scrublet/threshold").read_scalar_double();
  return g;
}


TEST(Scrublet, ThresholdMinimumIsSkimages) {
  const Golden g = golden();
  const auto t = threshold_minimum(g.sim);
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(*t, g.threshold, 1e-12 * std::fabs(g.threshold));
  // A bimodal sample: the threshold falls between the modes.
  std::mt19937_64 rng(test::fresh_seed());
  std::normal_distribution<double> a(0.1, 0.03), b(0.6, 0.05);
  std::vector<double> v;
  for (int i = 0; i < 3000; ++i) v.push_back(a(rng));
  for (int i = 0; i < 1000; ++i) v.push_back(b(rng));
  const auto t2 = threshold_minimum(v);
  ASSERT_TRUE(t2.has_value());
  EXPECT_GT(*t2, 0.2);
  EXPECT_LT(*t2, 0.45);
  // A constant sample has one mode: no threshold.
  EXPECT_FALSE(threshold_minimum({1.0, 1.0, 1.0}).has_value());
}

Dataset pbmc_counts() {
  Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  FilterCellsOptions fc;
  fc.min_genes = 200;
  filter_cells(Context::cpu(2), d, fc);
  FilterGenesOptions fg;
  fg.min_cells = 3;
  filter_genes(Context::cpu(2), d, fg);
  return d;
}

TEST(Scrublet, MatchesScanpyOnPbmc) {
  Dataset d = pbmc_counts();
  ASSERT_EQ(d.n_obs(), 1000);
  ASSERT_EQ(d.n_vars(), 11780);
  scrublet(Context::cpu(2), d, ScrubletOptions{});
  const Golden g = golden();
  const auto& score = d.obs.numeric("doublet_score");
  const auto& pred = d.obs.boolean("predicted_doublet");
  const double r = pearson(score, g.score);
  int64_t agree = 0;
  for (size_t i = 0; i < pred.size(); ++i) agree += (pred[i] != 0) == (g.predicted[i] != 0);
  std::printf("pbmc3k: doublet score correlation %.4f, predicted agree %.4f\n", r, agree / 1000.0);
  EXPECT_GE(r, 0.95);
  EXPECT_GE(agree, 950);
  const Dict& u = d.uns.at("scrublet").dict();
  const auto& sim = std::get<NumArray>(u.at("doublet_scores_sim").v);
  EXPECT_EQ(sim.data.size(), g.sim.size());
  const double thr = std::get<double>(u.at("threshold").v);
  std::printf("threshold %.4f (scanpy %.4f)\n", thr, g.threshold);
  EXPECT_NEAR(thr, g.threshold, 0.02);
  const Dict& p = u.at("parameters").dict();
  EXPECT_EQ(std::get<int64_t>(p.at("n_neighbors").v), 16);
  const auto& par = std::get<NumArray>(u.at("doublet_parents").v);
  EXPECT_EQ(par.shape, (std::vector<int64_t>{2000, 2}));
  // The simulated pairs are scanpy's own (numpy's RandomState and sklearn's sampling reproduced).
  h5::File f = h5::File::open(test::integrate_golden_path());
  EXPECT_EQ(par.data, f.dataset("scrublet/doublet_parents").read<double>());
  double worst = 0;
  for (size_t i = 0; i < sim.data.size(); ++i) worst = std::max(worst, std::fabs(sim.data[i] - g.sim[i]));
  // With scanpy's own doublets, the scores are scanpy's (exact search, exact PCA): allow a few
  // neighbour ties to fall otherwise.
  int same_sim = 0, same_obs = 0;
  for (size_t i = 0; i < sim.data.size(); ++i) same_sim += std::fabs(sim.data[i] - g.sim[i]) <= 1e-9;
  for (size_t i = 0; i < score.size(); ++i) same_obs += std::fabs(score[i] - g.score[i]) <= 1e-9;
  std::printf("scores equal to scanpy's: %d of 1000 cells, %d of 2000 simulated (max |diff| %.3g)\n", same_obs,
              same_sim, worst);
  EXPECT_GE(same_obs, 980);
  EXPECT_GE(same_sim, 1960);
}

TEST(Scrublet, PlantedDoubletsScoreHigh) {
  const uint64_t seed = test::fresh_seed();
  const Planted p = planted(seed, 1500, 600);
  Dataset d1 = dataset_of(p), d2 = dataset_of(p);
  ScrubletOptions opt;
  opt.random_state = seed;
  scrublet(Context::cpu(1), d1, opt);
  scrublet(Context::cpu(2), d2, opt);
  EXPECT_EQ(d1.obs.numeric("doublet_score"), d2.obs.numeric("doublet_score")) << "1 vs 2 threads";
  // AUC of the score for planted doublets vs singlets.
  const auto& s = d1.obs.numeric("doublet_score");
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (p.doublet[i])
      for (size_t j = 0; j < s.size(); ++j)
        if (!p.doublet[j]) {
          wins += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
          pairs += 1;
        }
  EXPECT_GT(wins / pairs, 0.85) << "seed " << seed;
  // With batches: every cell scored; the uns layout as scanpy's.
  ScrubletOptions ob = opt;
  ob.batch_key = "sample";
  Dataset d3 = dataset_of(p);
  scrublet(Context::cpu(2), d3, ob);
  for (double v : d3.obs.numeric("doublet_score")) ASSERT_TRUE(std::isfinite(v));
  const Dict& u = d3.uns.at("scrublet").dict();
  EXPECT_EQ(std::get<std::string>(u.at("batched_by").v), "sample");
  EXPECT_EQ(u.at("batches").dict().size(), 2u);
  EXPECT_TRUE(u.at("batches").dict().count("s1"));
}

// Above 8,192 observed cells the unset neighbour option searches with IVF-Flat on the CPU: its
// scores against the exact search's (use_approx_neighbors = false) on 8,300 planted cells (24,900
// points, k_adj 137): correlated >= 0.99, predictions the same on >= 99% of the cells.
TEST(Scrublet, IvfAboveScanpysCutoffMatchesExact) {
  const uint64_t seed = test::fresh_seed();
  const Planted p = planted(seed, 8300, 200);
  Dataset a = dataset_of(p), b = dataset_of(p);
  ScrubletOptions o;
  o.random_state = seed;
  scrublet(Context::cpu(2), a, o);
  o.use_approx_neighbors = false;
  scrublet(Context::cpu(2), b, o);
  const auto& sa = a.obs.numeric("doublet_score");
  const auto& sb = b.obs.numeric("doublet_score");
  const auto& pa = std::get<BoolColumn>(a.obs.at("predicted_doublet").c).values;
  const auto& pb = std::get<BoolColumn>(b.obs.at("predicted_doublet").c).values;
  std::vector<double> fa, fb;
  int64_t agree = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (std::isnan(sb[i])) continue;
    fa.push_back(sa[i]);
    fb.push_back(sb[i]);
    agree += pa[i] == pb[i];
  }
  ASSERT_GT(fa.size(), 8200u);
  const double r = pearson(fa, fb), share = static_cast<double>(agree) / static_cast<double>(fa.size());
  EXPECT_GE(r, 0.99) << "seed " << seed;
  EXPECT_GE(share, 0.99) << "seed " << seed;
  std::printf("IVF vs exact, 8,300 cells: score correlation %.4f, predictions agree %.4f\n", r, share);
}

TEST(Scrublet, BadInputNamesTheProblem) {
  const Planted p = planted(3, 300, 200);
  Dataset d = dataset_of(p);
  ScrubletOptions opt;
  opt.batch_key = "nope";
  try {
    scrublet(Context::cpu(1), d, opt);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
  opt.batch_key = "";
  opt.expected_doublet_rate = 1.5;
  EXPECT_THROW(scrublet(Context::cpu(1), d, opt), InputError);
  opt.expected_doublet_rate = 0.05;
  d.X.csr_f().data[0] = 0.5f;  // not a count
  EXPECT_THROW(scrublet(Context::cpu(1), d, opt), InputError);
}

}  // namespace
