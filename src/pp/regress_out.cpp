#include "pp/regress_out.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "pp/linalg.hpp"
#include "pp/obs_groups.hpp"

namespace scurry {
namespace {

// Rows per block: a fixed partition (independent of the thread count) whose float64 copy of one
// block stays near 8 MB for 2,000 genes.
constexpr int64_t kBlockValues = int64_t{1} << 20;

RowBlocks blocks_for(const DenseF& Y) {
  return RowBlocks::uniform(Y.n_rows, std::max<int64_t>(1, kBlockValues / std::max<int64_t>(1, Y.n_cols)));
}

// Per gene: 1 if some value differs from the first row's (scanpy skips constant genes).
std::vector<uint8_t> varying_genes(const Context& ctx, const DenseF& Y, const RowBlocks& rb) {
  const size_t g = static_cast<size_t>(Y.n_cols);
  std::vector<double> acc;
  if (Y.n_rows == 0) return std::vector<uint8_t>(g, 0);
  const float* first = Y.row(0);
  reduce_blocks(ctx.threads(), rb.n_blocks(), g, acc, [&](int64_t b, double* part) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      const float* y = Y.row(r);
      for (size_t j = 0; j < g; ++j) part[j] += (y[j] != first[j]) ? 1.0 : 0.0;
    }
  });
  std::vector<uint8_t> out(g);
  for (size_t j = 0; j < g; ++j) out[j] = acc[j] > 0 ? 1 : 0;
  return out;
}

}  // namespace

namespace detail {

// Orthonormal basis of the design's columns (n x q, q <= p), modified Gram-Schmidt applied twice
// per column ("twice is enough", Giraud et al. 2005); columns whose remainder is below 1e-10 of
// their norm are dropped.
DenseD orthonormal_basis(const DenseD& D) {
  const int64_t n = D.n_rows, p = D.n_cols;
  std::vector<std::vector<double>> q;
  for (int64_t c = 0; c < p; ++c) {
    std::vector<double> v(static_cast<size_t>(n));
    double norm0 = 0;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = D(i, c);
      norm0 += v[i] * v[i];
    }
    norm0 = std::sqrt(norm0);
    if (!(norm0 > 0)) continue;
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& u : q) {
        double dot = 0;
        for (int64_t i = 0; i < n; ++i) dot += u[i] * v[i];
        for (int64_t i = 0; i < n; ++i) v[i] -= dot * u[i];
      }
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    if (norm <= 1e-10 * norm0) continue;
    for (double& x : v) x /= norm;
    q.push_back(std::move(v));
  }
  DenseD Q(n, static_cast<int64_t>(q.size()));
  for (size_t c = 0; c < q.size(); ++c)
    for (int64_t i = 0; i < n; ++i) Q(i, static_cast<int64_t>(c)) = q[c][i];
  return Q;
}

std::vector<double> categorical_fit(const std::vector<double>& S, const std::vector<double>& nc,
                                    const std::vector<uint8_t>& vary, int64_t n, int32_t k, int64_t g) {
  // Per gene: the category means m_c (rounded to float32, as scanpy's regressors), then OLS of y on
  // [1, m]: b = cov(m, y) / var(m), a = mean(y) - b mean(m); fitted value of category c: a + b m_c.
  std::vector<double> fitted(static_cast<size_t>(k * g), 0.0);
  const double dn = static_cast<double>(n);
  for (int64_t j = 0; j < g; ++j) {
    if (!vary[j]) continue;
    double ybar = 0, mbar = 0;
    std::vector<double> m(static_cast<size_t>(k), 0.0);
    for (int32_t c = 0; c < k; ++c) {
      if (nc[c] == 0) continue;
      m[c] = static_cast<double>(static_cast<float>(S[c * g + j] / nc[c]));
      ybar += S[c * g + j];
      mbar += nc[c] * m[c];
    }
    ybar /= dn;
    mbar /= dn;
    double cov = 0, var = 0;
    for (int32_t c = 0; c < k; ++c) {
      if (nc[c] == 0) continue;
      const double dm = m[c] - mbar;
      cov += dm * (S[c * g + j] - nc[c] * ybar);
      var += nc[c] * dm * dm;
    }
    // m constant (within rounding): the design is rank one and the fit is the mean.
    const double scale = std::max(1.0, std::fabs(mbar));
    const double slope = var > 1e-24 * dn * scale * scale ? cov / var : 0.0;
    for (int32_t c = 0; c < k; ++c) fitted[c * g + j] = ybar + slope * (m[c] - mbar);
  }
  return fitted;
}

}  // namespace detail

void regress_out_design(const Context& ctx, DenseF& Y, const DenseD& design) {
  const int64_t n = Y.n_rows, g = Y.n_cols;
  if (design.n_rows != n)
    fail("regress_out: the design has ", design.n_rows, " rows for ", n, " cells");
  for (double v : design.data)
    if (!std::isfinite(v)) fail_input("regress_out", "a regressor has a missing or infinite value");
  if (n == 0 || g == 0) return;
  const DenseD Q = detail::orthonormal_basis(design);
  const int64_t q = Q.n_cols;
  const RowBlocks rb = blocks_for(Y);
  const std::vector<uint8_t> vary = varying_genes(ctx, Y, rb);
  linalg::SingleThreadedBlas single;
  // C = Q^T Y (q x g), float64, block partials added in block order.
  std::vector<double> C;
  reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(q * g), C, [&](int64_t b, double* part) {
    const int64_t r0 = rb.begin(b), m = rb.end(b) - r0;
    std::vector<double> yb(Y.data.begin() + r0 * g, Y.data.begin() + (r0 + m) * g);
    linalg::dgemm(true, false, q, g, m, 1.0, Q.row(r0), q, yb.data(), g, 0.0, part, g);
  });
  for (int64_t j = 0; j < g; ++j)
    if (!vary[j])
      for (int64_t c = 0; c < q; ++c) C[c * g + j] = 0.0;
  // Y -= Q C, per block.
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    const int64_t r0 = rb.begin(b), m = rb.end(b) - r0;
    std::vector<double> fit(static_cast<size_t>(m * g));
    linalg::dgemm(false, false, m, g, q, 1.0, Q.row(r0), q, C.data(), g, 0.0, fit.data(), g);
    float* y = Y.row(r0);
    for (int64_t k = 0; k < m * g; ++k) y[k] = static_cast<float>(static_cast<double>(y[k]) - fit[k]);
  });
}

void regress_out_categorical(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes, int32_t k) {
  const int64_t n = Y.n_rows, g = Y.n_cols;
  if (static_cast<int64_t>(codes.size()) != n) fail("regress_out: ", codes.size(), " codes for ", n, " cells");
  if (n == 0 || g == 0) return;
  const RowBlocks rb = blocks_for(Y);
  const std::vector<uint8_t> vary = varying_genes(ctx, Y, rb);
  std::vector<double> S;  // per category and gene: sum of y
  reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(k * g), S, [&](int64_t b, double* part) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      const float* y = Y.row(r);
      double* s = part + static_cast<int64_t>(codes[r]) * g;
      for (int64_t j = 0; j < g; ++j) s[j] += y[j];
    }
  });
  std::vector<double> nc(static_cast<size_t>(k), 0.0);
  for (int32_t c : codes) nc[c] += 1.0;
  const std::vector<double> fitted = detail::categorical_fit(S, nc, vary, n, k, g);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      float* y = Y.row(r);
      const double* f = fitted.data() + static_cast<int64_t>(codes[r]) * g;
      for (int64_t j = 0; j < g; ++j)
        if (vary[j]) y[j] = static_cast<float>(static_cast<double>(y[j]) - f[j]);
    }
  });
}

void regress_out(const Context& ctx, Dataset& d, const RegressOutOptions& opt) {
  const char* where = "regress_out";
  if (opt.keys.empty()) fail_input(where, "no keys given: name the obs columns to regress out (e.g. total_counts,pct_counts_mt)");
  Matrix* slot = &d.X;
  if (!opt.layer.empty()) {
    auto it = d.layers.find(opt.layer);
    if (it == d.layers.end()) fail_input(where, "no layer '", opt.layer, "'");
    slot = &it->second;
  }
  if (slot->empty()) fail_input(where, "the matrix is empty");
  const int64_t n = d.n_obs();
  for (const auto& k : opt.keys)
    if (!d.obs.has(k)) fail_input(where, "obs has no column '", k, "' (obs columns: ", list_columns(d.obs), ")");
  const Column& first = d.obs.at(opt.keys[0]);
  const bool categorical = std::holds_alternative<CategoricalColumn>(first.c) || std::holds_alternative<StringColumn>(first.c);
  DenseF Y = to_dense_f(*slot);
  if (categorical) {
    if (opt.keys.size() > 1)
      fail_input(where, "key '", opt.keys[0], "' is categorical: regress out one categorical key alone, or numeric keys only");
    const ObsGroups gr = obs_groups(d.obs, opt.keys[0], where);
    if (ctx.backend() == Backend::cuda)
      regress_out_categorical_gpu(ctx, Y, gr.codes, gr.n());
    else
      regress_out_categorical(ctx, Y, gr.codes, gr.n());
  } else {
    DenseD D(n, static_cast<int64_t>(opt.keys.size()) + 1);
    for (int64_t i = 0; i < n; ++i) D(i, 0) = 1.0;
    for (size_t c = 0; c < opt.keys.size(); ++c) {
      const Column& col = d.obs.at(opt.keys[c]);
      if (auto* p = std::get_if<NumericColumn>(&col.c)) {
        for (int64_t i = 0; i < n; ++i) D(i, c + 1) = p->values[i];
      } else if (auto* bcol = std::get_if<BoolColumn>(&col.c)) {
        for (int64_t i = 0; i < n; ++i) D(i, c + 1) = bcol->values[i];
      } else {
        fail_input(where, "obs column '", opt.keys[c], "' is ", col.kind(), "; with several keys every key must be numeric");
      }
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(D(i, c + 1))) fail_input(where, "obs column '", opt.keys[c], "' has a missing or infinite value at cell ", i);
    }
    if (ctx.backend() == Backend::cuda)
      regress_out_design_gpu(ctx, Y, D);
    else
      regress_out_design(ctx, Y, D);
  }
  *slot = Matrix(std::move(Y), DType::f32);
}

}  // namespace scurry
