// cNMF at scale on the GPU: replicates split into groups (two host threads on device 0 stand in for
// two GPUs) give the same factors as one batch (sparse layout: bit for bit; dense layout: float32
// tolerance), the dense layout (fp32 and TF32 GEMMs) against the CPU oracle, and the GPU benchmark's
// generator against the CPU one's density.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "exec/context.hpp"
#include "nmf/cnmf_bench.hpp"
#include "nmf/nmf.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (const float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Entries that differ bit for bit (0: identical); -1 for different sizes.
int64_t n_differ(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t d = 0;
  for (size_t q = 0; q < a.size(); ++q) d += a[q] != b[q];
  return d;
}

Context gpu_context() {
  ContextOptions co;
  co.device = "gpu";
  return Context::create(co);
}

TEST(NmfGpus, TwoGroupsEqualOneBatchSparse) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(3000, 300, 0.01, seed, 12);
  const Context gpu = gpu_context();
  const NmfBatch init = nmf_random_init(X, 7, nmf_replicate_seeds(seed, 5));
  for (const double tol : {0.0, 1e-4}) {
    NmfOptions opt;
    opt.gpu_layout = NmfGpuLayout::sparse;
    opt.tol = tol;
    opt.max_iter = tol > 0 ? 300 : 15;
    const NmfResult one = nmf_fit_gpu(gpu, X, init, opt);
    const NmfResult two = nmf_fit_gpus(X, init, opt, {0, 0});
    ASSERT_EQ(two.f.R, 5);
    EXPECT_EQ(n_differ(two.f.W, one.f.W), 0) << "tol " << tol;
    EXPECT_EQ(n_differ(two.f.Ht, one.f.Ht), 0) << "tol " << tol;
    EXPECT_EQ(two.n_iter, one.n_iter);
    for (int r = 0; r < 5; ++r) EXPECT_EQ(two.error[r], one.error[r]);
    // And each replicate alone (R = 1) gives the same factors again.
    const NmfResult alone = nmf_fit_gpu(gpu, X, nmf_batch_slice(init, 3, 4), opt);
    EXPECT_EQ(n_differ(alone.f.W, nmf_batch_slice(one.f, 3, 4).W), 0);
  }
}

TEST(NmfGpus, DenseLayoutMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(3000, 300, 0.1, seed, 12);
  const Context gpu = gpu_context();
  const Context cpu = Context::cpu(2);
  for (const NmfSolver s : {NmfSolver::cd, NmfSolver::mu}) {
    for (const int k : {7, 20, 45}) {
      const NmfBatch init = nmf_random_init(X, k, nmf_replicate_seeds(seed + k, 4));
      NmfOptions opt;
      opt.solver = s;
      opt.tol = 0;
      opt.max_iter = 15;
      opt.gpu_layout = NmfGpuLayout::dense;
      const NmfResult a = nmf_fit(cpu, X, init, opt);
      const NmfResult b = nmf_fit_gpu(gpu, X, init, opt);
      for (int r = 0; r < 4; ++r)
        EXPECT_NEAR(b.error[r], a.error[r], 3e-4 * a.error[r]) << nmf_solver_name(s) << " k " << k;
      const double sw = max_abs(a.f.W), sh = max_abs(a.f.Ht);
      for (size_t q = 0; q < a.f.W.size(); ++q) ASSERT_NEAR(b.f.W[q], a.f.W[q], 2e-3 * sw) << q << " k " << k;
      for (size_t q = 0; q < a.f.Ht.size(); ++q) ASSERT_NEAR(b.f.Ht[q], a.f.Ht[q], 2e-3 * sh) << q << " k " << k;
      // Two groups of the dense layout: equal up to float32 rounding of the GEMMs.
      const NmfResult two = nmf_fit_gpus(X, init, opt, {0, 0});
      for (size_t q = 0; q < a.f.W.size(); ++q) ASSERT_NEAR(two.f.W[q], b.f.W[q], 1e-3 * sw) << q;
      // TF32 GEMMs: the same fit within TF32's rounding.
      NmfOptions t = opt;
      t.gpu_tf32 = true;
      const NmfResult c = nmf_fit_gpu(gpu, X, init, t);
      for (int r = 0; r < 4; ++r) EXPECT_NEAR(c.error[r], a.error[r], 1e-2 * a.error[r]);
    }
  }
  // The automatic layout (dense at this density) with the stopping rule: converged errors agree.
  const NmfBatch init = nmf_random_init(X, 7, nmf_replicate_seeds(seed, 3));
  NmfOptions conv;
  conv.tol = 1e-4;
  conv.max_iter = 400;
  const NmfResult c = nmf_fit(cpu, X, init, conv);
  const NmfResult d = nmf_fit_gpu(gpu, X, init, conv);
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(d.error[r], c.error[r], 2e-3 * c.error[r]);
}

// The dense fits: component-major (the default: X^T kept; X^T W as one GEMM, and as 5 GEMMs over
// chunks of the cells summed in order; the update with the Grams from shared memory one column per
// thread, HALS on the tensor cores, and the Grams as kernel arguments, each forced for every k; the
// Grams by 3xTF32 mma instead of float32 FMAs), and the row-major one (SCURRY_NMF_DENSE=legacy), each
// against the CPU oracle, for k in every bound of the kernels' templates (k 10, 30, 60 among them),
// and with more genes than cells (products in their own buffer). The tensor-core HALS (3xTF32) and
// the one-column float32 kernel agree to float32 accuracy (the count of differing values is printed).
TEST(NmfGpus, DenseComponentMajorAndRowMajorMatchCpu) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const Context gpu = gpu_context();
  const Context cpu = Context::cpu(2);
  struct Shape {
    int64_t n, g;
    int k, R;
  };
  for (const Shape sh : {Shape{3000, 300, 3, 3}, Shape{3000, 300, 10, 3}, Shape{3000, 300, 14, 2},
                         Shape{3000, 300, 30, 2}, Shape{3000, 300, 60, 2}, Shape{400, 1200, 12, 3}}) {
    const CsrF X = test::random_counts(sh.n, sh.g, 0.1, seed + sh.k, 12);
    const NmfBatch init = nmf_random_init(X, sh.k, nmf_replicate_seeds(seed + 7 * sh.k, sh.R));
    for (const NmfSolver s : {NmfSolver::cd, NmfSolver::mu}) {
      NmfOptions opt;
      opt.solver = s;
      opt.tol = 0;
      opt.max_iter = 12;
      opt.gpu_layout = NmfGpuLayout::dense;
      const NmfResult a = nmf_fit(cpu, X, init, opt);
      const double sw = max_abs(a.f.W), sh_ = max_abs(a.f.Ht);
      NmfResult shared_fit, tc_fit;
      for (const char* mode : {"cm", "cm-splitk-5", "cm-shared", "cm-tc", "cm-arg", "cm-gram-tc", "legacy"}) {
        if (std::string(mode) == "legacy") setenv("SCURRY_NMF_DENSE", "legacy", 1);
        if (std::string(mode) == "cm-splitk-5") setenv("SCURRY_NMF_SPLITK", "5", 1);
        if (std::string(mode) == "cm-shared") setenv("SCURRY_NMF_UPDATE", "shared", 1);
        if (std::string(mode) == "cm-tc") setenv("SCURRY_NMF_UPDATE", "tc", 1);
        if (std::string(mode) == "cm-arg") setenv("SCURRY_NMF_UPDATE", "arg", 1);
        if (std::string(mode) == "cm-gram-tc") setenv("SCURRY_NMF_GRAM", "tc", 1);
        const NmfResult b = nmf_fit_gpu(gpu, X, init, opt);
        if (std::string(mode) == "cm-shared") shared_fit = b;
        if (std::string(mode) == "cm-tc") tc_fit = b;
        unsetenv("SCURRY_NMF_DENSE");
        unsetenv("SCURRY_NMF_SPLITK");
        unsetenv("SCURRY_NMF_UPDATE");
        unsetenv("SCURRY_NMF_GRAM");
        const std::string what = std::string(mode) + " " + nmf_solver_name(s) + " n " + std::to_string(sh.n) + " g " +
                                 std::to_string(sh.g) + " k " + std::to_string(sh.k);
        for (int r = 0; r < sh.R; ++r) {
          EXPECT_EQ(b.n_iter[r], 12) << what;
          EXPECT_NEAR(b.error[r], a.error[r], 3e-4 * a.error[r]) << what;
        }
        for (size_t q = 0; q < a.f.W.size(); ++q) ASSERT_NEAR(b.f.W[q], a.f.W[q], 2e-3 * sw) << q << " " << what;
        for (size_t q = 0; q < a.f.Ht.size(); ++q) ASSERT_NEAR(b.f.Ht[q], a.f.Ht[q], 2e-3 * sh_) << q << " " << what;
      }
      // The tensor-core HALS against the one-column float32 update (both forced for every half-step;
      // MU takes the one-column kernel either way).
      size_t differ = 0;
      for (size_t q = 0; q < a.f.W.size(); ++q) {
        EXPECT_NEAR(tc_fit.f.W[q], shared_fit.f.W[q], 1e-4 * sw) << q << " k " << sh.k;
        differ += tc_fit.f.W[q] != shared_fit.f.W[q];
      }
      for (size_t q = 0; q < a.f.Ht.size(); ++q) {
        EXPECT_NEAR(tc_fit.f.Ht[q], shared_fit.f.Ht[q], 1e-4 * sh_) << q << " k " << sh.k;
        differ += tc_fit.f.Ht[q] != shared_fit.f.Ht[q];
      }
      std::printf("[ info ] tc vs shared update, %s k %d: %zu of %zu values differ\n", nmf_solver_name(s), sh.k,
                  differ, a.f.W.size() + a.f.Ht.size());
    }
  }
}

TEST(NmfGpus, BenchGeneratorAndRun) {
  SCURRY_REQUIRE_GPU();
  CnmfBenchOptions o;
  o.cells = 20000;
  o.genes = 500;
  o.ks = {5, 12};
  o.replicates = 3;
  o.iterations = 5;
  o.seed = test::fresh_seed();
  o.devices = {0, 0};
  const CnmfBenchResult g = cnmf_bench_gpu(o, CudaOptions{});
  CnmfBenchOptions oc = o;
  oc.cells = 5000;
  const CsrF x = cnmf_bench_counts(Context::cpu(2), oc);
  const double dc = static_cast<double>(x.nnz()) / (5000.0 * 500.0);
  EXPECT_NEAR(g.density, dc, 0.02);
  ASSERT_EQ(g.ks.size(), 2u);
  for (const auto& k : g.ks) {
    EXPECT_EQ(k.replicates, 3);
    EXPECT_EQ(k.layout, "dense");
    EXPECT_GT(k.seconds, 0.0);
    EXPECT_GT(k.relative_error, 0.0);
    EXPECT_LT(k.relative_error, 1.0);
    ASSERT_EQ(k.peak_bytes.size(), 2u);
    EXPECT_GT(k.peak_bytes[0], 20000.0 * 500 * 4);  // the dense X at least
  }
  // The CPU benchmark on the same (smaller) data reaches a similar fit quality.
  const CnmfBenchResult c = cnmf_bench_cpu(Context::cpu(2), oc);
  EXPECT_NEAR(g.ks[0].relative_error, c.ks[0].relative_error, 0.08);
}

}  // namespace
}  // namespace scurry
