// GPU t-SNE (label gpu; each case skips without a visible GPU, except the error case): the device
// repulsion against the CPU's exact all-pairs sums and the CPU's own FFT interpolation on seeded
// layouts; the embedding's quality against the CPU path (the oracle) on the same input; the same
// bits run after run; a CPU context is an InputError.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "testlib.hpp"
#include "tl/tsne.hpp"
#include "tl/tsne_gpu.hpp"

using namespace scurry;

namespace {

// A layout of 5 clusters (as an embedding has them) whose extent is about 2 scale: testlib's blobs in
// 2 dims (centres sd 5, points sd 1), times scale / 5.
std::vector<double> clustered_layout(int64_t n, double scale, uint64_t seed) {
  const DenseF p = test::clustered_points(n, 2, 5, seed, 0.0f);
  std::vector<double> y(p.data.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<double>(p.data[i]) * scale / 5.0;
  return y;
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST(TsneGpu, RepulsionMatchesExactSumsAndTheCpuGrid) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  // Grids of 300 (the least boxes, fine), ~100 boxes of width 1, and the widest (128 boxes, wider).
  for (double scale : {0.5, 5.0, 25.0, 40.0, 90.0}) {
    const int64_t n = 3000;
    const std::vector<double> y = clustered_layout(n, scale, seed + static_cast<uint64_t>(scale));
    TsneOptions fo, eo;
    fo.method = "fft";
    eo.method = "exact";
    std::vector<double> cpu_exact, cpu_fft, gpu_fft, gpu_exact;
    const double ze = tsne_repulsion(y, n, eo, 2, cpu_exact);
    const double zc = tsne_repulsion(y, n, fo, 2, cpu_fft);
    const double zg = tsne_repulsion_gpu(gpu, y, n, fo, gpu_fft);
    const double zx = tsne_repulsion_gpu(gpu, y, n, eo, gpu_exact);
    // All pairs in float64 on both: only the order of the sums differs.
    EXPECT_NEAR(zx / ze, 1.0, 1e-10) << "scale " << scale;
    EXPECT_LT(relative_error(gpu_exact, cpu_exact), 1e-10) << "scale " << scale;
    // The grid's error against the exact sums is the interpolation's own, shared with the CPU grid
    // (test_tsne bounds it): on the H200 the GPU's equalled the CPU's to 3 digits at every scale
    // while the CPU's own ranged 5e-4..2.5e-3 at scale 5 and 0.04..0.26 at scale 40 with the seed.
    // The oracle here is the CPU grid (below); the figures are printed for the record.
    std::printf("scale %g: CPU grid vs exact %.4g, GPU grid vs exact %.4g, GPU vs CPU grid %.4g; Z: CPU grid / exact - 1 "
                "%.4g, GPU / CPU grid - 1 %.4g\n",
                scale, relative_error(cpu_fft, cpu_exact), relative_error(gpu_fft, cpu_exact),
                relative_error(gpu_fft, cpu_fft), zc / ze - 1, zg / zc - 1);
    const bool coarse = scale > 10;
    // The same grid, weights and kernel as the CPU's: only the float32 FFTs' rounding (~1e-7 of the
    // largest potential, times the cancellation of up to |y - mid|^2 in Z and |y - mid| in the sums)
    // and the order of the charges' sums differ. On the H200 (6 seeds): Z within 5e-5 and the sums
    // within 5e-5 at every scale (within 4e-6 for scales <= 5); the bounds are 10x that, far below
    // what a wrong node, box or term gives (the interpolation's own error, 1e-3 .. 1e-1).
    EXPECT_NEAR(zg / zc, 1.0, coarse ? 5e-4 : 5e-5) << "scale " << scale;
    EXPECT_LT(relative_error(gpu_fft, cpu_fft), coarse ? 5e-4 : 5e-5) << "scale " << scale;
  }
}

TEST(TsneGpu, QualityAsTheCpuPathOnClusteredData) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = test::clustered_points(6000, 20, 8, seed);
  const Context cpu = Context::cpu(0);
  TsneOptions o;  // the defaults: FFT repulsion (6,000 > exact_below), exact kNN, 1,000 iterations
  const TsneResult c = tsne(cpu, x, o);
  const TsneResult g = tsne_gpu(test::gpu_context(), x, o);
  ASSERT_EQ(g.embedding.n_rows, 6000);
  ASSERT_EQ(g.embedding.n_cols, 2);
  for (float v : g.embedding.data) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(g.knn_used, "exact");
  const double pc = test::knn_preservation(cpu, x, c.embedding, 15), pg = test::knn_preservation(cpu, x, g.embedding, 15);
  std::printf("tsne 6000 cells: 15-NN preservation cpu %.4f gpu %.4f; KL cpu %.5f gpu %.5f\n", pc, pg,
              c.kl_divergence, g.kl_divergence);
  // Issue 22's bound against the oracle. The KL: the same affinities, start and steps; the layouts
  // part only by rounding (sums in other orders, float32 P), which moves t-SNE's final KL by
  // about 1 % between implementations of the same gradient; 5 % allows for the chaotic dynamics
  // without admitting a wrong gradient (a wrong factor or a missing term moves it by tens of per cent).
  EXPECT_NEAR(pg, pc, 0.03);
  EXPECT_NEAR(g.kl_divergence, c.kl_divergence, 0.05 * c.kl_divergence);
}

TEST(TsneGpu, SameBitsRunAfterRun) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  const DenseF x = test::clustered_points(5000, 16, 6, seed);
  const Context gpu = test::gpu_context();
  for (const char* method : {"fft", "exact"}) {
    TsneOptions o;
    o.method = method;
    o.n_iter = 400;  // past the early exaggeration (250)
    const TsneResult a = tsne_gpu(gpu, x, o), b = tsne_gpu(gpu, x, o);
    ASSERT_EQ(a.embedding.data.size(), b.embedding.data.size());
    EXPECT_EQ(0, std::memcmp(a.embedding.data.data(), b.embedding.data.data(), a.embedding.data.size() * sizeof(float)))
        << method;
    EXPECT_EQ(a.kl_divergence, b.kl_divergence) << method;
  }
  // The dataset level on a CUDA context takes the GPU path (the kNN's report is the GPU's).
  Dataset d;
  d.obsm["X_pca"] = Matrix(x, DType::f32);
  TsneOptions o;
  o.n_iter = 300;
  const TsneResult r = tsne(gpu, d, o);
  EXPECT_EQ(r.knn_used, "exact");
  EXPECT_EQ(d.obsm.count("X_tsne"), 1u);
}

TEST(TsneGpu, CpuContextIsAnInputError) {
  const DenseF x = test::clustered_points(100, 5, 2, 1);
  EXPECT_THROW(tsne_gpu(Context::cpu(1), x, TsneOptions{}), InputError);
}
