// The threaded connectivities (fuzzy_simplicial_set, smooth_knn_dist, knn_distance_matrix with a
// Context) against the serial reference (the oracle) on seeded graphs with duplicate points, missing
// neighbours and asymmetric neighbourhoods: bit-identical with 1 and 4 threads. Bad input. With
// SCURRY_CONN_TIMING=1, the timing at 1,306,127 cells x 15.
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "graph/connectivities.hpp"
#include "connectivities_graphs.hpp"

namespace scurry {
namespace {

using test_conn::expect_identical;

void expect_same_smooth(const SmoothKnn& a, const SmoothKnn& b) {
  ASSERT_EQ(a.sigma.size(), b.sigma.size());
  ASSERT_EQ(a.rho.size(), b.rho.size());
  EXPECT_EQ(std::memcmp(a.sigma.data(), b.sigma.data(), a.sigma.size() * sizeof(float)), 0) << "sigma";
  EXPECT_EQ(std::memcmp(a.rho.data(), b.rho.data(), a.rho.size() * sizeof(float)), 0) << "rho";
}

// Every threaded entry point against the reference, with 1 and 4 threads and without a Context.
void check_against_reference(const Knn& knn, const ConnectivitiesOptions& opt) {
  const SmoothKnn s_ref = smooth_knn_dist_reference(knn, opt);
  const CsrF ref = fuzzy_simplicial_set_reference(knn, opt);
  test_conn::expect_symmetric_graph(ref);
  for (int threads : {1, 4}) {
    const Context ctx = Context::cpu(threads);
    expect_same_smooth(smooth_knn_dist(ctx, knn, opt), s_ref);
    expect_identical(fuzzy_simplicial_set(ctx, knn, opt), ref, threads == 1 ? "1 thread" : "4 threads");
  }
  expect_same_smooth(smooth_knn_dist(knn, opt), s_ref);
  expect_identical(fuzzy_simplicial_set(knn, opt), ref, "no context");
}

TEST(Connectivities, ThreadedEqualsReferenceOnClusteredGraph) {
  const uint64_t seed = test::fresh_seed();
  const Knn knn = test_conn::clustered_knn(Context::cpu(2), 20000, 10, 15, seed);
  // The graph has what it is meant to have: rows with rho = 0 and missing neighbours.
  const SmoothKnn s = smooth_knn_dist_reference(knn, {});
  const int64_t rho0 = std::count(s.rho.begin(), s.rho.end(), 0.0f);
  const int64_t missing = std::count(knn.indices.begin(), knn.indices.end(), -1);
  std::printf("clustered graph: %lld rows with rho = 0, %lld missing neighbours\n", static_cast<long long>(rho0),
              static_cast<long long>(missing));
  EXPECT_GE(rho0, 15);
  EXPECT_GT(missing, 0);
  check_against_reference(knn, {});
}

TEST(Connectivities, ThreadedEqualsReferenceOnRandomGraphsAndOptions) {
  const uint64_t seed = test::fresh_seed();
  const Knn knn = test_conn::random_knn(30000, 12, seed, false);
  check_against_reference(knn, {});
  ConnectivitiesOptions o1;
  o1.local_connectivity = 1.5;  // interpolated rho
  o1.bandwidth = 1.3;
  o1.set_op_mix_ratio = 0.5;
  check_against_reference(knn, o1);
  ConnectivitiesOptions o2;
  o2.local_connectivity = 0.5;  // rho a fraction of the nearest distance
  o2.set_op_mix_ratio = 0.0;    // intersection: zeros dropped
  check_against_reference(knn, o2);
  ConnectivitiesOptions o3;
  o3.local_connectivity = 20;  // more than the neighbours: rho = the largest distance
  o3.n_iter = 5;
  check_against_reference(knn, o3);
}

TEST(Connectivities, NeighbourListedTwiceContributesTheSum) {
  const uint64_t seed = test::fresh_seed();
  const Knn knn = test_conn::random_knn(20000, 10, seed, true);
  int64_t repeats = 0;
  for (int64_t i = 0; i < knn.n; ++i)
    for (int64_t j = 1; j < knn.k; ++j)
      for (int64_t q = 1; q < j; ++q) repeats += knn.index(i, j) >= 0 && knn.index(i, j) == knn.index(i, q);
  EXPECT_GT(repeats, 0);
  check_against_reference(knn, {});
  // By hand: cell 0 lists cell 1 twice (distances 1 and 2), cell 1 lists nobody else; rho_0 = 1, so
  // A_01 = exp(0) + exp(-(2 - 1) / sigma_0) and the union is A_01 (A_10 = 0).
  Knn t;
  t.n = 3;
  t.k = 3;
  t.indices = {0, 1, 1, 1, -1, -1, 2, 0, -1};
  const float inf = std::numeric_limits<float>::infinity();
  t.distances = {0, 1, 2, 0, inf, inf, 0, 3, inf};
  const SmoothKnn s = smooth_knn_dist(t);
  const CsrF g = fuzzy_simplicial_set(Context::cpu(2), t);
  expect_identical(g, fuzzy_simplicial_set_reference(t), "by hand");
  ASSERT_EQ(g.indptr, (std::vector<int64_t>{0, 2, 3, 4}));
  ASSERT_EQ(g.indices, (std::vector<int32_t>{1, 2, 0, 0}));
  const float a01 = 1.0f + std::exp(-((2.0f - s.rho[0]) / s.sigma[0]));
  EXPECT_EQ(s.rho[0], 1.0f);
  EXPECT_EQ(g.data[0], a01);
  EXPECT_EQ(g.data[2], a01);
}

TEST(Connectivities, DistanceMatrixThreadedEqualsSerial) {
  const uint64_t seed = test::fresh_seed();
  const Knn knn = test_conn::clustered_knn(Context::cpu(2), 3000, 8, 15, seed);
  const CsrF one = knn_distance_matrix(knn);
  expect_identical(knn_distance_matrix(Context::cpu(4), knn), one, "distances");
  // Row i: its neighbours other than itself with a non-zero distance, by column.
  for (int64_t i = 0; i < knn.n; ++i) {
    std::vector<std::pair<int32_t, float>> want;
    for (int64_t j = 0; j < knn.k; ++j)
      if (knn.index(i, j) >= 0 && knn.index(i, j) != i && knn.distance(i, j) != 0.0f)
        want.emplace_back(knn.index(i, j), knn.distance(i, j));
    std::sort(want.begin(), want.end());
    ASSERT_EQ(one.row_nnz(i), static_cast<int64_t>(want.size())) << "row " << i;
    for (size_t q = 0; q < want.size(); ++q) {
      EXPECT_EQ(one.indices[one.indptr[i] + q], want[q].first);
      EXPECT_EQ(one.data[one.indptr[i] + q], want[q].second);
    }
  }
}

TEST(Connectivities, SmallAndDegenerateGraphs) {
  // Only the cell itself (k = 1); no cells; every neighbour missing.
  for (int64_t n : {0, 1, 5}) {
    Knn t;
    t.n = n;
    t.k = 1;
    for (int64_t i = 0; i < n; ++i) t.indices.push_back(static_cast<int32_t>(i)), t.distances.push_back(0.0f);
    const CsrF g = fuzzy_simplicial_set(Context::cpu(4), t);
    EXPECT_EQ(g.n_rows, n);
    EXPECT_EQ(g.nnz(), 0);
    expect_identical(g, fuzzy_simplicial_set_reference(t), "k = 1");
  }
  Knn t = test_conn::random_knn(50, 6, 7, false);
  for (int64_t i = 0; i < t.n; ++i)
    for (int64_t j = 1; j < t.k; ++j) t.indices[i * 6 + j] = -1, t.distances[i * 6 + j] = std::numeric_limits<float>::infinity();
  const CsrF g = fuzzy_simplicial_set(Context::cpu(4), t);
  EXPECT_EQ(g.nnz(), 0);
  expect_identical(g, fuzzy_simplicial_set_reference(t), "all missing");
}

TEST(Connectivities, BadInputIsAnInputError) {
  Knn t = test_conn::random_knn(20, 4, 3, false);
  t.indices[7] = 20;
  EXPECT_THROW(fuzzy_simplicial_set(Context::cpu(2), t), InputError);
  EXPECT_THROW(knn_distance_matrix(t), InputError);
  t.indices[7] = -2;
  EXPECT_THROW(fuzzy_simplicial_set(t), InputError);
  t.indices[7] = 1;
  t.distances.pop_back();
  EXPECT_THROW(smooth_knn_dist(Context::cpu(2), t), InputError);
  try {
    t.distances.push_back(1.0f);
    t.indices[9] = 99;
    fuzzy_simplicial_set(t);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("neighbour 1 of cell 2 has index 99"), std::string::npos) << e.what();
  }
}

// Timing, on request (SCURRY_CONN_TIMING=1): the reference and the threaded version at 1.3M x 15.
TEST(Connectivities, TimingAt1_3M) {
  const char* env = std::getenv("SCURRY_CONN_TIMING");
  if (!env) GTEST_SKIP() << "set SCURRY_CONN_TIMING=1 to time 1,306,127 x 15 (or =N for N cells)";
  const int64_t n = std::atoll(env) > 1 ? std::atoll(env) : 1306127;
  const Knn knn = test_conn::random_knn(n, 15, 1, false);
  const Context ctx = Context::cpu(0);
  CsrF ref, one, all;
  const double t_ref = test_conn::median_seconds(1, [&] { ref = fuzzy_simplicial_set_reference(knn); });
  const double t_one = test_conn::median_seconds(3, [&] { one = fuzzy_simplicial_set(Context::cpu(1), knn); });
  const double t_all = test_conn::median_seconds(3, [&] { all = fuzzy_simplicial_set(ctx, knn); });
  std::printf("fuzzy_simplicial_set at %lld x 15 (nnz %lld): reference %.3f s, threaded 1 thread %.3f s, "
              "%d threads %.3f s (median of 3)\n",
              static_cast<long long>(n), static_cast<long long>(ref.nnz()), t_ref, t_one, ctx.threads(), t_all);
  expect_identical(one, ref, "1 thread");
  expect_identical(all, ref, "all threads");
  // The sigma/rho search alone (the float64 exp: ~30 iterations x 14 per row).
  SmoothKnn s;
  const double s_ref = test_conn::median_seconds(1, [&] { s = smooth_knn_dist_reference(knn); });
  const double s_one = test_conn::median_seconds(3, [&] { s = smooth_knn_dist(Context::cpu(1), knn); });
  const double s_all = test_conn::median_seconds(3, [&] { s = smooth_knn_dist(ctx, knn); });
  std::printf("smooth_knn_dist alone: reference %.3f s, threaded 1 thread %.3f s, %d threads %.3f s\n", s_ref, s_one,
              ctx.threads(), s_all);
}

}  // namespace
}  // namespace scurry
