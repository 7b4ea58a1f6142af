// score_genes and score_genes_cell_cycle against scanpy 1.9.6's own results on pbmc3k
// (tests/data/golden/pbmc3k_first1000.scanpy_tl.h5: score_genes(gene_list=uns['score_gene_list'],
// random_state=0, use_raw=True) and score_genes_cell_cycle with Tirosh et al.'s lists), and
// against a direct computation of the score from the control genes on fresh seeded data.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "testlib.hpp"
#include "tl/score_genes.hpp"

using namespace scurry;

namespace {

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / n, mb = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

h5::Group golden_group() {
  static h5::File f = h5::File::open(test::test_data("golden/pbmc3k_first1000.scanpy_tl.h5"));
  return f.group("score_genes");
}

const Dataset& pbmc() {
  static const Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  return d;
}

}  // namespace

TEST(ScoreGenesGolden, ScoreMatchesScanpy) {
  h5::Group g = golden_group();
  ScoreGenesOptions o;
  o.gene_list = g.dataset("gene_list").read_strings();
  o.use_raw = true;
  const auto r = score_genes(pbmc(), o, Context::cpu(2));
  const auto gold = g.dataset("score").read<double>();
  ASSERT_EQ(r.score.size(), gold.size());
  const double c = pearson(r.score, gold);
  double maxdiff = 0;
  for (size_t i = 0; i < gold.size(); ++i) maxdiff = std::max(maxdiff, std::fabs(r.score[i] - gold[i]));
  std::printf("score_genes: pearson %.9f with scanpy, max |diff| %.3g, %zu control genes\n", c, maxdiff,
              r.control_genes.size());
  EXPECT_GE(c, 0.98);
}

TEST(ScoreGenesGolden, CellCycleMatchesScanpy) {
  h5::Group g = golden_group();
  Dataset d = pbmc();
  ScoreGenesOptions o;
  o.use_raw = true;
  score_genes_cell_cycle(d, tirosh_s_genes(), tirosh_g2m_genes(), o, Context::cpu(2));
  const auto s = d.obs.numeric("S_score"), g2m = d.obs.numeric("G2M_score");
  const auto gs = g.dataset("S_score").read<double>(), gg = g.dataset("G2M_score").read<double>();
  const double cs = pearson(s, gs), cg = pearson(g2m, gg);
  const auto& ph = std::get<CategoricalColumn>(d.obs.at("phase").c);
  const auto gcodes = g.dataset("phase_codes").read<int32_t>();
  const auto gcats = g.dataset("phase_categories").read_strings();
  int64_t same = 0;
  for (size_t i = 0; i < gcodes.size(); ++i) same += ph.categories[ph.codes[i]] == gcats[gcodes[i]];
  std::printf("cell cycle: S pearson %.9f, G2M pearson %.9f, phase agrees on %lld of %zu cells\n", cs, cg,
              static_cast<long long>(same), gcodes.size());
  EXPECT_GE(cs, 0.98);
  EXPECT_GE(cg, 0.98);
  EXPECT_GE(static_cast<double>(same), 0.95 * static_cast<double>(gcodes.size()));
}

TEST(ScoreGenes, ScoreIsSetMeanMinusControlMean) {
  std::mt19937_64 rng(test::fresh_seed());
  std::uniform_real_distribution<double> u(0, 1);
  const int64_t n = 120, g = 200;
  DenseF x(n, g);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j)
      if (u(rng) < 0.1 + 0.8 * j / g) x(i, j) = static_cast<float>(u(rng) * 3);
  Dataset d;
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("g" + std::to_string(j));
  d.X = Matrix(to_csr_f(Matrix(x)));
  ScoreGenesOptions o;
  o.gene_list = {"g5", "g100", "g150", "absent"};
  o.ctrl_size = 7;
  o.n_bins = 10;
  const auto r = score_genes(d, o, Context::cpu(2));
  EXPECT_EQ(r.genes_used, (std::vector<std::string>{"g5", "g100", "g150"}));
  std::set<std::string> ctrl(r.control_genes.begin(), r.control_genes.end());
  // scanpy's bins: genes cut by the rank (method 'min') of their mean, round(g / (n_bins - 1)) ranks a
  // bin; up to ctrl_size genes drawn from each bin that holds a set gene, the set genes then removed.
  std::vector<double> mean(static_cast<size_t>(g), 0.0);
  for (int64_t j = 0; j < g; ++j) {
    for (int64_t i = 0; i < n; ++i) mean[static_cast<size_t>(j)] += x(i, j);
    mean[static_cast<size_t>(j)] /= static_cast<double>(n);
  }
  const int64_t per_bin = std::llround(static_cast<double>(g) / (o.n_bins - 1));
  auto bin = [&](int64_t j) {
    int64_t below = 0;
    for (double m : mean) below += m < mean[static_cast<size_t>(j)];
    return (below + 1) / per_bin;
  };
  std::set<int64_t> set_bins = {bin(5), bin(100), bin(150)};
  size_t most = 0;
  for (int64_t b : set_bins) {
    int64_t in_bin = 0;
    for (int64_t j = 0; j < g; ++j) in_bin += bin(j) == b;
    most += static_cast<size_t>(std::min<int64_t>(in_bin, o.ctrl_size));
  }
  for (const auto& c : ctrl) {
    EXPECT_TRUE(c != "g5" && c != "g100" && c != "g150") << c;
    EXPECT_TRUE(set_bins.count(bin(std::stoi(c.substr(1))))) << c << " is in no bin of a set gene";
  }
  EXPECT_LE(ctrl.size(), most);
  EXPECT_GE(ctrl.size() + 3, most);  // (at most the three set genes drawn and removed)
  for (int64_t i = 0; i < n; ++i) {
    const double a = (static_cast<double>(x(i, 5)) + x(i, 100) + x(i, 150)) / 3;
    double b = 0;
    for (const auto& c : ctrl) b += x(i, std::stoi(c.substr(1)));
    b /= static_cast<double>(ctrl.size());
    EXPECT_NEAR(r.score[i], a - b, 1e-12);
  }
  // another seed draws other control genes; the same seed the same ones
  const auto r2 = score_genes(d, o, Context::cpu(1));
  EXPECT_EQ(r2.control_genes, r.control_genes);
  o.random_state = 7;
  EXPECT_NE(score_genes(d, o, Context::cpu(2)).control_genes, r.control_genes);
  o.gene_list = {"absent"};
  EXPECT_THROW(score_genes(d, o, Context::cpu(2)), InputError);
}
