// Leiden over several GPUs (label gpu): leiden_gpus over 2 and 3 contexts (2 devices when there are,
// else every context on device 0; 3 contexts put two on one device) gives the labels and the
// modularity of leiden_gpu on one context, bit for bit: seeded planted-partition graphs of 50,000
// nodes (resolutions 1 and 2, unweighted, two iterations), one with hubs (the sort path and the
// block kernels at level 0, on the first GPU), and one with most nodes on the sort path; errors
// from the ranks reach the caller.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/leiden.hpp"
#include "graph/leiden_gpu.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

CsrF planted(int64_t n, int64_t blocks, int intra, int inter, uint64_t seed, int hubs = 0) {
  return test::planted_partition(n, blocks, intra, inter, seed, hubs);
}

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

std::vector<Context> three_contexts() { return test::three_gpu_contexts(); }

// leiden_gpus over the first 2 and 3 contexts equals leiden_gpu on the first: with every level's
// degree classes split over the GPUs (SCURRY_LEIDEN_SPREAD_BELOW=0), and with levels below 100,000
// nodes not split (the default; these graphs are smaller: only the sort path's results exchanged).
void expect_equal_to_one_gpu(const char* what, std::vector<Context>& ctxs, const CsrF& g, const LeidenOptions& o) {
  const LeidenResult one = leiden_gpu(ctxs[0], g, o);
  ASSERT_EQ(static_cast<int64_t>(one.labels.size()), g.n_rows);
  for (int mode = 0; mode < 4; ++mode) {
    const int parts = mode % 2 == 0 ? 2 : 3;
    const bool spread = mode < 2;
    const ScopedEnv env("SCURRY_LEIDEN_SPREAD_BELOW", spread ? "0" : "100000");
    std::vector<Context*> ptrs;
    for (int s = 0; s < parts; ++s) ptrs.push_back(&ctxs[s]);
    const LeidenResult many = leiden_gpus(ptrs, g, o);
    int64_t differ = 0;
    ASSERT_EQ(many.labels.size(), one.labels.size()) << what << ", " << parts << " contexts, split " << spread;
    for (size_t i = 0; i < one.labels.size(); ++i) differ += many.labels[i] != one.labels[i];
    EXPECT_EQ(differ, 0) << what << ", " << parts << " contexts, split " << spread << ": labels unlike one GPU's";
    EXPECT_EQ(many.n_clusters, one.n_clusters) << what << ", " << parts << " contexts, split " << spread;
    EXPECT_EQ(many.modularity, one.modularity) << what << ", " << parts << " contexts, split " << spread;
    std::printf("%s (resolution %.2f): %d contexts on %d devices%s: %lld clusters, modularity %.6f, %lld labels differ\n",
                what, o.resolution, parts, std::min(cuda_device_count(), parts), spread ? ", classes split" : "",
                static_cast<long long>(many.n_clusters), many.modularity, static_cast<long long>(differ));
  }
}

TEST(LeidenGpus, PlantedPartitionEqualsOneGpu) {
  SCURRY_REQUIRE_GPU();
  std::vector<Context> ctxs = three_contexts();
  const CsrF g = planted(50000, 40, 10, 3, test::fresh_seed());
  expect_equal_to_one_gpu("planted partition 50000 nodes", ctxs, g, LeidenOptions{});
  LeidenOptions hi;
  hi.resolution = 2.0;
  expect_equal_to_one_gpu("planted partition 50000 nodes", ctxs, g, hi);
  LeidenOptions two;
  two.n_iterations = 2;
  two.use_weights = false;
  expect_equal_to_one_gpu("planted partition 50000 nodes, unweighted, 2 iterations", ctxs, g, two);
}

TEST(LeidenGpus, HubsEqualOneGpu) {
  SCURRY_REQUIRE_GPU();
  std::vector<Context> ctxs = three_contexts();
  const CsrF g = planted(40000, 20, 10, 3, test::fresh_seed(), 3);
  int64_t max_degree = 0;
  for (int64_t i = 0; i < g.n_rows; ++i) max_degree = std::max(max_degree, g.row_nnz(i));
  ASSERT_GT(max_degree, 1024);  // rows for the block kernel
  expect_equal_to_one_gpu("planted partition with hubs", ctxs, g, LeidenOptions{});
}

// Nodes of degree > 16 take the sort path (on the first GPU), the others are split.
TEST(LeidenGpus, SortPathEqualsOneGpu) {
  SCURRY_REQUIRE_GPU();
  const ScopedEnv env("SCURRY_LEIDEN_SORT_ABOVE", "16");
  std::vector<Context> ctxs = three_contexts();
  const CsrF g = planted(30000, 30, 10, 3, test::fresh_seed());
  expect_equal_to_one_gpu("planted partition 30000 nodes, sort path above degree 16", ctxs, g, LeidenOptions{});
}

TEST(LeidenGpus, NeedsGpuContextsAndPassesErrorsOn) {
  const CsrF g = CsrF::zeros(5, 5);
  Context cpu = Context::cpu(1);
  EXPECT_THROW(leiden_gpus({}, g, LeidenOptions{}), InputError);
  EXPECT_THROW(leiden_gpus({&cpu, &cpu}, g, LeidenOptions{}), InputError);
  if (!test::have_gpu()) return;
  std::vector<Context> ctxs = three_contexts();
  std::vector<Context*> two{&ctxs[0], &ctxs[1]};
  EXPECT_THROW(leiden_gpus(two, CsrF::zeros(5, 6), LeidenOptions{}), InputError);
  CsrF bad = planted(2000, 4, 10, 3, 7);
  bad.data[bad.nnz() / 2] = -1.0f;
  EXPECT_THROW(leiden_gpus(two, bad, LeidenOptions{}), InputError);
  const LeidenResult r = leiden_gpus(two, g, LeidenOptions{});  // no edges: every node alone
  EXPECT_EQ(r.n_clusters, 5);
}

}  // namespace
}  // namespace scurry
