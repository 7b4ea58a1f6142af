// The host halves of the GPU chains' steps (pp/chain_steps.hpp), which the resident steps and the
// streamed passes both call: each decision from per-gene / per-cell sums must equal the CPU step's
// own result on the same data (the oracle: the CPU steps, which compute their statistics themselves),
// over one rank and over ranks that are threads.
#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "exec/comm.hpp"
#include "exec/comm_thread.hpp"
#include "exec/context.hpp"
#include "pp/chain_steps.hpp"
#include "pp/hvg.hpp"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "pp/scale.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// Log-normalised counts (the CPU steps), as the HVG and scale decisions see them.
Dataset log_normalised(int64_t cells, int64_t genes) {
  Dataset d = test::simulated_counts(cells, genes, 0.1 * static_cast<double>(genes));
  NormalizeTotalOptions no;
  no.target_sum = 1e4;
  normalize_total(Context::cpu(1), d, no);
  log1p(Context::cpu(1), d, Log1pOptions());
  return d;
}

// Per-gene sums and sums of squares of f(x) over the stored values (the device's gene_sums).
void gene_moments(const CsrF& x, bool expm1, std::vector<double>& sum, std::vector<double>& sumsq) {
  sum.assign(static_cast<size_t>(x.n_cols), 0.0);
  sumsq.assign(static_cast<size_t>(x.n_cols), 0.0);
  for (int64_t p = 0; p < x.nnz(); ++p) {
    const double v = expm1 ? std::expm1(static_cast<double>(x.data[p])) : static_cast<double>(x.data[p]);
    sum[x.indices[p]] += v;
    sumsq[x.indices[p]] += v * v;
  }
}

}  // namespace

TEST(ChainSteps, HvgChoiceIsTheCpuStepsFromTheSums) {
  const Dataset d0 = log_normalised(600, 400);
  for (const char* flavor : {"seurat", "cell_ranger"}) {
    SCOPED_TRACE(flavor);
    HvgOptions o;
    o.flavor = flavor;
    o.n_top_genes = 60;
    Dataset cpu = d0;
    highly_variable_genes(Context::cpu(1), cpu, o);
    Dataset dev = d0;
    std::vector<double> s, ss;
    gene_moments(to_csr_f(dev.X), o.flavor == "seurat", s, ss);
    const std::vector<int64_t> keep = chain::choose_hvg(dev, o, s, ss, dev.n_obs());
    const auto& flags = cpu.var.boolean("highly_variable");
    EXPECT_EQ(dev.var.boolean("highly_variable"), flags);
    std::vector<int64_t> want;
    for (size_t j = 0; j < flags.size(); ++j)
      if (flags[j]) want.push_back(static_cast<int64_t>(j));
    EXPECT_EQ(keep, want);
    // (scanpy's cut-off is `dispersion_norm >= the 60th largest`: genes tied with it are kept too)
    EXPECT_GE(static_cast<int64_t>(keep.size()), 60);
    const auto& mc = cpu.var.numeric("means");
    const auto& md = dev.var.numeric("means");
    // (the CPU step takes expm1 in float32, the sums here in float64)
    for (size_t j = 0; j < mc.size(); ++j) EXPECT_NEAR(md[j], mc[j], 1e-6 * std::max(1.0, std::fabs(mc[j])));
  }
  // No gene passes: a clear error, not an empty selection.
  Dataset dev = d0;
  HvgOptions o;
  o.min_mean = 1e9;
  std::vector<double> s, ss;
  gene_moments(to_csr_f(dev.X), true, s, ss);
  EXPECT_THROW(chain::choose_hvg(dev, o, s, ss, dev.n_obs()), InputError);
}

TEST(ChainSteps, ScaleStatsAreTheCpuSteps) {
  const Dataset d0 = log_normalised(300, 200);
  Dataset cpu = d0;
  ScaleOptions so;
  so.max_value = 10;
  scale(Context::cpu(1), cpu, so);
  Dataset dev = d0;
  std::vector<double> s, ss;
  gene_moments(to_csr_f(dev.X), false, s, ss);
  const chain::ScaleStats st = chain::scale_stats(dev, s, ss, dev.n_obs());
  const auto& mean = cpu.var.numeric("mean");
  const auto& sd = cpu.var.numeric("std");
  ASSERT_EQ(st.mean.size(), mean.size());
  for (size_t j = 0; j < mean.size(); ++j) {
    EXPECT_NEAR(st.mean[j], mean[j], 1e-9 * std::max(1.0, std::fabs(mean[j])));
    // The CPU step squares each value in float32 (scanpy's), the sums here in float64: each square's
    // rounding (2^-24 relative) is amplified in var = E[x^2] - mean^2 by E[x^2] / var, halved in sd.
    const double var = sd[j] * sd[j];
    const double amplification = (mean[j] * mean[j] + var) / var;
    EXPECT_NEAR(st.sd[j], sd[j], sd[j] * (1e-9 + 1e-7 * amplification));
  }
  EXPECT_EQ(dev.var.numeric("mean"), st.mean);
  // Restricted to some genes (the streamed chain's HVGs): those genes' statistics, in order.
  Dataset sub = d0;
  sub.subset_vars({3, 7, 150});
  const chain::ScaleStats r = chain::scale_stats(sub, s, ss, d0.n_obs(), {3, 7, 150});
  ASSERT_EQ(r.mean.size(), 3u);
  EXPECT_EQ(r.mean[1], st.mean[7]);
  EXPECT_EQ(r.sd[2], st.sd[150]);
}

TEST(ChainSteps, NormalizeTargetIsTheMedianOfPositiveTotalsOverEveryRank) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> v(1 + rng() % 41);
    for (double& x : v) x = (rng() % 4 == 0) ? 0.0 : static_cast<double>(rng() % 1000);
    v[0] = 5;  // one positive at least
    std::vector<double> p;
    for (double x : v)
      if (x > 0) p.push_back(x);
    std::sort(p.begin(), p.end());
    const size_t m = p.size() / 2;
    const double want = p.size() % 2 ? p[m] : 0.5 * (p[m - 1] + p[m]);
    EXPECT_EQ(chain::median_of_positive(v), want);
    // Over 3 ranks holding a third each: the same median.
    auto comms = make_thread_comms(3);
    std::vector<double> got(3);
    std::vector<std::thread> th;
    for (int q = 0; q < 3; ++q)
      th.emplace_back([&, q] {
        std::vector<double> part;
        for (size_t i = q; i < v.size(); i += 3) part.push_back(v[i]);
        got[q] = chain::normalize_target(*comms[q], std::nullopt, [&] { return part; });
      });
    for (auto& t : th) t.join();
    for (double x : got) EXPECT_EQ(x, want);
  }
  auto one = make_local_comm();
  bool called = false;
  EXPECT_EQ(chain::normalize_target(*one, 1e4, [&] { called = true; return std::vector<double>{}; }), 1e4);
  EXPECT_FALSE(called) << "the totals are computed only without target_sum";
  EXPECT_THROW(chain::normalize_target(*one, 0.0, [] { return std::vector<double>{1}; }), InputError);
  EXPECT_THROW(chain::normalize_target(*one, std::nullopt, [] { return std::vector<double>{0, 0}; }), InputError);
}

TEST(ChainSteps, CellStatsAndEveryRankKeepsACell) {
  const chain::CellStats c = chain::cell_stats({3, 0, 7}, {1.0 / 3.0, 0.0, 16777217.0});
  EXPECT_EQ(c.n_genes, (std::vector<int64_t>{3, 0, 7}));
  EXPECT_EQ(c.total_f32[0], static_cast<double>(static_cast<float>(1.0 / 3.0)));
  EXPECT_EQ(c.total_f32[2], 16777216.0);  // as the float32 obs column holds it
  auto comms = make_thread_comms(2);
  std::vector<int> threw(2, 0);
  std::vector<std::thread> th;
  for (int q = 0; q < 2; ++q)
    th.emplace_back([&, q] {
      try {
        chain::check_every_rank_keeps(*comms[q], q == 0 ? 5 : 0);
      } catch (const InputError&) {
        threw[q] = 1;
      }
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(threw, (std::vector<int>{1, 1})) << "every rank must learn that rank 1 kept no cell";
}
