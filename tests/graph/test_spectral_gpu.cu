// The spectral layout on the GPU (label gpu): the block products on the device against the same
// solver on the CPU (the oracle: the same start block and sweeps, so the same subspace to rounding),
// and the same bits from two GPU runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "exec/context.hpp"
#include "graph/connectivities.hpp"
#include "graph/knn.hpp"
#include "graph/spectral.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {


// Smallest cosine of the principal angles' projections: each column of a is projected on span(b).
double subspace_agreement(const DenseD& a, const DenseD& b) {
  double worst = 1;
  for (int64_t c = 0; c < a.n_cols; ++c) {
    double proj = 0;
    for (int64_t e = 0; e < b.n_cols; ++e) {
      double dot = 0;
      for (int64_t i = 0; i < a.n_rows; ++i) dot += a(i, c) * b(i, e);
      proj += dot * dot;
    }
    worst = std::min(worst, std::sqrt(proj));
  }
  return worst;
}

TEST(SpectralGpu, EqualsTheCpuSolverAndRepeatsBitForBit) {
  if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device visible";
  const uint64_t seed = test::fresh_seed();
  // Overlapping blobs in the plane (centres sd 5, points sd 1): a connected kNN graph with clusters.
  DenseF x(20000, 2);
  {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> z(0.0, 1.0);
    double centres[8][2];
    for (auto& c : centres) c[0] = 2.5 * z(rng), c[1] = 2.5 * z(rng);
    for (int64_t i = 0; i < x.n_rows; ++i) {
      const int c = static_cast<int>(rng() % 8);
      for (int j = 0; j < 2; ++j) x(i, j) = static_cast<float>(centres[c][j] + z(rng));
    }
  }
  const Knn knn = knn_exact(Context::cpu(2), x, 15, KnnMetric::euclidean);
  const CsrF g = fuzzy_simplicial_set(Context::cpu(2), knn);
  if (connected_components(g) != 1) GTEST_SKIP() << "the seeded graph is not connected (seed " << seed << ")";
  SpectralOptions o;
  o.dense_max_nodes = 0;
  o.tol = 1e-6;
  o.max_products = 3000;
  o.random_state = seed;
  SpectralStats sc, sg, sg2;
  const auto cpu = spectral_layout(Context::cpu(2), g, o, &sc);
  const Context ctx = test::gpu_context();
  const auto gpu = spectral_layout(ctx, g, o, &sg);
  const auto gpu2 = spectral_layout(ctx, g, o, &sg2);
  ASSERT_TRUE(cpu && gpu && gpu2);
  EXPECT_TRUE(sg.gpu);
  EXPECT_FALSE(sc.gpu);
  std::printf("[ info ] cpu: %lld products, residual %.3g; gpu: %lld products, residual %.3g\n",
              static_cast<long long>(sc.products), sc.residual, static_cast<long long>(sg.products), sg.residual);
  EXPECT_TRUE(sg.converged);
  const double agree = std::min(subspace_agreement(*cpu, *gpu), subspace_agreement(*gpu, *cpu));
  std::printf("[ info ] smallest cosine between the CPU and GPU subspaces %.8f\n", agree);
  EXPECT_GT(agree, 0.9999);
  EXPECT_EQ(gpu->data, gpu2->data);  // the same bits run after run
  EXPECT_EQ(sg.products, sg2.products);
}

}  // namespace
}  // namespace scurry
