#include "graph/spectral.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "exec/parallel.hpp"
#include "pp/linalg.hpp"

namespace scurry {
namespace {

constexpr int64_t kRowsPerBlock = 4096;  // sparse product row blocks
constexpr int kRitzEvery = 10;           // subspace iteration: Rayleigh-Ritz period
constexpr double kRitzTol = 1e-7;        // subspace iteration: convergence of the Ritz values

// Y = B Q with B = (I + M) / 2, M = D^-1/2 A D^-1/2 (dinv = D^-1/2).
void apply(const Context& ctx, const CsrF& a, const std::vector<double>& dinv, const DenseD& q, DenseD& y) {
  const int64_t n = a.n_rows, l = q.n_cols;
  y = DenseD(n, l);
  const int64_t n_blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  parallel_for(ctx.threads(), n_blocks, [&](int64_t b) {
    const int64_t r1 = std::min(n, (b + 1) * kRowsPerBlock);
    for (int64_t i = b * kRowsPerBlock; i < r1; ++i) {
      double* yi = y.row(i);
      for (int64_t p = a.indptr[i]; p < a.indptr[i + 1]; ++p) {
        const int32_t j = a.indices[p];
        const double w = a.data[p] * dinv[j];
        const double* qj = q.row(j);
        for (int64_t c = 0; c < l; ++c) yi[c] += w * qj[c];
      }
      const double* qi = q.row(i);
      for (int64_t c = 0; c < l; ++c) yi[c] = 0.5 * (qi[c] + dinv[i] * yi[c]);
    }
  });
}

}  // namespace

int64_t connected_components(const CsrF& graph, std::vector<int32_t>* labels) {
  const int64_t n = graph.n_rows;
  std::vector<int32_t> lab(static_cast<size_t>(n), -1);
  std::vector<int64_t> stack;
  int32_t next = 0;
  for (int64_t s = 0; s < n; ++s) {
    if (lab[s] >= 0) continue;
    lab[s] = next;
    stack.push_back(s);
    while (!stack.empty()) {
      const int64_t v = stack.back();
      stack.pop_back();
      for (int64_t p = graph.indptr[v]; p < graph.indptr[v + 1]; ++p) {
        const int32_t u = graph.indices[p];
        if (lab[u] < 0) {
          lab[u] = next;
          stack.push_back(u);
        }
      }
    }
    ++next;
  }
  if (labels) *labels = std::move(lab);
  return next;
}

std::optional<DenseD> spectral_layout(const Context& ctx, const CsrF& graph, const SpectralOptions& opt) {
  const int64_t n = graph.n_rows, dim = opt.dim;
  if (graph.n_cols != n) fail("spectral_layout: the graph is ", n, " x ", graph.n_cols, ", not square");
  if (dim < 1 || dim + 1 >= n) return std::nullopt;
  if (connected_components(graph) != 1) return std::nullopt;
  std::vector<double> dinv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) s += graph.data[p];
    if (!(s > 0)) return std::nullopt;
    dinv[i] = 1.0 / std::sqrt(s);
  }
  const int64_t k = dim + 1;
  DenseD out(n, dim);
  if (n <= opt.dense_max_nodes) {
    DenseD m(n, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p)
        m(i, graph.indices[p]) += dinv[i] * graph.data[p] * dinv[graph.indices[p]];
    linalg::SymEigen e = linalg::eigh_top(m, k);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) out(i, c) = e.vectors(i, c + 1);
    return out;
  }
  const int64_t l = std::min(n, k + std::max<int64_t>(0, opt.oversample));
  DenseD q(n, l);
  {
    // Gaussian start block: mt19937_64 (a fixed sequence) through Box-Muller, the same everywhere.
    std::mt19937_64 rng(opt.random_state);
    auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
    for (double& v : q.data) v = std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform());
  }
  linalg::SingleThreadedBlas blas_guard;
  linalg::orthonormalize_columns(q);
  DenseD y, vecs;
  std::vector<double> prev(static_cast<size_t>(k), -1.0);
  for (int64_t it = 1; it <= opt.max_iter; ++it) {
    apply(ctx, graph, dinv, q, y);
    if (it % kRitzEvery == 0 || it == opt.max_iter) {
      // Rayleigh-Ritz: H = Q^T B Q, rotate Q to its eigenvectors.
      DenseD h(l, l);
      linalg::dgemm(true, false, l, l, n, 1.0, q.data.data(), l, y.data.data(), l, 0.0, h.data.data(), l);
      for (int64_t i = 0; i < l; ++i)
        for (int64_t j = 0; j < i; ++j) h(i, j) = 0.5 * (h(i, j) + h(j, i));
      linalg::SymEigen e = linalg::eigh_top(h, l);
      DenseD rot(n, l);
      linalg::dgemm(false, false, n, l, l, 1.0, y.data.data(), l, e.vectors.data.data(), l, 0.0, rot.data.data(), l);
      double change = 0;
      for (int64_t c = 0; c < k; ++c) change = std::max(change, std::fabs(e.values[c] - prev[c])), prev[c] = e.values[c];
      linalg::dgemm(false, false, n, l, l, 1.0, q.data.data(), l, e.vectors.data.data(), l, 0.0, y.data.data(), l);
      vecs = y;  // Ritz vectors (Q times the eigenvectors of H)
      if (change < kRitzTol || it == opt.max_iter) break;
      q = std::move(rot);
    } else {
      q = std::move(y);
    }
    linalg::orthonormalize_columns(q);
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) out(i, c) = vecs(i, c + 1);
  return out;
}

}  // namespace scurry
