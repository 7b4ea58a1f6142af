// The whole CPU chain (what `scurry run` does up to PCA) against scanpy 1.9.6's tutorial run on the
// pbmc3k subset (tests/data), and identical for 1 and 2 threads.
#include <cmath>
#include <map>
#include <random>

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

// The chain's HVG subset of a CSR X (pp/preprocess.cpp: the counts' values saved beside X, new
// copies of the kept genes, raw/X and layers/counts handed to early_write) gives what the steps one
// by one give (the oracle: counts copied before normalize_total, log1p apart, raw copied, the copy
// subset with X): raw/X, layers['counts'] (values and dtype), X, X_pca bit for bit. Counts below the
// log1p memo's 64, above it, above uint16 (the float32 fallback) and non-integers (the same).
TEST(Preprocess, LeanSubsetEqualsStepsOneByOne) {
  const uint64_t seed = test::fresh_seed();
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    Dataset in = test::simulated_counts(400, 600, 120);
    CsrF& x = in.X.csr_f();
    std::mt19937_64 rng(seed + static_cast<uint64_t>(kind));
    for (float& v : x.data) {  // a few large counts; kind 1: some above 65535, kind 2: non-integers
      const uint64_t u = rng() % 1000;
      if (u < 20) v += static_cast<float>(100 + rng() % 900);
      if (kind == 1 && u == 999) v = 70000.0f + static_cast<float>(rng() % 100);
      if (kind == 2 && u >= 990) v += 0.5f;
    }
    in.X.dtype = kind == 0 ? DType::i32 : DType::f32;
    PreprocessOptions o;
    o.qc_vars = {"mt"};
    o.filter_cells.min_genes = 20;
    o.hvg.n_top_genes = 150;
    o.pca.n_comps = 10;
    Context ctx = Context::cpu(2);

    Dataset want = in;  // the oracle: the steps one by one
    {
      mark_qc_vars(want, o.qc_vars);
      QcOptions q = o.qc;
      q.qc_vars = qc_var_names(o.qc_vars);
      calculate_qc_metrics(ctx, want, q);
      filter_cells(ctx, want, o.filter_cells);
      filter_genes(ctx, want, o.filter_genes);
      want.layers["counts"] = want.X;
      normalize_total(ctx, want, o.normalize);
      log1p(ctx, want, o.log1p);
      HvgOptions h = o.hvg;
      h.subset = false;
      highly_variable_genes(ctx, want, h);
      want.raw = std::make_shared<Dataset>();
      want.raw->X = want.X;
      want.raw->var = want.var;
      std::vector<int64_t> keep;
      const auto& hv = want.var.boolean("highly_variable");
      for (size_t g = 0; g < hv.size(); ++g)
        if (hv[g]) keep.push_back(static_cast<int64_t>(g));
      want.subset_vars(keep);
      scale(ctx, want, o.scale);
      pca(ctx, want, o.pca);
    }
    auto same_csr = [](const Matrix& a, const Matrix& b, const char* what) {
      SCOPED_TRACE(what);
      EXPECT_EQ(a.dtype, b.dtype);
      const CsrF &p = a.csr_f(), &q = b.csr_f();
      EXPECT_EQ(p.n_rows, q.n_rows);
      EXPECT_EQ(p.n_cols, q.n_cols);
      EXPECT_EQ(p.indptr, q.indptr);
      EXPECT_EQ(p.indices, q.indices);
      EXPECT_EQ(p.data, q.data);
    };
    Dataset kept = in;
    preprocess(ctx, kept, o);
    same_csr(kept.raw->X, want.raw->X, "raw/X kept");
    same_csr(kept.layers.at("counts"), want.layers.at("counts"), "layers/counts kept");
    EXPECT_EQ(kept.X.dense_f().data, want.X.dense_f().data);
    EXPECT_EQ(kept.obsm.at("X_pca").dense_f().data, want.obsm.at("X_pca").dense_f().data);
    EXPECT_EQ(kept.var.index, want.var.index);

    Dataset early = in;  // handed out and let go
    std::map<std::string, Matrix> out;
    PreprocessOptions oe = o;
    oe.early_write = [&](const std::string& slot, const Matrix& m) {
      out[slot] = m;
      return true;
    };
    preprocess(ctx, early, oe);
    ASSERT_EQ(out.size(), 2u);
    same_csr(out.at("raw/X"), want.raw->X, "raw/X handed out");
    same_csr(out.at("layers/counts"), want.layers.at("counts"), "layers/counts handed out");
    ASSERT_TRUE(early.raw);
    EXPECT_TRUE(early.raw->X.empty());
    EXPECT_EQ(early.raw->var.index, want.raw->var.index);
    EXPECT_FALSE(early.layers.count("counts"));
    EXPECT_EQ(early.X.dense_f().data, want.X.dense_f().data);
  }
}
