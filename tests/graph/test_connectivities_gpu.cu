// GPU connectivities (label gpu) against the CPU path (the oracle, itself bit-identical to the serial
// reference): seeded clustered and random kNN graphs with duplicate points, missing neighbours,
// neighbours listed twice and non-default options: same structure, values within 1e-6 relative (the
// count of values that differ in any bit is printed). Bad input, the CPU-context error, and the
// timing of both at 1,306,127 cells x 15.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "connectivities_graphs.hpp"
#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/connectivities.hpp"
#include "graph/connectivities_gpu.hpp"

namespace scurry {
namespace {

Context gpu_ctx() {
  ContextOptions o;
  o.device = "gpu";
  return Context::create(o);
}

// GPU result against the CPU result: identical structure, max relative difference <= tol.
void expect_close(const CsrF& gpu, const CsrF& cpu, const char* what, double tol = 1e-6) {
  ASSERT_EQ(gpu.n_rows, cpu.n_rows) << what;
  ASSERT_EQ(gpu.n_cols, cpu.n_cols) << what;
  ASSERT_EQ(gpu.indptr, cpu.indptr) << what;
  ASSERT_EQ(gpu.indices, cpu.indices) << what;
  double max_rel = 0;
  int64_t differ = 0;
  for (size_t p = 0; p < cpu.data.size(); ++p) {
    differ += std::memcmp(&gpu.data[p], &cpu.data[p], sizeof(float)) != 0;
    max_rel = std::max(max_rel, std::fabs(double(gpu.data[p]) - cpu.data[p]) / std::fabs(double(cpu.data[p])));
  }
  std::printf("%s: nnz %lld, %lld values differ in some bit, max relative difference %.3g\n", what,
              static_cast<long long>(cpu.nnz()), static_cast<long long>(differ), max_rel);
  EXPECT_LE(max_rel, tol) << what;
}

TEST(ConnectivitiesGpu, ClusteredGraphMatchesCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = gpu_ctx();
  const Context cpu = Context::cpu(0);
  const uint64_t seed = test::fresh_seed();
  const Knn knn = test_conn::clustered_knn(cpu, 20000, 20, 15, seed);
  const CsrF want = fuzzy_simplicial_set(cpu, knn);
  const CsrF got = fuzzy_simplicial_set_gpu(gpu, knn);
  expect_close(got, want, "clustered 20000 x 15");
  test_conn::expect_symmetric_graph(got);
  ConnectivitiesOptions o;
  o.local_connectivity = 1.5;
  o.bandwidth = 1.3;
  o.set_op_mix_ratio = 0.5;
  expect_close(fuzzy_simplicial_set_gpu(gpu, knn, o), fuzzy_simplicial_set(cpu, knn, o), "clustered, options");
}

TEST(ConnectivitiesGpu, RandomGraphsMatchCpu) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = gpu_ctx();
  const Context cpu = Context::cpu(0);
  const uint64_t seed = test::fresh_seed();
  for (bool repeats : {false, true}) {
    const Knn knn = test_conn::random_knn(30000, 12, seed + repeats, repeats);
    expect_close(fuzzy_simplicial_set_gpu(gpu, knn), fuzzy_simplicial_set(cpu, knn),
                 repeats ? "random, neighbours listed twice" : "random");
    ConnectivitiesOptions o;
    o.local_connectivity = 0.5;
    o.set_op_mix_ratio = 0.0;
    expect_close(fuzzy_simplicial_set_gpu(gpu, knn, o), fuzzy_simplicial_set(cpu, knn, o), "random, intersection");
    o.local_connectivity = 20;
    o.n_iter = 5;
    o.set_op_mix_ratio = 1.0;
    expect_close(fuzzy_simplicial_set_gpu(gpu, knn, o), fuzzy_simplicial_set(cpu, knn, o), "random, rho = max");
  }
}

TEST(ConnectivitiesGpu, DegenerateGraphs) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = gpu_ctx();
  for (int64_t n : {0, 1, 5}) {
    Knn t;
    t.n = n;
    t.k = 1;
    for (int64_t i = 0; i < n; ++i) t.indices.push_back(static_cast<int32_t>(i)), t.distances.push_back(0.0f);
    const CsrF g = fuzzy_simplicial_set_gpu(gpu, t);
    EXPECT_EQ(g.n_rows, n);
    EXPECT_EQ(g.nnz(), 0);
    EXPECT_EQ(g.indptr, std::vector<int64_t>(static_cast<size_t>(n) + 1, 0));
  }
  Knn t = test_conn::random_knn(50, 6, 7, false);
  for (int64_t i = 0; i < t.n; ++i)
    for (int64_t j = 1; j < t.k; ++j) t.indices[i * 6 + j] = -1, t.distances[i * 6 + j] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fuzzy_simplicial_set_gpu(gpu, t).nnz(), 0);
  // By hand (as in the CPU test): cell 0 lists cell 1 twice.
  Knn h;
  h.n = 3;
  h.k = 3;
  h.indices = {0, 1, 1, 1, -1, -1, 2, 0, -1};
  const float inf = std::numeric_limits<float>::infinity();
  h.distances = {0, 1, 2, 0, inf, inf, 0, 3, inf};
  expect_close(fuzzy_simplicial_set_gpu(gpu, h), fuzzy_simplicial_set(h), "by hand");
}

TEST(ConnectivitiesGpu, BadInputAndCpuContext) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = gpu_ctx();
  Knn t = test_conn::random_knn(20, 4, 3, false);
  EXPECT_THROW(fuzzy_simplicial_set_gpu(Context::cpu(1), t), InputError);
  t.indices[9] = 99;
  try {
    fuzzy_simplicial_set_gpu(gpu, t);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("neighbour 1 of cell 2 has index 99"), std::string::npos) << e.what();
  }
  t.indices[9] = 1;
  t.distances.pop_back();
  EXPECT_THROW(fuzzy_simplicial_set_gpu(gpu, t), InputError);
}

// 1,306,127 cells x 15 (the 1.3M benchmark's size), random neighbours: GPU (host kNN in, host CSR
// out) and threaded CPU, median of 3 after a warm-up; the results compared.
TEST(ConnectivitiesGpu, TimingAt1_3M) {
  SCURRY_REQUIRE_GPU();
  const Context gpu = gpu_ctx();
  const Context cpu = Context::cpu(0);
  const Knn knn = test_conn::random_knn(1306127, 15, 1, false);
  CsrF g, c;
  g = fuzzy_simplicial_set_gpu(gpu, knn);  // warm-up (pool, staging buffers)
  const double t_gpu = test_conn::median_seconds(3, [&] { g = fuzzy_simplicial_set_gpu(gpu, knn); });
  const double t_cpu = test_conn::median_seconds(3, [&] { c = fuzzy_simplicial_set(cpu, knn); });
  std::printf("fuzzy_simplicial_set at 1,306,127 x 15: GPU %.4f s, CPU %d threads %.4f s (median of 3)\n", t_gpu,
              cpu.threads(), t_cpu);
  expect_close(g, c, "1.3M x 15");
}

}  // namespace
}  // namespace scurry
