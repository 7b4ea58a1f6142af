// GPU UMAP (label gpu): the layout of a seeded clustered dataset against the CPU layout (the oracle)
// on the same graph and the same initial layout: neighbour preservation and kNN classification of
// the clusters in the embedding; the CPU-context and bad-input errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/knn.hpp"
#include "graph/neighbors.hpp"
#include "graph/spectral.hpp"
#include "graph/umap.hpp"
#include "graph/umap_gpu.hpp"
#include "io/h5ad.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {


// n points in d dims around `k` Gaussian centres (centres N(0, 3^2) per coordinate, points N(centre, 1)).
DenseF clustered(int64_t n, int64_t d, int k, uint64_t seed, std::vector<int32_t>& labels) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  std::vector<double> centres(static_cast<size_t>(k * d));
  for (double& c : centres) c = 3.0 * z(rng);
  DenseF x(n, d);
  labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % static_cast<uint64_t>(k));
    labels[i] = c;
    for (int64_t j = 0; j < d; ++j) x(i, j) = static_cast<float>(centres[c * d + j] + z(rng));
  }
  return x;
}

TEST(UmapGpu, LayoutQualityMatchesCpuOnClusteredData) {
  SCURRY_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  std::vector<int32_t> labels;
  const DenseF x = clustered(20000, 30, 10, seed, labels);
  const Context cpu = Context::cpu(0);
  const NeighborsResult nb = neighbors(cpu, x, NeighborsOptions{});
  UmapOptions o;
  o.random_state = seed;
  const UmapResult c = umap(cpu, nb.connectivities, o);
  const UmapResult g = umap_gpu(test::gpu_context(), nb.connectivities, o);
  ASSERT_EQ(g.embedding.n_rows, 20000);
  ASSERT_EQ(g.embedding.n_cols, 2);
  for (float v : g.embedding.data) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(g.n_epochs, c.n_epochs);
  EXPECT_EQ(g.init, c.init);
  EXPECT_DOUBLE_EQ(g.a, c.a);
  EXPECT_DOUBLE_EQ(g.b, c.b);
  const double p_cpu = test::knn_preservation(cpu, x, c.embedding, 15), p_gpu = test::knn_preservation(cpu, x, g.embedding, 15);
  const double a_cpu = test::knn_accuracy(cpu, c.embedding, labels, 15), a_gpu = test::knn_accuracy(cpu, g.embedding, labels, 15);
  std::printf("umap 20000 cells: 15-NN preservation cpu %.4f gpu %.4f; 15-NN cluster accuracy cpu %.4f gpu %.4f\n",
              p_cpu, p_gpu, a_cpu, a_gpu);
  EXPECT_NEAR(p_gpu, p_cpu, 0.02);
  EXPECT_GE(a_gpu, a_cpu - 0.02);
}

TEST(UmapGpu, GivenLayoutAndThreeDimensions) {
  SCURRY_REQUIRE_GPU();
  // The low-level overload from a given start layout, 3 components, a short run: the result stays
  // finite and keeps the clusters apart as well as the CPU path from the same start.
  const uint64_t seed = test::fresh_seed();
  std::vector<int32_t> labels;
  const DenseF x = clustered(20000, 10, 5, seed, labels);  // large enough that parallel updates rarely collide
  const Context cpu = Context::cpu(0);
  const NeighborsResult nb = neighbors(cpu, x, NeighborsOptions{});
  UmapOptions o;
  o.n_components = 3;
  o.maxiter = 0;
  const DenseF start = umap(cpu, nb.connectivities, o).embedding;  // the CPU initial layout
  o.maxiter = 100;
  o.random_state = seed;
  const UmapResult g = umap_gpu(test::gpu_context(), nb.connectivities, start, o);
  UmapOptions oc = o;
  oc.init_pos = "given";
  const UmapResult c = umap(cpu, nb.connectivities, oc, &start);
  ASSERT_EQ(g.embedding.n_cols, 3);
  for (float v : g.embedding.data) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(g.n_epochs, 100);
  const double a_cpu = test::knn_accuracy(cpu, c.embedding, labels, 15), a_gpu = test::knn_accuracy(cpu, g.embedding, labels, 15);
  const double p_cpu = test::knn_preservation(cpu, x, c.embedding, 15), p_gpu = test::knn_preservation(cpu, x, g.embedding, 15);
  std::printf("umap 20000 cells, 3 dims, 100 epochs: preservation cpu %.4f gpu %.4f; accuracy cpu %.4f gpu %.4f\n",
              p_cpu, p_gpu, a_cpu, a_gpu);
  EXPECT_GE(a_gpu, a_cpu - 0.02);
  EXPECT_NEAR(p_gpu, p_cpu, 0.03);
}

TEST(UmapGpu, PreservesNeighboursLikeScanpyOnPbmcAndRepeatsBitForBit) {
  SCURRY_REQUIRE_GPU();
  // scanpy 1.9.6's golden X_pca and X_umap of the bundled pbmc3k subset (tests/data): the GPU
  // layout with the defaults (spectral init on the GPU, batched epochs) keeps as many of each
  // cell's 15 X_pca neighbours as umap-learn's, and the same command twice gives the same bits.
  H5adReadOptions ro;
  ro.read_raw = false;
  ro.read_layers = false;
  const Dataset g = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"), ro);
  Dataset d;
  d.obs = g.obs;
  d.obsm["X_pca"] = g.obsm.at("X_pca");
  const Context ctx = test::gpu_context();
  neighbors(ctx, d, NeighborsOptions{});
  Dataset d2 = d;
  const UmapResult r = umap(ctx, d, UmapOptions{});
  umap(ctx, d2, UmapOptions{});
  EXPECT_EQ(r.init, "spectral");
  const Context cpu = Context::cpu(0);
  const DenseF pca = to_dense_f(g.obsm.at("X_pca"));
  const DenseF& ours = std::get<DenseF>(d.obsm.at("X_umap").m);
  const double p_gpu = test::knn_preservation(cpu, pca, ours, 15);
  const double p_scanpy = test::knn_preservation(cpu, pca, to_dense_f(g.obsm.at("X_umap")), 15);
  std::printf("[ info ] pbmc3k: 15-NN preservation gpu %.4f, scanpy %.4f\n", p_gpu, p_scanpy);
  EXPECT_GE(p_gpu, p_scanpy - 0.02);
  EXPECT_EQ(std::get<DenseF>(d2.obsm.at("X_umap").m).data, ours.data);
}

// Smallest cosine between each centred column of a and its projection on the centred columns of b
// (b's columns orthonormalised first): 1 when a's columns lie in b's span, whatever the signs, the
// shifts and the scales of the columns.
double centred_subspace_agreement(const DenseF& a, const DenseF& b) {
  auto centred = [](const DenseF& m) {
    std::vector<std::vector<double>> cols(static_cast<size_t>(m.n_cols), std::vector<double>(static_cast<size_t>(m.n_rows)));
    for (int64_t c = 0; c < m.n_cols; ++c) {
      double mean = 0;
      for (int64_t i = 0; i < m.n_rows; ++i) mean += m(i, c);
      mean /= static_cast<double>(m.n_rows);
      for (int64_t i = 0; i < m.n_rows; ++i) cols[c][i] = m(i, c) - mean;
    }
    return cols;
  };
  auto dot = [](const std::vector<double>& u, const std::vector<double>& v) {
    double s = 0;
    for (size_t i = 0; i < u.size(); ++i) s += u[i] * v[i];
    return s;
  };
  auto ca = centred(a), cb = centred(b);
  for (size_t c = 0; c < cb.size(); ++c) {  // Gram-Schmidt, twice
    for (int pass = 0; pass < 2; ++pass)
      for (size_t e = 0; e < c; ++e) {
        const double d = dot(cb[c], cb[e]);
        for (size_t i = 0; i < cb[c].size(); ++i) cb[c][i] -= d * cb[e][i];
      }
    const double nrm = std::sqrt(dot(cb[c], cb[c]));
    for (double& v : cb[c]) v /= nrm;
  }
  double worst = 1;
  for (const auto& u : ca) {
    double proj = 0;
    for (const auto& v : cb) proj += dot(u, v) * dot(u, v);
    worst = std::min(worst, std::sqrt(proj / dot(u, u)));
  }
  return worst;
}

TEST(UmapGpu, DeviceSpectralStartMatchesTheCpuStartAndRepeatsBitForBit) {
  SCURRY_REQUIRE_GPU();
  // Above the dense solver's size the spectral start runs on the device from the uploaded graph
  // (pruning, degrees, solver, noise and scaling there): it must span what the CPU path's start
  // spans (the same solver from the same start block, to rounding), and two runs give the same bits.
  const uint64_t seed = test::fresh_seed();
  // Eight blobs in the plane (points sd 1) whose centres lie 2.5 apart on a line, each overlapping
  // the next: a connected kNN graph with clusters.
  DenseF x(20000, 2);
  {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> z(0.0, 1.0);
    for (int64_t i = 0; i < x.n_rows; ++i) {
      const int c = static_cast<int>(rng() % 8);
      x(i, 0) = static_cast<float>(2.5 * c + z(rng));
      x(i, 1) = static_cast<float>(z(rng));
    }
  }
  const Context cpu = Context::cpu(0);
  const NeighborsResult nb = neighbors(cpu, x, NeighborsOptions{});
  ASSERT_EQ(connected_components_above(nb.connectivities, checked_max_weight(cpu, nb.connectivities) / 200.0f), 1)
      << "the seeded graph is not connected (seed " << seed << ")";
  UmapOptions o;
  o.random_state = seed;
  o.maxiter = 0;  // the start layout alone
  const UmapResult c = umap(cpu, nb.connectivities, o);
  const Context gpu = test::gpu_context();
  const UmapResult g = umap_gpu(gpu, nb.connectivities, o);
  const UmapResult g2 = umap_gpu(gpu, nb.connectivities, o);
  ASSERT_EQ(c.init, "spectral");
  ASSERT_EQ(g.init, "spectral");
  ASSERT_EQ(g.embedding.n_rows, 20000);
  ASSERT_EQ(g.embedding.n_cols, 2);
  float lo = 1e30f, hi = -1e30f;
  for (float v : g.embedding.data) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_FLOAT_EQ(lo, 0.0f);  // every column scaled to [0, 10]
  EXPECT_NEAR(hi, 10.0f, 1e-5);
  const double agree = std::min(centred_subspace_agreement(g.embedding, c.embedding),
                                centred_subspace_agreement(c.embedding, g.embedding));
  std::printf("[ info ] device start against the CPU start: smallest cosine %.8f\n", agree);
  EXPECT_GT(agree, 0.999);
  EXPECT_EQ(g.embedding.data, g2.embedding.data);
  // With the epochs: the same bits twice, and the quality of the CPU path's layout.
  o.maxiter.reset();
  const UmapResult f = umap_gpu(gpu, nb.connectivities, o), f2 = umap_gpu(gpu, nb.connectivities, o);
  EXPECT_EQ(f.embedding.data, f2.embedding.data);
  const UmapResult fc = umap(cpu, nb.connectivities, o);
  const double p_cpu = test::knn_preservation(cpu, x, fc.embedding, 15), p_gpu = test::knn_preservation(cpu, x, f.embedding, 15);
  std::printf("[ info ] 15-NN preservation cpu %.4f gpu (device start) %.4f\n", p_cpu, p_gpu);
  EXPECT_GE(p_gpu, p_cpu - 0.02);
}

TEST(UmapGpu, DisconnectedGraphStartsAsTheCpuPath) {
  SCURRY_REQUIRE_GPU();
  // Two clusters far apart: the kNN graph has two components, so the device start is the CPU path's
  // (umap-learn's multi-component layout), the same bits as the CPU path's.
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  DenseF x(4000, 5);
  for (int64_t i = 0; i < x.n_rows; ++i)
    for (int64_t j = 0; j < x.n_cols; ++j) x(i, j) = static_cast<float>(z(rng) + (i % 2 ? 1000.0 : 0.0));
  const Context cpu = Context::cpu(0);
  const NeighborsResult nb = neighbors(cpu, x, NeighborsOptions{});
  ASSERT_GT(connected_components(nb.connectivities), 1);
  UmapOptions o;
  o.random_state = seed;
  o.maxiter = 0;
  const UmapResult c = umap(cpu, nb.connectivities, o);
  const UmapResult g = umap_gpu(test::gpu_context(), nb.connectivities, o);
  EXPECT_EQ(c.init, "spectral");
  EXPECT_EQ(g.init, "spectral");
  EXPECT_EQ(g.embedding.data, c.embedding.data);
}

TEST(UmapGpu, NeedsGpuContextAndValidInput) {
  CsrF g = CsrF::zeros(4, 4);
  DenseF init(4, 2);
  EXPECT_THROW(umap_gpu(Context::cpu(1), g, init, UmapOptions{}), InputError);
  EXPECT_THROW(umap_gpu(Context::cpu(1), g, UmapOptions{}), InputError);
  if (!test::have_gpu()) return;
  const Context ctx = test::gpu_context();
  EXPECT_THROW(umap_gpu(ctx, g, DenseF(3, 2), UmapOptions{}), InputError);  // wrong init shape
  CsrF bad = CsrF::zeros(3, 4);
  EXPECT_THROW(umap_gpu(ctx, bad, DenseF(3, 2), UmapOptions{}), InputError);  // not square
}

}  // namespace
}  // namespace scurry
