#include "graph/leiden.hpp"

#include "graph/leiden_gpu.hpp"

#include <igraph/igraph.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "core/env_laps.hpp"
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
  for (double r : opt.resolutions)
    if (!(r > 0)) fail_input(kWhere, "resolution = ", r, " must be positive");
  if (!(opt.beta > 0)) fail_input(kWhere, "beta = ", opt.beta, " must be positive");
  if (opt.flavor != "leidenalg" && opt.flavor != "igraph")
    fail_input(kWhere, "flavor '", opt.flavor, "' is not one of leidenalg, igraph");
  if (opt.flavor == "igraph" && opt.directed.value_or(false))
    fail_input(kWhere, "flavor igraph cannot use a directed graph (igraph's Leiden is undirected): leave directed false");
  if (!opt.restrict_key.empty() && opt.restrict_categories.empty())
    fail_input(kWhere, "restrict_to '", opt.restrict_key, "' names no categories");
  if (opt.restrict_key.empty() && !opt.restrict_categories.empty())
    fail_input(kWhere, "restrict_to categories given without an obs key");
}

std::vector<LeidenResult> leiden(const Context&, const CsrF& graph, const LeidenOptions& opt,
                                 const std::vector<double>& resolutions) {
  const int64_t n = graph.n_rows;
  if (graph.n_cols != n) fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square");
  validate_leiden_options(opt);
  for (double r : resolutions)
    if (!(r > 0)) fail_input(kWhere, "resolution = ", r, " must be positive");
  std::vector<LeidenResult> out(resolutions.size());
  if (n == 0) return out;
  const bool igraph_flavor = opt.flavor == "igraph";
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
  ErrorsAsCodes errors_as_codes;
  Graph g;
  igraph_vector_t wview, sview;
  if (two_m > 0) {
    igraph_vector_int_t edge_view;
    igraph_vector_int_view(&edge_view, ends.data(), static_cast<igraph_integer_t>(ends.size()));
    check_igraph(igraph_create(&g.g, &edge_view, static_cast<igraph_integer_t>(n), IGRAPH_UNDIRECTED), "igraph_create");
    g.alive = true;
    igraph_vector_view(&wview, weights.data(), static_cast<igraph_integer_t>(weights.size()));
    igraph_vector_view(&sview, strength.data(), static_cast<igraph_integer_t>(n));
  }
  for (size_t r = 0; r < resolutions.size(); ++r) {
    LeidenResult& res = out[r];
    res.labels.assign(static_cast<size_t>(n), 0);
    if (two_m > 0) {
      IntVec membership(n);
      igraph_integer_t nb = 0;
      igraph_real_t quality = 0;
      check_igraph(igraph_rng_seed(igraph_rng_default(), static_cast<igraph_uint_t>(opt.random_state)), "igraph_rng_seed");
      const double gamma = resolutions[r] / two_m;
      if (opt.n_iterations >= 0 || igraph_flavor) {
        // igraph flavor: n_iterations as given, negative included (python-igraph passes it on).
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
        EnvLaps laps("SCURRY_LEIDEN_TIMES", "leiden");  // each iteration's seconds and quality
        for (int64_t it = 0; it < kMaxIterations; ++it) {
          check_igraph(igraph_community_leiden(&g.g, &wview, &sview, gamma, opt.beta, it > 0, 1, &membership.v, &nb,
                                               &quality),
                       "igraph_community_leiden");
          if (laps.on())
            laps.lap(("iteration " + std::to_string(it) + ": " + std::to_string(nb) + " clusters, quality " +
                      std::to_string(quality)).c_str());
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
    const int64_t k = count_labels(res.labels);
    std::vector<int64_t> size(static_cast<size_t>(k), 0), first(static_cast<size_t>(k), n);
    for (int64_t i = 0; i < n; ++i) {
      ++size[res.labels[i]];
      first[res.labels[i]] = std::min(first[res.labels[i]], i);
    }
    std::vector<int32_t> order;
    for (int32_t c = 0; c < k; ++c)
      if (size[c] > 0) order.push_back(c);
    // leidenalg: renumber by decreasing size, ties by first cell; igraph: its own (contiguous) numbers.
    if (!igraph_flavor)
      std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
        return size[x] != size[y] ? size[x] > size[y] : first[x] < first[y];
      });
    std::vector<int32_t> newid(static_cast<size_t>(k), -1);
    for (size_t q = 0; q < order.size(); ++q) newid[order[q]] = static_cast<int32_t>(q);
    for (int32_t& l : res.labels) l = newid[l];
    res.n_clusters = static_cast<int64_t>(order.size());
    res.modularity = modularity(graph, res.labels, resolutions[r]);
  }
  return out;
}

LeidenResult leiden(const Context& ctx, const CsrF& graph, const LeidenOptions& opt) {
  return std::move(leiden(ctx, graph, opt, std::vector<double>{opt.resolution})[0]);
}

std::string leiden_resolution_key(const std::string& key_added, double resolution) {
  // Python's repr(float): the shortest round trip, positional between 1e-4 and 1e16, with ".0" for
  // whole numbers.
  char buf[64];
  const double a = std::fabs(resolution);
  const bool fixed = a >= 1e-4 && a < 1e16;
  auto r = std::to_chars(buf, buf + sizeof buf, resolution, fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string s(buf, r.ptr);
  if (fixed && s.find('.') == std::string::npos) s += ".0";
  return key_added + "_" + s;
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0, db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // compare as integers: strip leading zeros, then by length, then digits
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else if (da != db) {
      return da;  // natsort: a number (after the empty leading string) sorts before text
    } else {
      size_t ie = i, je = j;
      while (ie < a.size() && !std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && !std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const int c = a.compare(i, ie - i, b, j, je - j);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    }
  }
  return a.size() - i < b.size() - j;
}

namespace {

// The graph the Dataset-level call clusters: obsp[obsp] or the neighbours' connectivities.
CsrF leiden_graph(const Dataset& d, const LeidenOptions& opt) {
  if (opt.obsp.empty()) return neighbors_graph(d, opt.neighbors_key, kWhere);
  auto it = d.obsp.find(opt.obsp);
  if (it == d.obsp.end()) fail_input(kWhere, "obsp['", opt.obsp, "'] is missing");
  CsrF g = to_csr_f(it->second);
  if (it->second.is_sparse()) validate_csr(g, std::string(kWhere) + ": obsp['" + opt.obsp + "']");
  if (g.n_rows != d.n_obs() || g.n_cols != d.n_obs())
    fail_input(kWhere, "obsp['", opt.obsp, "'] is ", g.n_rows, " x ", g.n_cols, " but the dataset has ", d.n_obs(), " cells");
  return g;
}

// The rows and columns `keep` (sorted cell indices) of a square graph.
CsrF subgraph(const CsrF& g, const std::vector<int64_t>& keep) {
  std::vector<int32_t> pos(static_cast<size_t>(g.n_rows), -1);
  for (size_t t = 0; t < keep.size(); ++t) pos[keep[t]] = static_cast<int32_t>(t);
  CsrF s;
  s.n_rows = s.n_cols = static_cast<int64_t>(keep.size());
  s.indptr.push_back(0);
  for (int64_t i : keep) {
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p)
      if (pos[g.indices[p]] >= 0) {
        s.indices.push_back(pos[g.indices[p]]);
        s.data.push_back(g.data[p]);
      }
    s.indptr.push_back(static_cast<int64_t>(s.indices.size()));
  }
  return s;
}

void write_params(Dataset& d, const std::string& key, double resolution, const LeidenOptions& opt) {
  Dict params;
  params["resolution"] = Value(resolution);
  params["random_state"] = Value(static_cast<int64_t>(opt.random_state));
  params["n_iterations"] = Value(opt.n_iterations);
  Dict u;
  u["params"] = Value(std::move(params));
  d.uns[key] = Value(std::move(u));
}

}  // namespace

LeidenResult leiden(const Context& ctx, Dataset& d, const LeidenOptions& opt) {
  validate_leiden_options(opt);
  const CsrF full = leiden_graph(d, opt);
  const std::vector<double> resolutions = opt.resolutions.empty() ? std::vector<double>{opt.resolution} : opt.resolutions;
  const bool several = resolutions.size() > 1;
  // restrict_to: the cells of those categories (scanpy's restrict_adjacency).
  std::vector<int64_t> keep;
  std::vector<std::string> old_labels;
  if (!opt.restrict_key.empty()) {
    if (!d.obs.has(opt.restrict_key)) fail_input(kWhere, "restrict_to: obs['", opt.restrict_key, "'] is missing");
    const auto* cat = std::get_if<CategoricalColumn>(&d.obs.at(opt.restrict_key).c);
    if (cat == nullptr) fail_input(kWhere, "restrict_to: obs['", opt.restrict_key, "'] is not categorical");
    std::vector<char> chosen(cat->categories.size(), 0);
    for (const std::string& c : opt.restrict_categories) {
      auto f = std::find(cat->categories.begin(), cat->categories.end(), c);
      if (f == cat->categories.end())
        fail_input(kWhere, "restrict_to: '", c, "' is not a valid category for '", opt.restrict_key, "'");
      chosen[f - cat->categories.begin()] = 1;
    }
    old_labels.resize(cat->codes.size());
    for (size_t i = 0; i < cat->codes.size(); ++i) {
      const int32_t code = cat->codes[i];
      old_labels[i] = code >= 0 ? cat->categories[code] : "nan";  // pandas astype('U') of a missing value
      if (code >= 0 && chosen[code]) keep.push_back(static_cast<int64_t>(i));
    }
    if (keep.empty()) fail_input(kWhere, "restrict_to: no cell of obs['", opt.restrict_key, "'] is in those categories");
  }
  const CsrF g = keep.empty() ? full : subgraph(full, keep);
  const bool gpu = ctx.backend() == Backend::cuda;  // our own GPU kernels; igraph on the CPU
  std::vector<LeidenResult> results;
  if (gpu) {
    for (double r : resolutions) {
      LeidenOptions o = opt;
      o.resolution = r;
      results.push_back(leiden_gpu(ctx, g, o));
    }
  } else {
    results = leiden(ctx, g, opt, resolutions);
  }
  for (size_t r = 0; r < resolutions.size(); ++r) {
    std::string key = opt.key_added;
    if (!keep.empty() && key == "leiden") key += "_R";  // scanpy's restrict_to key
    if (several) key = leiden_resolution_key(key, resolutions[r]);
    LeidenOptions o = opt;
    o.resolution = resolutions[r];
    o.key_added = key;
    if (keep.empty()) {
      write_leiden(d, results[r], o);
    } else {
      // scanpy's rename_groups: "<categories joined by ->,<new label>" for the clustered cells.
      std::string prefix;
      for (size_t c = 0; c < opt.restrict_categories.size(); ++c)
        prefix += (c ? "-" : "") + opt.restrict_categories[c];
      prefix += ",";
      std::vector<std::string> labels = old_labels;
      for (size_t t = 0; t < keep.size(); ++t) labels[keep[t]] = prefix + std::to_string(results[r].labels[t]);
      std::vector<std::string> cats = labels;
      std::sort(cats.begin(), cats.end());
      cats.erase(std::unique(cats.begin(), cats.end()), cats.end());
      std::stable_sort(cats.begin(), cats.end(), natural_less);
      CategoricalColumn col;
      col.categories = cats;
      std::map<std::string, int32_t> code_of;
      for (size_t c = 0; c < cats.size(); ++c) code_of.emplace(cats[c], static_cast<int32_t>(c));
      col.codes.resize(labels.size());
      for (size_t i = 0; i < labels.size(); ++i) col.codes[i] = code_of.at(labels[i]);
      d.obs.set(key, Column(std::move(col)));
      write_params(d, key, resolutions[r], opt);
    }
    log::info(detail::concat(gpu ? "leiden (gpu): " : "leiden: ", results[r].n_clusters, " clusters of ", g.n_rows,
                             " cells (resolution ", resolutions[r], ", modularity ", results[r].modularity, ") -> obs['",
                             key, "']"));
  }
  return std::move(results[0]);
}

void write_leiden(Dataset& d, const LeidenResult& res, const LeidenOptions& opt) {
  CategoricalColumn col;
  for (int64_t c = 0; c < res.n_clusters; ++c) col.categories.push_back(std::to_string(c));
  col.codes = res.labels;
  d.obs.set(opt.key_added, Column(std::move(col)));
  write_params(d, opt.key_added, opt.resolution, opt);
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
