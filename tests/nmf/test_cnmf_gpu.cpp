// GPU (label gpu): planted programs recovered end to end with the replicates factorised on the GPU
// (the consensus and refits as on the CPU), the "on the CPU and the GPU".
#include "nmf/nmf.hpp"
#include "testlib.hpp"
#include "cnmf_planted.hpp"

using namespace scurry;

TEST(CnmfGpu, RecoversPlantedPrograms) {
  SCURRY_REQUIRE_GPU();
  ContextOptions o;
  o.device = "gpu";
  const Context g = Context::create(o);
  test_cnmf::check_planted_recovery(
      [&](const CsrF& X, NmfBatch init, const NmfOptions& opt) { return nmf_fit_gpu(g, X, std::move(init), opt); },
      test::fresh_seed());
}
