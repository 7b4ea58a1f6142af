// scurry: ForceAtlas2 (see draw_graph.hpp).
#include "tl/draw_graph.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/knn.hpp"
#include "graph/umap.hpp"
#include "nmf/numpy_random.hpp"

namespace scurry {
namespace {

const char* kWhere = "draw_graph";
constexpr int64_t kNodeBlock = 2048;  // nodes a parallel block (fixed: sums do not depend on threads)

// One region of fa2's Barnes-Hut tree: the nodes perm[begin, end); children are regions
// [first_child, first_child + n_children). A region of one node is that node (fa2 keeps no centre
// for it and applies the pair force).
struct Region {
  double mass = 0, cx = 0, cy = 0, size = 0;
  int64_t begin = 0, end = 0;
  int64_t first_child = 0;
  int32_t n_children = 0;
};

// fa2's Region.buildSubRegions, breadth first so that every region's children are consecutive.
void build_tree(const std::vector<double>& y, const std::vector<double>& mass, std::vector<int64_t>& perm,
                std::vector<int64_t>& scratch, std::vector<Region>& regions) {
  const int64_t n = static_cast<int64_t>(mass.size());
  regions.clear();
  perm.resize(static_cast<size_t>(n));
  scratch.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  Region root;
  root.begin = 0;
  root.end = n;
  regions.push_back(root);
  for (size_t r = 0; r < regions.size(); ++r) {
    const int64_t b = regions[r].begin, e = regions[r].end;
    if (e - b < 2) {  // a node: its own position and mass (read without the indirection)
      if (e - b == 1) {
        const int64_t i = perm[b];
        regions[r].mass = mass[i];
        regions[r].cx = y[2 * i];
        regions[r].cy = y[2 * i + 1];
      }
      continue;
    }
    double m = 0, sx = 0, sy = 0;
    for (int64_t p = b; p < e; ++p) {
      const int64_t i = perm[p];
      m += mass[i];
      sx += y[2 * i] * mass[i];
      sy += y[2 * i + 1] * mass[i];
    }
    const double cx = sx / m, cy = sy / m;
    double size = 0;
    for (int64_t p = b; p < e; ++p) {
      const int64_t i = perm[p];
      const double dx = y[2 * i] - cx, dy = y[2 * i + 1] - cy;
      size = std::max(size, 2 * std::sqrt(dx * dx + dy * dy));
    }
    regions[r].mass = m;
    regions[r].cx = cx;
    regions[r].cy = cy;
    regions[r].size = size;
    // Quadrants in fa2's order: top left, bottom left, top right, bottom right (stable).
    auto quadrant = [&](int64_t i) {
      const bool left = y[2 * i] < cx, bottom = y[2 * i + 1] < cy;
      return left ? (bottom ? 1 : 0) : (bottom ? 3 : 2);
    };
    int64_t count[4] = {0, 0, 0, 0};
    for (int64_t p = b; p < e; ++p) ++count[quadrant(perm[p])];
    int64_t start[4];
    start[0] = b;
    for (int q = 1; q < 4; ++q) start[q] = start[q - 1] + count[q - 1];
    int64_t at[4] = {start[0], start[1], start[2], start[3]};
    for (int64_t p = b; p < e; ++p) scratch[at[quadrant(perm[p])]++] = perm[p];
    std::copy(scratch.begin() + b, scratch.begin() + e, perm.begin() + b);
    const int64_t first = static_cast<int64_t>(regions.size());
    int32_t kids = 0;
    for (int q = 0; q < 4; ++q) {
      if (count[q] == 0) continue;
      if (count[q] < e - b) {
        Region c;
        c.begin = start[q];
        c.end = start[q] + count[q];
        regions.push_back(c);
        ++kids;
      } else {  // every node on one side (coincident points): each node its own region, as fa2
        for (int64_t p = start[q]; p < start[q] + count[q]; ++p) {
          Region c;
          c.begin = p;
          c.end = p + 1;
          regions.push_back(c);
          ++kids;
        }
      }
    }
    regions[r].first_child = first;
    regions[r].n_children = kids;
  }
}

struct Totals {
  double swinging = 0, traction = 0;
};

}  // namespace

void validate_draw_graph_options(const DrawGraphOptions& opt) {
  if (opt.layout != "fa") {
    static const char* igraph_layouts[] = {"fr", "drl", "kk", "grid_fr", "lgl", "rt", "rt_circular"};
    for (const char* l : igraph_layouts)
      if (opt.layout == l)
        fail_input(kWhere, "layout '", opt.layout,
                   "' (igraph's) is not implemented; the igraph layouts fr, drl, kk, grid_fr, lgl, rt and rt_circular "
                   "are not available, use layout fa (ForceAtlas2)");
    fail_input(kWhere, "unknown layout '", opt.layout, "'; use fa (ForceAtlas2)");
  }
  if (opt.init_pos == "paga")
    fail_input(kWhere, "init_pos 'paga' (positions from pl.paga) is not implemented; use an obsm key (e.g. X_umap) or "
                       "leave it out for a random start");
  if (opt.iterations < 0) fail_input(kWhere, "iterations = ", opt.iterations, " must be >= 0");
  if (!(opt.theta >= 0) || !std::isfinite(opt.theta)) fail_input(kWhere, "theta = ", opt.theta, " must be >= 0");
  if (!(opt.scaling_ratio > 0) || !std::isfinite(opt.scaling_ratio))
    fail_input(kWhere, "scaling_ratio = ", opt.scaling_ratio, " must be positive");
  if (!(opt.gravity >= 0) || !std::isfinite(opt.gravity)) fail_input(kWhere, "gravity = ", opt.gravity, " must be >= 0");
  if (!(opt.jitter_tolerance > 0) || !std::isfinite(opt.jitter_tolerance))
    fail_input(kWhere, "jitter_tolerance = ", opt.jitter_tolerance, " must be positive");
  if (!std::isfinite(opt.edge_weight_influence))
    fail_input(kWhere, "edge_weight_influence = ", opt.edge_weight_influence, " must be finite");
  if (opt.random_state > 0xffffffffULL)
    fail_input(kWhere, "random_state = ", opt.random_state, " must be below 2^32 (numpy's RandomState seeds)");
  if (opt.n_jobs < 0) fail_input(kWhere, "n_jobs = ", opt.n_jobs, " must be >= 0");
}

void fa2_repulsion(const std::vector<double>& y, const std::vector<double>& mass, double theta, double kr, int threads,
                   std::vector<double>& f) {
  const int64_t n = static_cast<int64_t>(mass.size());
  f.assign(static_cast<size_t>(2 * n), 0.0);
  const int64_t n_blocks = (n + kNodeBlock - 1) / kNodeBlock;
  if (theta <= 0) {  // all pairs, j in index order
    parallel_for(threads, n_blocks, [&](int64_t blk) {
      const int64_t hi = std::min(n, (blk + 1) * kNodeBlock);
      for (int64_t i = blk * kNodeBlock; i < hi; ++i) {
        double fx = 0, fy = 0;
        const double xi = y[2 * i], yi = y[2 * i + 1];
        for (int64_t j = 0; j < n; ++j) {
          const double dx = xi - y[2 * j], dy = yi - y[2 * j + 1];
          const double d2 = dx * dx + dy * dy;
          if (d2 > 0) {
            const double factor = kr * mass[i] * mass[j] / d2;
            fx += dx * factor;
            fy += dy * factor;
          }
        }
        f[2 * i] = fx;
        f[2 * i + 1] = fy;
      }
    });
    return;
  }
  std::vector<int64_t> perm, scratch;
  std::vector<Region> regions;
  build_tree(y, mass, perm, scratch, regions);
  const double theta2 = theta * theta;
  parallel_for(threads, n_blocks, [&](int64_t blk) {
    const int64_t hi = std::min(n, (blk + 1) * kNodeBlock);
    std::vector<int64_t> stack;
    for (int64_t i = blk * kNodeBlock; i < hi; ++i) {
      double fx = 0, fy = 0;
      const double xi = y[2 * i], yi = y[2 * i + 1], mi = mass[i];
      stack.clear();
      stack.push_back(0);
      while (!stack.empty()) {
        const Region& r = regions[stack.back()];
        stack.pop_back();
        const double dx = xi - r.cx, dy = yi - r.cy;
        const double d2 = dx * dx + dy * dy;
        // A node, or a region far enough: one body (distance * theta > size, squared: both >= 0).
        if (r.end - r.begin < 2 || d2 * theta2 > r.size * r.size) {
          if (d2 > 0) {
            const double factor = kr * mi * r.mass / d2;
            fx += dx * factor;
            fy += dy * factor;
          }
        } else {
          for (int32_t c = r.n_children - 1; c >= 0; --c) stack.push_back(r.first_child + c);
        }
      }
      f[2 * i] = fx;
      f[2 * i + 1] = fy;
    }
  });
}

DrawGraphResult force_atlas2(const Context& ctx, const CsrF& graph, const DenseD& init, const DrawGraphOptions& opt) {
  validate_draw_graph_options(opt);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = graph.n_rows;
  if (graph.n_cols != n) fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square");
  if (init.n_rows != n || init.n_cols < 2)
    fail_input(kWhere, "the start positions are ", init.n_rows, " x ", init.n_cols, "; need ", n, " x 2");
  const int threads = opt.n_jobs > 0 ? opt.n_jobs : ctx.threads();
  // Masses and the undirected edges (upper triangle, j > i, weight != 0), both directions listed.
  std::vector<double> mass(static_cast<size_t>(n));
  std::vector<int64_t> deg(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    mass[i] = 1.0 + static_cast<double>(graph.row_nnz(i));
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const int64_t j = graph.indices[p];
      const float w = graph.data[p];
      if (!std::isfinite(w)) fail_input(kWhere, "the graph has a non-finite weight in row ", i);
      if (j > i && w != 0) {
        ++deg[i + 1];
        ++deg[j + 1];
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) deg[i + 1] += deg[i];
  std::vector<int64_t> nbr(static_cast<size_t>(deg[n]));
  std::vector<double> coef(static_cast<size_t>(deg[n]));
  double mean_mass = 0;
  for (double m : mass) mean_mass += m;
  mean_mass = n > 0 ? mean_mass / static_cast<double>(n) : 1.0;
  {
    std::vector<int64_t> at(deg.begin(), deg.end() - 1);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
        const int64_t j = graph.indices[p];
        const double w0 = graph.data[p];
        if (!(j > i && w0 != 0)) continue;
        double w = opt.edge_weight_influence == 0 ? 1.0
                   : opt.edge_weight_influence == 1 ? w0
                                                    : std::pow(w0, opt.edge_weight_influence);
        // fa2: factor = -coefficient * e (/ mass of the edge's first node with outbound distribution)
        double c = opt.outbound_attraction_distribution ? mean_mass * w / mass[i] : w;
        nbr[at[i]] = j;
        coef[at[i]++] = c;
        nbr[at[j]] = i;
        coef[at[j]++] = c;
      }
  }
  std::vector<double> y(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    y[2 * i] = init(i, 0);
    y[2 * i + 1] = init(i, 1);
    if (!std::isfinite(y[2 * i]) || !std::isfinite(y[2 * i + 1]))
      fail_input(kWhere, "the start position of node ", i, " is not finite");
  }
  std::vector<double> force, old(static_cast<size_t>(2 * n), 0.0), rep;
  const int64_t n_blocks = (n + kNodeBlock - 1) / kNodeBlock;
  double speed = 1.0, speed_efficiency = 1.0;
  for (int64_t it = 0; it < opt.iterations && n > 0; ++it) {
    fa2_repulsion(y, mass, opt.barnes_hut ? opt.theta : 0.0, opt.scaling_ratio, threads, force);
    // Gravity and attraction, each node gathering its own terms.
    parallel_for(threads, n_blocks, [&](int64_t blk) {
      const int64_t hi = std::min(n, (blk + 1) * kNodeBlock);
      for (int64_t i = blk * kNodeBlock; i < hi; ++i) {
        const double xi = y[2 * i], yi = y[2 * i + 1];
        double fx = force[2 * i], fy = force[2 * i + 1];
        if (!opt.strong_gravity) {
          const double dist = std::sqrt(xi * xi + yi * yi);
          if (dist > 0) {
            const double factor = mass[i] * opt.gravity / dist;
            fx -= xi * factor;
            fy -= yi * factor;
          }
        } else if (xi != 0 || yi != 0) {
          const double factor = opt.scaling_ratio * mass[i] * opt.gravity;
          fx -= xi * factor;
          fy -= yi * factor;
        }
        double ax = 0, ay = 0;
        for (int64_t p = deg[i]; p < deg[i + 1]; ++p) {
          const int64_t j = nbr[p];
          ax -= (xi - y[2 * j]) * coef[p];
          ay -= (yi - y[2 * j + 1]) * coef[p];
        }
        force[2 * i] = fx + ax;
        force[2 * i + 1] = fy + ay;
      }
    });
    // Gephi's adaptive speed (fa2's adjustSpeedAndApplyForces), sums in block order.
    std::vector<double> acc;
    reduce_blocks(threads, n_blocks, 2, acc, [&](int64_t blk, double* part) {
      const int64_t hi = std::min(n, (blk + 1) * kNodeBlock);
      for (int64_t i = blk * kNodeBlock; i < hi; ++i) {
        const double sx = old[2 * i] - force[2 * i], sy = old[2 * i + 1] - force[2 * i + 1];
        const double tx = old[2 * i] + force[2 * i], ty = old[2 * i + 1] + force[2 * i + 1];
        part[0] += mass[i] * std::sqrt(sx * sx + sy * sy);
        part[1] += 0.5 * mass[i] * std::sqrt(tx * tx + ty * ty);
      }
    });
    const double swinging = acc[0], traction = acc[1];
    const double nd = static_cast<double>(n);
    const double estimated_jt = 0.05 * std::sqrt(nd);
    const double min_jt = std::sqrt(estimated_jt), max_jt = 10;
    double jt = opt.jitter_tolerance * std::max(min_jt, std::min(max_jt, estimated_jt * traction / (nd * nd)));
    constexpr double kMinSpeedEfficiency = 0.05;
    if (traction != 0 && swinging / traction > 2.0) {
      if (speed_efficiency > kMinSpeedEfficiency) speed_efficiency *= 0.5;
      jt = std::max(jt, opt.jitter_tolerance);
    }
    const double target_speed =
        swinging == 0 ? std::numeric_limits<double>::infinity() : jt * speed_efficiency * traction / swinging;
    if (swinging > jt * traction) {
      if (speed_efficiency > kMinSpeedEfficiency) speed_efficiency *= 0.7;
    } else if (speed < 1000) {
      speed_efficiency *= 1.3;
    }
    constexpr double kMaxRise = 0.5;
    speed = speed + std::min(target_speed - speed, kMaxRise * speed);
    parallel_for(threads, n_blocks, [&](int64_t blk) {
      const int64_t hi = std::min(n, (blk + 1) * kNodeBlock);
      for (int64_t i = blk * kNodeBlock; i < hi; ++i) {
        const double sx = old[2 * i] - force[2 * i], sy = old[2 * i + 1] - force[2 * i + 1];
        const double sw = mass[i] * std::sqrt(sx * sx + sy * sy);
        const double factor = speed / (1.0 + std::sqrt(speed * sw));
        y[2 * i] += force[2 * i] * factor;
        y[2 * i + 1] += force[2 * i + 1] * factor;
      }
    });
    std::swap(old, force);
  }
  DrawGraphResult res;
  res.positions = DenseD(n, 2);
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (!std::isfinite(y[i])) fail(kWhere, ": the layout diverged (a non-finite position)");
    res.positions.data[i] = y[i];
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

DrawGraphResult draw_graph(const Context& ctx, Dataset& d, const DrawGraphOptions& opt) {
  validate_draw_graph_options(opt);
  const int64_t n = d.n_obs();
  CsrF g;
  if (!opt.obsp.empty()) {
    auto it = d.obsp.find(opt.obsp);
    if (it == d.obsp.end()) fail_input(kWhere, "obsp['", opt.obsp, "'] is missing");
    g = to_csr_f(it->second);
    if (it->second.is_sparse()) validate_csr(g, std::string(kWhere) + ": obsp['" + opt.obsp + "']");
  } else {
    g = neighbors_graph(d, opt.neighbors_key, kWhere);
  }
  if (g.n_rows != n || g.n_cols != n)
    fail_input(kWhere, "the graph is ", g.n_rows, " x ", g.n_cols, " but the dataset has ", n, " cells");
  DenseD init;
  if (!opt.init_pos.empty()) {
    auto it = d.obsm.find(opt.init_pos);
    if (it == d.obsm.end())
      fail_input(kWhere, "init_pos '", opt.init_pos, "' is not an obsm key (nor 'paga'); leave it out for a random start");
    init = to_dense_d(it->second);
    if (init.n_rows != n || init.n_cols < 2)
      fail_input(kWhere, "obsm['", opt.init_pos, "'] is ", init.n_rows, " x ", init.n_cols, "; need ", n,
                 " rows and at least 2 columns");
    if (init.n_cols > 2) {  // fa2 reads the first two columns
      DenseD two(n, 2);
      for (int64_t i = 0; i < n; ++i) {
        two(i, 0) = init(i, 0);
        two(i, 1) = init(i, 1);
      }
      init = std::move(two);
    }
  } else {
    // scanpy: np.random.seed(random_state); np.random.random((n, 2))
    NumpyRandomState rs(static_cast<uint32_t>(opt.random_state));
    init = DenseD(n, 2);
    for (double& v : init.data) v = rs.random_sample();
  }
  DrawGraphResult res = force_atlas2(ctx, g, init, opt);
  res.key = "X_draw_graph_" + (opt.key_added_ext.empty() ? opt.layout : opt.key_added_ext);
  d.obsm[res.key] = Matrix(res.positions, DType::f64);
  Dict params;
  params["layout"] = Value(opt.layout);
  params["random_state"] = Value(static_cast<int64_t>(opt.random_state));
  Dict u;
  u["params"] = Value(std::move(params));
  d.uns["draw_graph"] = Value(std::move(u));
  log::info(detail::concat("draw_graph: ForceAtlas2 of ", n, " cells, ", opt.iterations, " iterations in ", res.seconds,
                           " s -> obsm['", res.key, "']"));
  return res;
}

double graph_preservation(const Context& ctx, const CsrF& graph, const DenseF& layout, int64_t k) {
  const int64_t n = graph.n_rows;
  if (layout.n_rows != n) fail("graph_preservation: the layout has ", layout.n_rows, " rows for ", n, " nodes");
  if (n < 2) return 1.0;
  const int64_t kk = std::min<int64_t>(k + 1, n);
  const Knn b = knn_exact(ctx, layout, kk, KnnMetric::euclidean);
  double tot = 0;
  int64_t rows = 0;
  std::vector<std::pair<float, int32_t>> nb;
  std::vector<int32_t> sa, sb, common;
  for (int64_t i = 0; i < n; ++i) {
    nb.clear();
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p)
      if (graph.indices[p] != i && graph.data[p] > 0) nb.emplace_back(graph.data[p], graph.indices[p]);
    if (nb.empty()) continue;
    std::sort(nb.begin(), nb.end(), [](const auto& x, const auto& z) {
      return x.first != z.first ? x.first > z.first : x.second < z.second;
    });
    sa.clear();
    for (size_t t = 0; t < nb.size() && static_cast<int64_t>(t) < k; ++t) sa.push_back(nb[t].second);
    sb.clear();
    for (int64_t j = 0; j < kk; ++j)
      if (b.index(i, j) != i && static_cast<int64_t>(sb.size()) < k) sb.push_back(b.index(i, j));
    std::sort(sa.begin(), sa.end());
    std::sort(sb.begin(), sb.end());
    common.clear();
    std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(common));
    tot += static_cast<double>(common.size()) / static_cast<double>(sa.size());
    ++rows;
  }
  return rows > 0 ? tot / static_cast<double>(rows) : 1.0;
}

}  // namespace scurry
