// cNMF at scale, CPU side: replicate batches sliced and joined, --gpus parsing, replicate groups fitted
// apart equal one batch (the CPU NMF's independence claim that the GPU split relies on), the
// benchmark's generator (density, thread-count independence, planted structure) and scaling against
// a dense oracle, and the CPU benchmark's bookkeeping.
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "nmf/cnmf_bench.hpp"
#include "nmf/nmf.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

TEST(CnmfScale, SliceConcatRoundTrip) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(200, 40, 0.2, seed);
  const NmfBatch b = nmf_random_init(X, 3, nmf_replicate_seeds(seed, 5));
  const NmfBatch a = nmf_batch_slice(b, 0, 2), c = nmf_batch_slice(b, 2, 5);
  EXPECT_EQ(a.R, 2);
  EXPECT_EQ(c.R, 3);
  for (int r = 0; r < 3; ++r)
    for (int64_t i = 0; i < b.n; i += 7)
      for (int q = 0; q < 3; ++q) ASSERT_EQ(c.w(r, i, q), b.w(r + 2, i, q));
  const NmfBatch j = nmf_batch_concat({a, c});
  EXPECT_EQ(j.R, 5);
  EXPECT_EQ(j.W, b.W);
  EXPECT_EQ(j.Ht, b.Ht);
  EXPECT_ANY_THROW(nmf_batch_slice(b, 3, 3));
}

TEST(CnmfScale, ParseGpus) {
  EXPECT_EQ(parse_gpus("all", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_gpus("2", 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_gpus("1,3", 4), (std::vector<int>{1, 3}));
  EXPECT_EQ(parse_gpus("1,", 4), (std::vector<int>{1}));
  EXPECT_THROW(parse_gpus("5", 4), InputError);
  EXPECT_THROW(parse_gpus("0", 4), InputError);
  EXPECT_THROW(parse_gpus("x", 4), InputError);
  EXPECT_THROW(parse_gpus("1,1", 4), InputError);
  EXPECT_THROW(parse_gpus("0,4", 4), InputError);
  EXPECT_THROW(parse_gpus("all", 0), InputError);
}

// Groups of replicates fitted separately, joined, equal the whole batch bit for bit (CPU), also with
// the stopping rule.
TEST(CnmfScale, GroupsEqualOneBatchCpu) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(400, 60, 0.15, seed, 9);
  const Context ctx = Context::cpu(2);
  const NmfBatch init = nmf_random_init(X, 4, nmf_replicate_seeds(seed, 5));
  NmfOptions opt;
  opt.tol = 1e-3;
  opt.max_iter = 60;
  const NmfResult whole = nmf_fit(ctx, X, init, opt);
  const NmfResult g1 = nmf_fit(ctx, X, nmf_batch_slice(init, 0, 3), opt);
  const NmfResult g2 = nmf_fit(ctx, X, nmf_batch_slice(init, 3, 5), opt);
  const NmfBatch joined = nmf_batch_concat({g1.f, g2.f});
  EXPECT_EQ(joined.W, whole.f.W);
  EXPECT_EQ(joined.Ht, whole.f.Ht);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(r < 3 ? g1.n_iter[r] : g2.n_iter[r - 3], whole.n_iter[r]);
}

TEST(CnmfScale, GpusWithoutCudaIsAnInputError) {
  if (cuda_built()) GTEST_SKIP() << "CUDA build";
  const CsrF X = test::random_counts(50, 10, 0.3, 1);
  EXPECT_THROW(nmf_fit_gpus(X, nmf_random_init(X, 2, {1, 2}), NmfOptions{}, {0}), InputError);
}

TEST(CnmfBench, GeneratorDensityStructureAndThreads) {
  CnmfBenchOptions o;
  o.cells = 3000;
  o.seed = test::fresh_seed();
  const CsrF a = cnmf_bench_counts(Context::cpu(1), o);
  const CsrF b = cnmf_bench_counts(Context::cpu(2), o);
  EXPECT_EQ(a.indptr, b.indptr);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.data, b.data);
  ASSERT_EQ(a.n_rows, 3000);
  ASSERT_EQ(a.n_cols, 2000);
  const double density = static_cast<double>(a.nnz()) / (3000.0 * 2000.0);
  EXPECT_GT(density, 0.10);
  EXPECT_LT(density, 0.22);
  for (int64_t i = 0; i < a.n_rows; ++i)
    for (int64_t p = a.indptr[i]; p < a.indptr[i + 1]; ++p) {
      ASSERT_GE(a.data[p], 1.0f);
      ASSERT_EQ(a.data[p], std::round(a.data[p]));
      if (p > a.indptr[i]) {
        ASSERT_LT(a.indices[p - 1], a.indices[p]);
      }
    }
  // Spectra: P rows summing to 1.
  const std::vector<float> s = cnmf_bench_spectra(o);
  ASSERT_EQ(s.size(), static_cast<size_t>(o.programs) * 2000);
  for (int p = 0; p < o.programs; ++p) {
    double t = 0;
    for (int64_t j = 0; j < 2000; ++j) t += s[p * 2000 + j];
    EXPECT_NEAR(t, 1.0, 1e-5);
  }
  // Planted structure: going from rank 1 to rank P gains clearly more on P = 20 planted programs than
  // on a single one (where the extra components only fit noise).
  auto gain = [&](int programs) {
    CnmfBenchOptions q = o;
    q.programs = programs;
    CsrF x = cnmf_bench_counts(Context::cpu(2), q);
    cnmf_bench_scale(x);
    double nx = 0;
    for (const float v : x.data) nx += static_cast<double>(v) * v;
    NmfOptions opt;
    opt.tol = 0;
    opt.max_iter = 30;
    const Context ctx = Context::cpu(2);
    const double e1 = nmf_fit(ctx, x, nmf_random_init(x, 1, {3}), opt).error[0] / std::sqrt(nx);
    const double eP = nmf_fit(ctx, x, nmf_random_init(x, 20, {3}), opt).error[0] / std::sqrt(nx);
    return e1 - eP;
  };
  const double g20 = gain(20), g1 = gain(1);
  EXPECT_GT(g20, g1 + 0.007) << "gain with 20 programs " << g20 << ", with 1 " << g1;
}

TEST(CnmfBench, ScaleMatchesDenseOracle) {
  const uint64_t seed = test::fresh_seed();
  CsrF X = test::random_counts(300, 50, 0.2, seed, 15);
  // Gene 7 all zero: its scale is 1 (no division by zero).
  for (int64_t i = 0; i < X.n_rows; ++i)
    for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p)
      if (X.indices[p] == 7) X.data[p] = 0;
  const CsrF before = X;
  cnmf_bench_scale(X);
  std::vector<double> dense(300 * 50, 0.0);
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t p = before.indptr[i]; p < before.indptr[i + 1]; ++p) dense[i * 50 + before.indices[p]] = before.data[p];
  for (int64_t j = 0; j < 50; ++j) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < 300; ++i) m += dense[i * 50 + j] / 300.0;
    for (int64_t i = 0; i < 300; ++i) v += (dense[i * 50 + j] - m) * (dense[i * 50 + j] - m) / 299.0;
    const double sd = v > 0 ? std::sqrt(v) : 1.0;
    for (int64_t i = 0; i < 300; ++i)
      for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p)
        if (X.indices[p] == j) {
          ASSERT_NEAR(X.data[p], before.data[p] / sd, 1e-5 * (1 + before.data[p] / sd));
        }
  }
}

TEST(CnmfBench, CpuBookkeeping) {
  CnmfBenchOptions o;
  o.cells = 400;
  o.genes = 120;
  o.ks = {3, 5};
  o.replicates = 2;
  o.iterations = 4;
  o.seed = test::fresh_seed();
  const CnmfBenchResult r = cnmf_bench_cpu(Context::cpu(2), o);
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.cells, 400);
  EXPECT_GT(r.nnz, 0);
  ASSERT_EQ(r.ks.size(), 2u);
  for (const auto& k : r.ks) {
    EXPECT_EQ(k.replicates, 2);
    EXPECT_DOUBLE_EQ(k.flops_per_iteration, 4.0 * 400 * 120 * k.k * 2);
    EXPECT_NEAR(k.replicates_per_second * k.seconds, 2.0, 1e-9);
    EXPECT_NEAR(k.seconds_per_iteration * 4, k.seconds, 1e-12);
    EXPECT_GT(k.relative_error, 0.0);
    EXPECT_LT(k.relative_error, 1.0);
  }
  o.programs = 40;
  EXPECT_THROW(cnmf_bench_cpu(Context::cpu(1), o), InputError);
}

}  // namespace
}  // namespace scurry
