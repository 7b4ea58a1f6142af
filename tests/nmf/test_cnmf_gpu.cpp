// GPU (label gpu): planted programs recovered end to end with the replicates factorised on the GPU
// (the consensus and refits as on the CPU), the "on the CPU and the GPU"; and consensus' refits
// on the device against the CPU's.
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

// consensus' refits (the usages over every cell, the TPM spectra, the final usages on the TPM of the
// factorised genes) on the device of a GPU context against the same steps on the CPU: the k-means
// spectra are the same bits, the refits agree to the solvers' tolerance.
TEST(CnmfGpu, ConsensusRefitsOnTheDeviceMatchTheCpu) {
  SCURRY_REQUIRE_GPU();
  constexpr int K = 6, R = 5;
  const uint64_t seed = test::fresh_seed();
  const test_cnmf::Planted p = test_cnmf::planted(2500, 600, K, 2000, seed);
  const Context cpu = Context::cpu(2);
  ContextOptions o;
  o.device = "gpu";
  const Context gpu = Context::create(o);
  CnmfPrepareOptions po;
  po.num_highvar_genes = 400;
  const CnmfPrepared pr = cnmf_prepare(cpu, p.counts, p.cells, p.genes, po, "planted");
  NmfOptions nmf;
  const NmfResult res = nmf_fit(cpu, pr.norm_counts, nmf_random_init(pr.norm_counts, K, nmf_replicate_seeds(seed, R)), nmf);
  const DenseF merged = test_cnmf::merged_spectra(res, R, K, pr.norm_counts.n_cols);
  CnmfConsensusOptions co;
  co.refit = nmf;
  co.density_threshold = 2.0;
  const CnmfConsensus cc = cnmf_consensus(cpu, merged, K, pr.norm_counts, co);
  const CnmfConsensus cg = cnmf_consensus(gpu, merged, K, pr.norm_counts, co);
  EXPECT_EQ(cc.labels, cg.labels);
  EXPECT_EQ(cc.stability, cg.stability);
  const auto rel = [](const DenseF& a, const DenseF& b) {
    double d = 0, s = 0;
    for (size_t q = 0; q < a.data.size(); ++q) d += double(a.data[q] - b.data[q]) * (a.data[q] - b.data[q]), s += double(a.data[q]) * a.data[q];
    return std::sqrt(d / s);
  };
  ASSERT_EQ(cc.usages.data.size(), cg.usages.data.size());
  const double du = rel(cc.usages, cg.usages);
  EXPECT_LT(du, 2e-2) << "usages over all cells";
  EXPECT_NEAR(cg.prediction_error, cc.prediction_error, 1e-2 * cc.prediction_error);
  const std::vector<double>& sd = pr.tpm_std;
  const DenseF tc = cnmf_gene_spectra_tpm(cpu, cc.usages, pr.tpm, nmf);
  const DenseF tg = cnmf_gene_spectra_tpm(gpu, cc.usages, pr.tpm, nmf);
  const double dt = rel(tc, tg);
  EXPECT_LT(dt, 2e-2) << "TPM spectra";
  const DenseF fc = cnmf_refit_usages_tpm(cpu, pr.tpm, pr.genes, tc, sd, nmf);
  const DenseF fg = cnmf_refit_usages_tpm(gpu, pr.tpm, pr.genes, tc, sd, nmf);
  const double df = rel(fc, fg);
  EXPECT_LT(df, 2e-2) << "final usages";
  std::printf("relative differences GPU vs CPU: usages %.3g, TPM spectra %.3g, final usages %.3g\n", du, dt, df);
}
