// scurry: diffusion maps and diffusion pseudotime (see diffmap.hpp).
#include "tl/diffmap.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/spectral.hpp"
#include "graph/umap.hpp"
#include "pp/linalg.hpp"

namespace scurry {

namespace {

constexpr int64_t kRowBlock = 4096;

int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }

// y = T x (rows in fixed blocks: the same bits for any thread count).
void spmv(const CsrD& T, const double* x, double* y, int threads) {
  parallel_for(threads, blocks_of(T.n_rows, kRowBlock), [&](int64_t b) {
    for (int64_t i = b * kRowBlock; i < std::min(T.n_rows, (b + 1) * kRowBlock); ++i) {
      double s = 0;
      for (int64_t e = T.indptr[i]; e < T.indptr[i + 1]; ++e) s += T.data[e] * x[T.indices[e]];
      y[i] = s;
    }
  });
}

// Indices of the m values of largest magnitude, then ordered by decreasing value.
std::vector<int64_t> pick_largest_magnitude(const std::vector<double>& vals, int64_t m) {
  std::vector<int64_t> idx(vals.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return std::abs(vals[a]) > std::abs(vals[b]); });
  idx.resize(static_cast<size_t>(m));
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return vals[a] > vals[b]; });
  return idx;
}

struct Pairs {
  std::vector<double> values;
  DenseD vectors;  // n x m
  int64_t steps = 0;
};

Pairs eigen_dense(const CsrD& T, int64_t m) {
  const int64_t n = T.n_rows;
  auto dense = [&](double sign) {
    DenseD a(n, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = T.indptr[i]; e < T.indptr[i + 1]; ++e) a(i, T.indices[e]) += sign * T.data[e];
    return a;
  };
  DenseD top = dense(1.0), bottom = dense(-1.0);
  const linalg::SymEigen hi = linalg::eigh_top(top, m);
  const linalg::SymEigen lo = linalg::eigh_top(bottom, std::min<int64_t>(m, n - m > 0 ? m : 1));
  std::vector<double> vals = hi.values;
  for (double v : lo.values) vals.push_back(-v);
  // Both ends may overlap for tiny n: keep the top end's copy (it comes first in vals).
  std::vector<int64_t> pick = pick_largest_magnitude(vals, m);
  Pairs out;
  out.vectors = DenseD(n, m);
  for (int64_t c = 0; c < m; ++c) {
    const int64_t j = pick[c];
    out.values.push_back(vals[j]);
    const bool from_hi = j < static_cast<int64_t>(hi.values.size());
    const DenseD& src = from_hi ? hi.vectors : lo.vectors;
    const int64_t col = from_hi ? j : j - static_cast<int64_t>(hi.values.size());
    for (int64_t i = 0; i < n; ++i) out.vectors(i, c) = src(i, col);
  }
  return out;
}

// Lanczos with full reorthogonalisation; the Krylov space grows until the m Ritz pairs of largest
// magnitude have residuals beta_k |s_kj| <= tol.
Pairs eigen_lanczos(const CsrD& T, int64_t m, const DiffmapOptions& opt, int threads) {
  const int64_t n = T.n_rows;
  const int64_t max_steps = std::min<int64_t>(n, std::max<int64_t>(40 * m, 600));
  std::vector<double> Q;  // steps x n, row j = Lanczos vector j
  std::vector<double> alpha, beta;
  std::vector<double> q(static_cast<size_t>(n)), w(static_cast<size_t>(n));
  std::mt19937_64 rng(opt.random_state);
  std::normal_distribution<double> nd(0, 1);
  double nrm = 0;
  for (auto& v : q) {
    v = nd(rng);
    nrm += v * v;
  }
  nrm = std::sqrt(nrm);
  for (auto& v : q) v /= nrm;
  Pairs out;
  int64_t check_at = std::min<int64_t>(max_steps, std::max<int64_t>(3 * m, 60));
  for (int64_t k = 0; k < max_steps; ++k) {
    Q.insert(Q.end(), q.begin(), q.end());
    spmv(T, q.data(), w.data(), threads);
    double a = 0;
    for (int64_t i = 0; i < n; ++i) a += w[i] * q[i];
    alpha.push_back(a);
    // Full reorthogonalisation against every previous vector (classical Gram-Schmidt, twice).
    const int64_t rows = k + 1;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<double> h(static_cast<size_t>(rows), 0.0);
      parallel_for(threads, rows, [&](int64_t j) {
        const double* qj = &Q[static_cast<size_t>(j * n)];
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += qj[i] * w[i];
        h[j] = s;
      });
      parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
        for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
          double s = w[i];
          for (int64_t j = 0; j < rows; ++j) s -= h[j] * Q[static_cast<size_t>(j * n + i)];
          w[i] = s;
        }
      });
    }
    double bn = 0;
    for (double v : w) bn += v * v;
    bn = std::sqrt(bn);
    const bool exhausted = bn < 1e-12 || k + 1 == max_steps;
    if (k + 1 >= check_at || exhausted) {
      // Ritz pairs of the tridiagonal matrix.
      const int64_t s = k + 1;
      DenseD Tk(s, s);
      for (int64_t j = 0; j < s; ++j) {
        Tk(j, j) = alpha[j];
        if (j + 1 < s) Tk(j + 1, j) = Tk(j, j + 1) = beta[j];
      }
      const linalg::SymEigen ev = linalg::eigh_top(Tk, s);
      const int64_t want = std::min(m, s);
      const std::vector<int64_t> pick = pick_largest_magnitude(ev.values, want);
      double worst = 0;
      for (int64_t j : pick) worst = std::max(worst, bn * std::abs(ev.vectors(s - 1, j)));
      if ((worst <= opt.tol && want == m) || exhausted) {
        out.steps = s;
        out.vectors = DenseD(n, want);
        for (int64_t c = 0; c < want; ++c) {
          const int64_t j = pick[c];
          out.values.push_back(ev.values[j]);
        }
        parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
          for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i)
            for (int64_t c = 0; c < want; ++c) {
              double v = 0;
              for (int64_t r = 0; r < s; ++r) v += Q[static_cast<size_t>(r * n + i)] * ev.vectors(r, pick[c]);
              out.vectors(i, c) = v;
            }
        });
        if (worst > opt.tol)
          log::warn(detail::concat("diffmap: Lanczos stopped after ", s, " steps with residual ", worst,
                                   " above tol ", opt.tol));
        return out;
      }
      check_at = std::min(max_steps, check_at + std::max<int64_t>(20, check_at / 4));
    }
    beta.push_back(bn);
    for (int64_t i = 0; i < n; ++i) q[i] = w[i] / bn;
  }
  fail("internal: diffmap Lanczos ended without a result");
}

}  // namespace

CsrD diffusion_transitions_sym(const CsrF& W) {
  const int64_t n = W.n_rows;
  std::vector<double> q(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = W.indptr[i]; e < W.indptr[i + 1]; ++e) q[W.indices[e]] += W.data[e];
  CsrD K;
  K.n_rows = K.n_cols = n;
  K.indptr = W.indptr;
  K.indices = W.indices;
  K.data.resize(W.data.size());
  std::vector<double> z(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = W.indptr[i]; e < W.indptr[i + 1]; ++e) {
      const int64_t j = W.indices[e];
      K.data[e] = static_cast<double>(W.data[e]) / (q[i] * q[j]);
      z[j] += K.data[e];
    }
  for (auto& v : z) v = std::sqrt(v);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = K.indptr[i]; e < K.indptr[i + 1]; ++e) K.data[e] /= z[i] * z[K.indices[e]];
  return K;
}

DiffmapResult diffmap(const Context& ctx, const CsrF& W, const DiffmapOptions& opt) {
  const int64_t n = W.n_rows;
  if (W.n_cols != n) fail_input("diffmap", "the connectivities are ", n, " x ", W.n_cols, ", not square");
  if (opt.n_comps < 1) fail_input("diffmap", "n_comps = ", opt.n_comps, " must be positive");
  for (int64_t i = 0; i < n; ++i)
    if (W.indptr[i + 1] == W.indptr[i])
      fail_input("diffmap", "cell ", i, " has no neighbours in the connectivities; recompute the neighbours");
  const int64_t m = std::min(n - 1, opt.n_comps);  // scanpy: min(n - 1, n_comps)
  const CsrD T = diffusion_transitions_sym(W);
  Pairs p = n <= opt.dense_max_cells ? eigen_dense(T, m) : eigen_lanczos(T, m, opt, ctx.threads());
  DiffmapResult res;
  res.lanczos_steps = p.steps;
  res.evals = p.values;
  res.components = DenseF(n, m);
  for (int64_t c = 0; c < m; ++c) {
    double big = 0;
    for (int64_t i = 0; i < n; ++i)
      if (std::abs(p.vectors(i, c)) > std::abs(big)) big = p.vectors(i, c);
    const double s = big < 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < n; ++i) res.components(i, c) = static_cast<float>(s * p.vectors(i, c));
  }
  return res;
}

DiffmapResult diffmap(const Context& ctx, Dataset& d, const DiffmapOptions& opt) {
  if (opt.n_comps <= 2) fail_input("diffmap", "n_comps = ", opt.n_comps, "; pass a value greater than 2 (as scanpy)");
  const CsrF g = neighbors_graph(d, opt.neighbors_key, "diffmap");
  DiffmapResult res = diffmap(ctx, g, opt);
  d.obsm["X_diffmap"] = Matrix(res.components, DType::f32);
  NumArray ev;
  ev.shape = {static_cast<int64_t>(res.evals.size())};
  for (double v : res.evals) ev.data.push_back(static_cast<double>(static_cast<float>(v)));
  ev.dtype = DType::f32;
  d.uns["diffmap_evals"] = Value(std::move(ev));
  log::info(detail::concat("diffmap: ", res.evals.size(), " components of ", g.n_rows, " cells (",
                           res.lanczos_steps ? detail::concat("Lanczos, ", res.lanczos_steps, " steps")
                                             : std::string("dense solver"),
                           "), eigenvalues ", res.evals.front(), " ... ", res.evals.back()));
  return res;
}

std::vector<double> dpt_pseudotime(const DenseF& V, const std::vector<double>& evals, int64_t n_dcs, int64_t root,
                                   const std::vector<int32_t>& component) {
  const int64_t n = V.n_rows;
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t l = 0; l < n_dcs; ++l) {
      // scanpy works in float32 eigenvalues and vectors.
      const double lam = static_cast<double>(static_cast<float>(evals[l]));
      const double diff = static_cast<double>(V(root, l)) - static_cast<double>(V(i, l));
      const double f = lam < 0.9994 ? lam / (1 - lam) : 1.0;
      s += f * f * diff * diff;
    }
    out[i] = std::sqrt(s);
    if (!component.empty() && component[i] != component[root]) out[i] = std::numeric_limits<double>::infinity();
  }
  double mx = 0;
  for (double v : out)
    if (std::isfinite(v)) mx = std::max(mx, v);
  if (mx > 0)
    for (auto& v : out) v /= mx;
  return out;
}

std::vector<double> dpt(const Context& ctx, Dataset& d, const DptOptions& opt) {
  int64_t root = -1;
  if (opt.root_cell) {
    root = *opt.root_cell;
  } else {
    auto it = d.uns.find("iroot");
    if (it == d.uns.end())
      fail_input("dpt", "no root cell: pass --root-cell (root_cell) or set uns['iroot'] to a cell index");
    if (auto* i = std::get_if<int64_t>(&it->second.v)) root = *i;
    else if (auto* x = std::get_if<double>(&it->second.v)) root = static_cast<int64_t>(*x);
    else if (auto* a = std::get_if<NumArray>(&it->second.v); a && a->data.size() == 1) root = static_cast<int64_t>(a->data[0]);
    else fail_input("dpt", "uns['iroot'] is not an integer cell index");
  }
  if (root < 0 || root >= d.n_obs())
    fail_input("dpt", "root cell ", root, " is out of range: the dataset has ", d.n_obs(), " cells");
  if (opt.n_dcs < 2) fail_input("dpt", "n_dcs = ", opt.n_dcs, " must be at least 2");
  if (!d.obsm.count("X_diffmap")) {
    DiffmapOptions dm;
    dm.n_comps = opt.n_dcs;
    dm.neighbors_key = opt.neighbors_key;
    diffmap(ctx, d, dm);
  }
  const DenseF V = to_dense_f(d.obsm.at("X_diffmap"));
  std::vector<double> evals;
  auto ev = d.uns.find("diffmap_evals");
  if (ev == d.uns.end() || !std::holds_alternative<NumArray>(ev->second.v))
    fail_input("dpt", "obsm['X_diffmap'] is there but uns['diffmap_evals'] is not; rerun diffmap");
  evals = std::get<NumArray>(ev->second.v).data;
  if (opt.n_dcs > V.n_cols || opt.n_dcs > static_cast<int64_t>(evals.size()))
    fail_input("dpt", "n_dcs = ", opt.n_dcs, " but obsm['X_diffmap'] has ", V.n_cols,
               " components; rerun diffmap with n_comps >= n_dcs");
  const CsrF g = neighbors_graph(d, opt.neighbors_key, "dpt");
  std::vector<int32_t> comp;
  const int64_t ncomp = connected_components(g, &comp, ctx.threads());
  if (ncomp == 1) comp.clear();
  std::vector<double> pt = dpt_pseudotime(V, evals, opt.n_dcs, root, comp);
  d.obs.set("dpt_pseudotime", Column::numeric(pt));
  d.uns["iroot"] = Value(root);
  log::info(detail::concat("dpt: pseudotime of ", d.n_obs(), " cells from root ", root, " (", opt.n_dcs,
                           " diffusion components", ncomp > 1 ? detail::concat(", ", ncomp, " connected components") : "",
                           ")"));
  return pt;
}

}  // namespace scurry
