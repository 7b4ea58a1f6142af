// Leiden: modularity against scanpy's golden clustering, reproducibility, a planted partition, and
// the modularity / ARI helpers against simple oracles. scurry's own Leiden against igraph's (the CPU
// path before issue 19, detail::leiden_igraph_loop) on seeded planted partitions and the golden
// graph; every community connected; the same labels for any thread count; n_iterations 0, 1, 2 and
// -1; edgeless graphs, isolated nodes and self-loops; the exact optimum of small graphs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "graph/leiden.hpp"
#include "leiden_checks.hpp"
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

// Number of connected pieces of each community (BFS over the edges inside it); 1 for each when
// every community is connected.
std::vector<int64_t> pieces_per_community(const CsrF& g, const std::vector<int32_t>& lab) {
  const int64_t n = g.n_rows;
  int32_t k = 0;
  for (int32_t l : lab) k = std::max(k, l + 1);
  std::vector<int64_t> pieces(static_cast<size_t>(k), 0);
  std::vector<char> seen(static_cast<size_t>(n), 0);
  std::deque<int64_t> q;
  for (int64_t s = 0; s < n; ++s) {
    if (seen[s]) continue;
    ++pieces[lab[s]];
    seen[s] = 1;
    q.push_back(s);
    while (!q.empty()) {
      const int64_t v = q.front();
      q.pop_front();
      for (int64_t p = g.indptr[v]; p < g.indptr[v + 1]; ++p) {
        const int64_t u = g.indices[p];
        if (g.data[p] != 0 && !seen[u] && lab[u] == lab[s]) {
          seen[u] = 1;
          q.push_back(u);
        }
      }
    }
  }
  return pieces;
}

void expect_connected_communities(const char* what, const CsrF& g, const LeidenResult& r) {
  const std::vector<int64_t> pieces = pieces_per_community(g, r.labels);
  ASSERT_EQ(static_cast<int64_t>(pieces.size()), r.n_clusters) << what;
  int64_t split = 0;
  for (int64_t p : pieces) split += p > 1;
  EXPECT_EQ(split, 0) << what << ": " << split << " of " << r.n_clusters << " communities are not connected";
}

using test::expect_numbered_by_size;

// scurry's Leiden against igraph's until-stable loop over `seeds` random states from
// o.random_state: the best modularity of ours at least igraph's best - 0.003 (a single run varies
// too much to be compared alone: on the golden graph ~8% of either's runs end near 0.620 against a
// median of 0.634); every community of every run connected, labels by size, the reported
// modularity that of the labels. On the golden graph at resolution 2, 84 runs of each (session 27)
// gave means 0.49179 (ours) and 0.49204 (igraph's), maxima 0.49386 and 0.49388; best of 7 fell
// short of igraph's by more than 0.002 in about 1 draw in 1,000 (CI failed so, at 0.0022), best of
// 11 by more than 0.003 in none of 200,000 resampled draws.
void compare_with_igraph(const char* what, const CsrF& g, const LeidenOptions& o, int seeds) {
  double best_ours = -1, best_ig = -1;
  for (int t = 0; t < seeds; ++t) {
    LeidenOptions os = o;
    os.random_state = o.random_state + 101 * static_cast<uint64_t>(t);
    const LeidenResult ours = leiden(Context::cpu(1), g, os);
    const LeidenResult ig = detail::leiden_igraph_loop(g, os);
    std::printf("%s (resolution %.2f, seed %llu): scurry %lld clusters, modularity %.5f; igraph %lld clusters, %.5f; "
                "ARI %.4f\n",
                what, o.resolution, static_cast<unsigned long long>(os.random_state),
                static_cast<long long>(ours.n_clusters), ours.modularity, static_cast<long long>(ig.n_clusters),
                ig.modularity, adjusted_rand_index(ours.labels, ig.labels));
    EXPECT_NEAR(ours.modularity, modularity(g, ours.labels, o.resolution), 1e-12);
    expect_numbered_by_size(ours);
    expect_connected_communities(what, g, ours);
    best_ours = std::max(best_ours, ours.modularity);
    best_ig = std::max(best_ig, ig.modularity);
  }
  std::printf("%s (resolution %.2f): best of %d seeds: scurry %.5f, igraph %.5f\n", what, o.resolution, seeds, best_ours,
              best_ig);
  EXPECT_GE(best_ours, best_ig - 0.003) << what << ", resolution " << o.resolution;
}

TEST(Leiden, ModularityAtLeastIgraphsOnPlantedPartitions) {
  const uint64_t seed = test::fresh_seed();
  struct Case {
    int64_t n, blocks;
    int intra, inter;
    double resolution;
    int seeds;
  };
  const Case cases[] = {{400, 4, 8, 2, 1.0, 5},     {3000, 12, 4, 4, 1.0, 5},   {3000, 12, 4, 4, 2.5, 5},
                        {20000, 40, 6, 5, 1.0, 3}, {20000, 40, 6, 5, 2.0, 2}, {50000, 40, 10, 3, 1.0, 2}};
  int c = 0;
  for (const Case& k : cases) {
    const CsrF g = test::planted_partition(k.n, k.blocks, k.intra, k.inter, seed + c++);
    LeidenOptions o;
    o.resolution = k.resolution;
    o.random_state = (seed + c) % 1000;
    const std::string what = "planted partition " + std::to_string(k.n) + " nodes";
    compare_with_igraph(what.c_str(), g, o, k.seeds);
  }
}

TEST(Leiden, ModularityAtLeastIgraphsOnTheGoldenGraph) {
  const CsrF g = to_csr_f(golden().obsp.at("connectivities"));
  const uint64_t seed = test::fresh_seed();
  for (double res : {0.5, 1.0, 2.0}) {
    LeidenOptions o;
    o.resolution = res;
    o.random_state = seed % 1000;
    compare_with_igraph("pbmc3k golden graph", g, o, 11);
  }
  LeidenOptions unweighted;
  unweighted.use_weights = false;
  CsrF ones = g;
  for (float& w : ones.data) w = 1.0f;
  compare_with_igraph("pbmc3k golden graph, unweighted", ones, unweighted, 7);
  EXPECT_EQ(leiden(Context::cpu(1), g, unweighted).labels, leiden(Context::cpu(1), ones, LeidenOptions{}).labels);
}

TEST(Leiden, SameSeedSameLabelsForAnyThreadCountOtherSeedsNear) {
  const uint64_t seed = test::fresh_seed();
  const CsrF g = test::planted_partition(20000, 40, 6, 5, seed);  // noisy: seeds give other partitions
  LeidenOptions o;
  o.random_state = seed % 1000;
  const LeidenResult one = leiden(Context::cpu(1), g, o), two = leiden(Context::cpu(2), g, o);
  EXPECT_EQ(one.labels, two.labels);
  EXPECT_EQ(one.modularity, two.modularity);
  double lo = one.modularity, hi = one.modularity;
  int64_t other_labels = 0;
  for (uint64_t s = 1; s <= 4; ++s) {
    o.random_state = (seed + s * 7919) % 100000;
    const LeidenResult r = leiden(Context::cpu(2), g, o);
    lo = std::min(lo, r.modularity);
    hi = std::max(hi, r.modularity);
    other_labels += r.labels != one.labels;
    expect_connected_communities("other seed", g, r);
  }
  std::printf("five seeds: modularity %.5f to %.5f, %lld of 4 other seeds with other labels\n", lo, hi,
              static_cast<long long>(other_labels));
  EXPECT_GT(other_labels, 0);  // the seed is used
  EXPECT_LT(hi - lo, 0.005);
  // The golden graph too, through the Dataset entry point.
  Dataset d1, d2;
  d1.obsp["connectivities"] = golden().obsp.at("connectivities");
  d1.obs.index = golden().obs.index;
  d2 = d1;
  EXPECT_EQ(leiden(Context::cpu(1), d1, LeidenOptions{}).labels, leiden(Context::cpu(2), d2, LeidenOptions{}).labels);
  // More threads than this machine's cores, last in this process: clang 14's libomp, under the
  // sanitized build's LeakSanitizer, reports team structures as leaked when a larger team is later
  // shrunk (seen with 5 threads alone, and with 4 under ctest's load).
  o.random_state = seed % 1000;
  EXPECT_EQ(leiden(Context::cpu(4), g, o).labels, one.labels);
}

// n_iterations: 0 leaves every cell alone; k > 0 runs k iterations, each from the partition before
// (so with one seed the modularity never falls with k); negative stops at the first iteration
// after the first that raises the modularity by no more than a relative 1e-12, keeping the
// partition before an iteration that lowered it.
TEST(Leiden, IterationCounts) {
  const CsrF g = to_csr_f(golden().obsp.at("connectivities"));
  const uint64_t seed = test::fresh_seed();
  LeidenOptions o;
  o.random_state = seed % 1000;
  o.n_iterations = 0;
  const LeidenResult zero = leiden(Context::cpu(1), g, o);
  EXPECT_EQ(zero.n_clusters, g.n_rows);
  std::vector<int32_t> iota(static_cast<size_t>(g.n_rows));
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<int32_t>(i);  // sizes tie: by first cell
  EXPECT_EQ(zero.labels, iota);
  std::vector<LeidenResult> by_k;  // by_k[k - 1]: k iterations
  for (int64_t k = 1; k <= 30; ++k) {
    o.n_iterations = k;
    by_k.push_back(leiden(Context::cpu(1), g, o));
    expect_connected_communities("k iterations", g, by_k.back());
    if (k > 1) {
      EXPECT_GE(by_k[k - 1].modularity, by_k[k - 2].modularity - 1e-12) << k;
    }
  }
  EXPECT_GT(by_k[0].modularity, zero.modularity + 0.5);
  // Until stable, predicted from the sequence (the rule applied to modularity(); the run applies it
  // to its own float64 sum, equal to ~1e-15).
  int64_t stop = -1;
  for (int64_t k = 2; k <= 30 && stop < 0; ++k)
    if (!(by_k[k - 1].modularity > by_k[k - 2].modularity + 1e-9)) stop = k;
  ASSERT_GT(stop, 0) << "still rising after 30 iterations";
  o.n_iterations = -1;
  const LeidenResult stable = leiden(Context::cpu(1), g, o);
  std::printf("until stable: %lld iterations predicted, modularity %.6f (1 iteration %.6f, 2: %.6f)\n",
              static_cast<long long>(stop), stable.modularity, by_k[0].modularity, by_k[1].modularity);
  EXPECT_TRUE(stable.labels == by_k[stop - 1].labels || stable.labels == by_k[stop - 2].labels);
  EXPECT_NEAR(stable.modularity, by_k[stop - 1].modularity, 1e-9);
  EXPECT_GE(stable.modularity, by_k[1].modularity - 1e-12);
}

TEST(Leiden, EdgelessGraphsIsolatedNodesAndSelfLoops) {
  // No edges: every node alone, numbered by first cell.
  const LeidenResult none = leiden(Context::cpu(1), CsrF::zeros(5, 5), LeidenOptions{});
  EXPECT_EQ(none.labels, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(none.n_clusters, 5);
  EXPECT_EQ(none.modularity, 0.0);
  // Only self-loops: every node alone (no edge joins two of them).
  std::vector<std::vector<std::pair<int32_t, float>>> loops(4);
  for (int32_t i = 0; i < 4; ++i) loops[i].emplace_back(i, 1.0f + static_cast<float>(i));
  const CsrF only_loops = test::csr_from_rows(loops, 4);
  const LeidenResult l = leiden(Context::cpu(1), only_loops, LeidenOptions{});
  EXPECT_EQ(l.n_clusters, 4);
  EXPECT_NEAR(l.modularity, modularity_oracle(only_loops, l.labels, 1.0), 1e-12);
  // A planted partition with isolated nodes between its nodes: each isolated node alone, the rest
  // as without them.
  const uint64_t seed = test::fresh_seed();
  std::vector<int32_t> truth;
  const CsrF g = test::planted_partition(3000, 6, 10, 1, seed, 0, &truth);
  const int64_t n = g.n_rows, gaps = 50;
  std::vector<std::vector<std::pair<int32_t, float>>> rows(static_cast<size_t>(n + gaps));
  auto at = [&](int64_t i) { return static_cast<int32_t>(i + (i / 60) + 1); };  // node i's row with the gaps
  std::vector<char> isolated(static_cast<size_t>(n + gaps), 1);
  for (int64_t i = 0; i < n; ++i) {
    isolated[at(i)] = 0;
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p) rows[at(i)].emplace_back(at(g.indices[p]), g.data[p]);
  }
  const CsrF gi = test::csr_from_rows(rows, n + gaps);
  LeidenOptions o;
  o.random_state = seed % 1000;
  const LeidenResult r = leiden(Context::cpu(1), gi, o);
  std::vector<int64_t> size(static_cast<size_t>(r.n_clusters), 0);
  for (int32_t c : r.labels) ++size[c];
  int64_t alone = 0;
  for (int64_t i = 0; i < n + gaps; ++i)
    if (isolated[i]) {
      ++alone;
      EXPECT_EQ(size[r.labels[i]], 1) << "isolated node " << i << " shares a community";
    }
  EXPECT_GE(alone, gaps - 1);
  EXPECT_EQ(r.n_clusters, 6 + alone);
  std::vector<int32_t> kept;
  for (int64_t i = 0; i < n; ++i) kept.push_back(r.labels[at(i)]);
  EXPECT_GE(adjusted_rand_index(kept, truth), 0.99);
  expect_connected_communities("planted partition with isolated nodes", gi, r);
  // Self-loops on every node of the planted partition (diagonal entries): the modularity counts
  // them, and the partition still matches igraph's.
  std::vector<std::vector<std::pair<int32_t, float>>> with_loops(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p) with_loops[i].emplace_back(g.indices[p], g.data[p]);
    with_loops[i].emplace_back(static_cast<int32_t>(i), 0.5f + static_cast<float>(i % 7));
  }
  const CsrF gl = test::csr_from_rows(with_loops, n);
  compare_with_igraph("planted partition with self-loops", gl, o, 3);
  const LeidenResult rl = leiden(Context::cpu(1), gl, o);
  EXPECT_NEAR(rl.modularity, modularity_oracle(gl, rl.labels, 1.0), 1e-9);
  EXPECT_GE(adjusted_rand_index(rl.labels, truth), 0.99);
}

// All partitions of a small graph (restricted growth strings): the best modularity.
double best_modularity(const CsrF& g, double resolution) {
  const int64_t n = g.n_rows;
  std::vector<int32_t> lab(static_cast<size_t>(n), 0), mx(static_cast<size_t>(n), 0);
  double best = -1e300;
  for (;;) {
    best = std::max(best, modularity(g, lab, resolution));
    int64_t i = n - 1;
    while (i > 0 && lab[i] > mx[i - 1]) --i;
    if (i == 0) break;
    ++lab[i];
    mx[i] = std::max(mx[i - 1], lab[i]);
    for (int64_t j = i + 1; j < n; ++j) lab[j] = 0, mx[j] = mx[i];
  }
  return best;
}

// Small graphs whose best partition is found by enumeration: two weighted cliques with a bridge;
// the same with a heavy self-loop on one node (it leaves its clique); a ring of triangles.
TEST(Leiden, FindsTheOptimumOfSmallGraphs) {
  auto build = [](int64_t n, const std::vector<std::tuple<int32_t, int32_t, float>>& edges) {
    std::vector<std::vector<std::pair<int32_t, float>>> rows(static_cast<size_t>(n));
    for (const auto& [i, j, w] : edges) {
      rows[i].emplace_back(j, w);
      if (i != j) rows[j].emplace_back(i, w);
    }
    return test::csr_from_rows(rows, n);
  };
  std::vector<std::tuple<int32_t, int32_t, float>> cliques;
  for (int32_t i = 0; i < 4; ++i)
    for (int32_t j = i + 1; j < 4; ++j) {
      cliques.emplace_back(i, j, 1.0f + 0.1f * static_cast<float>(i + j));
      cliques.emplace_back(i + 4, j + 4, 0.8f + 0.05f * static_cast<float>(i * j));
    }
  cliques.emplace_back(3, 4, 0.3f);
  auto loop = cliques;
  loop.emplace_back(0, 0, 30.0f);
  std::vector<std::tuple<int32_t, int32_t, float>> ring;
  for (int32_t t = 0; t < 3; ++t) {
    const int32_t a = 3 * t;
    ring.emplace_back(a, a + 1, 1.0f);
    ring.emplace_back(a + 1, a + 2, 1.0f);
    ring.emplace_back(a, a + 2, 1.0f);
    ring.emplace_back(a + 2, (a + 3) % 9, 0.25f);
  }
  const std::pair<const char*, CsrF> graphs[] = {
      {"two cliques", build(8, cliques)}, {"two cliques, a heavy self-loop", build(8, loop)}, {"ring of triangles", build(9, ring)}};
  for (const auto& [what, g] : graphs)
    for (double res : {0.5, 1.0, 2.0}) {
      const double opt = best_modularity(g, res);
      for (uint64_t seed = 0; seed < 5; ++seed) {
        LeidenOptions o;
        o.resolution = res;
        o.random_state = seed;
        const LeidenResult r = leiden(Context::cpu(1), g, o);
        EXPECT_NEAR(r.modularity, opt, 1e-9) << what << ", resolution " << res << ", seed " << seed;
      }
    }
  // The self-loop's node is alone at resolution 1, the cliques otherwise kept.
  const LeidenResult r = leiden(Context::cpu(1), graphs[1].second, LeidenOptions{});
  EXPECT_EQ(r.n_clusters, 3);
  for (int32_t i = 1; i < 4; ++i) EXPECT_NE(r.labels[i], r.labels[0]);
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
  // A negative or non-finite weight, in either triangle: an InputError naming it, for both flavors.
  for (float bad : {-0.5f, std::nanf("")}) {
    std::vector<std::vector<std::pair<int32_t, float>>> rows = {{{1, 1.0f}}, {{0, 1.0f}, {2, bad}}, {{1, 1.0f}}};
    const CsrF g = test::csr_from_rows(rows, 3);
    for (const char* flavor : {"leidenalg", "igraph"}) {
      LeidenOptions f;
      f.flavor = flavor;
      try {
        leiden(Context::cpu(1), g, f);
        ADD_FAILURE() << flavor << ": weight " << bad << " accepted";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("negative or non-finite weight at row 1"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_THROW(leiden(Context::cpu(1), CsrF::zeros(3, 4), LeidenOptions{}), InputError);  // not square
}

}  // namespace
}  // namespace scurry
