// scurry: sklearn's init='nndsvd' (see nmf.hpp): Boutsidis & Gallopoulos (2008), "SVD based
// initialization: A head start for nonnegative matrix factorization", Pattern Recognition 41(4).
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "nmf/nmf.hpp"
#include "nmf/numpy_random.hpp"
#include "pp/linalg.hpp"

namespace scurry {

namespace {

constexpr int64_t kRowsPerBlock = 1024;

// Y = X M (X: n x g CSR, M: g x l row-major), rows in fixed blocks.
DenseD times(const Context& ctx, const CsrF& X, const DenseD& M) {
  const int64_t l = M.n_cols;
  DenseD Y(X.n_rows, l);
  const RowBlocks rb = RowBlocks::uniform(X.n_rows, kRowsPerBlock);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i)
      for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) {
        const double v = X.data[p];
        const double* m = M.row(X.indices[p]);
        double* y = Y.row(i);
        for (int64_t c = 0; c < l; ++c) y[c] += v * m[c];
      }
  });
  return Y;
}

// Z = X^T Q (g x l): per-block partials added in block order (the same bits for any thread count).
DenseD times_t(const Context& ctx, const CsrF& X, const DenseD& Q) {
  const int64_t l = Q.n_cols, g = X.n_cols;
  const RowBlocks rb = RowBlocks::uniform(X.n_rows, kRowsPerBlock);
  std::vector<double> acc;
  reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(g * l), acc, [&](int64_t b, double* z) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i)
      for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) {
        const double v = X.data[p];
        const double* q = Q.row(i);
        double* zz = z + static_cast<int64_t>(X.indices[p]) * l;
        for (int64_t c = 0; c < l; ++c) zz[c] += v * q[c];
      }
  });
  DenseD Z(g, l);
  Z.data = std::move(acc);
  return Z;
}

}  // namespace

NmfBatch nmf_nndsvd_init(const Context& ctx, const CsrF& X, int k, const std::vector<uint64_t>& seeds, double eps) {
  if (k < 1) fail_input("NMF", "the number of components k must be at least 1 (got ", k, ")");
  if (seeds.empty()) fail("nmf_nndsvd_init: no seeds");
  const int64_t n = X.n_rows, g = X.n_cols;
  if (k > std::min(n, g)) fail_input("NMF", "init nndsvd needs k <= min(cells, genes) (k = ", k, ")");
  // Randomised SVD (Halko, Martinsson & Tropp 2011), as sklearn's randomized_svd: 10 oversamples,
  // 7 power iterations when k < 0.1 min(n, g) (else 4), each step re-orthonormalised (QR).
  const int64_t l = std::min<int64_t>(k + 10, std::min(n, g));
  const int power = k < 0.1 * static_cast<double>(std::min(n, g)) ? 7 : 4;
  NumpyRandomState rng(static_cast<uint32_t>(seeds[0] <= 0xffffffffull ? seeds[0] : (seeds[0] ^ (seeds[0] >> 32))));
  DenseD omega(g, l);
  for (auto& v : omega.data) v = rng.standard_normal();
  DenseD Q = times(ctx, X, omega);
  linalg::orthonormalize_columns(Q);
  for (int it = 0; it < power; ++it) {
    DenseD Z = times_t(ctx, X, Q);
    linalg::orthonormalize_columns(Z);
    Q = times(ctx, X, Z);
    linalg::orthonormalize_columns(Q);
  }
  // B = Q^T X (l x g) = (X^T Q)^T; its SVD gives X ~ (Q Ub) S Vt.
  const DenseD Bt = times_t(ctx, X, Q);  // g x l
  DenseD B(l, g);
  for (int64_t j = 0; j < g; ++j)
    for (int64_t c = 0; c < l; ++c) B(c, j) = Bt(j, c);
  const linalg::Svd sv = linalg::svd_thin(B);
  // U = Q Ub (n x k), V = Vt (k x g).
  DenseD U(n, k);
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < k; ++c) {
      double s = 0;
      for (int64_t q = 0; q < l; ++q) s += Q(i, q) * sv.u(q, c);
      U(i, c) = s;
    }
  // NNDSVD: the leading pair from |u1|, |v1|; each further pair from the dominant sign part.
  DenseF W(n, k), H(k, g);
  for (int c = 0; c < k; ++c) {
    const double S = sv.s[c];
    if (c == 0) {
      const double r = std::sqrt(S);
      for (int64_t i = 0; i < n; ++i) W(i, 0) = static_cast<float>(r * std::fabs(U(i, 0)));
      for (int64_t j = 0; j < g; ++j) H(0, j) = static_cast<float>(r * std::fabs(sv.vt(0, j)));
      continue;
    }
    double xp = 0, xn = 0, yp = 0, yn = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = U(i, c);
      (x > 0 ? xp : xn) += x * x;
    }
    for (int64_t j = 0; j < g; ++j) {
      const double y = sv.vt(c, j);
      (y > 0 ? yp : yn) += y * y;
    }
    xp = std::sqrt(xp), xn = std::sqrt(xn), yp = std::sqrt(yp), yn = std::sqrt(yn);
    const double mp = xp * yp, mn = xn * yn;
    const bool pos = mp > mn;
    const double sigma = pos ? mp : mn, xnrm = pos ? xp : xn, ynrm = pos ? yp : yn;
    const double lbd = std::sqrt(S * sigma);
    for (int64_t i = 0; i < n; ++i) {
      const double x = U(i, c);
      const double part = pos ? std::max(x, 0.0) : std::max(-x, 0.0);
      W(i, c) = static_cast<float>(xnrm > 0 ? lbd * part / xnrm : 0.0);
    }
    for (int64_t j = 0; j < g; ++j) {
      const double y = sv.vt(c, j);
      const double part = pos ? std::max(y, 0.0) : std::max(-y, 0.0);
      H(c, j) = static_cast<float>(ynrm > 0 ? lbd * part / ynrm : 0.0);
    }
  }
  for (auto& v : W.data)
    if (v < eps) v = 0;
  for (auto& v : H.data)
    if (v < eps) v = 0;
  // Every replicate starts from the same factors (sklearn: the SVD's random state is the replicate
  // seed, but converged to the top singular subspace the factors agree up to rounding).
  std::vector<NmfBatch> parts(seeds.size(), NmfBatch::from(W, H));
  return seeds.size() == 1 ? parts[0] : nmf_batch_concat(parts);
}

}  // namespace scurry
