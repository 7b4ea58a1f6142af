// draw_graph (ForceAtlas2): the Barnes-Hut repulsion against the exact all-pairs sums (theta -> 0
// equal, theta 1.2 close), the whole layout against a plain transliteration of fa2's loop written
// here (the oracle: all pairs, each pair once, each edge once, fa2's speed rule), thread-count
// determinism, scanpy's start and slots, the layout's 15-NN preservation of scanpy's pbmc3k graph,
// and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "nmf/numpy_random.hpp"
#include "testlib.hpp"
#include "tl/draw_graph.hpp"

using namespace scurry;

namespace {

// fa2 0.3.5's ForceAtlas2.forceatlas2 with barnesHutOptimize=False, as plainly as it reads
// (fa2util.apply_repulsion: every pair once, both nodes updated; apply_gravity; apply_attraction:
// every upper-triangle edge once; adjustSpeedAndApplyForces).
DenseD fa2_oracle(const CsrF& g, const DenseD& init, int iterations, double kr = 2.0, double gravity = 1.0) {
  const int64_t n = g.n_rows;
  std::vector<double> x(n), y(n), dx(n, 0), dy(n, 0), odx(n), ody(n), m(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = init(i, 0);
    y[i] = init(i, 1);
    m[i] = 1.0 + static_cast<double>(g.row_nnz(i));
  }
  struct E {
    int64_t a, b;
    double w;
  };
  std::vector<E> edges;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p)
      if (g.indices[p] > i && g.data[p] != 0) edges.push_back({i, g.indices[p], g.data[p]});
  double speed = 1, eff = 1;
  for (int it = 0; it < iterations; ++it) {
    for (int64_t i = 0; i < n; ++i) {
      odx[i] = dx[i];
      ody[i] = dy[i];
      dx[i] = dy[i] = 0;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) {
        const double xd = x[i] - x[j], yd = y[i] - y[j], d2 = xd * xd + yd * yd;
        if (d2 > 0) {
          const double f = kr * m[i] * m[j] / d2;
          dx[i] += xd * f;
          dy[i] += yd * f;
          dx[j] -= xd * f;
          dy[j] -= yd * f;
        }
      }
    for (int64_t i = 0; i < n; ++i) {
      const double d = std::sqrt(x[i] * x[i] + y[i] * y[i]);
      if (d > 0) {
        dx[i] -= x[i] * m[i] * gravity / d;
        dy[i] -= y[i] * m[i] * gravity / d;
      }
    }
    for (const E& e : edges) {
      const double xd = x[e.a] - x[e.b], yd = y[e.a] - y[e.b], f = -e.w;
      dx[e.a] += xd * f;
      dy[e.a] += yd * f;
      dx[e.b] -= xd * f;
      dy[e.b] -= yd * f;
    }
    double sw = 0, tr = 0;
    for (int64_t i = 0; i < n; ++i) {
      sw += m[i] * std::hypot(odx[i] - dx[i], ody[i] - dy[i]);
      tr += 0.5 * m[i] * std::hypot(odx[i] + dx[i], ody[i] + dy[i]);
    }
    const double est = 0.05 * std::sqrt(static_cast<double>(n));
    double jt = std::max(std::sqrt(est), std::min(10.0, est * tr / (double(n) * double(n))));
    if (tr != 0 && sw / tr > 2.0) {
      if (eff > 0.05) eff *= 0.5;
      jt = std::max(jt, 1.0);
    }
    const double target = sw == 0 ? INFINITY : jt * eff * tr / sw;
    if (sw > jt * tr) {
      if (eff > 0.05) eff *= 0.7;
    } else if (speed < 1000) {
      eff *= 1.3;
    }
    speed = speed + std::min(target - speed, 0.5 * speed);
    for (int64_t i = 0; i < n; ++i) {
      const double s = m[i] * std::hypot(odx[i] - dx[i], ody[i] - dy[i]);
      const double f = speed / (1.0 + std::sqrt(speed * s));
      x[i] += dx[i] * f;
      y[i] += dy[i] * f;
    }
  }
  DenseD out(n, 2);
  for (int64_t i = 0; i < n; ++i) {
    out(i, 0) = x[i];
    out(i, 1) = y[i];
  }
  return out;
}

DenseD uniform_start(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DenseD p(n, 2);
  for (double& v : p.data) v = u(rng);
  return p;
}

double max_rel_diff(const DenseD& a, const DenseD& b) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    scale = std::max(scale, std::fabs(b.data[i]));
    diff = std::max(diff, std::fabs(a.data[i] - b.data[i]));
  }
  return diff / scale;
}

}  // namespace

TEST(DrawGraph, BarnesHutRepulsionMatchesAllPairs) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  const int64_t n = 3000;
  std::vector<double> y(2 * n), mass(n);
  for (int64_t i = 0; i < n; ++i) {  // clusters, as a layout has them
    y[2 * i] = 100 * std::cos(double(i % 7)) + 15 * nd(rng);
    y[2 * i + 1] = 100 * std::sin(double(i % 7)) + 15 * nd(rng);
    mass[i] = 1 + static_cast<double>(rng() % 30);
  }
  std::vector<double> exact, tiny, bh;
  fa2_repulsion(y, mass, 0.0, 2.0, 2, exact);
  fa2_repulsion(y, mass, 1e-9, 2.0, 2, tiny);  // opens every region: the same pairs, another order
  fa2_repulsion(y, mass, 1.2, 2.0, 2, bh);
  double num = 0, den = 0, num_bh = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    num += (tiny[i] - exact[i]) * (tiny[i] - exact[i]);
    num_bh += (bh[i] - exact[i]) * (bh[i] - exact[i]);
    den += exact[i] * exact[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-12);
  // theta 1.2 (scanpy's): a coarse approximation of the same forces.
  const double rel = std::sqrt(num_bh / den);
  EXPECT_LT(rel, 0.1);
  EXPECT_GT(rel, 0.0);  // it does approximate (a tree that always opened would be exact)
}

TEST(DrawGraph, ExactLayoutMatchesFa2Oracle) {
  const uint64_t seed = test::fresh_seed();
  std::vector<int32_t> truth;
  const CsrF g = test::planted_partition(240, 4, 8, 1, seed, 0, &truth);
  const DenseD start = uniform_start(g.n_rows, seed + 1);
  DrawGraphOptions o;
  o.barnes_hut = false;
  const Context ctx = Context::cpu(2);
  // The dynamics are chaotic (the speed rule branches): sums in another order part by ~10x an
  // iteration after a few, so positions are compared over the first iterations only (~1e-12 after
  // 6 here (1e-7 allowed: some seeds part sooner), ~1e-9 after 10, O(1) after 20), the layouts after
  // 300 by their quality.
  o.iterations = 6;
  const DenseD want = fa2_oracle(g, start, 6);
  EXPECT_LT(max_rel_diff(force_atlas2(ctx, g, start, o).positions, want), 1e-7);
  // Barnes-Hut with theta -> 0 is the same layout (the same pairs, summed in another order).
  DrawGraphOptions t = o;
  t.barnes_hut = true;
  t.theta = 1e-9;
  EXPECT_LT(max_rel_diff(force_atlas2(ctx, g, start, t).positions, want), 1e-7);
  // After 300 iterations: exact and Barnes-Hut (theta 1.2) layouts keep the graph alike.
  o.iterations = t.iterations = 300;
  t.theta = 1.2;
  auto as_f = [](const DenseD& p) {
    DenseF f(p.n_rows, p.n_cols);
    for (size_t i = 0; i < p.data.size(); ++i) f.data[i] = static_cast<float>(p.data[i]);
    return f;
  };
  const double p_exact = graph_preservation(ctx, g, as_f(force_atlas2(ctx, g, start, o).positions), 8);
  const double p_bh = graph_preservation(ctx, g, as_f(force_atlas2(ctx, g, start, t).positions), 8);
  const double p_start = graph_preservation(ctx, g, as_f(start), 8);
  std::printf("8-NN preservation: exact %.4f, barnes-hut %.4f, start %.4f\n", p_exact, p_bh, p_start);
  EXPECT_NEAR(p_bh, p_exact, 0.05);
  EXPECT_GT(p_exact, p_start + 0.1);
}

TEST(DrawGraph, SameBitsForAnyThreadCount) {
  const uint64_t seed = test::fresh_seed();
  const CsrF g = test::planted_partition(5000, 6, 10, 2, seed);
  const DenseD start = uniform_start(g.n_rows, seed);
  DrawGraphOptions o;
  o.iterations = 40;
  const DenseD a = force_atlas2(Context::cpu(1), g, start, o).positions;
  const DenseD b = force_atlas2(Context::cpu(3), g, start, o).positions;
  ASSERT_EQ(a.data.size(), b.data.size());
  for (size_t i = 0; i < a.data.size(); ++i) ASSERT_EQ(a.data[i], b.data[i]) << i;
}

TEST(DrawGraph, PbmcLayoutPreservesTheGraph) {
  Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  const Context ctx = Context::cpu(2);
  const int64_t n = d.n_obs();
  const DrawGraphResult r = draw_graph(ctx, d, DrawGraphOptions{});
  // scanpy's slots.
  ASSERT_TRUE(d.obsm.count("X_draw_graph_fa"));
  EXPECT_EQ(d.obsm.at("X_draw_graph_fa").n_rows(), n);
  EXPECT_EQ(d.obsm.at("X_draw_graph_fa").n_cols(), 2);
  EXPECT_EQ(d.obsm.at("X_draw_graph_fa").dtype, DType::f64);
  const Dict& params = d.uns.at("draw_graph").dict().at("params").dict();
  EXPECT_EQ(std::get<std::string>(params.at("layout").v), "fa");
  const CsrF g = to_csr_f(d.obsp.at("connectivities"));
  DenseF lay(n, 2), start(n, 2), umap = to_dense_f(d.obsm.at("X_umap"));
  NumpyRandomState rs(0);  // scanpy's start: np.random.seed(0); np.random.random((n, 2))
  for (int64_t i = 0; i < 2 * n; ++i) {
    lay.data[i] = static_cast<float>(r.positions.data[i]);
    start.data[i] = static_cast<float>(rs.random_sample());
  }
  const double p_fa = graph_preservation(ctx, g, lay, 15);
  const double p_start = graph_preservation(ctx, g, start, 15);
  const double p_umap = graph_preservation(ctx, g, umap, 15);
  std::printf("15-NN preservation of the graph: fa %.4f, scanpy's umap %.4f, start %.4f\n", p_fa, p_umap, p_start);
  EXPECT_LT(p_start, 0.05);
  EXPECT_GT(p_fa, 0.8 * p_umap);  // on a par with scanpy's UMAP of the same graph
  // From X_umap, as `init_pos='X_umap'`.
  DrawGraphOptions o;
  o.init_pos = "X_umap";
  o.key_added_ext = "fa_umap";
  draw_graph(ctx, d, o);
  ASSERT_TRUE(d.obsm.count("X_draw_graph_fa_umap"));
  const DenseF lay2 = to_dense_f(d.obsm.at("X_draw_graph_fa_umap"));
  EXPECT_GT(graph_preservation(ctx, g, lay2, 15), 0.8 * p_umap);
}

TEST(DrawGraph, BadInput) {
  Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  const Context ctx = Context::cpu(1);
  auto message = [&](DrawGraphOptions o) {
    try {
      draw_graph(ctx, d, o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  DrawGraphOptions o;
  o.layout = "fr";
  EXPECT_NE(message(o).find("not implemented"), std::string::npos) << message(o);
  o.layout = "spring";
  EXPECT_NE(message(o).find("unknown layout"), std::string::npos);
  o = {};
  o.init_pos = "X_nope";
  EXPECT_NE(message(o).find("X_nope"), std::string::npos);
  o.init_pos = "paga";
  EXPECT_NE(message(o).find("paga"), std::string::npos);
  o = {};
  o.neighbors_key = "nbrs";
  EXPECT_NE(message(o).find("nbrs"), std::string::npos) << message(o);
  o = {};
  o.obsp = "nope";
  EXPECT_NE(message(o).find("obsp['nope']"), std::string::npos);
  o = {};
  o.iterations = -1;
  EXPECT_NE(message(o).find("iterations"), std::string::npos);
  EXPECT_FALSE(d.obsm.count("X_draw_graph_fa"));  // nothing written by a failed call
}
