#include "graph/leiden.hpp"

#include "graph/leiden_gpu.hpp"

#include <igraph/igraph.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "core/error.hpp"
#include "core/log.hpp"
#include "graph/umap.hpp"

namespace scurry {
namespace {

const char* kWhere = "leiden";
constexpr int64_t kMaxIterations = 10000;     // "until stable": most iterations
constexpr double kQualityTolerance = 1e-12;   // "until stable": relative gain that counts

// igraph status codes become scurry::Error here, and only here.
void check_igraph(igraph_error_t rc, const char* call) {
  if (rc != IGRAPH_SUCCESS) fail("leiden: igraph ", call, " failed: ", igraph_strerror(rc));
}

// While alive, igraph reports errors by return code instead of aborting the process (its default).
struct ErrorsAsCodes {
  igraph_error_handler_t* old;
  ErrorsAsCodes() : old(igraph_set_error_handler(igraph_error_handler_ignore)) {}
  ~ErrorsAsCodes() { igraph_set_error_handler(old); }
};

// RAII for igraph objects.
struct Graph {
  igraph_t g;
  bool alive = false;
  ~Graph() {
    if (alive) igraph_destroy(&g);
  }
};
struct Vec {
  igraph_vector_t v;
  explicit Vec(igraph_integer_t n) { check_igraph(igraph_vector_init(&v, n), "igraph_vector_init"); }
  ~Vec() { igraph_vector_destroy(&v); }
};
struct IntVec {
  igraph_vector_int_t v;
  explicit IntVec(igraph_integer_t n) { check_igraph(igraph_vector_int_init(&v, n), "igraph_vector_int_init"); }
  ~IntVec() { igraph_vector_int_destroy(&v); }
};

int64_t count_labels(const std::vector<int32_t>& labels) {
  int32_t mx = -1;
  for (int32_t l : labels) {
    if (l < 0) fail("leiden: negative label ", l);
    mx = std::max(mx, l);
  }
  return static_cast<int64_t>(mx) + 1;
}

}  // namespace

void validate_leiden_options(const LeidenOptions& opt) {
  if (!(opt.resolution > 0)) fail_input(kWhere, "resolution = ", opt.resolution, " must be positive");
  if (!(opt.beta > 0)) fail_input(kWhere, "beta = ", opt.beta, " must be positive");
}

LeidenResult leiden(const Context&, const CsrF& graph, const LeidenOptions& opt) {
  const int64_t n = graph.n_rows;
  if (graph.n_cols != n) fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square");
  validate_leiden_options(opt);
  LeidenResult res;
  if (n == 0) return res;
  // Edges: upper triangle (i <= j), each undirected edge once.
  std::vector<igraph_integer_t> ends;
  std::vector<double> weights;
  double two_m = 0;
  std::vector<double> strength(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const int64_t j = graph.indices[p];
      const double w = opt.use_weights ? static_cast<double>(graph.data[p]) : 1.0;
      if (!std::isfinite(w) || w < 0) fail_input(kWhere, "the graph has a negative or non-finite weight at row ", i);
      if (w == 0) continue;
      strength[i] += w;
      two_m += w;
      if (j >= i) {
        ends.push_back(i);
        ends.push_back(j);
        weights.push_back(w);
      }
    }
  res.labels.assign(static_cast<size_t>(n), 0);
  if (two_m > 0) {
    ErrorsAsCodes errors_as_codes;
    igraph_vector_int_t edge_view;
    igraph_vector_int_view(&edge_view, ends.data(), static_cast<igraph_integer_t>(ends.size()));
    Graph g;
    check_igraph(igraph_create(&g.g, &edge_view, static_cast<igraph_integer_t>(n), IGRAPH_UNDIRECTED), "igraph_create");
    g.alive = true;
    igraph_vector_t wview, sview;
    igraph_vector_view(&wview, weights.data(), static_cast<igraph_integer_t>(weights.size()));
    igraph_vector_view(&sview, strength.data(), static_cast<igraph_integer_t>(n));
    IntVec membership(n);
    igraph_integer_t nb = 0;
    igraph_real_t quality = 0;
    check_igraph(igraph_rng_seed(igraph_rng_default(), static_cast<igraph_uint_t>(opt.random_state)), "igraph_rng_seed");
    const double gamma = opt.resolution / two_m;
    if (opt.n_iterations >= 0) {
      check_igraph(igraph_community_leiden(&g.g, &wview, &sview, gamma, opt.beta, false,
                                           static_cast<igraph_integer_t>(opt.n_iterations), &membership.v, &nb, &quality),
                   "igraph_community_leiden");
    } else {
      // Until stable, as leidenalg: one iteration at a time (each starting from the previous
      // partition) until an iteration no longer raises the quality. igraph 0.10's own negative
      // n_iterations stops after the first iteration whatever it gained (on pbmc3k: modularity
      // 0.620 after one iteration, 0.632 when iterated to the end).
      double prev = -std::numeric_limits<double>::infinity();
      std::vector<igraph_integer_t> best(static_cast<size_t>(n));
      for (int64_t it = 0; it < kMaxIterations; ++it) {
        check_igraph(igraph_community_leiden(&g.g, &wview, &sview, gamma, opt.beta, it > 0, 1, &membership.v, &nb,
                                             &quality),
                     "igraph_community_leiden");
        if (quality < prev) {  // an iteration that lost quality: keep the partition before it
          for (int64_t i = 0; i < n; ++i) VECTOR(membership.v)[i] = best[i];
          break;
        }
        if (it > 0 && !(quality > prev + kQualityTolerance * std::fabs(prev))) break;
        prev = quality;
        for (int64_t i = 0; i < n; ++i) best[i] = VECTOR(membership.v)[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) res.labels[i] = static_cast<int32_t>(VECTOR(membership.v)[i]);
  } else {
    std::iota(res.labels.begin(), res.labels.end(), 0);  // no edges: every cell alone
  }
  // Renumber by decreasing size, ties by first cell.
  const int64_t k = count_labels(res.labels);
  std::vector<int64_t> size(static_cast<size_t>(k), 0), first(static_cast<size_t>(k), n);
  for (int64_t i = 0; i < n; ++i) {
    ++size[res.labels[i]];
    first[res.labels[i]] = std::min(first[res.labels[i]], i);
  }
  std::vector<int32_t> order;
  for (int32_t c = 0; c < k; ++c)
    if (size[c] > 0) order.push_back(c);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return size[x] != size[y] ? size[x] > size[y] : first[x] < first[y];
  });
  std::vector<int32_t> newid(static_cast<size_t>(k), -1);
  for (size_t r = 0; r < order.size(); ++r) newid[order[r]] = static_cast<int32_t>(r);
  for (int32_t& l : res.labels) l = newid[l];
  res.n_clusters = static_cast<int64_t>(order.size());
  res.modularity = modularity(graph, res.labels, opt.resolution);
  return res;
}

LeidenResult leiden(const Context& ctx, Dataset& d, const LeidenOptions& opt) {
  const CsrF g = neighbors_graph(d, opt.neighbors_key, kWhere);
  const bool gpu = ctx.backend() == Backend::cuda;  // our own GPU kernels; igraph on the CPU
  LeidenResult res = gpu ? leiden_gpu(ctx, g, opt) : leiden(ctx, g, opt);
  write_leiden(d, res, opt);
  log::info(detail::concat(gpu ? "leiden (gpu): " : "leiden: ", res.n_clusters, " clusters of ", g.n_rows, " cells (resolution ",
                           opt.resolution, ", modularity ", res.modularity, ")"));
  return res;
}

void write_leiden(Dataset& d, const LeidenResult& res, const LeidenOptions& opt) {
  CategoricalColumn col;
  for (int64_t c = 0; c < res.n_clusters; ++c) col.categories.push_back(std::to_string(c));
  col.codes = res.labels;
  d.obs.set(opt.key_added, Column(std::move(col)));
  Dict params;
  params["resolution"] = Value(opt.resolution);
  params["random_state"] = Value(static_cast<int64_t>(opt.random_state));
  params["n_iterations"] = Value(opt.n_iterations);
  Dict u;
  u["params"] = Value(std::move(params));
  d.uns[opt.key_added] = Value(std::move(u));
}

double modularity(const CsrF& graph, const std::vector<int32_t>& labels, double resolution) {
  const int64_t n = graph.n_rows;
  if (static_cast<int64_t>(labels.size()) != n)
    fail("modularity: ", labels.size(), " labels for a graph of ", n, " nodes");
  const int64_t k = count_labels(labels);
  std::vector<double> tot(static_cast<size_t>(k), 0.0);
  double two_m = 0, inside = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const double w = graph.data[p];
      two_m += w;
      tot[labels[i]] += w;
      if (labels[graph.indices[p]] == labels[i]) inside += w;
    }
  if (!(two_m > 0)) return 0.0;
  double expected = 0;
  for (double t : tot) expected += t * t;
  return inside / two_m - resolution * expected / (two_m * two_m);
}

double adjusted_rand_index(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  if (a.size() != b.size()) fail("adjusted_rand_index: labelings of ", a.size(), " and ", b.size(), " cells");
  const int64_t n = static_cast<int64_t>(a.size());
  if (n < 2) return 1.0;
  const int64_t ka = count_labels(a), kb = count_labels(b);
  std::map<std::pair<int32_t, int32_t>, int64_t> table;
  std::vector<int64_t> ra(static_cast<size_t>(ka), 0), rb(static_cast<size_t>(kb), 0);
  for (int64_t i = 0; i < n; ++i) {
    ++table[{a[i], b[i]}];
    ++ra[a[i]];
    ++rb[b[i]];
  }
  auto c2 = [](int64_t x) { return 0.5 * static_cast<double>(x) * static_cast<double>(x - 1); };
  double sum_ij = 0, sum_a = 0, sum_b = 0;
  for (const auto& [key, c] : table) sum_ij += c2(c);
  for (int64_t x : ra) sum_a += c2(x);
  for (int64_t x : rb) sum_b += c2(x);
  const double expected = sum_a * sum_b / c2(n);
  const double max_index = 0.5 * (sum_a + sum_b);
  if (max_index == expected) return 1.0;  // both trivial partitions (as scikit-learn)
  return (sum_ij - expected) / (max_index - expected);
}

}  // namespace scurry
