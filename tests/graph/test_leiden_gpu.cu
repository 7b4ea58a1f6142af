// GPU Leiden (label gpu): modularity of the GPU partition against the CPU partition (scurry's own
// Leiden), the oracle, on the golden pbmc3k connectivities, on a seeded planted-partition graph of
// 50,000 nodes and on one with hubs (nodes of degree 300-3,000: the warp, sort-path and block
// kernels at level 0); the sort path for every node against the same oracle; the same labels run
// after run; the labels' numbering and the Dataset slots; the CPU-context error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/leiden.hpp"
#include "leiden_checks.hpp"
#include "graph/leiden_gpu.hpp"
#include "io/h5ad.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

Context gpu_ctx() {
  ContextOptions o;
  o.device = "gpu";
  return Context::create(o);
}

CsrF golden_graph() {
  H5adReadOptions o;
  o.read_raw = false;
  o.read_layers = false;
  const Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"), o);
  return to_csr_f(d.obsp.at("connectivities"));
}

CsrF planted(int64_t n, int64_t blocks, int intra, int inter, uint64_t seed, std::vector<int32_t>& truth,
             int hubs = 0) {
  return test::planted_partition(n, blocks, intra, inter, seed, hubs, &truth);
}

using test::expect_numbered_by_size;

// Sets an environment variable for the scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

void compare(const char* what, const CsrF& g, const LeidenOptions& o) {
  const LeidenResult c = leiden(Context::cpu(0), g, o);
  const LeidenResult r = leiden_gpu(gpu_ctx(), g, o);
  const LeidenResult again = leiden_gpu(gpu_ctx(), g, o);
  EXPECT_TRUE(again.labels == r.labels) << what << ": a second GPU run gave other labels";
  EXPECT_EQ(again.modularity, r.modularity);
  ASSERT_EQ(r.labels.size(), c.labels.size());
  expect_numbered_by_size(r);
  const double q_gpu = modularity(g, r.labels, o.resolution), q_cpu = modularity(g, c.labels, o.resolution);
  std::printf("%s (resolution %.2f): gpu %lld clusters, modularity %.5f; cpu %lld clusters, modularity %.5f; ARI %.4f\n",
              what, o.resolution, static_cast<long long>(r.n_clusters), q_gpu, static_cast<long long>(c.n_clusters),
              q_cpu, adjusted_rand_index(r.labels, c.labels));
  EXPECT_GE(q_gpu, q_cpu - 0.01);
  EXPECT_NEAR(r.modularity, q_gpu, 1e-9);
}

TEST(LeidenGpu, GoldenGraphModularityNearCpu) {
  SCURRY_REQUIRE_GPU();
  const CsrF g = golden_graph();
  compare("pbmc3k golden graph", g, LeidenOptions{});
  LeidenOptions hi;
  hi.resolution = 2.0;
  compare("pbmc3k golden graph", g, hi);
  LeidenOptions unweighted;
  unweighted.use_weights = false;
  const LeidenResult r = leiden_gpu(gpu_ctx(), g, unweighted);
  expect_numbered_by_size(r);
  EXPECT_NEAR(r.modularity, modularity(g, r.labels, 1.0), 1e-9);  // the weighted modularity, as the CPU path
}

TEST(LeidenGpu, PlantedPartitionModularityNearCpu) {
  SCURRY_REQUIRE_GPU();
  std::vector<int32_t> truth;
  const CsrF g = planted(50000, 40, 10, 3, test::fresh_seed(), truth);
  compare("planted partition 50000 nodes", g, LeidenOptions{});
  const LeidenResult r = leiden_gpu(gpu_ctx(), g, LeidenOptions{});
  const double ari = adjusted_rand_index(r.labels, truth);
  std::printf("planted partition: ARI of the gpu partition vs the planted one %.4f\n", ari);
  EXPECT_GT(ari, 0.85);
}

TEST(LeidenGpu, HubsModularityNearCpu) {
  SCURRY_REQUIRE_GPU();
  std::vector<int32_t> truth;
  const CsrF g = planted(50000, 20, 10, 3, test::fresh_seed(), truth, 3);
  int64_t max_degree = 0;
  for (int64_t i = 0; i < g.n_rows; ++i) max_degree = std::max(max_degree, g.row_nnz(i));
  ASSERT_GT(max_degree, 1024);  // rows for the block kernel
  compare("planted partition with hubs", g, LeidenOptions{});
  LeidenOptions hi;
  hi.resolution = 2.0;
  compare("planted partition with hubs", g, hi);
}

// Every node's candidates by sort + reduce-by-key (the path of high-degree nodes).
TEST(LeidenGpu, SortPathModularityNearCpu) {
  SCURRY_REQUIRE_GPU();
  const ScopedEnv env("SCURRY_LEIDEN_SORT_ABOVE", "0");
  const CsrF g = golden_graph();
  compare("pbmc3k golden graph, sort path", g, LeidenOptions{});
  LeidenOptions hi;
  hi.resolution = 2.0;
  compare("pbmc3k golden graph, sort path", g, hi);
  std::vector<int32_t> truth;
  compare("planted partition 50000 nodes, sort path", planted(50000, 40, 10, 3, test::fresh_seed(), truth),
          LeidenOptions{});
}

TEST(LeidenGpu, DatasetLevelWritesScanpysSlots) {
  SCURRY_REQUIRE_GPU();
  Dataset d;
  const CsrF g = golden_graph();
  d.obs.index.assign(static_cast<size_t>(g.n_rows), "c");
  d.obsp["connectivities"] = Matrix(g);
  const LeidenResult r = leiden(gpu_ctx(), d, LeidenOptions{});  // dispatches to the GPU
  const auto& col = std::get<CategoricalColumn>(d.obs.at("leiden").c);
  ASSERT_EQ(static_cast<int64_t>(col.categories.size()), r.n_clusters);
  EXPECT_EQ(col.codes, r.labels);
  EXPECT_TRUE(d.uns.count("leiden"));
}

TEST(LeidenGpu, NeedsGpuContextAndValidInput) {
  const CsrF g = CsrF::zeros(5, 5);
  EXPECT_THROW(leiden_gpu(Context::cpu(1), g, LeidenOptions{}), InputError);
  if (!test::have_gpu()) return;
  LeidenOptions o;
  o.resolution = 0;
  EXPECT_THROW(leiden_gpu(gpu_ctx(), g, o), InputError);
  EXPECT_THROW(leiden_gpu(gpu_ctx(), CsrF::zeros(5, 6), LeidenOptions{}), InputError);
  // No edges: every node alone.
  const LeidenResult r = leiden_gpu(gpu_ctx(), g, LeidenOptions{});
  EXPECT_EQ(r.n_clusters, 5);
}

}  // namespace
}  // namespace scurry
