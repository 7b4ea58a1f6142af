// GPU test (label gpu): the default `scurry --device gpu run` twice on the same input gives the same
// bits in every slot of the output (issue 15, point 4): X, obs and var columns (QC, HVG, mean/std,
// leiden), obsm (X_pca, X_umap), varm (PCs), obsp (distances, connectivities), uns['pca'].
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>

#include "io/h5ad.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool same_matrix(const Matrix& a, const Matrix& b) {
  if (a.m.index() != b.m.index()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using M = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<M, std::monostate>) {
          return true;
        } else {
          const M& y = std::get<M>(b.m);
          if constexpr (std::is_same_v<M, CsrF> || std::is_same_v<M, CsrD>)
            return x.n_rows == y.n_rows && x.n_cols == y.n_cols && same_bits(x.indptr, y.indptr) &&
                   same_bits(x.indices, y.indices) && same_bits(x.data, y.data);
          else
            return x.n_rows == y.n_rows && x.n_cols == y.n_cols && same_bits(x.data, y.data);
        }
      },
      a.m);
}

bool same_column(const Column& a, const Column& b) {
  if (a.c.index() != b.c.index()) return false;
  if (auto* x = std::get_if<NumericColumn>(&a.c)) return same_bits(x->values, std::get<NumericColumn>(b.c).values);
  if (auto* x = std::get_if<BoolColumn>(&a.c)) return same_bits(x->values, std::get<BoolColumn>(b.c).values);
  if (auto* x = std::get_if<StringColumn>(&a.c)) return x->values == std::get<StringColumn>(b.c).values;
  const auto& x = std::get<CategoricalColumn>(a.c);
  const auto& y = std::get<CategoricalColumn>(b.c);
  return x.categories == y.categories && same_bits(x.codes, y.codes);
}

void expect_same_slots(const std::map<std::string, Matrix>& a, const std::map<std::string, Matrix>& b,
                       const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, m] : a) {
    ASSERT_TRUE(b.count(name)) << what << "/" << name;
    EXPECT_TRUE(same_matrix(m, b.at(name))) << what << "/" << name << " differs between the two runs";
  }
}

void expect_same_table(const Table& a, const Table& b, const char* what) {
  ASSERT_EQ(a.names(), b.names()) << what;
  EXPECT_EQ(a.index, b.index) << what;
  for (const auto& name : a.names())
    EXPECT_TRUE(same_column(a.at(name), b.at(name))) << what << "/" << name << " differs between the two runs";
}

}  // namespace

TEST(RunReproGpu, DefaultRunTwiceGivesTheSameBits) {
  SCURRY_REQUIRE_GPU();
  test::TempDir dir;
  const std::string in = dir.path("in.h5ad");
  write_h5ad(test::simulated_counts(30000, 6000, 900), in);
  std::string outs[2] = {dir.path("o1.h5ad"), dir.path("o2.h5ad")};
  for (const auto& out : outs) {
    const std::string cmd = "'" + test::scurry_binary() + "' -q --device gpu run '" + in + "' -o '" + out +
                            "' --no-raw --no-counts-layer";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  const Dataset a = read_h5ad(outs[0]), b = read_h5ad(outs[1]);
  ASSERT_GT(a.n_obs(), 20000);
  ASSERT_TRUE(a.obsm.count("X_pca") && a.obsm.count("X_umap") && a.obsp.count("connectivities"));
  ASSERT_TRUE(a.obs.has("leiden"));
  EXPECT_TRUE(same_matrix(a.X, b.X)) << "X differs between the two runs";
  expect_same_table(a.obs, b.obs, "obs");
  expect_same_table(a.var, b.var, "var");
  expect_same_slots(a.obsm, b.obsm, "obsm");
  expect_same_slots(a.varm, b.varm, "varm");
  expect_same_slots(a.obsp, b.obsp, "obsp");
  ASSERT_TRUE(a.uns.count("pca") && b.uns.count("pca"));
  for (const char* key : {"variance", "variance_ratio"}) {
    const auto& x = std::get<NumArray>(a.uns.at("pca").dict().at(key).v);
    const auto& y = std::get<NumArray>(b.uns.at("pca").dict().at(key).v);
    EXPECT_TRUE(same_bits(x.data, y.data)) << "uns/pca/" << key;
  }
}
