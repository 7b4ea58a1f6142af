#include "graph/spectral.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/knn.hpp"
#include "graph/spectral_ops.hpp"
#include "graph/spectral_rng.hpp"
#include "pp/linalg.hpp"

namespace scurry {
namespace spectral {
namespace {

constexpr int64_t kRowsPerBlock = 4096;  // host block operations: fixed row blocks
constexpr double kSvqbFloor = 1e-14;     // SVQB: eigenvalues of the scaled Gram clamped at this x the largest

// The host backend: blocks in memory, row blocks on the CPU threads, sums in block order.
//
// The block product's cost is its gathers: for every edge (i, j) row j of the source block. In the
// graph's own node order the neighbours of a node lie anywhere in the block (tens of MB at 10^5 -
// 10^6 nodes), so every gather is a cache miss. The host backend therefore works in breadth-first
// order (Cuthill & McKee 1969, without the degree sort): nodes renumbered in the order a BFS from
// node 0 reaches them, so that a node's neighbours are within about two BFS levels of it and the
// gathered rows mostly come from the caches. The slots hold the rows in that order; the start
// block (gaussian) and the download map back, so the result is the same up to rounding (a
// permutation changes no product, only the order of the sums in the Gram matrices). The source rows
// of a product are also gathered from a float copy (half the bytes; products and sums in double):
// the rounding (6e-8 relative) is far below the solver's tolerance (1e-4; umap asks ARPACK for the
// same).
class HostOps final : public BlockOps {
 public:
  HostOps(const Context& ctx, const CsrF& g, const std::vector<double>& dinv, int64_t w, int slots)
      : ctx_(ctx), n_(g.n_rows), w_(w), slots_(static_cast<size_t>(slots), DenseD(g.n_rows, w)) {
    n_blocks_ = (n_ + kRowsPerBlock - 1) / kRowsPerBlock;
    bfs_order(g);
    // The permuted graph, entries D^-1/2 A D^-1/2 as float, each row's entries in its order.
    indptr_.assign(static_cast<size_t>(n_ + 1), 0);
    for (int64_t r = 0; r < n_; ++r) {
      const int64_t i = order_[r];
      indptr_[r + 1] = indptr_[r] + (g.indptr[i + 1] - g.indptr[i]);
    }
    idx_.resize(g.data.size());
    wt_.resize(g.data.size());
    n_entries_ = static_cast<int64_t>(g.data.size());
    rows([&](int64_t r) {
      const int64_t i = order_[r];
      int64_t q = indptr_[r];
      for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p, ++q) {
        idx_[q] = rank_[g.indices[p]];
        wt_[q] = static_cast<float>(static_cast<double>(g.data[p]) * (dinv[i] * dinv[g.indices[p]]));
      }
    });
    v0_.resize(static_cast<size_t>(n_));
    double s = 0;
    for (int64_t i = 0; i < n_; ++i) s += 1.0 / (dinv[i] * dinv[i]);
    const double inv = 1.0 / std::sqrt(s);
    for (int64_t r = 0; r < n_; ++r) v0_[r] = inv / dinv[order_[r]];
    xf_.resize(static_cast<size_t>(n_ * w_));
  }

  void gaussian(int dst, uint64_t seed) override {
    double* d = slots_[dst].data.data();
    rows([&](int64_t r) {
      const int64_t i = order_[r];
      for (int64_t c = 0; c < w_; ++c) d[r * w_ + c] = gaussian_at(seed, static_cast<uint64_t>(i * w_ + c));
    });
  }
  void cheb(int dst, int src, int prev, double alpha, double beta, double gamma) override {
    double* y = slots_[dst].data.data();
    const double* x = slots_[src].data.data();
    const double* z = prev >= 0 ? slots_[prev].data.data() : nullptr;
    const int64_t w = w_;
    float* xf = xf_.data();
    rows([&](int64_t r) {
      for (int64_t c = 0; c < w; ++c) xf[r * w + c] = static_cast<float>(x[r * w + c]);
    });
    // The width as a compile-time constant for the usual blocks (2 or 3 components + 8), so that
    // the row's sums stay in registers and vectorise; the same arithmetic in the same order.
    switch (w) {
      case 10: product<10>(y, x, z, xf, alpha, beta, gamma); break;
      case 11: product<11>(y, x, z, xf, alpha, beta, gamma); break;
      default: product<0>(y, x, z, xf, alpha, beta, gamma); break;
    }
  }
  template <int W>
  void product(double* y, const double* x, const double* z, const float* xf, double alpha, double beta, double gamma) {
    const int64_t w = W > 0 ? W : w_;
    rows([&](int64_t r) {
      double acc[W > 0 ? W : kMaxWidth] = {};
      for (int64_t p = indptr_[r]; p < indptr_[r + 1]; ++p) {
        // the row gathered kPrefetch entries ahead requested now (BFS order keeps most gathers in
        // the caches, but not all: at 200,000 nodes the gather was 40% of the product)
        if (p + kPrefetch < n_entries_) __builtin_prefetch(xf + static_cast<int64_t>(idx_[p + kPrefetch]) * w);
        const double a = wt_[p];
        const float* xj = xf + static_cast<int64_t>(idx_[p]) * w;
        if constexpr (W > 0) {
          // unrolled: the sums in registers (a loop keeps them in memory, and every edge then
          // waits for the previous one's store, ~9 cycles a column)
#pragma GCC unroll 16
          for (int c = 0; c < W; ++c) acc[c] += a * static_cast<double>(xj[c]);
        } else {
          for (int64_t c = 0; c < w; ++c) acc[c] += a * static_cast<double>(xj[c]);
        }
      }
      for (int64_t c = 0; c < w; ++c) {
        double v = alpha * acc[c] + beta * x[r * w + c];
        if (z) v += gamma * z[r * w + c];
        y[r * w + c] = v;
      }
    });
  }
  void axpby(int dst, int x, double a, int y, double b) override {
    double* d = slots_[dst].data.data();
    const double *xs = slots_[x].data.data(), *ys = slots_[y].data.data();
    rows([&](int64_t i) {
      for (int64_t c = 0; c < w_; ++c) d[i * w_ + c] = a * xs[i * w_ + c] + b * ys[i * w_ + c];
    });
  }
  DenseD gram(int x, int y) override {
    switch (w_) {
      case 10: return gram_w<10>(x, y);
      case 11: return gram_w<11>(x, y);
      default: return gram_w<0>(x, y);
    }
  }
  template <int W>
  DenseD gram_w(int x, int y) {
    const double *a = slots_[x].data.data(), *b = slots_[y].data.data();
    const int64_t w = W > 0 ? W : w_;
    std::vector<double> acc;
    reduce_blocks(ctx_.threads(), n_blocks_, static_cast<size_t>(w * w), acc, [&](int64_t blk, double* part) {
      const int64_t r1 = std::min(n_, (blk + 1) * kRowsPerBlock);
      for (int64_t i = blk * kRowsPerBlock; i < r1; ++i)
        for (int64_t p = 0; p < w; ++p) {
          const double ap = a[i * w + p];
          if constexpr (W > 0) {
#pragma GCC unroll 16
            for (int q = 0; q < W; ++q) part[p * W + q] += ap * b[i * W + q];
          } else {
            for (int64_t q = 0; q < w; ++q) part[p * w + q] += ap * b[i * w + q];
          }
        }
    });
    DenseD out(w, w);
    out.data = std::move(acc);
    return out;
  }
  void mul(int dst, int src, const DenseD& s) override {
    switch (w_) {  // compile-time widths for the usual blocks (as cheb): the sums in registers
      case 10: mul_w<10>(dst, src, s); break;
      case 11: mul_w<11>(dst, src, s); break;
      default: mul_w<0>(dst, src, s); break;
    }
  }
  template <int W>
  void mul_w(int dst, int src, const DenseD& s) {
    double* d = slots_[dst].data.data();
    const double* x = slots_[src].data.data();
    const int64_t w = W > 0 ? W : w_;
    const double* sm = s.data.data();
    rows([&](int64_t i) {
      double acc[W > 0 ? W : kMaxWidth] = {};
      for (int64_t t = 0; t < w; ++t) {
        const double xt = x[i * w + t];
        if constexpr (W > 0) {
#pragma GCC unroll 16
          for (int c = 0; c < W; ++c) acc[c] += xt * sm[t * W + c];
        } else {
          for (int64_t c = 0; c < w; ++c) acc[c] += xt * sm[t * w + c];
        }
      }
      for (int64_t c = 0; c < w; ++c) d[i * w + c] = acc[c];
    });
  }
  void deflate(int x) override {
    double* a = slots_[x].data.data();
    const int64_t w = w_;
    std::vector<double> coef;
    reduce_blocks(ctx_.threads(), n_blocks_, static_cast<size_t>(w), coef, [&](int64_t blk, double* part) {
      const int64_t r1 = std::min(n_, (blk + 1) * kRowsPerBlock);
      for (int64_t i = blk * kRowsPerBlock; i < r1; ++i)
        for (int64_t c = 0; c < w; ++c) part[c] += v0_[i] * a[i * w + c];
    });
    rows([&](int64_t i) {
      for (int64_t c = 0; c < w; ++c) a[i * w + c] -= v0_[i] * coef[c];
    });
  }
  DenseD download(int src, int64_t cols) override {
    DenseD out(n_, cols);
    rows([&](int64_t r) {
      for (int64_t c = 0; c < cols; ++c) out(order_[r], c) = slots_[src](r, c);
    });
    return out;
  }

 private:
  template <class F>
  void rows(F&& f) {
    parallel_for(ctx_.threads(), n_blocks_, [&](int64_t blk) {
      const int64_t r1 = std::min(n_, (blk + 1) * kRowsPerBlock);
      for (int64_t i = blk * kRowsPerBlock; i < r1; ++i) f(i);
    });
  }
  // order_[r]: the node at position r of a breadth-first search from node 0 (then from the first
  // node not reached, for a graph of several components); rank_ its inverse.
  void bfs_order(const CsrF& g) {
    order_.assign(static_cast<size_t>(n_), 0);
    rank_.assign(static_cast<size_t>(n_), -1);
    int64_t head = 0, tail = 0;
    for (int64_t s = 0; s < n_; ++s) {
      if (rank_[s] >= 0) continue;
      rank_[s] = static_cast<int32_t>(tail);
      order_[tail++] = static_cast<int32_t>(s);
      while (head < tail) {
        const int32_t i = order_[head++];
        for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p) {
          const int32_t j = g.indices[p];
          if (rank_[j] < 0) rank_[j] = static_cast<int32_t>(tail), order_[tail++] = j;
        }
      }
    }
  }
  const Context& ctx_;
  int64_t n_, w_, n_blocks_ = 0;
  std::vector<DenseD> slots_;
  std::vector<int32_t> order_, rank_;
  std::vector<int64_t> indptr_;  // the graph in BFS order
  std::vector<int32_t> idx_;
  std::vector<float> wt_;   // D^-1/2 A D^-1/2, entry by entry
  std::vector<double> v0_;  // D^1/2 1, unit norm, in BFS order
  std::vector<float> xf_;   // the source block of a product as float
  int64_t n_entries_ = 0;
  static constexpr int64_t kPrefetch = 16;
};

}  // namespace

// Orthonormal columns spanning slot x's (SVQB twice; tmp is scratch; the result is in x).
static void orthonormalize(BlockOps& ops, int& x, int& tmp, int64_t w) {
  for (int pass = 0; pass < 2; ++pass) {
    DenseD g = ops.gram(x, x);
    std::vector<double> d(static_cast<size_t>(w));
    for (int64_t c = 0; c < w; ++c) d[c] = g(c, c) > 0 ? 1.0 / std::sqrt(g(c, c)) : 0.0;
    for (int64_t p = 0; p < w; ++p)
      for (int64_t q = 0; q < w; ++q) g(p, q) *= d[p] * d[q];
    linalg::SymEigen e = linalg::eigh_top(g, w);
    const double floor = std::max(e.values[0], 1e-300) * kSvqbFloor;
    DenseD s(w, w);
    for (int64_t p = 0; p < w; ++p)
      for (int64_t q = 0; q < w; ++q) s(p, q) = d[p] * e.vectors(p, q) / std::sqrt(std::max(e.values[q], floor));
    ops.mul(tmp, x, s);
    std::swap(x, tmp);
  }
}

int chebyshev_subspace(BlockOps& ops, int64_t k, int64_t w, const SpectralOptions& opt, SpectralStats& st) {
  int q = 0, z = 1, t = 2, p = 3;
  ops.gaussian(q, opt.random_state);
  ops.deflate(q);
  orthonormalize(ops, q, t, w);
  const int64_t degree = std::max<int64_t>(2, opt.degree);
  for (;;) {
    // Rayleigh-Ritz on span(Q): Q <- Q V, Z = M Q <- Z V, theta descending.
    ops.cheb(z, q, -1, 1.0, 0.0, 0.0);
    ++st.products;
    ++st.sweeps;
    DenseD h = ops.gram(q, z), gzz = ops.gram(z, z);
    for (int64_t i = 0; i < w; ++i)
      for (int64_t j = 0; j < i; ++j) h(i, j) = h(j, i) = 0.5 * (h(i, j) + h(j, i));
    linalg::SymEigen e = linalg::eigh_top(h, w);
    ops.mul(t, q, e.vectors);
    std::swap(q, t);
    ops.mul(t, z, e.vectors);
    std::swap(z, t);
    // |z_c - theta_c q_c|^2 = (V^T Gzz V)_cc - theta_c^2 (q orthonormal, Q^T Z = diag(theta)).
    st.residual = 0;
    for (int64_t c = 0; c < k; ++c) {
      double zz = 0;
      for (int64_t a = 0; a < w; ++a) {
        double s = 0;
        for (int64_t b = 0; b < w; ++b) s += gzz(a, b) * e.vectors(b, c);
        zz += e.vectors(a, c) * s;
      }
      st.residual = std::max(st.residual, std::sqrt(std::max(0.0, zz - e.values[c] * e.values[c])));
    }
    st.converged = st.residual <= opt.tol;
    if (st.converged || st.products + degree > opt.max_products) break;
    // Filter: T_degree of M mapped from [lo, cut] to [-1, 1] (damped), above cut amplified.
    // Y0 = Q, Y1 = (M Q - c Q) / h = (Z - c Q) / h, Y_{j+1} = 2 (M Y_j - c Y_j) / h - Y_{j-1}.
    const double lo = -1.0, cut = std::max(e.values[w - 1], lo + 1e-3);
    const double c0 = 0.5 * (cut + lo), h0 = 0.5 * (cut - lo);
    int prev = q, cur = p, next = t;
    ops.axpby(cur, z, 1.0 / h0, q, -c0 / h0);
    for (int64_t j = 2; j <= degree; ++j) {
      ops.cheb(next, cur, prev, 2.0 / h0, -2.0 * c0 / h0, -1.0);
      ++st.products;
      std::swap(prev, cur);  // prev <- Y_j
      std::swap(cur, next);  // cur <- Y_{j+1}; next <- Y_{j-1} (free)
    }
    // cur holds the filtered block; the other three slots are free.
    const int slots[4] = {q, z, t, p};
    int free_slots[3], nf = 0;
    for (int s : slots)
      if (s != cur) free_slots[nf++] = s;
    q = cur, z = free_slots[0], t = free_slots[1], p = free_slots[2];
    ops.deflate(q);
    orthonormalize(ops, q, t, w);
  }
  return q;
}

}  // namespace spectral

int64_t connected_components(const CsrF& graph, std::vector<int32_t>* labels, int threads) {
  return connected_components_above(graph, -std::numeric_limits<float>::infinity(), labels, threads);
}

int64_t connected_components_above(const CsrF& graph, float min_weight, std::vector<int32_t>* labels, int threads) {
  // Concurrent union-find (linking the larger root under the smaller with compare-and-swap, finds
  // with path halving): every root ends as its component's smallest node whatever the interleaving,
  // so the partition and the numbering below are the same for any thread count.
  const int64_t n = graph.n_rows;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int32_t> parent(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) parent[i] = static_cast<int32_t>(i);
  auto find = [&](int32_t x) {
    for (;;) {
      std::atomic_ref<int32_t> px(parent[x]);
      int32_t p = px.load(std::memory_order_relaxed);
      if (p == x) return x;
      const int32_t g = std::atomic_ref<int32_t>(parent[p]).load(std::memory_order_relaxed);
      if (g != p) px.compare_exchange_weak(p, g, std::memory_order_relaxed);  // path halving
      x = g;
    }
  };
  constexpr int64_t kRows = 16384;
  const bool has_floor = min_weight > -std::numeric_limits<float>::infinity();
  parallel_for(threads, (n + kRows - 1) / kRows, [&](int64_t blk) {
    const int64_t r1 = std::min(n, (blk + 1) * kRows);
    for (int64_t i = blk * kRows; i < r1; ++i)
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
        int32_t a = static_cast<int32_t>(i), b = graph.indices[p];
        if (b <= a) continue;  // the pattern is symmetric: each edge once
        if (has_floor && !(graph.data[p] >= min_weight && graph.data[p] != 0.0f)) continue;
        for (;;) {
          a = find(a), b = find(b);
          if (a == b) break;
          if (a > b) std::swap(a, b);
          int32_t expect = b;  // b is a root: hang it under the smaller root a
          if (std::atomic_ref<int32_t>(parent[b]).compare_exchange_strong(expect, a, std::memory_order_relaxed)) break;
        }
      }
  });
  std::vector<int32_t> lab(static_cast<size_t>(n));
  int32_t next = 0;
  for (int64_t i = 0; i < n; ++i) {  // roots are their components' first nodes: numbered in order
    const int32_t r = find(static_cast<int32_t>(i));
    lab[i] = r == i ? next++ : lab[r];
  }
  if (labels) *labels = std::move(lab);
  return next;
}

std::optional<DenseD> spectral_layout(const Context& ctx, const CsrF& graph, const SpectralOptions& opt,
                                      SpectralStats* stats) {
  const int64_t n = graph.n_rows, dim = opt.dim;
  if (graph.n_cols != n) fail("spectral_layout: the graph is ", n, " x ", graph.n_cols, ", not square");
  SpectralStats st;
  if (stats) *stats = st;
  if (dim < 1 || dim + 1 >= n) return std::nullopt;
  if (connected_components(graph, nullptr, ctx.threads()) != 1) return std::nullopt;
  std::vector<double> dinv(static_cast<size_t>(n));
  std::atomic<bool> isolated{false};  // (each row's sum on one thread, in CSR order: any thread count)
  parallel_for(ctx.threads(), (n + 16383) / 16384, [&](int64_t blk) {
    const int64_t r1 = std::min(n, (blk + 1) * 16384);
    for (int64_t i = blk * 16384; i < r1; ++i) {
      double s = 0;
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) s += graph.data[p];
      if (!(s > 0)) isolated = true;
      dinv[i] = s > 0 ? 1.0 / std::sqrt(s) : 0.0;
    }
  });
  if (isolated) return std::nullopt;
  DenseD out(n, dim);
  if (n <= opt.dense_max_nodes) {
    const int64_t k = dim + 1;
    DenseD m(n, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p)
        m(i, graph.indices[p]) += dinv[i] * graph.data[p] * dinv[graph.indices[p]];
    linalg::SymEigen e = linalg::eigh_top(m, k);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) out(i, c) = e.vectors(i, c + 1);
    return out;
  }
  // The block: the wanted dim vectors and the oversampling, at most n - 1 (v0 is deflated).
  const int64_t w = std::min({n - 1, dim + std::max<int64_t>(1, opt.oversample), spectral::kMaxWidth});
  if (dim > w) fail_input("spectral_layout", "n_components = ", dim, " is more than the spectral layout supports (",
                          spectral::kMaxWidth - 1, "); use init_pos random");
  constexpr int kSlots = 4;
  const auto t0 = std::chrono::steady_clock::now();
  st.gpu = ctx.cuda() != nullptr;
  linalg::SingleThreadedBlas blas_guard;
  std::unique_ptr<spectral::BlockOps> ops = st.gpu ? spectral::device_block_ops(ctx, graph, dinv, w, kSlots)
                                                    : spectral::host_block_ops(ctx, graph, dinv, w, kSlots);
  out = ops->download(spectral::chebyshev_subspace(*ops, dim, w, opt, st), dim);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info(detail::concat("spectral layout", st.gpu ? " (gpu)" : "", ": ", st.products, " products in ", st.sweeps,
                           " sweeps, residual ", st.residual, st.converged ? "" : " (not converged: the layout is still used)",
                           ", ", st.seconds, " s"));
  if (stats) *stats = st;
  return out;
}

DenseD component_layout(const DenseF& x, const std::vector<int32_t>& labels, int64_t nc, int64_t dim) {
  if (x.n_rows != static_cast<int64_t>(labels.size()) || nc <= dim)
    fail("component_layout: ", x.n_rows, " rows, ", labels.size(), " labels, ", nc, " components for ", dim, " dimensions");
  const int64_t n = x.n_rows, d = x.n_cols;
  DenseD cen(nc, d);
  std::vector<double> cnt(static_cast<size_t>(nc), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = labels[i];
    cnt[c] += 1.0;
    for (int64_t j = 0; j < d; ++j) cen(c, j) += x(i, j);
  }
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t j = 0; j < d; ++j) cen(c, j) /= cnt[c];
  // A (diagonal ignored), the degrees, N = D^-1/2 A D^-1/2 (an isolated component: degree taken as 1,
  // its row of N zero, as scipy's laplacian and sklearn's diagonal of 1 leave it).
  DenseD a(nc, nc);
  std::vector<double> w(static_cast<size_t>(nc), 0.0);
  for (int64_t p = 0; p < nc; ++p)
    for (int64_t q = 0; q < nc; ++q) {
      if (p == q) continue;
      double d2 = 0;
      for (int64_t j = 0; j < d; ++j) {
        const double t = cen(p, j) - cen(q, j);
        d2 += t * t;
      }
      a(p, q) = std::exp(-d2);
      w[p] += a(p, q);
    }
  for (double& v : w) v = v > 0 ? std::sqrt(v) : 1.0;
  for (int64_t p = 0; p < nc; ++p)
    for (int64_t q = 0; q < nc; ++q) a(p, q) /= w[p] * w[q];
  const int64_t k = dim + 1;
  const linalg::SymEigen e = linalg::eigh_top(a, k);  // descending: sklearn's order after its reversal
  DenseD out(nc, dim);
  for (int64_t v = 1; v < k; ++v) {
    // embedding / dd, then the sign that makes the largest |entry| positive (sklearn's
    // _deterministic_vector_sign_flip, on the divided vector).
    std::vector<double> col(static_cast<size_t>(nc));
    int64_t arg = 0;
    for (int64_t p = 0; p < nc; ++p) {
      col[p] = e.vectors(p, v) / w[p];
      if (std::fabs(col[p]) > std::fabs(col[arg])) arg = p;
    }
    const double sign = col[arg] < 0 ? -1.0 : 1.0;
    for (int64_t p = 0; p < nc; ++p) out(p, v - 1) = sign * col[p];
  }
  double mx = -std::numeric_limits<double>::infinity(), mabs = 0;
  for (double v : out.data) mx = std::max(mx, v), mabs = std::max(mabs, std::fabs(v));
  const double scale = mx > 0 ? mx : mabs;  // (umap divides by the maximum; guarded where it is not positive)
  if (scale > 0)
    for (double& v : out.data) v /= scale;
  return out;
}

DenseD multi_component_layout(const Context& ctx, const CsrF& graph, const std::vector<int32_t>& labels,
                              int64_t nc, const SpectralOptions& opt, const std::function<DenseF()>& data) {
  const int64_t n = graph.n_rows, dim = opt.dim;
  if (static_cast<int64_t>(labels.size()) != n || nc < 1)
    fail("multi_component_layout: ", labels.size(), " labels for ", n, " nodes, ", nc, " components");
  std::mt19937_64 rng(opt.random_state ^ 0x6d756c7469636f6dULL);
  auto uniform = [&](double lo, double hi) {
    return lo + (hi - lo) * ((static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53);
  };
  // The meta layout: one point per component.
  constexpr int64_t kMaxDenseComponents = 4000;  // the dense eigen-solve's bound (nc^2 doubles)
  DenseD meta(nc, dim);
  if (nc > 2 * dim) {
    bool placed = false;
    if (data && nc <= kMaxDenseComponents) {
      DenseF x;
      try {
        x = data();
      } catch (const std::exception& e) {  // (no representation to place them by: at random, as umap without data)
        log::info(detail::concat("umap: the components' layout points drawn at random (", e.what(), ")"));
      }
      if (x.n_rows == n && x.n_cols > 0) {
        meta = component_layout(x, labels, nc, dim);
        placed = true;
      }
    }
    if (!placed) {
      if (nc > kMaxDenseComponents)
        log::info(detail::concat("umap: ", nc, " components; their layout points drawn at random"));
      for (double& v : meta.data) v = uniform(0.0, 10.0);
    }
  } else {
    const int64_t k = (nc + 1) / 2;
    for (int64_t c = 0; c < nc; ++c) meta(c, c < k ? c : c - k) = c < k ? 1.0 : -1.0;
  }
  // Each component's half-distance to the nearest other point: all pairs for a few thousand points,
  // else the exact kNN search (many tiny components would make the pairs quadratic).
  std::vector<double> range(static_cast<size_t>(nc), 1.0);
  if (nc > kMaxDenseComponents) {
    DenseF mf(nc, dim);
    for (int64_t q = 0; q < nc * dim; ++q) mf.data[q] = static_cast<float>(meta.data[q]);
    const Knn nn = knn_exact(ctx, mf, 2, KnnMetric::euclidean);
    for (int64_t p = 0; p < nc; ++p)
      if (nn.distance(p, 1) > 0 && std::isfinite(nn.distance(p, 1))) range[p] = nn.distance(p, 1) / 2.0;
  }
  for (int64_t p = 0; p < nc && nc <= kMaxDenseComponents; ++p) {
    double best = std::numeric_limits<double>::infinity();
    for (int64_t q = 0; q < nc; ++q) {
      double d2 = 0;
      for (int64_t j = 0; j < dim; ++j) {
        const double t = meta(p, j) - meta(q, j);
        d2 += t * t;
      }
      if (d2 > 0) best = std::min(best, std::sqrt(d2));
    }
    if (std::isfinite(best)) range[p] = best / 2.0;
  }
  // The members of each component (ascending), their local numbers, and each component's layout.
  std::vector<int64_t> off(static_cast<size_t>(nc + 1), 0);
  for (int64_t i = 0; i < n; ++i) ++off[labels[i] + 1];
  for (int64_t c = 0; c < nc; ++c) off[c + 1] += off[c];
  std::vector<int32_t> members(static_cast<size_t>(n)), local(static_cast<size_t>(n));
  {
    std::vector<int64_t> pos(off.begin(), off.end() - 1);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t q = pos[labels[i]]++;
      members[q] = static_cast<int32_t>(i);
      local[i] = static_cast<int32_t>(q - off[labels[i]]);
    }
  }
  DenseD out(n, dim);
  // The dense eigen-solve (O(m^3)) only for small components: many components of a few thousand
  // cells each would otherwise cost seconds apiece (the iterative solver above: ~linear in m).
  SpectralOptions so = opt;
  so.dense_max_nodes = std::min<int64_t>(opt.dense_max_nodes, 256);
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t m = off[c + 1] - off[c];
    const int32_t* mem = members.data() + off[c];
    std::optional<DenseD> emb;
    if (m >= 2 * dim && m > dim + 1) {
      CsrF sub = CsrF::zeros(m, m);
      for (int64_t a = 0; a < m; ++a) {
        const int32_t i = mem[a];
        for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
          if (labels[graph.indices[p]] != c) continue;  // (none: a component's edges stay inside it)
          sub.indices.push_back(local[graph.indices[p]]);
          sub.data.push_back(graph.data[p]);
        }
        sub.indptr[a + 1] = static_cast<int64_t>(sub.indices.size());
      }
      emb = spectral_layout(ctx, sub, so);
    }
    if (emb) {
      double mabs = 0;
      for (double v : emb->data) mabs = std::max(mabs, std::fabs(v));
      const double expansion = mabs > 0 ? range[c] / mabs : 0.0;
      for (int64_t a = 0; a < m; ++a)
        for (int64_t j = 0; j < dim; ++j) out(mem[a], j) = (*emb)(a, j) * expansion + meta(c, j);
    } else {
      for (int64_t a = 0; a < m; ++a)
        for (int64_t j = 0; j < dim; ++j) out(mem[a], j) = uniform(-range[c], range[c]) + meta(c, j);
    }
  }
  return out;
}

namespace spectral {
std::unique_ptr<BlockOps> host_block_ops(const Context& ctx, const CsrF& graph, const std::vector<double>& dinv,
                                         int64_t w, int slots) {
  return std::make_unique<HostOps>(ctx, graph, dinv, w, slots);
}
}  // namespace spectral

}  // namespace scurry
