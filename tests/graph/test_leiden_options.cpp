// Leiden as users call it now (issue 22 point 4): several resolutions in one call equal the
// single-resolution runs; restrict_to leaves the other cells' labels as they were and clusters the
// chosen ones as a run on their subgraph does, with scanpy's "<cats>,<new>" labels and key; flavor
// igraph (n_iterations 2) against scanpy's golden clustering; use_weights, obsp, key names, natsort
// order and the errors.
#include <algorithm>
#include <map>
#include <random>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/leiden.hpp"
#include "io/h5ad.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

Dataset golden() {
  H5adReadOptions o;
  o.read_raw = false;
  o.read_layers = false;
  Dataset g = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"), o);
  Dataset d;
  d.obs = g.obs;
  d.obsp["connectivities"] = g.obsp.at("connectivities");
  return d;
}

const CategoricalColumn& cat(const Dataset& d, const std::string& key) {
  return std::get<CategoricalColumn>(d.obs.at(key).c);
}

std::vector<std::string> strings(const Dataset& d, const std::string& key) {
  const CategoricalColumn& c = cat(d, key);
  std::vector<std::string> s;
  for (int32_t code : c.codes) s.push_back(c.categories.at(code));
  return s;
}

}  // namespace

TEST(LeidenOptions, SeveralResolutionsEqualSingleRuns) {
  const uint64_t seed = test::fresh_seed();
  Dataset d;
  const CsrF g = test::planted_partition(3000, 12, 10, 3, seed);
  d.obsp["connectivities"] = Matrix(g);
  for (int64_t i = 0; i < g.n_rows; ++i) d.obs.index.push_back(std::to_string(i));
  LeidenOptions o;
  o.random_state = seed % 1000;
  o.resolutions = {0.25, 1.0, 3.0};
  const Context ctx = Context::cpu(2);
  leiden(ctx, d, o);
  for (double r : o.resolutions) {
    const std::string key = leiden_resolution_key("leiden", r);
    ASSERT_TRUE(d.obs.has(key)) << key;
    LeidenOptions one;
    one.random_state = o.random_state;
    one.resolution = r;
    const LeidenResult single = leiden(ctx, g, one);
    EXPECT_EQ(cat(d, key).codes, single.labels) << key;
    EXPECT_EQ(static_cast<int64_t>(cat(d, key).categories.size()), single.n_clusters);
    EXPECT_EQ(std::get<double>(d.uns.at(key).dict().at("params").dict().at("resolution").v), r);
  }
  EXPECT_FALSE(d.obs.has("leiden"));  // several resolutions write only the suffixed keys
  EXPECT_EQ(leiden_resolution_key("leiden", 0.5), "leiden_0.5");
  EXPECT_EQ(leiden_resolution_key("leiden", 1.0), "leiden_1.0");
  EXPECT_EQ(leiden_resolution_key("leiden", 2), "leiden_2.0");
  EXPECT_EQ(leiden_resolution_key("res", 0.25), "res_0.25");
  EXPECT_EQ(leiden_resolution_key("leiden", 0.1), "leiden_0.1");
}

TEST(LeidenOptions, RestrictToKeepsOtherCellsAndClustersTheSubgraph) {
  Dataset d = golden();
  const std::vector<std::string> before = strings(d, "leiden");
  LeidenOptions o;
  o.restrict_key = "leiden";
  o.restrict_categories = {"0", "3"};
  const Context ctx = Context::cpu(2);
  const LeidenResult r = leiden(ctx, d, o);
  ASSERT_TRUE(d.obs.has("leiden_R"));
  EXPECT_EQ(strings(d, "leiden"), before);  // the restrict key itself is untouched
  const std::vector<std::string> after = strings(d, "leiden_R");
  // The oracle: the subgraph of those cells clustered alone.
  const CsrF full = to_csr_f(d.obsp.at("connectivities"));
  std::vector<int64_t> keep;
  for (size_t i = 0; i < before.size(); ++i)
    if (before[i] == "0" || before[i] == "3") keep.push_back(static_cast<int64_t>(i));
  std::vector<std::vector<std::pair<int32_t, float>>> rows(keep.size());
  std::map<int64_t, int32_t> pos;
  for (size_t t = 0; t < keep.size(); ++t) pos[keep[t]] = static_cast<int32_t>(t);
  for (size_t t = 0; t < keep.size(); ++t)
    for (int64_t p = full.indptr[keep[t]]; p < full.indptr[keep[t] + 1]; ++p) {
      auto f = pos.find(full.indices[p]);
      if (f != pos.end()) rows[t].emplace_back(f->second, full.data[p]);
    }
  const CsrF sub = test::csr_from_rows(rows, static_cast<int64_t>(keep.size()));
  const LeidenResult want = leiden(ctx, sub, LeidenOptions{});
  EXPECT_EQ(r.labels, want.labels);
  size_t t = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    if (t < keep.size() && keep[t] == static_cast<int64_t>(i)) {
      EXPECT_EQ(after[i], "0-3," + std::to_string(want.labels[t])) << i;
      ++t;
    } else {
      EXPECT_EQ(after[i], before[i]) << i;
    }
  }
  // Categories in natsort order, "0-3,10" after "0-3,9" when there are that many.
  const auto& cats = cat(d, "leiden_R").categories;
  EXPECT_TRUE(std::is_sorted(cats.begin(), cats.end(), natural_less));
  EXPECT_TRUE(natural_less("0-3,9", "0-3,10"));
  EXPECT_TRUE(natural_less("2", "10"));
  EXPECT_TRUE(natural_less("1", "1,0"));
  EXPECT_FALSE(natural_less("10", "2"));
  // A key of one's own is kept as given.
  o.key_added = "sub";
  leiden(ctx, d, o);
  EXPECT_EQ(strings(d, "sub"), after);
}

TEST(LeidenOptions, IgraphFlavorAgainstScanpy) {
  Dataset d = golden();
  const CsrF g = to_csr_f(d.obsp.at("connectivities"));
  const std::vector<int32_t> scanpy = cat(d, "leiden").codes;
  LeidenOptions o;
  o.flavor = "igraph";
  o.n_iterations = 2;  // scanpy 1.10's announced default
  o.key_added = "leiden_ig";
  const LeidenResult r = leiden(Context::cpu(2), d, o);
  const double ari = adjusted_rand_index(r.labels, scanpy);
  std::printf("igraph flavor, 2 iterations: %lld clusters, modularity %.5f (scanpy's leidenalg %.5f), ARI vs scanpy %.4f\n",
              static_cast<long long>(r.n_clusters), r.modularity, modularity(g, scanpy), ari);
  EXPECT_GE(r.modularity, modularity(g, scanpy) - 0.02);
  EXPECT_GT(ari, 0.8);
  // Two iterations of igraph are not the leidenalg flavor's run to stability in general, but both
  // are valid partitions of the same quality band.
  const LeidenResult la = leiden(Context::cpu(2), g, LeidenOptions{});
  EXPECT_NEAR(r.modularity, la.modularity, 0.02);
}

TEST(LeidenOptions, WeightsObspAndErrors) {
  Dataset d = golden();
  const Context ctx = Context::cpu(1);
  CsrF ones = to_csr_f(d.obsp.at("connectivities"));
  for (float& w : ones.data) w = 1.0f;
  LeidenOptions unweighted;
  unweighted.use_weights = false;
  unweighted.key_added = "uw";
  const LeidenResult a = leiden(ctx, d, unweighted);
  EXPECT_EQ(a.labels, leiden(ctx, ones, LeidenOptions{}).labels);
  // obsp: another graph by name.
  d.obsp["ones"] = Matrix(ones);
  LeidenOptions by_obsp;
  by_obsp.obsp = "ones";
  by_obsp.key_added = "ob";
  EXPECT_EQ(leiden(ctx, d, by_obsp).labels, a.labels);
  auto message = [&](LeidenOptions o) {
    try {
      leiden(ctx, d, o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LeidenOptions o;
  o.flavor = "igraph";
  o.directed = true;
  EXPECT_NE(message(o).find("directed"), std::string::npos);
  o = {};
  o.flavor = "louvain";
  EXPECT_NE(message(o).find("flavor"), std::string::npos);
  o = {};
  o.restrict_key = "leiden";
  o.restrict_categories = {"99"};
  EXPECT_NE(message(o).find("'99' is not a valid category for 'leiden'"), std::string::npos) << message(o);
  o.restrict_key = "nope";
  EXPECT_NE(message(o).find("obs['nope']"), std::string::npos);
  o = {};
  o.obsp = "nope";
  EXPECT_NE(message(o).find("obsp['nope']"), std::string::npos);
  o = {};
  o.resolutions = {1.0, -2.0};
  EXPECT_NE(message(o).find("resolution"), std::string::npos);
}

}  // namespace scurry
