// GPU batched NMF against the CPU one (the oracle) from the same init: HALS, MU Frobenius and MU
// Kullback-Leibler for a fixed number of iterations (float32 tolerances), and with the stopping rule;
// the Frobenius cases in both GPU layouts of X (sparse gathers, dense GEMMs).
#include <algorithm>
#include <cmath>

#include "exec/context.hpp"
#include "nmf/nmf.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (const float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

TEST(NmfGpu, MatchesCpuFromSameInit) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(3000, 300, 0.1, seed, 12);
  ContextOptions co;
  co.device = "gpu";
  const Context gpu = Context::create(co);
  const Context cpu = Context::cpu(2);
  struct Case {
    NmfSolver s;
    NmfLoss l;
    NmfGpuLayout layout;
  };
  for (const Case cs : {Case{NmfSolver::cd, NmfLoss::frobenius, NmfGpuLayout::sparse},
                        Case{NmfSolver::mu, NmfLoss::frobenius, NmfGpuLayout::sparse},
                        Case{NmfSolver::cd, NmfLoss::frobenius, NmfGpuLayout::dense},
                        Case{NmfSolver::mu, NmfLoss::frobenius, NmfGpuLayout::dense},
                        Case{NmfSolver::mu, NmfLoss::kullback_leibler, NmfGpuLayout::sparse}}) {
    const NmfBatch init = nmf_random_init(X, 7, nmf_replicate_seeds(seed, 5));
    NmfOptions opt;
    opt.solver = cs.s;
    opt.loss = cs.l;
    opt.gpu_layout = cs.layout;
    const double etol = cs.layout == NmfGpuLayout::dense ? 3e-4 : 1e-4;  // dense: float32 GEMMs and updates
    opt.tol = 0;
    opt.max_iter = 15;
    const NmfResult a = nmf_fit(cpu, X, init, opt);
    const NmfResult b = nmf_fit_gpu(gpu, X, init, opt);
    for (int r = 0; r < 5; ++r) {
      EXPECT_EQ(b.n_iter[r], 15);
      EXPECT_NEAR(b.error[r], a.error[r], etol * a.error[r]) << nmf_solver_name(cs.s) << "/" << nmf_loss_name(cs.l)
                                                            << (cs.layout == NmfGpuLayout::dense ? " dense" : " sparse");
    }
    const double sw = max_abs(a.f.W), sh = max_abs(a.f.Ht);
    for (size_t q = 0; q < a.f.W.size(); ++q) ASSERT_NEAR(b.f.W[q], a.f.W[q], 2e-3 * sw) << q;
    for (size_t q = 0; q < a.f.Ht.size(); ++q) ASSERT_NEAR(b.f.Ht[q], a.f.Ht[q], 2e-3 * sh) << q;
    // With the stopping rule: converged errors agree.
    NmfOptions conv = opt;
    conv.tol = 1e-4;
    conv.max_iter = 400;
    const NmfResult c = nmf_fit(cpu, X, init, conv);
    const NmfResult d = nmf_fit_gpu(gpu, X, init, conv);
    for (int r = 0; r < 5; ++r) EXPECT_NEAR(d.error[r], c.error[r], 2e-3 * c.error[r]);
  }
}

}  // namespace
}  // namespace scurry
