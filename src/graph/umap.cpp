#include "graph/umap.hpp"

#include "graph/umap_gpu.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/spectral.hpp"
#include "graph/umap_sgd.hpp"

namespace scurry {
namespace {

const char* kWhere = "umap";
constexpr int kAbPoints = 300;      // find_ab_params: points of the target curve
constexpr double kClip = 4.0;       // umap's gradient clip
constexpr double kInitNoise = 1e-4; // sd of the noise added to the spectral layout
constexpr double kInitScale = 10.0; // layouts are scaled to [0, 10] (spectral: max |x| = 10 first)

// umap's tau_rand_int: three-component Tausworthe generator, 32-bit states.
struct Tau {
  uint32_t s0, s1, s2;
  uint32_t next() {
    s0 = ((s0 & 4294967294u) << 12) ^ (((s0 << 13) ^ s0) >> 19);
    s1 = ((s1 & 4294967288u) << 4) ^ (((s1 << 2) ^ s1) >> 25);
    s2 = ((s2 & 4294967280u) << 17) ^ (((s2 << 3) ^ s2) >> 11);
    return s0 ^ s1 ^ s2;
  }
};

// Seeded uniforms and normals (53-bit uniforms, Box-Muller: the same sequence on every platform).
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double uniform() { return (static_cast<double>(g() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }
};

double clip(double v) { return std::clamp(v, -kClip, kClip); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

constexpr int64_t kRowsPerBlock = 2048;  // batched epochs: vertices per parallel block

// One batched epoch (umap_sgd.hpp): the groups one after the other, each computed into `tmp` from
// `pos` and copied back.
template <int D>
void batched_epoch(const Context& ctx, const CsrF& g, const std::vector<float>& eps, const umap_sgd::EpochParams& p,
                   float* pos, float* tmp) {
  const int64_t n = g.n_rows, dim = p.dim;
  for (int64_t s = 0; s < umap_sgd::kSubRounds; ++s) {
    const int64_t m = (n - s + umap_sgd::kSubRounds - 1) / umap_sgd::kSubRounds;  // the group's vertices
    parallel_for(ctx.threads(), (m + kRowsPerBlock - 1) / kRowsPerBlock, [&](int64_t blk) {
      const int64_t t1 = std::min(m, (blk + 1) * kRowsPerBlock);
      for (int64_t t = blk * kRowsPerBlock; t < t1; ++t) {
        const int64_t i = s + t * umap_sgd::kSubRounds;
        umap_sgd::vertex_epoch<D>(pos, g.indices.data(), eps.data(), g.indptr[i], g.indptr[i + 1],
                                  static_cast<int32_t>(i), p, tmp + i * dim);
      }
    });
    for (int64_t i = s; i < n; i += umap_sgd::kSubRounds)
      for (int64_t c = 0; c < dim; ++c) pos[i * dim + c] = tmp[i * dim + c];
  }
}

}  // namespace

void validate_umap_options(const UmapOptions& opt) {
  check_sgd(opt);
  if (opt.n_components < 1) fail_input(kWhere, "n_components = ", opt.n_components, " must be at least 1");
  if (opt.maxiter && *opt.maxiter < 0) fail_input(kWhere, "maxiter = ", *opt.maxiter, " must not be negative");
  if (!(opt.negative_sample_rate >= 0)) fail_input(kWhere, "negative_sample_rate must not be negative");
  if (!(opt.spread > 0) || !(opt.min_dist >= 0) || opt.min_dist > 3 * opt.spread)
    fail_input(kWhere, "spread = ", opt.spread, ", min_dist = ", opt.min_dist,
               " are invalid; use spread > 0 and 0 <= min_dist <= 3 spread (typically min_dist < spread)");
}

void check_sgd(const UmapOptions& opt) {
  if (opt.sgd != "batched" && opt.sgd != "sequential")
    fail_input(kWhere, "sgd '", opt.sgd, "' is unknown; use batched or sequential");
  if (opt.sgd == "batched" && opt.n_components > umap_sgd::kMaxDim)
    fail_input(kWhere, "n_components = ", opt.n_components, " is more than the batched layout supports (",
               umap_sgd::kMaxDim, "); use sgd sequential");
}

umap_sgd::EpochParams epoch_params(const UmapOptions& opt, const UmapResult& res, int64_t n) {
  umap_sgd::EpochParams p{};
  p.n_vertices = static_cast<uint32_t>(n);
  p.dim = static_cast<int>(opt.n_components);
  p.a = static_cast<float>(res.a);
  p.b = static_cast<float>(res.b);
  p.gamma = static_cast<float>(opt.gamma);
  p.neg_rate = opt.negative_sample_rate;
  p.seed = umap_sgd::mix64(opt.random_state + 0x9E3779B97F4A7C15ULL);
  return p;
}

void umap_batched_epochs(const Context& ctx, const CsrF& g, const UmapOptions& opt, UmapResult& res) {
  const int64_t n = g.n_rows, dim = opt.n_components, n_edges = g.nnz();
  float wmax = 0;
  for (float w : g.data) wmax = std::max(wmax, w);
  if (n_edges == 0 || !(wmax > 0) || res.n_epochs <= 1) return;
  std::vector<float> eps(static_cast<size_t>(n_edges));
  for (int64_t p = 0; p < n_edges; ++p) eps[p] = umap_sgd::epochs_per_sample(g.data[p], 0.0f, wmax);
  umap_sgd::EpochParams p = epoch_params(opt, res, n);
  std::vector<float> tmp(res.embedding.data.size());
  float* pos = res.embedding.data.data();
  for (int64_t ep = 1; ep < res.n_epochs; ++ep) {
    umap_sgd::set_epoch(p, ep, opt.alpha, res.n_epochs);
    if (dim == 2) batched_epoch<2>(ctx, g, eps, p, pos, tmp.data());
    else if (dim == 3) batched_epoch<3>(ctx, g, eps, p, pos, tmp.data());
    else batched_epoch<umap_sgd::kMaxDim>(ctx, g, eps, p, pos, tmp.data());
  }
}

std::pair<double, double> find_ab_params(double spread, double min_dist) {
  if (!(spread > 0) || !(min_dist >= 0) || min_dist > 3 * spread)
    fail_input(kWhere, "spread = ", spread, ", min_dist = ", min_dist,
               " are invalid; use spread > 0 and 0 <= min_dist <= 3 spread (typically min_dist < spread)");
  std::vector<double> xv(kAbPoints), yv(kAbPoints);
  for (int i = 0; i < kAbPoints; ++i) {
    xv[i] = spread * 3.0 * i / (kAbPoints - 1);
    yv[i] = xv[i] < min_dist ? 1.0 : std::exp(-(xv[i] - min_dist) / spread);
  }
  auto cost = [&](double a, double b) {
    double c = 0;
    for (int i = 0; i < kAbPoints; ++i) {
      const double r = 1.0 / (1.0 + a * std::pow(xv[i], 2 * b)) - yv[i];
      c += r * r;
    }
    return c;
  };
  double a = 1.0, b = 1.0, lambda = 1e-3, c = cost(a, b);
  for (int it = 0; it < 1000; ++it) {
    double jtj[3] = {0, 0, 0}, jtr[2] = {0, 0};  // jtj: aa, ab, bb
    for (int i = 0; i < kAbPoints; ++i) {
      const double x = xv[i];
      const double t = x > 0 ? std::pow(x, 2 * b) : 0.0;
      const double f = 1.0 / (1.0 + a * t);
      const double r = f - yv[i];
      const double da = -t * f * f;
      const double db = x > 0 ? -a * t * 2.0 * std::log(x) * f * f : 0.0;
      jtj[0] += da * da;
      jtj[1] += da * db;
      jtj[2] += db * db;
      jtr[0] += da * r;
      jtr[1] += db * r;
    }
    bool accepted = false;
    for (int tries = 0; tries < 60 && !accepted; ++tries) {
      const double m00 = jtj[0] * (1 + lambda), m11 = jtj[2] * (1 + lambda), m01 = jtj[1];
      const double det = m00 * m11 - m01 * m01;
      if (!(std::fabs(det) > 0)) {
        lambda *= 10;
        continue;
      }
      const double da = -(m11 * jtr[0] - m01 * jtr[1]) / det;
      const double db = -(m00 * jtr[1] - m01 * jtr[0]) / det;
      const double na = a + da, nb = b + db;
      const double nc = na > 0 && nb > 0 ? cost(na, nb) : std::numeric_limits<double>::infinity();
      if (nc <= c) {
        const bool done = std::fabs(da) <= 1e-15 * (std::fabs(a) + 1e-15) && std::fabs(db) <= 1e-15 * (std::fabs(b) + 1e-15);
        const double prev = c;
        a = na, b = nb, c = nc;
        lambda = std::max(lambda / 10, 1e-12);
        accepted = true;
        if (done || prev - nc <= 1e-18 * prev) return {a, b};
      } else {
        lambda *= 10;
      }
    }
    if (!accepted) break;  // no step lowers the cost: at the minimum to rounding
  }
  return {a, b};
}

float checked_max_weight(const Context& ctx, const CsrF& graph) {
  const int64_t n = graph.nnz();
  constexpr int64_t kPiece = int64_t(1) << 20;
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<float> mx(static_cast<size_t>(pieces), 0.0f);
  std::vector<uint8_t> bad(static_cast<size_t>(pieces), 0);
  parallel_for(ctx.threads(), pieces, [&](int64_t b) {
    const int64_t p1 = std::min(n, (b + 1) * kPiece);
    float m = 0;
    bool any_bad = false;
    for (int64_t p = b * kPiece; p < p1; ++p) {
      const float w = graph.data[p];
      any_bad |= !(std::isfinite(w) && w >= 0);
      m = std::max(m, w);
    }
    mx[b] = m;
    bad[b] = any_bad;
  });
  float m = 0;
  for (int64_t b = 0; b < pieces; ++b) {
    if (bad[b]) fail_input(kWhere, "the graph has a negative or non-finite weight; recompute the neighbours");
    m = std::max(m, mx[b]);
  }
  return m;
}

void umap_mark(const char* what) {
  static const bool on = std::getenv("SCURRY_UMAP_TIMES") != nullptr;
  if (!on) return;
  static auto last = std::chrono::steady_clock::now();
  const auto t = std::chrono::steady_clock::now();
  std::fprintf(stderr, "[umap] %s %.4f s\n", what, std::chrono::duration<double>(t - last).count());
  last = t;
}

CsrF prune_graph(const Context& ctx, const CsrF& graph, float threshold) {
  const int64_t n = graph.n_rows;
  const int64_t n_blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  auto kept = [&](int64_t p) { return graph.data[p] >= threshold && graph.data[p] != 0.0f; };
  CsrF g = CsrF::zeros(n, graph.n_cols);
  parallel_for(ctx.threads(), n_blocks, [&](int64_t blk) {
    const int64_t r1 = std::min(n, (blk + 1) * kRowsPerBlock);
    for (int64_t i = blk * kRowsPerBlock; i < r1; ++i) {
      int64_t c = 0;
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) c += kept(p);
      g.indptr[i + 1] = c;
    }
  });
  for (int64_t i = 0; i < n; ++i) g.indptr[i + 1] += g.indptr[i];
  resize_large(g.indices, static_cast<size_t>(g.indptr[n]));  // (pages faulted in on several threads)
  resize_large(g.data, static_cast<size_t>(g.indptr[n]));
  parallel_for(ctx.threads(), n_blocks, [&](int64_t blk) {
    const int64_t r1 = std::min(n, (blk + 1) * kRowsPerBlock);
    for (int64_t i = blk * kRowsPerBlock; i < r1; ++i) {
      int64_t q = g.indptr[i];
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p)
        if (kept(p)) g.indices[q] = graph.indices[p], g.data[q++] = graph.data[p];
    }
  });
  return g;
}

UmapResult umap(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init) {
  const auto t_start = std::chrono::steady_clock::now();
  const int64_t n = graph.n_rows, dim = opt.n_components;
  if (graph.n_cols != n)
    fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square (cells x cells)");
  if (n < 2) fail_input(kWhere, "the graph has ", n, " nodes; UMAP needs at least 2 cells");
  if (dim < 1 || dim >= n)
    fail_input(kWhere, "n_components = ", dim, " is out of range for ", n, " cells; use 1 <= n_components < n_cells");
  if (opt.maxiter && *opt.maxiter < 0) fail_input(kWhere, "maxiter = ", *opt.maxiter, " must not be negative");
  if (!(opt.negative_sample_rate >= 0)) fail_input(kWhere, "negative_sample_rate must not be negative");
  check_sgd(opt);
  umap_mark("start");
  const float wmax_all = checked_max_weight(ctx, graph);
  umap_mark("weights checked");

  UmapResult res;
  res.max_weight = wmax_all;
  if (opt.a && opt.b) {
    res.a = *opt.a;
    res.b = *opt.b;
  } else {
    std::tie(res.a, res.b) = find_ab_params(opt.spread, opt.min_dist);
  }
  const int64_t default_epochs = n <= 10000 ? 500 : 200;
  const int64_t n_epochs = opt.maxiter ? *opt.maxiter : default_epochs;
  res.n_epochs = n_epochs;
  umap_mark("a and b");

  // Prune weak edges: below max / n_epochs (max / default_epochs when n_epochs <= 10). Not needed
  // without epochs (the GPU path asks for the start layout only) unless the spectral layout uses it.
  const bool need_graph = n_epochs > 0 || opt.init_pos == "spectral";
  const float wmax = need_graph ? wmax_all : 0.0f;
  const float threshold = wmax / static_cast<float>(n_epochs > 10 ? n_epochs : default_epochs);
  const CsrF g = need_graph ? prune_graph(ctx, graph, threshold) : CsrF::zeros(0, 0);
  umap_mark("the pruned graph");

  // Initial layout.
  Rng rng(opt.random_state);
  DenseD emb(n, dim);
  if (opt.init_pos != "spectral" && opt.init_pos != "random") {
    if (!init)
      fail_input(kWhere, "init_pos '", opt.init_pos, "' needs initial coordinates; use spectral, random or an obsm key");
    if (init->n_rows != n || init->n_cols < dim)
      fail_input(kWhere, "the initial coordinates are ", init->n_rows, " x ", init->n_cols, "; need ", n, " x ", dim);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) emb(i, c) = (*init)(i, c);
    res.init = opt.init_pos;
  } else {
    std::optional<DenseD> spec;
    if (opt.init_pos == "spectral") {
      SpectralOptions so;
      so.dim = dim;
      so.random_state = opt.random_state;
      spec = spectral_layout(ctx, g, so);
      umap_mark("spectral layout");
      if (!spec) log::info("umap: the graph is not connected; random initialisation instead of spectral");
    }
    if (spec) {
      double m = 0;
      for (double v : spec->data) m = std::max(m, std::fabs(v));
      const double expansion = m > 0 ? kInitScale / m : 1.0;
      for (size_t i = 0; i < emb.data.size(); ++i)
        emb.data[i] = static_cast<float>(spec->data[i] * expansion) + static_cast<float>(kInitNoise * rng.normal());
      res.init = "spectral";
    } else {
      for (double& v : emb.data) v = static_cast<float>(-10.0 + 20.0 * rng.uniform());
      res.init = "random";
    }
  }
  // Each column to [0, 10].
  DenseF e(n, dim);
  for (int64_t c = 0; c < dim; ++c) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (int64_t i = 0; i < n; ++i) lo = std::min(lo, emb(i, c)), hi = std::max(hi, emb(i, c));
    const double span = hi - lo > 0 ? hi - lo : 1.0;
    for (int64_t i = 0; i < n; ++i) e(i, c) = static_cast<float>(kInitScale * (emb(i, c) - lo) / span);
  }

  res.init_seconds = seconds_since(t_start);
  umap_mark("noise and scaling");
  if (n_epochs == 0) {  // the start layout only
    res.embedding = std::move(e);
    return res;
  }
  const auto t_epochs = std::chrono::steady_clock::now();
  if (opt.sgd == "batched") {
    res.embedding = std::move(e);
    umap_batched_epochs(ctx, g, opt, res);
    res.epochs_seconds = seconds_since(t_epochs);
    return res;
  }

  // SGD with umap's schedule, edge after edge (umap-learn's order).
  const int64_t n_edges = g.nnz();
  std::vector<int32_t> head(static_cast<size_t>(n_edges));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p) head[p] = static_cast<int32_t>(i);
  const std::vector<int32_t>& tail = g.indices;
  float gmax = 0;
  for (float w : g.data) gmax = std::max(gmax, w);
  std::vector<double> eps(static_cast<size_t>(n_edges), -1.0);
  for (int64_t p = 0; p < n_edges; ++p) {
    const double samples = static_cast<double>(n_epochs) * (g.data[p] / gmax);
    if (samples > 0) eps[p] = static_cast<double>(n_epochs) / samples;
  }
  std::vector<double> next_sample = eps, eps_neg(eps.size()), next_neg(eps.size());
  for (size_t p = 0; p < eps.size(); ++p) next_neg[p] = eps_neg[p] = eps[p] / opt.negative_sample_rate;
  Tau tau{static_cast<uint32_t>(rng.g()) | 2u, static_cast<uint32_t>(rng.g()) | 8u, static_cast<uint32_t>(rng.g()) | 16u};
  const double a = res.a, b = res.b, gamma = opt.gamma;
  const uint32_t nv = static_cast<uint32_t>(n);
  double alpha = opt.alpha;
  for (int64_t ep = 0; ep < n_epochs; ++ep) {
    const double epd = static_cast<double>(ep);
    for (int64_t p = 0; p < n_edges; ++p) {
      if (eps[p] <= 0 || next_sample[p] > epd) continue;
      float* cur = e.row(head[p]);
      float* oth = e.row(tail[p]);
      double d2 = 0;
      for (int64_t c = 0; c < dim; ++c) {
        const double t = static_cast<double>(cur[c]) - oth[c];
        d2 += t * t;
      }
      double gc = 0;
      if (d2 > 0) gc = -2.0 * a * b * std::pow(d2, b - 1.0) / (a * std::pow(d2, b) + 1.0);
      for (int64_t c = 0; c < dim; ++c) {
        const double gd = clip(gc * (static_cast<double>(cur[c]) - oth[c]));
        cur[c] = static_cast<float>(cur[c] + gd * alpha);
        oth[c] = static_cast<float>(oth[c] - gd * alpha);
      }
      next_sample[p] += eps[p];
      const int64_t n_neg = static_cast<int64_t>((epd - next_neg[p]) / eps_neg[p]);
      for (int64_t s = 0; s < n_neg; ++s) {
        const uint32_t k = tau.next() % nv;
        const float* o = e.row(k);
        double dn = 0;
        for (int64_t c = 0; c < dim; ++c) {
          const double t = static_cast<double>(cur[c]) - o[c];
          dn += t * t;
        }
        double gr;
        if (dn > 0)
          gr = 2.0 * gamma * b / ((0.001 + dn) * (a * std::pow(dn, b) + 1.0));
        else if (static_cast<int32_t>(k) == head[p])
          continue;
        else
          gr = 0.0;
        for (int64_t c = 0; c < dim; ++c) {
          const double gd = gr > 0 ? clip(gr * (static_cast<double>(cur[c]) - o[c])) : kClip;
          cur[c] = static_cast<float>(cur[c] + gd * alpha);
        }
      }
      if (n_neg > 0) next_neg[p] += static_cast<double>(n_neg) * eps_neg[p];
    }
    alpha = opt.alpha * (1.0 - epd / static_cast<double>(n_epochs));
  }
  res.embedding = std::move(e);
  res.epochs_seconds = seconds_since(t_epochs);
  return res;
}

const CsrF& neighbors_graph([[maybe_unused]] const Context& ctx, const Dataset& d, const std::string& neighbors_key,
                            const std::string& step, CsrF& storage) {
  std::string key = neighbors_key == "neighbors" ? "connectivities" : neighbors_key + "_connectivities";
  auto u = d.uns.find(neighbors_key);
  if (u != d.uns.end() && u->second.is_dict()) {
    const Dict& nd = u->second.dict();
    auto ck = nd.find("connectivities_key");
    if (ck != nd.end() && std::holds_alternative<std::string>(ck->second.v)) key = std::get<std::string>(ck->second.v);
  }
  auto it = d.obsp.find(key);
  if (it == d.obsp.end())
    fail_input(step, "obsp['", key, "'] is missing (neighbors_key '", neighbors_key,
               "'); run neighbors first");
  const CsrF* in_place = std::get_if<CsrF>(&it->second.m);
  if (!in_place) storage = to_csr_f(it->second);
  const CsrF& g = in_place ? *in_place : storage;
  validate_csr(g, step + ": obsp['" + key + "']");  // (on the threads)
  if (g.n_rows != g.n_cols || (d.n_obs() > 0 && g.n_rows != d.n_obs()))
    fail_input(step, "obsp['", key, "'] is ", g.n_rows, " x ", g.n_cols, " but the dataset has ", d.n_obs(),
               " cells; recompute the neighbours");
  return g;
}

CsrF neighbors_graph(const Dataset& d, const std::string& neighbors_key, const std::string& step) {
  std::string key = neighbors_key == "neighbors" ? "connectivities" : neighbors_key + "_connectivities";
  auto u = d.uns.find(neighbors_key);
  if (u != d.uns.end() && u->second.is_dict()) {
    const Dict& nd = u->second.dict();
    auto ck = nd.find("connectivities_key");
    if (ck != nd.end() && std::holds_alternative<std::string>(ck->second.v)) key = std::get<std::string>(ck->second.v);
  }
  auto it = d.obsp.find(key);
  if (it == d.obsp.end())
    fail_input(step, "obsp['", key, "'] is missing (neighbors_key '", neighbors_key,
               "'); run neighbors first");
  CsrF g = to_csr_f(it->second);
  validate_csr(g, step + ": obsp['" + key + "']");
  if (g.n_rows != g.n_cols || (d.n_obs() > 0 && g.n_rows != d.n_obs()))
    fail_input(step, "obsp['", key, "'] is ", g.n_rows, " x ", g.n_cols, " but the dataset has ", d.n_obs(),
               " cells; recompute the neighbours");
  return g;
}

UmapResult umap(const Context& ctx, Dataset& d, const UmapOptions& opt) {
  umap_mark("umap called");
  CsrF storage;
  const CsrF& g = neighbors_graph(ctx, d, opt.neighbors_key, kWhere, storage);
  umap_mark("graph validated (in place)");
  DenseF init;
  const DenseF* init_ptr = nullptr;
  if (opt.init_pos != "spectral" && opt.init_pos != "random") {
    auto it = d.obsm.find(opt.init_pos);
    if (it == d.obsm.end())
      fail_input(kWhere, "init_pos '", opt.init_pos, "' is neither spectral, random nor an obsm key");
    init = to_dense_f(it->second);
    init_ptr = &init;
  }
  const bool gpu = ctx.backend() == Backend::cuda;  // the layout's epochs on the GPU
  UmapResult res = gpu ? umap_gpu(ctx, g, opt, init_ptr) : umap(ctx, g, opt, init_ptr);
  write_umap(d, res, opt);
  log::info(detail::concat(gpu ? "umap (gpu): " : "umap: ", g.n_rows, " cells, ", res.n_epochs, " epochs, a = ", res.a, ", b = ", res.b,
                           ", ", res.init, " initialisation (", res.init_seconds, " s), epochs ", res.epochs_seconds, " s"));
  return res;
}

void write_umap(Dataset& d, const UmapResult& res, const UmapOptions&) {
  d.obsm["X_umap"] = Matrix(res.embedding, DType::f32);
  Dict params;
  params["a"] = Value(res.a);
  params["b"] = Value(res.b);
  Dict u;
  u["params"] = Value(std::move(params));
  d.uns["umap"] = Value(std::move(u));
}

}  // namespace scurry
