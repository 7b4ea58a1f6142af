// GPU tests (label gpu) of the streamed chain (preprocess_stream.hpp): small blocks (many of them), a
// small --max-pool-size and a host store too small for every block, against the in-memory GPU chain
// and the CPU oracle (the same tolerances as test_preprocess_gpu.cpp): QC and filter columns, the HVG
// set, scale statistics, PCA (variance ratio; X_pca up to sign); an h5ad file read lazily; scale and
// PCA without zero_center against the CPU; bad input.
#include <cstdio>
#include <cmath>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "pp/preprocess_stream.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

Context gpu_ctx(size_t max_pool = 0) {
  ContextOptions o;
  o.device = "gpu";
  o.cuda.max_pool_size = max_pool;
  return Context::create(o);
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rel, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  EXPECT_LE(worst, rel) << what;
}

// s (streamed) against c (the oracle: CPU or in-memory GPU): the columns both have, the HVG set, PCA.
void compare(const Dataset& s, const Dataset& c, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(s.n_obs(), c.n_obs());
  ASSERT_EQ(s.n_vars(), c.n_vars());
  EXPECT_EQ(s.obs.index, c.obs.index);
  EXPECT_EQ(s.var.index, c.var.index);  // the same HVGs, in the same order
  for (const auto& name : c.obs.names()) {
    if (!s.obs.has(name)) continue;
    if (std::holds_alternative<NumericColumn>(c.obs.at(name).c)) expect_close(s.obs.numeric(name), c.obs.numeric(name), 1e-5, "obs/" + name);
  }
  for (const auto& name : c.var.names()) {
    ASSERT_TRUE(s.var.has(name)) << "var/" << name;
    const Column& col = c.var.at(name);
    if (std::holds_alternative<NumericColumn>(col.c)) {
      const double tol = name.find("dispersions_norm") != std::string::npos ? 1e-4 : 1e-5;
      expect_close(s.var.numeric(name), c.var.numeric(name), tol, "var/" + name);
    } else if (std::holds_alternative<BoolColumn>(col.c)) {
      EXPECT_EQ(s.var.boolean(name), c.var.boolean(name)) << "var/" + name;
    }
  }
  const auto& su = s.uns.at("pca").dict(), &cu = c.uns.at("pca").dict();
  const auto& sv = std::get<NumArray>(su.at("variance_ratio").v).data, &cv = std::get<NumArray>(cu.at("variance_ratio").v).data;
  ASSERT_EQ(sv.size(), cv.size());
  for (size_t j = 0; j < 20 && j < cv.size(); ++j) EXPECT_NEAR(sv[j], cv[j], 1e-4 * cv[j]) << "variance_ratio " << j;
  const DenseF &sp = s.obsm.at("X_pca").dense_f(), &cp = c.obsm.at("X_pca").dense_f();
  ASSERT_EQ(sp.n_rows, cp.n_rows);
  ASSERT_EQ(sp.n_cols, cp.n_cols);
  for (int64_t j = 0; j < std::min<int64_t>(20, cp.n_cols); ++j) {
    double sab = 0, saa = 0, sbb = 0;
    for (int64_t i = 0; i < cp.n_rows; ++i) sab += sp(i, j) * cp(i, j), saa += sp(i, j) * sp(i, j), sbb += cp(i, j) * cp(i, j);
    EXPECT_GT(std::abs(sab) / std::sqrt(saa * sbb), 0.999) << "X_pca component " << j;
  }
  const DenseD &sc = s.varm.at("PCs").dense_d(), &cc = c.varm.at("PCs").dense_d();
  ASSERT_EQ(sc.data.size(), cc.data.size());
}

Dataset simulated(int64_t cells, int64_t genes, double nnz) { return test::simulated_counts(cells, genes, nnz); }

PreprocessOptions options() {
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  o.hvg.flavor = "cell_ranger";
  o.hvg.n_top_genes = 1500;
  o.normalize.target_sum.reset();  // the median: pass 2 runs
  o.filter_cells.min_genes = 700;  // removes cells inside blocks
  o.pca.n_comps = 30;
  return o;
}

// The streamed chain on a copy of `in` (its X as the source), leaving X out of d.
Dataset streamed(Context& ctx, const Dataset& in, RowSource& src, const PreprocessOptions& o, const StreamOptions& so,
                 Timings* t = nullptr) {
  Dataset d = in;
  d.X = Matrix();
  d.layers.clear();
  preprocess_stream(ctx, src, d, o, so, t);
  EXPECT_TRUE(d.X.empty());
  return d;
}

}  // namespace

TEST(PreprocessStreamGpu, EqualsInMemoryGpuAndCpuWithManySmallBlocks) {
  SCURRY_REQUIRE_GPU();
  const Dataset in = simulated(6000, 8000, 900);
  const PreprocessOptions o = options();
  Dataset cpu = in, gpu = in;
  Context c = Context::cpu(2), g = gpu_ctx();
  preprocess(c, cpu, o);
  preprocess(g, gpu, o);
  // 256 MiB device cap, ~20 blocks, 300-row dense chunks, a host store of part of the HVG rows.
  Context small = gpu_ctx(size_t{256} << 20);
  MemoryRowSource src(in.X.csr_f());
  StreamOptions so;
  so.block_nnz = 250000;
  so.dense_rows = 300;
  so.host_store_bytes = 2 << 20;
  Timings t;
  Dataset s = streamed(small, in, src, o, so, &t);
  EXPECT_GT(std::stoll(t.meta().at("stream_blocks")), 15);
  const int64_t stored = std::stoll(t.meta().at("stream_store_blocks"));
  EXPECT_GT(stored, 0);
  EXPECT_LT(stored, std::stoll(t.meta().at("stream_blocks")));  // the rest read again by the projection
  EXPECT_LE(std::stoll(t.meta().at("gpu_peak_bytes")), int64_t{256} << 20);
  compare(s, gpu, "streamed vs in-memory GPU");
  compare(s, cpu, "streamed vs CPU");
}

// Streamed over several GPUs (two where there are, else two contexts on one GPU): each streams its
// range of the cells, statistics combined over the ranks, rank 0 gathers; equal to one GPU streamed
// and to the CPU.
TEST(PreprocessStreamGpu, SeveralGpusEqualOneGpu) {
  SCURRY_REQUIRE_GPU();
  const Dataset in = simulated(5000, 7000, 800);
  const PreprocessOptions o = options();
  Dataset cpu = in;
  Context c = Context::cpu(2);
  preprocess(c, cpu, o);
  StreamOptions so;
  so.block_nnz = 300000;
  so.dense_rows = 400;
  so.host_store_bytes = 1 << 20;
  Context one = gpu_ctx(size_t{256} << 20);
  MemoryRowSource src1(in.X.csr_f());
  const Dataset s1 = streamed(one, in, src1, o, so);
  const int devices = cuda_device_count();
  std::vector<Context> ctxs;
  for (int q = 0; q < 2; ++q) {
    ContextOptions co;
    co.device = "gpu";
    co.cuda.device = devices >= 2 ? q : 0;
    co.cuda.max_pool_size = size_t{256} << 20;
    ctxs.push_back(Context::create(co));
  }
  MemoryRowSource src2(in.X.csr_f());
  Dataset s2 = in;
  s2.X = Matrix();
  s2.layers.clear();
  Timings t;
  preprocess_stream_sharded({&ctxs[0], &ctxs[1]}, src2, s2, o, so, &t);
  EXPECT_TRUE(s2.X.empty());
  EXPECT_EQ(t.meta().at("gpus"), "2");
  compare(s2, s1, "2 GPUs streamed vs 1 GPU streamed");
  compare(s2, cpu, "2 GPUs streamed vs CPU");
  std::printf("streamed over 2 contexts (%d devices) equals one GPU and the CPU\n", devices);
}

TEST(PreprocessStreamGpu, SeuratGivenTargetNoHostStore) {
  SCURRY_REQUIRE_GPU();
  const Dataset in = simulated(4000, 6000, 700);
  PreprocessOptions o = options();
  o.hvg.flavor = "seurat";
  o.hvg.n_top_genes = 1000;
  o.normalize.target_sum = 1e4;
  o.filter_cells.min_genes = 500;
  o.filter_genes.min_cells = 20;
  Dataset cpu = in;
  Context c = Context::cpu(2), g = gpu_ctx();
  preprocess(c, cpu, o);
  MemoryRowSource src(in.X.csr_f());
  StreamOptions so;
  so.block_nnz = 120000;
  so.host_store_bytes = 0;  // the projection reads every block again
  Timings t;
  Dataset s = streamed(g, in, src, o, so, &t);
  EXPECT_EQ(t.meta().count("stream_totals_h2d_bytes"), 0u);  // target given: no totals pass
  EXPECT_EQ(t.meta().at("stream_store_blocks"), "0");
  compare(s, cpu, "streamed seurat vs CPU");
}

TEST(PreprocessStreamGpu, H5adFileSourceEqualsMemorySource) {
  SCURRY_REQUIRE_GPU();
  const Dataset in = simulated(5000, 7000, 800);
  test::TempDir dir;
  const std::string path = dir.path("in.h5ad");
  write_h5ad(in, path);
  const PreprocessOptions o = options();
  Context g = gpu_ctx();
  StreamOptions so;
  so.block_nnz = 300000;
  so.host_store_bytes = 2 << 20;
  MemoryRowSource mem(in.X.csr_f());
  const Dataset a = streamed(g, in, mem, o, so);
  H5adRowReader file(path);
  Timings t;
  const Dataset b = streamed(g, in, file, o, so, &t);
  EXPECT_GT(std::stoll(t.meta().at("stream_qc_read_bytes")), in.X.nnz() * 8);
  compare(b, a, "h5ad source vs memory source");
  // Same kernels, same blocks, same order: the same bits.
  EXPECT_EQ(b.obsm.at("X_pca").dense_f().data, a.obsm.at("X_pca").dense_f().data);
  Dataset cpu = in;
  Context c = Context::cpu(2);
  preprocess(c, cpu, o);
  compare(b, cpu, "h5ad source vs CPU");
}

TEST(PreprocessStreamGpu, WithoutZeroCenterEqualsCpu) {
  SCURRY_REQUIRE_GPU();
  const Dataset in = simulated(5000, 6000, 800);
  PreprocessOptions o = options();
  o.scale.zero_center = false;
  o.pca.zero_center = false;
  Dataset cpu = in;
  Context c = Context::cpu(2), g = gpu_ctx();
  preprocess(c, cpu, o);
  MemoryRowSource src(in.X.csr_f());
  StreamOptions so;
  so.block_nnz = 200000;
  const Dataset s = streamed(g, in, src, o, so);
  compare(s, cpu, "no zero_center: streamed vs CPU");
  // scale centred, PCA not (and the reverse): the CPU's semantics too.
  o.scale.zero_center = true;
  Dataset cpu2 = in;
  preprocess(c, cpu2, o);
  compare(streamed(g, in, src, o, so), cpu2, "centred scale, uncentred PCA");
}

TEST(PreprocessStreamGpu, BadInputIsRefused) {
  SCURRY_REQUIRE_GPU();
  const Dataset in = simulated(1500, 3000, 400);
  Context g = gpu_ctx();
  MemoryRowSource src(in.X.csr_f());
  PreprocessOptions o = options();
  o.filter_cells.min_genes = 300;
  Dataset wrong = in;
  wrong.X = Matrix();
  wrong.subset_obs(std::vector<int64_t>{0, 1, 2});
  EXPECT_THROW(preprocess_stream(g, src, wrong, o, {}), InputError);  // obs do not match the source
  PreprocessOptions bad = o;
  bad.hvg.flavor = "seurat_v3";
  EXPECT_THROW(streamed(g, in, src, bad, {}), InputError);
  bad = o;
  bad.filter_cells.min_genes = 100000;  // removes every cell
  EXPECT_THROW(streamed(g, in, src, bad, {}), InputError);
  bad = o;
  bad.pca.n_comps = 5000;
  EXPECT_THROW(streamed(g, in, src, bad, {}), InputError);
  StreamOptions so;
  so.prefetch = 0;
  EXPECT_THROW(streamed(g, in, src, o, so), InputError);
  Context cpu = Context::cpu(1);
  Dataset d = in;
  d.X = Matrix();
  EXPECT_THROW(preprocess_stream(cpu, src, d, o, {}), InputError);
}
