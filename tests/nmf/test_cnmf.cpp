// cNMF: planted programs recovered end to end (prepare, batched factorisation, consensus,
// gene_spectra_tpm); prepare's normalisation and errors; k-means and silhouette against naive
// oracles; gene_spectra_score against a dense OLS; file formats (Python float repr, TSV, PNG).
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "nmf/cnmf_files.hpp"
#include "nmf/cnmf_prepare.hpp"
#include "nmf/consensus.hpp"
#include "nmf/kmeans.hpp"
#include "nmf/nmf.hpp"
#include "nmf/plot_png.hpp"
#include "testlib.hpp"
#include "cnmf_planted.hpp"

namespace scurry {
namespace {

TEST(Cnmf, RecoversPlantedPrograms) {
  const Context ctx = Context::cpu(2);
  test_cnmf::check_planted_recovery(
      [&](const CsrF& X, NmfBatch init, const NmfOptions& opt) { return nmf_fit(ctx, X, std::move(init), opt); },
      test::fresh_seed());
}

TEST(Cnmf, PrepareNormalisation) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(300, 120, 0.3, seed, 20);
  std::vector<std::string> cells, genes;
  for (int i = 0; i < 300; ++i) cells.push_back("c" + std::to_string(i));
  for (int j = 0; j < 120; ++j) genes.push_back("g" + std::to_string(j));
  CnmfPrepareOptions po;
  po.num_highvar_genes = 50;
  const Context ctx = Context::cpu(2);
  const CnmfPrepared pr = cnmf_prepare(ctx, X, cells, genes, po, "in");
  ASSERT_EQ(pr.genes.size(), 50u);
  EXPECT_TRUE(std::is_sorted(pr.genes.begin(), pr.genes.end()));  // cNMF keeps var order
  for (int64_t i = 0; i < 300; ++i) {
    double s = 0;
    for (int64_t q = pr.tpm.indptr[i]; q < pr.tpm.indptr[i + 1]; ++q) s += pr.tpm.data[q];
    EXPECT_NEAR(s, 1e6, 1.0);
  }
  // Unit variance (ddof 1) of the selected genes' counts, and the values are counts / sd.
  std::vector<double> s1(50, 0.0), s2(50, 0.0), c1(50, 0.0), c2(50, 0.0);
  for (int64_t i = 0; i < 300; ++i) {
    for (int64_t q = pr.norm_counts.indptr[i]; q < pr.norm_counts.indptr[i + 1]; ++q)
      s1[pr.norm_counts.indices[q]] += pr.norm_counts.data[q], s2[pr.norm_counts.indices[q]] += double(pr.norm_counts.data[q]) * pr.norm_counts.data[q];
  }
  for (int j = 0; j < 50; ++j) {
    const double var = (s2[j] - s1[j] * s1[j] / 300) / 299;
    EXPECT_NEAR(var, 1.0, 1e-5);
  }
  // High-variance genes have the largest Fano ratios.
  const CnmfHighVar hv = cnmf_highvar_genes(pr.tpm, 50);
  double min_in = 1e300, max_out = -1e300;
  for (int j = 0; j < 120; ++j) {
    if (std::isnan(hv.fano_ratio[j])) continue;
    if (hv.high_var[j]) min_in = std::min(min_in, hv.fano_ratio[j]);
    else max_out = std::max(max_out, hv.fano_ratio[j]);
  }
  EXPECT_GE(min_in, max_out);
}

TEST(Cnmf, PrepareErrors) {
  CsrF X = test::random_counts(50, 30, 0.5, 11, 9);
  std::vector<std::string> cells, genes;
  for (int i = 0; i < 50; ++i) cells.push_back("c" + std::to_string(i));
  for (int j = 0; j < 30; ++j) genes.push_back("g" + std::to_string(j));
  const Context ctx = Context::cpu(1);
  // A cell with no counts at all.
  CsrF Z = X;
  const int64_t b = Z.indptr[7], e = Z.indptr[8];
  Z.indices.erase(Z.indices.begin() + b, Z.indices.begin() + e);
  Z.data.erase(Z.data.begin() + b, Z.data.begin() + e);
  for (int64_t i = 8; i <= 50; ++i) Z.indptr[i] -= e - b;
  try {
    cnmf_prepare(ctx, Z, cells, genes, {}, "in.h5ad");
    FAIL() << "expected InputError";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("c7"), std::string::npos) << err.what();
  }
  // A gene list under which some cell has no counts.
  CnmfPrepareOptions po;
  int64_t gene = -1;
  for (int j = 0; j < 30 && gene < 0; ++j) {
    int n = 0;
    for (int64_t q = 0; q < X.nnz(); ++q) n += X.indices[q] == j;
    if (n < 50) gene = j;
  }
  ASSERT_GE(gene, 0);
  po.genes = {genes[gene]};
  EXPECT_THROW(cnmf_prepare(ctx, X, cells, genes, po, "in.h5ad"), InputError);
  po.genes = {"no-such-gene"};
  EXPECT_THROW(cnmf_prepare(ctx, X, cells, genes, po, "in.h5ad"), InputError);
  X.data[0] = -2;
  EXPECT_THROW(cnmf_prepare(ctx, X, cells, genes, {}, "in.h5ad"), InputError);
}

TEST(Cnmf, KMeansAndSilhouetteAgainstNaive) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  constexpr int k = 4, per = 30, d = 12;
  DenseD X(k * per, d);
  std::vector<int> truth;
  for (int c = 0; c < k; ++c)
    for (int q = 0; q < per; ++q) {
      for (int j = 0; j < d; ++j) X(c * per + q, j) = (j == c ? 10.0 : 0.0) + 0.5 * nd(rng);
      truth.push_back(c);
    }
  const Context ctx = Context::cpu(2);
  const KMeansResult km = kmeans(ctx, X, k);
  // Each true cluster maps to one label, all distinct.
  std::vector<int> map(k, -1);
  for (int i = 0; i < k * per; ++i) {
    if (map[truth[i]] < 0) map[truth[i]] = km.labels[i];
    EXPECT_EQ(km.labels[i], map[truth[i]]);
  }
  std::sort(map.begin(), map.end());
  EXPECT_EQ(std::unique(map.begin(), map.end()) - map.begin(), k);
  // Each point's label is its nearest centre by exact distances, the inertia their sum, and the
  // result the same bits for any thread count.
  double inertia = 0;
  for (int i = 0; i < k * per; ++i) {
    std::vector<double> dc(k, 0.0);
    for (int c = 0; c < k; ++c)
      for (int j = 0; j < d; ++j) dc[c] += (X(i, j) - km.centers(c, j)) * (X(i, j) - km.centers(c, j));
    EXPECT_LE(dc[km.labels[i]], *std::min_element(dc.begin(), dc.end()) + 1e-9) << "point " << i;
    inertia += dc[km.labels[i]];
  }
  EXPECT_NEAR(km.inertia, inertia, 1e-9 * inertia);
  for (const int threads : {1, 3}) {
    const KMeansResult other = kmeans(Context::cpu(threads), X, k);
    EXPECT_EQ(other.labels, km.labels);
    EXPECT_EQ(other.centers.data, km.centers.data);
    EXPECT_EQ(other.inertia, km.inertia);
  }
  {  // many blocks of points, overlapping clusters
    DenseD Y(1000, 20);
    for (double& v : Y.data) v = nd(rng);
    const KMeansResult a = kmeans(Context::cpu(1), Y, 10), b = kmeans(Context::cpu(4), Y, 10);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_EQ(a.centers.data, b.centers.data);
  }
  // Silhouette: naive O(n^2) with direct distances, on a noisier labelling.
  std::vector<int> labels = km.labels;
  for (int i = 0; i < 10; ++i) labels[i * 7] = (labels[i * 7] + 1) % k;
  const int64_t n = X.n_rows;
  double tot = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> sum(k, 0.0), cnt(k, 0.0);
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int q = 0; q < d; ++q) s += (X(i, q) - X(j, q)) * (X(i, q) - X(j, q));
      sum[labels[j]] += std::sqrt(s);
      cnt[labels[j]] += 1;
    }
    if (cnt[labels[i]] <= 1) continue;
    const double a = sum[labels[i]] / (cnt[labels[i]] - 1);
    double bm = 1e300;
    for (int c = 0; c < k; ++c)
      if (c != labels[i] && cnt[c] > 0) bm = std::min(bm, sum[c] / cnt[c]);
    tot += (bm - a) / std::max(a, bm);
  }
  EXPECT_NEAR(silhouette_score(ctx, X, labels), tot / n, 1e-9);
}

TEST(Cnmf, GeneSpectraScoreMatchesDenseOls) {
  const uint64_t seed = test::fresh_seed();
  const CsrF T = test::random_counts(200, 25, 0.4, seed, 50);
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<double> un(0.0, 3.0);
  constexpr int k = 3;
  DenseF U(200, k);
  for (float& v : U.data) v = static_cast<float>(un(rng));
  std::vector<double> mean, sd;
  column_mean_std(T, mean, sd);
  const Context ctx = Context::cpu(2);
  const DenseD got = cnmf_gene_spectra_score(ctx, U, T, mean, sd);
  // Dense oracle: Z = (T - mean) / sd; beta = (U^T U)^-1 U^T Z by Gauss-Jordan.
  double M[k][k] = {};
  for (int i = 0; i < 200; ++i)
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) M[a][b] += double(U(i, a)) * U(i, b);
  double inv[k][k] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  for (int c = 0; c < k; ++c) {
    const double piv = M[c][c];
    for (int j = 0; j < k; ++j) M[c][j] /= piv, inv[c][j] /= piv;
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = M[r][c];
      for (int j = 0; j < k; ++j) M[r][j] -= f * M[c][j], inv[r][j] -= f * inv[c][j];
    }
  }
  std::vector<double> dense(25);
  for (int j = 0; j < 25; ++j) {
    std::vector<double> utz(k, 0.0);
    std::vector<double> col(200, 0.0);
    for (int i = 0; i < 200; ++i)
      for (int64_t q = T.indptr[i]; q < T.indptr[i + 1]; ++q)
        if (T.indices[q] == j) col[i] = T.data[q];
    for (int i = 0; i < 200; ++i)
      for (int a = 0; a < k; ++a) utz[a] += U(i, a) * ((col[i] - mean[j]) / sd[j]);
    for (int a = 0; a < k; ++a) {
      double s = 0;
      for (int b = 0; b < k; ++b) s += inv[a][b] * utz[b];
      if (sd[j] == 0) {
        EXPECT_TRUE(std::isnan(got(a, j)));
      } else {
        EXPECT_NEAR(got(a, j), s, 1e-8 * (1 + std::fabs(s)));
      }
    }
  }
}

TEST(Cnmf, ConsensusDensityFilterAndErrors) {
  // Two replicates' spectra identical up to noise, plus one outlier replicate row: with a strict
  // threshold the outliers are dropped.
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(60, 20, 0.5, seed, 9);
  const Context ctx = Context::cpu(1);
  constexpr int k = 2, R = 10;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> un(0.0, 0.02);
  DenseF merged(R * k, 20);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < k; ++c)
      for (int j = 0; j < 20; ++j)
        merged(r * k + c, j) = static_cast<float>((j % 2 == c ? 1.0 : 0.05) + un(rng));
  for (int j = 0; j < 20; ++j) merged(0, j) = static_cast<float>(j < 3 ? 1.0 : 0.0);  // outlier
  CnmfConsensusOptions co;
  co.density_threshold = 0.2;
  const CnmfConsensus c = cnmf_consensus(ctx, merged, k, X, co);
  EXPECT_EQ(c.kept[0], 0);
  for (int i = 1; i < R * k; ++i) EXPECT_EQ(c.kept[i], 1) << i;
  co.density_threshold = 1e-9;  // nothing survives
  EXPECT_THROW(cnmf_consensus(ctx, merged, k, X, co), InputError);
  co.density_threshold = 0.5;
  co.local_neighborhood_size = 0.01;  // empty neighbourhood
  EXPECT_THROW(cnmf_consensus(ctx, merged, k, X, co), InputError);
}

TEST(CnmfFiles, PythonFloatRepr) {
  EXPECT_EQ(py_float_repr(0.5), "0.5");
  EXPECT_EQ(py_float_repr(2.0), "2.0");
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(1e-05), "1e-05");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(123456789.0), "123456789.0");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(py_float_repr(-3.25), "-3.25");
  EXPECT_EQ(py_float_repr(0.1f), "0.1");
  EXPECT_EQ(py_float_repr(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(cnmf_dt_tag(0.5), "0_5");
  EXPECT_EQ(cnmf_dt_tag(2.0), "2_0");
}

TEST(CnmfFiles, TsvRoundTripIsExact) {
  test::TempDir dir;
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> un(0.0f, 1000.0f);
  DenseF m(3, 4);
  for (float& v : m.data) v = un(rng) * (rng() % 2 ? 1e-6f : 1.0f);
  m(1, 2) = std::nanf("");
  const std::string path = dir.path("t.txt");
  write_tsv_table(path, {"1", "2", "3"}, {"a", "b", "c", "d"}, m);
  std::ifstream in(path);
  std::string head;
  std::getline(in, head);
  EXPECT_EQ(head, "\ta\tb\tc\td");
  const TsvTable t = read_tsv_table(path);
  EXPECT_EQ(t.index, (std::vector<std::string>{"1", "2", "3"}));
  for (size_t q = 0; q < m.data.size(); ++q) {
    if (std::isnan(m.data[q])) {
      EXPECT_TRUE(std::isnan(t.values.data[q]));
    } else {
      EXPECT_EQ(static_cast<float>(t.values.data[q]), m.data[q]);
    }
  }
}

TEST(CnmfFiles, PngDecodes) {
  const Canvas c = k_selection_canvas({5, 6, 7, 8}, {0.9, 0.95, 0.7, 0.6}, {1000, 900, 850, 830});
  const std::string png = encode_png(c);
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto u32 = [&](size_t at) {
    return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
           (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
  };
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(u32(16), static_cast<uint32_t>(c.width));
  EXPECT_EQ(u32(20), static_cast<uint32_t>(c.height));
  const size_t idat = 8 + 12 + 13;
  EXPECT_EQ(png.substr(idat + 4, 4), "IDAT");
  const uint32_t len = u32(idat);
  std::string raw(static_cast<size_t>(c.height) * (c.width * 3 + 1), '\0');
  uLongf rl = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &rl, reinterpret_cast<const Bytef*>(png.data() + idat + 8), len), Z_OK);
  EXPECT_EQ(rl, raw.size());
  // Some blue and some red pixels were drawn.
  int blue = 0, red = 0;
  for (size_t p = 0; p + 2 < c.rgb.size(); p += 3) {
    blue += c.rgb[p] == 0x1F && c.rgb[p + 2] == 0xD0;
    red += c.rgb[p] == 0xD0 && c.rgb[p + 1] == 0x20;
  }
  EXPECT_GT(blue, 100);
  EXPECT_GT(red, 100);
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  EXPECT_EQ(u32(29), static_cast<uint32_t>(crc));
}

}  // namespace
}  // namespace scurry
