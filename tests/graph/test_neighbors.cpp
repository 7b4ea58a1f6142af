// neighbors + connectivities against scanpy 1.9.6's golden outputs on pbmc3k_first1000, the uns
// layout, and bad input.
#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/connectivities.hpp"
#include "graph/neighbors.hpp"
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

TEST(Connectivities, FromGoldenDistancesEqualGoldenConnectivities) {
  const Dataset& g = golden();
  const CsrF dist = to_csr_f(g.obsp.at("distances"));
  const CsrF want = to_csr_f(g.obsp.at("connectivities"));
  const Knn knn = knn_from_distance_matrix(dist, 15, "golden");
  const CsrF got = fuzzy_simplicial_set(knn);
  ASSERT_EQ(got.n_rows, want.n_rows);
  ASSERT_EQ(got.indptr, want.indptr);
  ASSERT_EQ(got.indices, want.indices);
  double max_err = 0;
  for (int64_t p = 0; p < want.nnz(); ++p) max_err = std::max(max_err, std::fabs(double(got.data[p]) - want.data[p]));
  std::printf("connectivities vs golden: nnz %lld, max |diff| %.3g\n", static_cast<long long>(want.nnz()), max_err);
  EXPECT_LT(max_err, 1e-5);
  // The threaded version gives the same matrix bit for bit.
  const CsrF got4 = fuzzy_simplicial_set(Context::cpu(4), knn);
  EXPECT_EQ(got4.indptr, got.indptr);
  EXPECT_EQ(got4.indices, got.indices);
  EXPECT_EQ(got4.data, got.data);
  // The distances matrix rebuilt from the kNN equals the golden one (float32 of float64 values).
  const CsrF back = knn_distance_matrix(knn);
  EXPECT_EQ(back.indptr, dist.indptr);
  EXPECT_EQ(back.indices, dist.indices);
  EXPECT_EQ(back.data, dist.data);
}

TEST(Neighbors, OnGoldenPcaMatchesGoldenGraph) {
  Dataset d;
  const Dataset& g = golden();
  d.obs = g.obs;
  d.obsm["X_pca"] = g.obsm.at("X_pca");
  NeighborsOptions opt;
  opt.n_pcs = 50;
  const NeighborsResult res = neighbors(Context::cpu(2), d, opt);
  EXPECT_EQ(res.algorithm, "exact");
  EXPECT_EQ(res.use_rep, "X_pca");
  const CsrF want = to_csr_f(g.obsp.at("distances"));
  const CsrF& got = std::get<CsrF>(d.obsp.at("distances").m);
  EXPECT_EQ(d.obsp.at("distances").dtype, DType::f64);
  ASSERT_EQ(got.n_rows, 1000);
  ASSERT_EQ(got.nnz(), 14000);
  int64_t same = 0;
  double max_rel = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    std::set<int32_t> a(got.indices.begin() + got.indptr[i], got.indices.begin() + got.indptr[i + 1]);
    for (int64_t p = want.indptr[i]; p < want.indptr[i + 1]; ++p) {
      if (a.count(want.indices[p])) {
        ++same;
        const auto it = std::lower_bound(got.indices.begin() + got.indptr[i], got.indices.begin() + got.indptr[i + 1],
                                         want.indices[p]);
        const double gv = got.data[it - got.indices.begin()];
        max_rel = std::max(max_rel, std::fabs(gv - want.data[p]) / want.data[p]);
      }
    }
  }
  const double frac = static_cast<double>(same) / 14000.0;
  std::printf("neighbour sets shared with scanpy: %.5f; max relative distance difference %.3g\n", frac, max_rel);
  EXPECT_GE(frac, 0.999);
  EXPECT_LT(max_rel, 1e-5);
  // Connectivities: same graph as scanpy's where the neighbour sets agree.
  const CsrF wc = to_csr_f(g.obsp.at("connectivities"));
  const CsrF& gc = std::get<CsrF>(d.obsp.at("connectivities").m);
  if (frac == 1.0) {
    EXPECT_EQ(gc.indices, wc.indices);
    double err = 0;
    for (int64_t p = 0; p < wc.nnz(); ++p) err = std::max(err, std::fabs(double(gc.data[p]) - wc.data[p]));
    EXPECT_LT(err, 1e-5);
  }
  // uns['neighbors'] laid out as the golden file.
  const Dict& u = d.uns.at("neighbors").dict();
  const Dict& gu = g.uns.at("neighbors").dict();
  for (const auto& [k, v] : gu) EXPECT_TRUE(u.count(k)) << k;
  EXPECT_EQ(u.size(), gu.size());
  EXPECT_EQ(std::get<std::string>(u.at("connectivities_key").v), "connectivities");
  EXPECT_EQ(std::get<std::string>(u.at("distances_key").v), "distances");
  const Dict& p = u.at("params").dict();
  const Dict& gp = gu.at("params").dict();
  EXPECT_EQ(p.size(), gp.size());
  for (const auto& [k, v] : gp) {
    ASSERT_TRUE(p.count(k)) << k;
    EXPECT_EQ(p.at(k).v.index(), v.v.index()) << k;
  }
  EXPECT_EQ(std::get<int64_t>(p.at("n_neighbors").v), 15);
  EXPECT_EQ(std::get<int64_t>(p.at("n_pcs").v), 50);
  EXPECT_EQ(std::get<std::string>(p.at("metric").v), "euclidean");
  EXPECT_EQ(std::get<std::string>(p.at("method").v), "umap");
}

TEST(Neighbors, HnswOnGoldenPcaHasHighRecall) {
  const DenseF x = to_dense_f(golden().obsm.at("X_pca"));
  NeighborsOptions opt;
  opt.algorithm = "hnsw";
  const NeighborsResult a = neighbors(Context::cpu(2), x, opt);
  opt.algorithm = "exact";
  const NeighborsResult e = neighbors(Context::cpu(2), x, opt);
  int64_t hit = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    std::set<int32_t> t(e.knn.indices.begin() + i * 15, e.knn.indices.begin() + i * 15 + 15);
    for (int64_t j = 0; j < 15; ++j) hit += t.count(a.knn.index(i, j));
  }
  std::printf("hnsw recall@15 on golden X_pca: %.4f\n", hit / 15000.0);
  EXPECT_GE(hit / 15000.0, 0.95);
}

TEST(Neighbors, BadInput) {
  Dataset d;
  const Dataset& g = golden();
  d.obs = g.obs;
  d.obsm["X_pca"] = g.obsm.at("X_pca");
  const Context ctx = Context::cpu(1);
  NeighborsOptions o;
  o.n_neighbors = 1000;
  EXPECT_THROW(neighbors(ctx, d, o), InputError);
  o = {};
  o.n_pcs = 51;
  try {
    neighbors(ctx, d, o);
    ADD_FAILURE() << "n_pcs > columns accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("n_pcs"), std::string::npos) << e.what();
  }
  o = {};
  o.use_rep = "X_scvi";
  try {
    neighbors(ctx, d, o);
    ADD_FAILURE() << "missing use_rep accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("X_scvi"), std::string::npos) << e.what();
  }
  o = {};
  o.metric = "correlation";
  EXPECT_THROW(neighbors(ctx, d, o), InputError);
  o = {};
  o.algorithm = "annoy";
  EXPECT_THROW(neighbors(ctx, d, o), InputError);
  Dataset empty;
  EXPECT_THROW(neighbors(ctx, empty, NeighborsOptions{}), InputError);
}

}  // namespace
}  // namespace scurry
