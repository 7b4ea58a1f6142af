// The whole CPU chain (what `scurry run` does up to PCA) against scanpy 1.9.6's tutorial run on the
// pbmc3k subset (tests/data), and identical for 1 and 2 threads.
#include <cmath>

#include "io/h5ad.hpp"
#include "pp/preprocess.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {
Dataset run_chain(int threads) {
  Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  Context ctx = Context::cpu(threads);
  preprocess(ctx, d, o);
  return d;
}
}  // namespace

TEST(Preprocess, TutorialChainMatchesScanpy) {
  const Dataset d = run_chain(2);
  const Dataset gold = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  EXPECT_EQ(d.obs.index, gold.obs.index);
  EXPECT_EQ(d.var.index, gold.var.index) << "the same 2000 HVGs in the same order";
  ASSERT_TRUE(d.raw);
  EXPECT_EQ(d.raw->var.index, gold.raw->var.index);
  // raw.X: log-normalised values of all 11,780 genes
  const CsrF &r = d.raw->X.csr_f(), &gr = gold.raw->X.csr_f();
  ASSERT_EQ(r.indices, gr.indices);
  double worst = 0;
  for (size_t p = 0; p < gr.data.size(); ++p) worst = std::max<double>(worst, std::abs(r.data[p] - gr.data[p]));
  EXPECT_LT(worst, 1e-6);
  // counts layer of the HVGs
  EXPECT_EQ(d.layers.at("counts").csr_f().data, to_csr_f(gold.layers.at("counts")).data);
  // scaled X
  const DenseF x = to_dense_f(d.X), gx = to_dense_f(gold.X);
  worst = 0;
  for (size_t i = 0; i < gx.data.size(); ++i) worst = std::max<double>(worst, std::abs(x.data[i] - gx.data[i]));
  EXPECT_LT(worst, 1e-5);
  // PCA
  const auto& vr = std::get<NumArray>(d.uns.at("pca").dict().at("variance_ratio").v).data;
  const auto& gvr = std::get<NumArray>(gold.uns.at("pca").dict().at("variance_ratio").v).data;
  ASSERT_EQ(vr.size(), 50u);
  for (size_t j = 0; j < 50; ++j) EXPECT_NEAR(vr[j], gvr[j], 1e-4 * gvr[j]) << j;
  const DenseD p = to_dense_d(d.obsm.at("X_pca")), gp = to_dense_d(gold.obsm.at("X_pca"));
  for (int64_t j = 0; j < 20; ++j) {
    double sab = 0, saa = 0, sbb = 0;
    for (int64_t i = 0; i < p.n_rows; ++i) sab += p(i, j) * gp(i, j), saa += p(i, j) * p(i, j), sbb += gp(i, j) * gp(i, j);
    EXPECT_GT(std::abs(sab) / std::sqrt(saa * sbb), 0.999) << "component " << j;
  }
  // QC columns carried through
  const auto& mt = d.obs.numeric("pct_counts_mt");
  const auto& gmt = gold.obs.numeric("pct_counts_mt");
  for (size_t i = 0; i < mt.size(); ++i) EXPECT_NEAR(mt[i], gmt[i], 1e-5 * std::max(1.0, gmt[i]));
}

TEST(Preprocess, IdenticalForOneAndTwoThreads) {
  const Dataset a = run_chain(1), b = run_chain(2);
  EXPECT_EQ(a.var.index, b.var.index);
  EXPECT_EQ(a.X.dense_f().data, b.X.dense_f().data);
  EXPECT_EQ(a.obsm.at("X_pca").dense_f().data, b.obsm.at("X_pca").dense_f().data);
  EXPECT_EQ(a.obs.numeric("pct_counts_in_top_50_genes"), b.obs.numeric("pct_counts_in_top_50_genes"));
}
