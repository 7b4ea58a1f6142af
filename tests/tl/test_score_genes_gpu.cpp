// score_genes and score_genes_cell_cycle on the GPU against the CPU path (the oracle; itself tested
// against scanpy 1.9.6 in test_score_genes.cpp): the same control genes and scores within float64
// summation order on pbmc3k (scanpy's gene list, use_raw) and on fresh seeded data, resident and
// streamed in chunks of rows (SCURRY_RGG_GPU_CHUNK); the same phases; a matrix with NaN scored on
// the CPU; over three contexts (the --gpus split) the same bits as on one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "testlib.hpp"
#include "tl/score_genes.hpp"

using namespace scurry;

namespace {

// n cells x g genes of log1p'd counts whose means spread over the bins.
Dataset scored_data(uint64_t seed, int64_t n, int64_t g) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  CsrF x;
  x.n_rows = n, x.n_cols = g;
  x.indptr.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < g; ++j)
      if (u(rng) < 0.05 + 0.6 * static_cast<double>(j) / static_cast<double>(g)) {
        x.indices.push_back(static_cast<int32_t>(j));
        x.data.push_back(static_cast<float>(std::log1p(1 + rng() % 9) * (1 + 0.1 * u(rng))));
      }
    x.indptr.push_back(static_cast<int64_t>(x.data.size()));
  }
  Dataset d;
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("G" + std::to_string(j));
  d.X = Matrix(std::move(x));
  return d;
}

void expect_same(const ScoreGenesResult& a, const ScoreGenesResult& b, const char* what) {
  EXPECT_EQ(a.control_genes, b.control_genes) << what;
  EXPECT_EQ(a.genes_used, b.genes_used) << what;
  ASSERT_EQ(a.score.size(), b.score.size()) << what;
  for (size_t i = 0; i < a.score.size(); ++i)
    EXPECT_NEAR(a.score[i], b.score[i], 1e-12 * std::max(1.0, std::fabs(b.score[i]))) << what << " cell " << i;
}

}  // namespace

TEST(ScoreGenesGpu, Pbmc3kAndCellCycleAgainstTheCpu) {
  SCURRY_REQUIRE_GPU();
  Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  h5::File f = h5::File::open(test::test_data("golden/pbmc3k_first1000.scanpy_tl.h5"));
  ScoreGenesOptions o;
  o.gene_list = f.group("score_genes").dataset("gene_list").read_strings();
  o.use_raw = true;
  const Context cpu = Context::cpu(2);
  const Context gpu = test::gpu_context();
  expect_same(score_genes(d, o, gpu), score_genes(d, o, cpu), "pbmc3k");
  Dataset e = d;
  ScoreGenesOptions base;
  base.use_raw = true;
  score_genes_cell_cycle(d, tirosh_s_genes(), tirosh_g2m_genes(), base, gpu);
  score_genes_cell_cycle(e, tirosh_s_genes(), tirosh_g2m_genes(), base, cpu);
  for (const char* k : {"S_score", "G2M_score"}) {
    const auto a = d.obs.numeric(k), b = e.obs.numeric(k);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * std::max(1.0, std::fabs(b[i]))) << k << " " << i;
  }
  EXPECT_EQ(std::get<CategoricalColumn>(d.obs.at("phase").c).codes, std::get<CategoricalColumn>(e.obs.at("phase").c).codes);
}

TEST(ScoreGenesGpu, ResidentStreamedAndNan) {
  SCURRY_REQUIRE_GPU();
  Dataset d = scored_data(test::fresh_seed(), 3000, 400);
  ScoreGenesOptions o;
  for (int j = 5; j < 400; j += 37) o.gene_list.push_back("G" + std::to_string(j));
  o.ctrl_size = 20;
  o.n_bins = 10;
  const Context cpu = Context::cpu(2);
  const Context gpu = test::gpu_context();
  const ScoreGenesResult ref = score_genes(d, o, cpu), a = score_genes(d, o, gpu);
  expect_same(a, ref, "resident");
  setenv("SCURRY_RGG_GPU_CHUNK", "20000", 1);  // ~12 chunks of rows
  const ScoreGenesResult b = score_genes(d, o, gpu);
  unsetenv("SCURRY_RGG_GPU_CHUNK");
  expect_same(b, ref, "streamed");
  EXPECT_EQ(a.score, b.score);  // (per row the same lanes and tree: the same bits)
  // NaN: scored on the CPU (nanmean), so equal to the CPU's bits
  std::get<CsrF>(d.X.m).data[10] = NAN;
  EXPECT_EQ(score_genes(d, o, gpu).score, score_genes(d, o, cpu).score);
}

TEST(ScoreGenesGpu, ThreeContextsGiveTheSameBitsResidentAndStreamed) {
  SCURRY_REQUIRE_GPU();
  Dataset d = scored_data(test::fresh_seed(), 2501, 333);  // (rows and genes not divisible by 3)
  ScoreGenesOptions o;
  for (int j = 3; j < 333; j += 29) o.gene_list.push_back("G" + std::to_string(j));
  o.ctrl_size = 15;
  o.n_bins = 8;
  const Context gpu = test::gpu_context();
  std::vector<Context> three = test::three_gpu_contexts();
  std::vector<Context*> gpus;
  for (Context& c : three) gpus.push_back(&c);
  const ScoreGenesResult one = score_genes(d, o, gpu);
  expect_same(one, score_genes(d, o, Context::cpu(2)), "one context against the CPU");
  const ScoreGenesResult many = score_genes(d, o, *gpus[0], gpus);
  EXPECT_EQ(many.control_genes, one.control_genes);
  EXPECT_EQ(many.score, one.score);  // the same bits
  setenv("SCURRY_RGG_GPU_CHUNK", "7000", 1);  // chunks of rows that straddle the contexts' row shares
  const ScoreGenesResult streamed = score_genes(d, o, *gpus[0], gpus);
  unsetenv("SCURRY_RGG_GPU_CHUNK");
  EXPECT_EQ(streamed.control_genes, one.control_genes);
  EXPECT_EQ(streamed.score, one.score);
  // score_genes_cell_cycle over the three: the same columns as on one
  Dataset a = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad")), b = a;
  ScoreGenesOptions base;
  base.use_raw = true;
  score_genes_cell_cycle(a, tirosh_s_genes(), tirosh_g2m_genes(), base, gpu);
  score_genes_cell_cycle(b, tirosh_s_genes(), tirosh_g2m_genes(), base, *gpus[0], gpus);
  EXPECT_EQ(a.obs.numeric("S_score"), b.obs.numeric("S_score"));
  EXPECT_EQ(a.obs.numeric("G2M_score"), b.obs.numeric("G2M_score"));
  EXPECT_EQ(std::get<CategoricalColumn>(a.obs.at("phase").c).codes, std::get<CategoricalColumn>(b.obs.at("phase").c).codes);
}
