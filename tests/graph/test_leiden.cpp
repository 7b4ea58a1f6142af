// Leiden: modularity against scanpy's golden clustering, reproducibility, a planted partition, and
// the modularity / ARI helpers against simple oracles.
#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/leiden.hpp"
#include "io/h5ad.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

const Dataset& golden() {
  static const Dataset d = [] {
    H5adReadOptions o;
    o.read_raw = false;
    o.read_layers = false;
    return read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"), o);
  }();
  return d;
}

std::vector<int32_t> golden_labels() {
  return std::get<CategoricalColumn>(golden().obs.at("leiden").c).codes;
}

// Dense float64 oracle of modularity.
double modularity_oracle(const CsrF& g, const std::vector<int32_t>& lab, double gamma) {
  const int64_t n = g.n_rows;
  DenseD a(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p) a(i, g.indices[p]) += g.data[p];
  std::vector<double> k(n, 0.0);
  double m2 = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) k[i] += a(i, j), m2 += a(i, j);
  double q = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (lab[i] == lab[j]) q += a(i, j) - gamma * k[i] * k[j] / m2;
  return q / m2;
}

TEST(Leiden, GoldenGraphModularityAtLeastScanpys) {
  Dataset d;
  d.obs = golden().obs;
  d.obsp["connectivities"] = golden().obsp.at("connectivities");
  const LeidenResult r = leiden(Context::cpu(2), d, LeidenOptions{});
  const CsrF g = to_csr_f(golden().obsp.at("connectivities"));
  const std::vector<int32_t> gl = golden_labels();
  const double q_ours = modularity(g, r.labels, 1.0), q_scanpy = modularity(g, gl, 1.0);
  const double ari = adjusted_rand_index(r.labels, gl);
  std::printf("leiden: %lld clusters (scanpy 7); modularity scurry %.5f, scanpy %.5f; ARI vs scanpy %.4f\n",
              static_cast<long long>(r.n_clusters), q_ours, q_scanpy, ari);
  EXPECT_GE(q_ours, q_scanpy - 0.01);
  EXPECT_NEAR(r.modularity, q_ours, 1e-12);
  EXPECT_NEAR(q_scanpy, modularity_oracle(g, gl, 1.0), 1e-9);
  EXPECT_NEAR(modularity(g, gl, 0.5), modularity_oracle(g, gl, 0.5), 1e-9);
  // Written as scanpy writes it: categorical "0".."k-1", "0" the largest, and uns params.
  const auto& col = std::get<CategoricalColumn>(d.obs.at("leiden").c);
  ASSERT_EQ(static_cast<int64_t>(col.categories.size()), r.n_clusters);
  for (int64_t c = 0; c < r.n_clusters; ++c) EXPECT_EQ(col.categories[c], std::to_string(c));
  std::vector<int64_t> size(r.n_clusters, 0);
  for (int32_t c : col.codes) ++size[c];
  EXPECT_TRUE(std::is_sorted(size.rbegin(), size.rend()));
  const Dict& p = d.uns.at("leiden").dict().at("params").dict();
  const Dict& gp = golden().uns.at("leiden").dict().at("params").dict();
  EXPECT_EQ(p.size(), gp.size());
  for (const auto& [k, v] : gp) {
    ASSERT_TRUE(p.count(k)) << k;
    EXPECT_EQ(p.at(k).v.index(), v.v.index()) << k;
  }
  EXPECT_EQ(std::get<int64_t>(p.at("n_iterations").v), -1);
  // Same seed: same labels; a higher resolution gives more clusters.
  const LeidenResult r2 = leiden(Context::cpu(1), g, LeidenOptions{});
  EXPECT_EQ(r2.labels, r.labels);
  LeidenOptions hi;
  hi.resolution = 3.0;
  EXPECT_GT(leiden(Context::cpu(1), g, hi).n_clusters, r.n_clusters);
}

TEST(Leiden, RecoversPlantedPartition) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int64_t blocks = 6, per = 80, n = blocks * per;
  std::vector<int32_t> truth(n);
  for (int64_t i = 0; i < n; ++i) truth[i] = static_cast<int32_t>(i / per);
  std::vector<std::vector<std::pair<int32_t, float>>> rows(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) {
      const double p = truth[i] == truth[j] ? 0.2 : 0.01;
      if (u(rng) < p) {
        const float w = static_cast<float>(0.2 + 0.8 * u(rng));
        rows[i].emplace_back(static_cast<int32_t>(j), w);
        rows[j].emplace_back(static_cast<int32_t>(i), w);
      }
    }
  CsrF g = CsrF::zeros(n, n);
  for (int64_t i = 0; i < n; ++i) {
    std::sort(rows[i].begin(), rows[i].end());
    for (const auto& [j, w] : rows[i]) g.indices.push_back(j), g.data.push_back(w);
    g.indptr[i + 1] = g.nnz();
  }
  LeidenOptions o;
  o.random_state = seed % 1000;
  const LeidenResult r = leiden(Context::cpu(1), g, o);
  const double ari = adjusted_rand_index(r.labels, truth);
  std::printf("planted partition: %lld clusters, ARI %.4f, modularity %.4f (truth %.4f)\n",
              static_cast<long long>(r.n_clusters), ari, r.modularity, modularity(g, truth));
  EXPECT_GE(ari, 0.95);
  EXPECT_NEAR(r.modularity, modularity_oracle(g, r.labels, 1.0), 1e-9);
}

TEST(Leiden, AdjustedRandIndexKnownValues) {
  // scikit-learn: adjusted_rand_score([0,0,1,1],[0,0,1,2]) = 0.5714285714285715,
  // adjusted_rand_score([0,0,1,1],[0,1,0,1]) = -0.5.
  EXPECT_NEAR(adjusted_rand_index({0, 0, 1, 1}, {0, 0, 1, 2}), 0.5714285714285715, 1e-12);
  EXPECT_NEAR(adjusted_rand_index({0, 0, 1, 1}, {0, 1, 0, 1}), -0.5, 1e-12);
  EXPECT_NEAR(adjusted_rand_index({0, 0, 1, 1, 2}, {5, 5, 3, 3, 0}), 1.0, 1e-12);
}

TEST(Leiden, BadInput) {
  Dataset d;
  d.obs = golden().obs;
  try {
    leiden(Context::cpu(1), d, LeidenOptions{});
    ADD_FAILURE() << "leiden without connectivities accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("neighbors"), std::string::npos) << e.what();
  }
  d.obsp["connectivities"] = golden().obsp.at("connectivities");
  LeidenOptions o;
  o.resolution = 0;
  EXPECT_THROW(leiden(Context::cpu(1), d, o), InputError);
}

}  // namespace
}  // namespace scurry
