// rank_genes_groups on the GPU against the CPU path (the oracle; itself tested against exact
// oracles and scanpy in test_rank_genes_groups.cpp): t-test, t-test_overestim_var and wilcoxon (with
// and without tie correction), vs rest and vs a reference, pts, many groups (the global-counter
// branch), gene batches (SCURRY_RGG_GPU_BATCH), the streamed path (SCURRY_RGG_GPU_CHUNK), tie groups
// longer than a tile, negative values, a matrix with NaN (computed on the CPU), and two runs giving
// the same bits; three contexts sharing the genes give the same bits as one; logreg's data term against a
// long double oracle, the same bits over three contexts and streamed in chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "testlib.hpp"
#include "tl/rank_genes_groups.hpp"
#include "tl/logreg_gpu.hpp"
#include "tl/rank_genes_groups_gpu.hpp"

using namespace scurry;

namespace {

// n cells x g genes of log1p'd small counts in n_groups groups (some cells without a group); gene 0
// has negative values; gene 1 is the same value in most cells (a tie group spanning many tiles).
Dataset data(uint64_t seed, int64_t n, int64_t g, int n_groups) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  CsrF x;
  x.n_rows = n, x.n_cols = g;
  x.indptr.push_back(0);
  CategoricalColumn cat;
  for (int c = 0; c < n_groups; ++c) cat.categories.push_back("g" + std::to_string(c));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = u(rng) < 0.03 ? -1 : static_cast<int32_t>(rng() % n_groups);
    cat.codes.push_back(c);
    for (int64_t j = 0; j < g; ++j) {
      float v = 0;
      if (j == 0) {
        if (u(rng) < 0.3) v = -static_cast<float>(1 + rng() % 3);
        else if (u(rng) < 0.3) v = static_cast<float>(rng() % 4);
      } else if (j == 1) {
        v = u(rng) < 0.9 ? 1.5f : static_cast<float>(u(rng));
      } else {
        const double p = 0.1 + 0.4 * (c >= 0 && j % n_groups == c ? 1 : 0) + 0.1 * u(rng);
        if (u(rng) < p) v = static_cast<float>(std::log1p(1 + (rng() % (c >= 0 ? 3 + c % 5 : 2))));
        if (j % 7 == 0 && v != 0) v = static_cast<float>(v * (1 + 0.01 * u(rng)));  // few ties
      }
      if (v != 0) {
        x.indices.push_back(static_cast<int32_t>(j));
        x.data.push_back(v);
      }
    }
    x.indptr.push_back(static_cast<int64_t>(x.data.size()));
  }
  Dataset d;
  d.obs.index.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) d.obs.index[i] = "c" + std::to_string(i);
  d.var.index.resize(static_cast<size_t>(g));
  for (int64_t j = 0; j < g; ++j) d.var.index[j] = "gene" + std::to_string(j);
  d.obs.set("grp", Column(cat));
  d.X = Matrix(std::move(x));
  return d;
}

void expect_close(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b, double rel,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t f = 0; f < a.size(); ++f) {
    ASSERT_EQ(a[f].size(), b[f].size()) << what;
    for (size_t j = 0; j < a[f].size(); ++j) {
      const double x = a[f][j], y = b[f][j];
      if (std::isnan(x) || std::isnan(y)) {
        EXPECT_EQ(std::isnan(x), std::isnan(y)) << what << " field " << f << " gene " << j;
        continue;
      }
      EXPECT_NEAR(x, y, rel * std::max(1.0, std::fabs(y)) + 1e-300) << what << " field " << f << " gene " << j;
    }
  }
}

void compare(const Dataset& d, const RankGenesGroupsOptions& o, double rel) {
  const Context cpu = Context::cpu(0);
  const Context gpu = test::gpu_context();
  const RankGenesGroupsResult a = rank_genes_groups(d, o, gpu);
  const RankGenesGroupsResult b = rank_genes_groups(d, o, cpu);
  const std::string m = o.method + (o.reference == "rest" ? " vs rest" : " vs " + o.reference);
  expect_close(a.scores, b.scores, rel, (m + ": scores").c_str());
  expect_close(a.pvals, b.pvals, rel, (m + ": pvals").c_str());
  expect_close(a.pvals_adj, b.pvals_adj, rel, (m + ": pvals_adj").c_str());
  // (the means behind the fold changes: fixed-point sums against float64 block sums)
  expect_close(a.logfoldchanges, b.logfoldchanges, std::max(rel, 1e-9), (m + ": logfoldchanges").c_str());
  expect_close(a.pts, b.pts, 1e-12, (m + ": pts").c_str());
  expect_close(a.pts_rest, b.pts_rest, 1e-12, (m + ": pts_rest").c_str());
  ASSERT_EQ(a.order.size(), b.order.size());
  // the top genes agree where scores are not (near) tied
  for (size_t f = 0; f < a.order.size(); ++f) {
    size_t same = 0;
    for (size_t k = 0; k < a.order[f].size(); ++k) same += a.order[f][k] == b.order[f][k];
    EXPECT_GE(static_cast<double>(same), 0.9 * static_cast<double>(a.order[f].size())) << m << " field " << f;
  }
}

}  // namespace

TEST(RankGenesGroupsGpu, EveryTestAgainstTheCpu) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = data(11, 5000, 60, 6);
  for (const char* method : {"t-test", "t-test_overestim_var", "wilcoxon"})
    for (const char* ref : {"rest", "g2"})
      for (bool tie : {false, true}) {
        if (tie && std::strcmp(method, "wilcoxon") != 0) continue;
        RankGenesGroupsOptions o;
        o.groupby = "grp";
        o.method = method;
        o.reference = ref;
        o.tie_correct = tie;
        o.pts = true;
        o.use_raw = false;
        // t-tests: fixed-point sums against float64 block sums (1e-9 of the variance's cancellation);
        // wilcoxon: the same integer rank sums
        compare(d, o, std::strcmp(method, "wilcoxon") == 0 ? 1e-12 : 1e-7);
      }
}

TEST(RankGenesGroupsGpu, ManyGroupsAndGeneBatches) {
  SCURRY_REQUIRE_GPU();
  // 1,000 groups: more buckets than the per-warp shared counters hold (the global-counter branch)
  const Dataset d = data(12, 20000, 25, 1000);
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "wilcoxon";
  o.use_raw = false;
  o.n_genes = 10;
  compare(d, o, 1e-12);
  // gene batches of at most ~3 genes' entries
  const Dataset e = data(13, 6000, 40, 5);
  setenv("SCURRY_RGG_GPU_BATCH", "5000", 1);
  RankGenesGroupsOptions p;
  p.groupby = "grp";
  p.method = "wilcoxon";
  p.tie_correct = true;
  p.use_raw = false;
  compare(e, p, 1e-12);
  p.reference = "g0";
  compare(e, p, 1e-12);
  unsetenv("SCURRY_RGG_GPU_BATCH");
  // streamed: the matrix in chunks of ~20,000 entries (each pass uploads them again), with batches
  setenv("SCURRY_RGG_GPU_CHUNK", "20000", 1);
  compare(e, p, 1e-12);
  p.reference = "rest";
  compare(e, p, 1e-12);
  setenv("SCURRY_RGG_GPU_BATCH", "7000", 1);
  compare(e, p, 1e-12);
  p.method = "t-test";
  p.pts = true;
  compare(e, p, 1e-7);
  unsetenv("SCURRY_RGG_GPU_BATCH");
  unsetenv("SCURRY_RGG_GPU_CHUNK");
}

TEST(RankGenesGroupsGpu, TwoRunsSameBitsAndNanOnTheCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  Dataset d = data(14, 7000, 30, 8);
  for (const char* method : {"t-test", "wilcoxon"}) {
    RankGenesGroupsOptions o;
    o.groupby = "grp";
    o.method = method;
    o.use_raw = false;
    const RankGenesGroupsResult a = rank_genes_groups(d, o, gpu);
    const RankGenesGroupsResult b = rank_genes_groups(d, o, gpu);
    for (size_t f = 0; f < a.scores.size(); ++f) {
      EXPECT_EQ(0, std::memcmp(a.scores[f].data(), b.scores[f].data(), a.scores[f].size() * 8)) << method;
      EXPECT_EQ(0, std::memcmp(a.logfoldchanges[f].data(), b.logfoldchanges[f].data(), a.scores[f].size() * 8));
    }
  }
  // NaN: the CPU path (which skips NaN values) computes it
  std::get<CsrF>(d.X.m).data[5] = std::nanf("");
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "wilcoxon";
  o.use_raw = false;
  compare(d, o, 1e-12);
}

TEST(RankGenesGroupsGpu, SeveralContextsGiveTheSameBits) {
  SCURRY_REQUIRE_GPU();
  // three contexts on one GPU stand for three GPUs: the genes split between them
  std::vector<Context> three = test::three_gpu_contexts();
  std::vector<Context*> gpus;
  for (Context& c : three) gpus.push_back(&c);
  const Dataset d = data(15, 6000, 41, 7);
  for (const char* method : {"t-test", "wilcoxon"})
    for (const char* ref : {"rest", "g3"}) {
      RankGenesGroupsOptions o;
      o.groupby = "grp";
      o.method = method;
      o.reference = ref;
      o.pts = true;
      o.use_raw = false;
      const RankGenesGroupsResult a = rank_genes_groups(d, o, *gpus[0]);
      const RankGenesGroupsResult b = rank_genes_groups(d, o, *gpus[0], gpus);
      ASSERT_EQ(a.scores.size(), b.scores.size());
      for (size_t f = 0; f < a.scores.size(); ++f) {
        const size_t n = a.scores[f].size() * 8;
        EXPECT_EQ(0, std::memcmp(a.scores[f].data(), b.scores[f].data(), n)) << method << " " << ref << " field " << f;
        EXPECT_EQ(0, std::memcmp(a.pvals_adj[f].data(), b.pvals_adj[f].data(), n)) << method << " " << ref;
        EXPECT_EQ(0, std::memcmp(a.logfoldchanges[f].data(), b.logfoldchanges[f].data(), n)) << method << " " << ref;
        EXPECT_EQ(a.order[f], b.order[f]);
      }
      for (size_t f = 0; f < a.pts.size(); ++f) EXPECT_EQ(a.pts[f], b.pts[f]);
    }
}

TEST(RankGenesGroupsGpu, DenseXOnTheDeviceGivesTheSameBitsAsTheHostPath) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  // a dense X (as a GPU run's scaled X), some exact zeros kept out as the CSR conversion does
  Dataset d = data(16, 6000, 37, 6);
  d.X = Matrix(to_dense_f(d.X), DType::f32);
  Dataset e = d;  // the same X, and its copy on the device
  e.device_x = device_matrix(gpu, std::get<DenseF>(e.X.m));
  auto same = [](const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b, const char* w) {
    ASSERT_EQ(a.size(), b.size()) << w;
    for (size_t f = 0; f < a.size(); ++f) {
      ASSERT_EQ(a[f].size(), b[f].size()) << w;
      EXPECT_EQ(0, std::memcmp(a[f].data(), b[f].data(), a[f].size() * 8)) << w << " field " << f;
    }
  };
  for (const char* method : {"t-test", "wilcoxon"})
    for (const char* ref : {"rest", "g1"}) {
      RankGenesGroupsOptions o;
      o.groupby = "grp";
      o.method = method;
      o.reference = ref;
      o.pts = true;
      o.tie_correct = true;
      o.use_raw = false;
      const RankGenesGroupsResult a = rank_genes_groups(e, o, gpu);  // the device's X
      const RankGenesGroupsResult b = rank_genes_groups(d, o, gpu);  // X converted and uploaded
      same(a.scores, b.scores, "scores");
      same(a.pvals, b.pvals, "pvals");
      same(a.logfoldchanges, b.logfoldchanges, "logfoldchanges");
      same(a.pts, b.pts, "pts");
      same(a.pts_rest, b.pts_rest, "pts_rest");
      EXPECT_EQ(a.order, b.order);
      compare(e, o, std::strcmp(method, "wilcoxon") == 0 ? 1e-12 : 1e-7);  // and the CPU
    }
  // NaN in the device's copy: computed on the CPU from the host's X
  std::get<DenseF>(e.X.m).data[7] = std::nanf("");
  e.device_x = device_matrix(gpu, std::get<DenseF>(e.X.m));
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "wilcoxon";
  o.use_raw = false;
  compare(e, o, 1e-12);
}

TEST(RankGenesGroupsGpu, LogregAgainstTheCpuAndTwoRunsSameBits) {
  SCURRY_REQUIRE_GPU();
  // the device's data term (z in the CPU's order and roundings; exp, log and the gradient's sums in
  // other orders) under the same host L-BFGS: coefficients within 1e-3 of the largest (the two may
  // stop one iteration apart, at a gradient of ~tol = 1e-4 with curvature >= 1/C = 1), at least 23
  // of each top 25 shared (the bar against scanpy: 20); multinomial (5 groups, some cells
  // without one) and binary (two groups selected); two runs the same bits
  const Context cpu = Context::cpu(2);
  const Context gpu = test::gpu_context();
  const Dataset d = data(16, 3000, 70, 5);
  for (bool binary : {false, true}) {
    RankGenesGroupsOptions o;
    o.groupby = "grp";
    o.method = "logreg";
    o.use_raw = false;
    o.n_genes = 25;
    if (binary) o.groups = {"g1", "g3"};
    const RankGenesGroupsResult a = rank_genes_groups(d, o, gpu), b = rank_genes_groups(d, o, cpu);
    ASSERT_EQ(a.scores.size(), b.scores.size());
    for (size_t f = 0; f < a.scores.size(); ++f) {
      double top = 0;
      for (double v : b.scores[f]) top = std::max(top, std::fabs(v));
      for (size_t j = 0; j < a.scores[f].size(); ++j)
        EXPECT_NEAR(a.scores[f][j], b.scores[f][j], 1e-3 * top) << (binary ? "binary" : "multinomial") << " field " << f;
      size_t same = 0;
      for (int64_t g : a.order[f]) same += std::count(b.order[f].begin(), b.order[f].end(), g);
      EXPECT_GE(same, 23u) << "field " << f;
    }
    const RankGenesGroupsResult c = rank_genes_groups(d, o, gpu);
    for (size_t f = 0; f < a.scores.size(); ++f)
      EXPECT_EQ(0, std::memcmp(a.scores[f].data(), c.scores[f].data(), a.scores[f].size() * 8)) << f;
  }
}

// logreg's data term: sum over cells of the cross-entropy and its gradient, in long double (the oracle).
static double logreg_oracle(const CsrF& x, const std::vector<int32_t>& y, int K, const std::vector<double>& w,
                     std::vector<double>& g) {
  const int64_t p = x.n_cols;
  const int R = K == 2 ? 1 : K;
  std::vector<long double> gl(static_cast<size_t>(R) * (p + 1), 0.0L);
  long double f = 0;
  for (int64_t i = 0; i < x.n_rows; ++i) {
    std::vector<long double> z(static_cast<size_t>(R));
    for (int k = 0; k < R; ++k) z[k] = w[static_cast<size_t>(R) * p + k];
    for (int64_t q = x.indptr[i]; q < x.indptr[i + 1]; ++q)
      for (int k = 0; k < R; ++k) z[k] += static_cast<long double>(w[k * p + x.indices[q]]) * x.data[q];
    std::vector<long double> d(static_cast<size_t>(R));
    if (K == 2) {
      const long double yy = y[i] == 1 ? 1 : 0;
      f += std::log1p(std::exp(z[0])) - yy * z[0];
      d[0] = 1 / (1 + std::exp(-z[0])) - yy;
    } else {
      long double mx = *std::max_element(z.begin(), z.end()), s = 0;
      for (int k = 0; k < K; ++k) s += std::exp(z[k] - mx);
      const long double lse = mx + std::log(s);
      f += lse - z[y[i]];
      for (int k = 0; k < K; ++k) d[k] = std::exp(z[k] - lse) - (y[i] == k ? 1 : 0);
    }
    for (int k = 0; k < R; ++k) {
      for (int64_t q = x.indptr[i]; q < x.indptr[i + 1]; ++q) gl[k * p + x.indices[q]] += d[k] * x.data[q];
      gl[static_cast<size_t>(R) * p + k] += d[k];
    }
  }
  g.assign(gl.begin(), gl.end());
  return static_cast<double>(f);
}

TEST(RankGenesGroupsGpu, LogregDataTermOnThreeContextsAndStreamedSameBits) {
  SCURRY_REQUIRE_GPU();
  // the loss and gradient against the long double oracle (1e-10 of the largest term), and the same
  // bits on one context, on three (row shares of whole 256-cell blocks), streamed in chunks of
  // blocks (a cap of entries that cuts the shares in several chunks), three contexts streamed;
  // multinomial and binary, at the start (w = 0) and at random weights
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const Dataset d = data(seed, 2777, 61, 5);  // (rows not a multiple of 256 or 3)
  const CsrF& x = std::get<CsrF>(d.X.m);
  const auto& codes = std::get<CategoricalColumn>(d.obs.at("grp").c).codes;
  const Context gpu = test::gpu_context();
  std::vector<Context> three = test::three_gpu_contexts();
  const std::vector<const Context*> one{&gpu}, many{&three[0], &three[1], &three[2]};
  for (int K : {5, 2}) {
    std::vector<int32_t> y(codes.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = (codes[i] < 0 ? 0 : codes[i]) % K;
    const int64_t nw = static_cast<int64_t>(K == 2 ? 1 : K) * (x.n_cols + 1);
    LogregGpu a(one, x, y, K), b(many, x, y, K), c(one, x, y, K, 9000), e(many, x, y, K, 5000);
    EXPECT_EQ(a.streamed_devices(), 0);
    EXPECT_EQ(c.streamed_devices(), 1);
    EXPECT_EQ(e.streamed_devices(), 3);
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<double> w(static_cast<size_t>(nw), 0.0);
      std::normal_distribution<double> nd(0, rep == 2 ? 3.0 : 0.3);
      if (rep > 0)
        for (double& v : w) v = nd(rng);
      std::vector<double> go, ga, gb, gc, ge;
      const double fo = logreg_oracle(x, y, K, w, go), fa = a(w, ga);
      double top = 0;
      for (double v : go) top = std::max(top, std::fabs(v));
      EXPECT_NEAR(fa, fo, 1e-10 * std::fabs(fo)) << "K " << K << " rep " << rep << " seed " << seed;
      ASSERT_EQ(ga.size(), go.size());
      for (size_t i = 0; i < go.size(); ++i) EXPECT_NEAR(ga[i], go[i], 1e-10 * top) << "K " << K << " i " << i;
      const double fb = b(w, gb), fc = c(w, gc), fe = e(w, ge);
      EXPECT_EQ(0, std::memcmp(&fa, &fb, 8));
      EXPECT_EQ(0, std::memcmp(&fa, &fc, 8));
      EXPECT_EQ(0, std::memcmp(&fa, &fe, 8));
      EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * 8)) << "three contexts, K " << K;
      EXPECT_EQ(0, std::memcmp(ga.data(), gc.data(), ga.size() * 8)) << "streamed, K " << K;
      EXPECT_EQ(0, std::memcmp(ga.data(), ge.data(), ga.size() * 8)) << "three streamed, K " << K;
    }
  }
}

TEST(RankGenesGroupsGpu, LogregOverThreeContextsAndStreamedGivesTheSameScores) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = data(test::fresh_seed(), 2100, 47, 4);
  const Context gpu = test::gpu_context();
  std::vector<Context> three = test::three_gpu_contexts();
  std::vector<Context*> gpus;
  for (Context& c : three) gpus.push_back(&c);
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "logreg";
  o.use_raw = false;
  const RankGenesGroupsResult a = rank_genes_groups(d, o, gpu), b = rank_genes_groups(d, o, *gpus[0], gpus);
  setenv("SCURRY_RGG_GPU_CHUNK", "3000", 1);
  const RankGenesGroupsResult c = rank_genes_groups(d, o, *gpus[0], gpus);
  unsetenv("SCURRY_RGG_GPU_CHUNK");
  ASSERT_EQ(a.scores.size(), 4u);
  for (size_t f = 0; f < a.scores.size(); ++f) {
    EXPECT_EQ(0, std::memcmp(a.scores[f].data(), b.scores[f].data(), a.scores[f].size() * 8)) << f;
    EXPECT_EQ(0, std::memcmp(a.scores[f].data(), c.scores[f].data(), a.scores[f].size() * 8)) << f;
    EXPECT_EQ(a.order[f], b.order[f]);
  }
}
