// GPU test (label gpu): the default `scurry --device gpu run` twice on the same input gives the same
// bits in every slot of the output (issue 15, point 4): X, obs and var columns (QC, HVG, mean/std,
// leiden), obsm (X_pca, X_umap), varm (PCs), obsp (distances, connectivities), uns['pca'].
#include <algorithm>
#include <cmath>
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

// The default GPU run of in into out (plus extra options): the command's exit status.
int gpu_run(const std::string& in, const std::string& out, const std::string& extra = "") {
  const std::string cmd = "'" + test::scurry_binary() + "' -q --device gpu run '" + in + "' -o '" + out +
                          "' --no-raw --no-counts-layer" + extra;
  return std::system(cmd.c_str());
}

// A fresh simulated input of 30,000 cells in dir.
std::string simulated_input(const test::TempDir& dir) {
  const std::string in = dir.path("in.h5ad");
  write_h5ad(test::simulated_counts(30000, 6000, 900), in);
  return in;
}

}  // namespace

TEST(RunReproGpu, DefaultRunTwiceGivesTheSameBits) {
  SCURRY_REQUIRE_GPU();
  test::TempDir dir;
  const std::string in = simulated_input(dir);
  std::string outs[2] = {dir.path("o1.h5ad"), dir.path("o2.h5ad")};
  for (const auto& out : outs) ASSERT_EQ(gpu_run(in, out), 0) << "scurry --device gpu run " << in << " -o " << out;
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

namespace {

const RecArray& rgg_field(const Dataset& d, const char* what) {
  return std::get<RecArray>(d.uns.at("rank_genes_groups").dict().at(what).v);
}

// The two results' names agree rank by rank and their scores within rel (relative, floor 1e-6). Two
// genes whose scores are within the tolerance of each other may come in either order (a near tie:
// the device's and the host's sums round apart): a name that differs at rank k must be found within
// the ranks of a whose scores are within 2 rel of a's score at k.
void expect_same_markers(const Dataset& a, const Dataset& b, double rel, const char* what) {
  const RecArray &na = rgg_field(a, "names"), &nb = rgg_field(b, "names");
  const RecArray &sa = rgg_field(a, "scores"), &sb = rgg_field(b, "scores");
  ASSERT_EQ(na.fields.size(), nb.fields.size()) << what;
  ASSERT_GT(na.fields.size(), 1u) << what;
  int64_t name_diffs = 0, checked = 0;
  for (const auto& f : sa.fields) {
    const RecField* g = sb.field(f.name);
    ASSERT_NE(g, nullptr) << what << ": group " << f.name;
    ASSERT_EQ(f.num.size(), g->num.size()) << what;
    for (size_t k = 0; k < f.num.size(); ++k, ++checked)
      ASSERT_LE(std::abs(f.num[k] - g->num[k]), rel * std::max(1e-6, std::abs(g->num[k])))
          << what << ": group " << f.name << " rank " << k;
    const RecField *fa = na.field(f.name), *fb = nb.field(f.name);
    for (size_t k = 0; k < 100 && k < fa->str.size(); ++k) {
      if (fa->str[k] == fb->str[k]) continue;
      const double tie = 2 * rel * std::max(1e-6, std::abs(f.num[k]));
      bool tied = false;
      for (size_t j = 0; j < fa->str.size() && !tied; ++j)
        tied = fa->str[j] == fb->str[k] && std::abs(f.num[j] - f.num[k]) <= tie;
      if (!tied)
        ADD_FAILURE() << what << ": group " << f.name << " rank " << k << ": " << fa->str[k] << " vs " << fb->str[k]
                      << " (scores " << f.num[k] << ", not a near tie)";
      name_diffs += !tied;
    }
  }
  EXPECT_GT(checked, 1000) << what;
  EXPECT_EQ(name_diffs, 0) << what << ": top-100 names differ";
}

}  // namespace

// The run's markers test the device's scaled X while its copy back is still being written (no wait):
// the same result as the path that waits for the host's copy (forced by --markers-mask-var, which
// the device path does not take) and as the CPU's t-test on the written output.
TEST(RunReproGpu, MarkersOnTheDeviceCopyEqualTheHostPaths) {
  SCURRY_REQUIRE_GPU();
  test::TempDir dir;
  const std::string in = simulated_input(dir);
  const std::string o1 = dir.path("o1.h5ad"), o2 = dir.path("o2.h5ad"), o3 = dir.path("o3.h5ad");
  ASSERT_EQ(gpu_run(in, o1), 0) << "scurry --device gpu run";
  ASSERT_EQ(gpu_run(in, o2, " --markers-mask-var highly_variable"), 0) << "scurry --device gpu run --markers-mask-var";
  const std::string cpu = "'" + test::scurry_binary() + "'" + " -q --device cpu rank-genes-groups '" + o1 + "' -o '" + o3 + "' --groupby leiden --no-use-raw";
  ASSERT_EQ(std::system(cpu.c_str()), 0) << cpu;
  const Dataset a = read_h5ad(o1), b = read_h5ad(o2), c = read_h5ad(o3);
  ASSERT_TRUE(a.uns.count("rank_genes_groups") && b.uns.count("rank_genes_groups") && c.uns.count("rank_genes_groups"));
  expect_same_markers(a, b, 1e-5, "device copy vs host copy (mask_var)");
  expect_same_markers(a, c, 1e-4, "GPU run vs CPU rank-genes-groups on its output");
}
