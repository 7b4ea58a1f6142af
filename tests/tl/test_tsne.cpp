// t-SNE: the FFT-interpolated repulsion against the exact all-pairs sums, the affinities against a
// direct computation of sklearn's rule, thread-count determinism, and the embedding's 15-NN
// preservation against scanpy 1.9.6's own X_tsne on pbmc3k (tests/data/golden/
// pbmc3k_first1000.scanpy_embed.h5, sc.tl.tsne(n_pcs=50, random_state=0), sklearn 1.2.1).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "testlib.hpp"
#include "tl/tsne.hpp"

using namespace scurry;

namespace {

std::vector<double> random_layout(int64_t n, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  std::vector<double> y(static_cast<size_t>(2 * n));
  // a few clusters, as an embedding has them
  for (int64_t i = 0; i < n; ++i) {
    const double cx = scale * std::cos(static_cast<double>(i % 5)), cy = scale * std::sin(static_cast<double>(i % 5));
    y[2 * i] = cx + scale * 0.2 * nd(rng);
    y[2 * i + 1] = cy + scale * 0.2 * nd(rng);
  }
  return y;
}

// n points in d dimensions, N(0, 1) around `groups` centres (point i in group i % groups, offset
// `sep` along the axes c with c % groups equal to it).
DenseF clustered_points(int64_t n, int64_t d, int64_t groups, double sep, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  DenseF X(n, d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) X(i, c) = static_cast<float>(nd(rng) + sep * (i % groups == c % groups));
  return X;
}

DenseF golden_matrix(const std::string& name) {
  h5::File f = h5::File::open(test::test_data("golden/pbmc3k_first1000.scanpy_embed.h5"));
  h5::Dataset ds = f.dataset(name);
  const auto shape = ds.shape();
  const std::vector<double> v = ds.read<double>();
  DenseF m(shape[0], shape.size() > 1 ? shape[1] : 1);
  for (size_t i = 0; i < v.size(); ++i) m.data[i] = static_cast<float>(v[i]);
  return m;
}

}  // namespace

TEST(Tsne, FftRepulsionMatchesExactSums) {
  // The grid sizes: 384 (3 x 2^7, the least boxes), 512 (2^9) and 768 (3 x 2^8).
  for (double scale : {0.5, 5.0, 25.0, 40.0}) {
    const int64_t n = 1500;
    const std::vector<double> y = random_layout(n, scale, 7 + static_cast<uint64_t>(scale));
    TsneOptions fo, eo;
    fo.method = "fft";
    eo.method = "exact";
    std::vector<double> rf, re;
    const double zf = tsne_repulsion(y, n, fo, 2, rf);
    const double ze = tsne_repulsion(y, n, eo, 2, re);
    // Boxes of width <= 1 with 3 Lagrange nodes (FIt-SNE's defaults): finer boxes for small layouts,
    // a few per cent of error at width 1 (the attraction, exact, dominates the layout).
    const bool coarse = scale > 10;
    EXPECT_NEAR(zf / ze, 1.0, coarse ? 2e-2 : 1e-4) << "scale " << scale;
    double num = 0, den = 0;
    for (size_t i = 0; i < rf.size(); ++i) {
      num += (rf[i] - re[i]) * (rf[i] - re[i]);
      den += re[i] * re[i];
    }
    EXPECT_LT(std::sqrt(num / den), coarse ? 6e-2 : 2e-3) << "scale " << scale;
  }
}

TEST(Tsne, AffinitiesHaveThePerplexity) {
  // Rows of the conditional P recovered from the joint one are not separable; check the rule
  // directly on a case where each row's neighbours are distinct: P symmetric, sum 1, and the
  // entropy of each row's conditional distribution (as found by the search) equals log(perplexity).
  const int64_t n = 300, k = 40;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.1, 5.0);
  std::vector<int32_t> nbr(static_cast<size_t>(n * k));
  std::vector<double> sq(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      nbr[i * k + j] = static_cast<int32_t>((i + 1 + j) % n);
      sq[i * k + j] = u(rng);
    }
  const double perp = 10;
  const CsrD P = tsne_affinities(nbr, sq, n, k, perp, 2);
  double total = 0;
  for (double v : P.data) total += v;
  EXPECT_NEAR(total, 1.0, 1e-12);
  auto at = [&](int64_t i, int64_t j) {
    for (int64_t e = P.indptr[i]; e < P.indptr[i + 1]; ++e)
      if (P.indices[e] == j) return P.data[e];
    return 0.0;
  };
  for (int64_t i = 0; i < n; i += 37)
    for (int64_t e = P.indptr[i]; e < P.indptr[i + 1]; ++e) EXPECT_DOUBLE_EQ(P.data[e], at(P.indices[e], i));
  // Oracle: bisection on beta to the entropy log(perp) for row 0, then p_j|0 + p_0|j over 2n.
  auto conditional = [&](int64_t i) {
    double lo = 1e-6, hi = 1e6;
    std::vector<double> p(static_cast<size_t>(k));
    for (int it = 0; it < 200; ++it) {
      const double beta = std::sqrt(lo * hi);
      double s = 0, sd = 0;
      for (int64_t j = 0; j < k; ++j) s += (p[j] = std::exp(-beta * sq[i * k + j]));
      for (int64_t j = 0; j < k; ++j) sd += sq[i * k + j] * p[j] / s;
      const double h = std::log(s) + beta * sd;
      (h > std::log(perp) ? lo : hi) = beta;
    }
    double s = 0;
    for (auto v : p) s += v;
    for (auto& v : p) v /= s;
    return p;
  };
  const auto p0 = conditional(0);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t t = nbr[j];
    double expect = p0[j];
    // t's own conditional row holds 0 only if 0 is among t's neighbours: here (t + 1 + j') % n == 0.
    const auto pt = conditional(t);
    for (int64_t jj = 0; jj < k; ++jj)
      if (nbr[t * k + jj] == 0) expect += pt[jj];
    EXPECT_NEAR(at(0, t), expect / (2.0 * n), 2e-6 / n) << "neighbour " << t;
  }
}

TEST(Tsne, SameBitsForAnyThreadCount) {
  const DenseF X = clustered_points(600, 10, 3, 4.0, 5);
  for (const char* method : {"fft", "exact"}) {
    TsneOptions o;
    o.method = method;
    o.n_iter = 60;
    o.exaggeration_iter = 30;
    o.learning_rate = 50;  // a small layout: a small grid
    o.n_jobs = 1;
    const TsneResult a = tsne(Context::cpu(1), X, o);
    o.n_jobs = 3;
    const TsneResult b = tsne(Context::cpu(3), X, o);
    ASSERT_EQ(a.embedding.data.size(), b.embedding.data.size());
    for (size_t i = 0; i < a.embedding.data.size(); ++i)
      ASSERT_EQ(a.embedding.data[i], b.embedding.data[i]) << method << " " << i;
  }
}

TEST(Tsne, NeighbourPreservationAsScanpysOnPbmc) {
  Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  TsneOptions o;
  o.n_pcs = 50;
  const Context ctx = Context::cpu(2);
  const TsneResult r = tsne(ctx, d, o);
  const DenseF pca = to_dense_f(d.obsm.at("X_pca"));
  const DenseF gold = golden_matrix("X_tsne");
  const double ours = knn_preservation(ctx, pca, r.embedding, 15);
  const double theirs = knn_preservation(ctx, pca, gold, 15);
  std::printf("15-NN preservation: scurry %.4f, scanpy %.4f, KL %.4f\n", ours, theirs, r.kl_divergence);
  EXPECT_GT(ours, theirs - 0.03);
  EXPECT_GT(theirs, 0.2);  // the oracle itself is a real embedding
  ASSERT_TRUE(d.obsm.count("X_tsne"));
  EXPECT_EQ(d.obsm.at("X_tsne").n_cols(), 2);
  // the embedding spreads as sklearn's does (same learning rate, exaggeration, iterations)
  auto spread = [](const DenseF& m) {
    double lo = 1e30, hi = -1e30;
    for (float v : m.data) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
    return hi - lo;
  };
  EXPECT_NEAR(spread(r.embedding) / spread(gold), 1.0, 0.35);
}

TEST(Tsne, BadOptionsAreInputErrors) {
  DenseF X(10, 3, 1.0f);
  TsneOptions o;
  EXPECT_THROW(tsne(Context::cpu(1), X, o), InputError);  // perplexity 30 >= n - 1
  o.perplexity = 3;
  o.method = "bh";
  EXPECT_THROW(tsne(Context::cpu(1), X, o), InputError);
}

TEST(Tsne, AutoIsExactBelowTheThresholdAndFftAbove) {
  // method "auto" (the default) runs the all-pairs repulsion for inputs under exact_below cells (the
  // grid's cost does not shrink with n: session 9's 300-cell calls spent 45-143 s on it) and FIt-SNE
  // above: the same bits as the method it stands for.
  const DenseF X = clustered_points(300, 8, 4, 3.0, 23);
  TsneOptions o;
  o.n_iter = 20;
  o.exaggeration_iter = 10;
  o.learning_rate = 20;
  o.perplexity = 10;
  const Context ctx = Context::cpu(2);
  auto run = [&](const std::string& method, int64_t below) {
    TsneOptions p = o;
    p.method = method;
    p.exact_below = below;
    return tsne(ctx, X, p).embedding.data;
  };
  const auto exact = run("exact", 0), fft = run("fft", 0);
  EXPECT_EQ(run("auto", 2000), exact);
  EXPECT_EQ(run("auto", 300), fft);  // 300 cells is not below 300
  EXPECT_NE(exact, fft);
}
