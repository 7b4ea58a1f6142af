#include "pp/scale.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/cancel.hpp"
#include "core/error.hpp"
#include "core/matrix_view.hpp"
#include "core/memory.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"

namespace scurry {
void validate_scale_options(const ScaleOptions& opt) {
  if (opt.max_value && !(*opt.max_value > 0.0))
    fail_input("scale", "max_value=", *opt.max_value, " must be a positive number (e.g. 10), or none for no clipping");
}

namespace {

// Fixed block partition (independent of the thread count): see pp/qc.cpp.
constexpr int64_t kBlockNnz = int64_t{1} << 18;


template <class T, class I, class P>
RowBlocks blocks_of(const CsrView<T, I, P>& X) { return row_blocks_by_nnz(X.indptr, X.n_rows, kBlockNnz); }
template <class T>
RowBlocks blocks_of(const DenseView<T>& X) {
  return RowBlocks::uniform(X.n_rows, std::max<int64_t>(1, kBlockNnz / std::max<int64_t>(1, X.n_cols)));
}
template <class T, class I, class P, class F>
void for_row(const CsrView<T, I, P>& X, int64_t r, F&& f) {
  for (int64_t p = X.row_begin(r); p < X.row_end(r); ++p) f(static_cast<size_t>(X.indices[p]), static_cast<float>(X.data[p]));
}
template <class T, class F>
void for_row(const DenseView<T>& X, int64_t r, F&& f) {
  const T* p = X.row(r);
  for (int64_t c = 0; c < X.n_cols; ++c) f(static_cast<size_t>(c), static_cast<float>(p[c]));
}

// n_rows: this rank's; the check is on the cells of all ranks.
void check(const Context& ctx, int64_t n_rows, const ScaleOptions& opt) {
  ctx.comm().allreduce_sum(&n_rows, 1);
  if (n_rows < 2)
    fail_input("scale", "the matrix has ", n_rows, " cell(s); the standard deviation (ddof=1) needs at least 2");
  validate_scale_options(opt);
}

// Per-gene mean and std (ddof=1) as scanpy 1.9.6: centred (its dense path) from float64 sums of the
// values and of their float32 squares, var = E[x^2] - mean^2; uncentred sparse from the two-pass
// sum of squared deviations (its sparse path).
template <class M>
ScaleResult stats(const Context& ctx, const M& X, bool two_pass) {
  const int64_t n = X.n_rows;
  const size_t g = static_cast<size_t>(X.n_cols);
  const RowBlocks rb = blocks_of(X);
  std::vector<double> acc;  // [0,g) sum, [g,2g) sum of float32 squares, [2g,3g) stored count
  reduce_blocks(ctx.threads(), rb.n_blocks(), 3 * g, acc, [&](int64_t b, double* part) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r)
      for_row(X, r, [&](size_t j, float v) {
        const float sq = v * v;
        part[j] += static_cast<double>(v);
        part[g + j] += static_cast<double>(sq);
        part[2 * g + j] += 1.0;
      });
  });
  int64_t n_total = n;
  ctx.comm().allreduce_sum(acc.data(), acc.size());
  ctx.comm().allreduce_sum(&n_total, 1);
  const double dn = static_cast<double>(n_total);
  ScaleResult res;
  res.mean.resize(g);
  res.std.resize(g);
  std::vector<double> var(g);
  for (size_t j = 0; j < g; ++j) {
    res.mean[j] = acc[j] / dn;
    var[j] = acc[g + j] / dn - res.mean[j] * res.mean[j];
  }
  if (two_pass) {
    std::vector<double> dev;
    reduce_blocks(ctx.threads(), rb.n_blocks(), g, dev, [&](int64_t b, double* part) {
      for (int64_t r = rb.begin(b); r < rb.end(b); ++r)
        for_row(X, r, [&](size_t j, float v) {
          const double d = static_cast<double>(v) - res.mean[j];
          part[j] += d * d;
        });
    });
    ctx.comm().allreduce_sum(dev.data(), dev.size());
    for (size_t j = 0; j < g; ++j)
      var[j] = (dev[j] + (dn - acc[2 * g + j]) * res.mean[j] * res.mean[j]) / dn;
  }
  for (size_t j = 0; j < g; ++j) {
    const double v = var[j] * (dn / (dn - 1.0));
    const double s = v > 0.0 ? std::sqrt(v) : 0.0;  // a negative var is rounding of a constant gene
    res.std[j] = s == 0.0 ? 1.0 : s;
  }
  return res;
}

struct Clip {
  bool hi = false, lo = false;
  float top = 0.0f, bottom = 0.0f;
  double top_d = 0.0;
  explicit Clip(const ScaleOptions& opt) {
    if (opt.max_value) {
      hi = true;
      top = static_cast<float>(*opt.max_value);
      top_d = *opt.max_value;
      lo = opt.clip_below && opt.zero_center;
      bottom = -top;
    }
  }
  float operator()(float y) const {
    if (hi && static_cast<double>(y) > top_d) return top;
    if (lo && static_cast<double>(y) < -top_d) return bottom;
    return y;
  }
};

// x -> float(float(x - mean) / std) (scanpy's in-place float32 `X -= mean; X /= std`).
inline float centred(float x, double mean, double std) {
  const float t = static_cast<float>(static_cast<double>(x) - mean);
  return static_cast<float>(static_cast<double>(t) / std);
}

void scale_dense_values(const Context& ctx, const DenseView<float>& X, const ScaleResult& st, const ScaleOptions& opt) {
  const RowBlocks rb = blocks_of(X);
  const Clip clip(opt);
  const int64_t g = X.n_cols;
  const CancelShield shield;  // the writing pass is not cut in the middle (core/cancel.hpp)
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      float* p = X.row(r);
      for (int64_t j = 0; j < g; ++j) {
        const size_t u = static_cast<size_t>(j);
        const float y = opt.zero_center ? centred(p[j], st.mean[u], st.std[u])
                                        : static_cast<float>(static_cast<double>(p[j]) / st.std[u]);
        p[j] = clip(y);
      }
    }
  });
}

// Centred, a sparse input: densify, every row starting from the scaled zero of each gene, then its
// nonzeros written.
template <class I, class P>
ScaleResult scale_csr_centred(const Context& ctx, const CsrView<const float, I, P>& X, const ScaleOptions& opt) {
  check(ctx, X.n_rows, opt);
  ScaleResult st = stats(ctx, X, false);
  const RowBlocks rb = blocks_of(X);
  const Clip clip(opt);
  const size_t g = static_cast<size_t>(X.n_cols);
  std::vector<float> zero(g);
  for (size_t j = 0; j < g; ++j) zero[j] = clip(centred(0.0f, st.mean[j], st.std[j]));
  // (its pages faulted in as huge pages on several threads first: a cold multi-GB buffer otherwise
  // costs more in page faults on one thread than the pass that fills it)
  DenseF Y;
  Y.n_rows = X.n_rows, Y.n_cols = X.n_cols;
  resize_large(Y.data, static_cast<size_t>(X.n_rows) * g);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      float* y = Y.row(r);
      std::copy(zero.begin(), zero.end(), y);
      for_row(X, r, [&](size_t j, float v) { y[j] = clip(centred(v, st.mean[j], st.std[j])); });
    }
  });
  st.X = Matrix(std::move(Y));
  return st;
}

// Not centred, a sparse input: the stored values times 1/std in place (scanpy's inplace_column_scale).
template <class I, class P>
ScaleResult scale_csr_uncentred(const Context& ctx, const CsrView<float, I, P>& X, const ScaleOptions& opt) {
  check(ctx, X.n_rows, opt);
  const CsrView<const float, I, P> cx{X.n_rows, X.n_cols, X.indptr, X.indices, X.data};
  ScaleResult st = stats(ctx, cx, true);
  const RowBlocks rb = blocks_of(X);
  const Clip clip(opt);
  const size_t g = static_cast<size_t>(X.n_cols);
  std::vector<double> inv(g);
  for (size_t j = 0; j < g; ++j) inv[j] = 1.0 / st.std[j];
  const CancelShield shield;
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t p = X.row_begin(rb.begin(b)); p < X.row_begin(rb.end(b)); ++p)
      X.data[p] = clip(static_cast<float>(static_cast<double>(X.data[p]) * inv[static_cast<size_t>(X.indices[p])]));
  });
  return st;
}

}  // namespace

ScaleResult scale_inplace(const Context& ctx, const DenseView<float>& X, const ScaleOptions& opt) {
  check(ctx, X.n_rows, opt);
  ScaleResult st = stats(ctx, DenseView<const float>{X.n_rows, X.n_cols, X.data}, false);
  scale_dense_values(ctx, X, st, opt);
  return st;
}

#define SCURRY_SCALE_VIEW(I, P)                                                                          \
  ScaleResult scale(const Context& ctx, const CsrView<const float, I, P>& X, const ScaleOptions& opt) {  \
    if (!opt.zero_center) fail("internal: scale of a read-only CSR view without centring");              \
    return scale_csr_centred(ctx, X, opt);                                                               \
  }                                                                                                      \
  ScaleResult scale_inplace(const Context& ctx, const CsrView<float, I, P>& X, const ScaleOptions& opt) { \
    if (opt.zero_center) fail("internal: a centred scale of a CSR matrix is dense; it cannot be in place"); \
    return scale_csr_uncentred(ctx, X, opt);                                                             \
  }
SCURRY_SCALE_VIEW(int32_t, int64_t)
SCURRY_SCALE_VIEW(int64_t, int64_t)
#undef SCURRY_SCALE_VIEW

void write_scale(Dataset& d, const ScaleResult& st) {
  d.var.set("mean", Column::numeric(st.mean));
  d.var.set("std", Column::numeric(st.std));
}

ScaleResult scale_inplace(const Context& ctx, DenseF& X, const ScaleOptions& opt) {
  return scale_inplace(ctx, view_of(X), opt);
}

ScaleResult scale(const Context& ctx, const DenseF& X, const ScaleOptions& opt) {
  DenseF Y = X;
  ScaleResult st = scale_inplace(ctx, Y, opt);
  st.X = Matrix(std::move(Y));
  return st;
}

ScaleResult scale(const Context& ctx, const CsrF& X, const ScaleOptions& opt) {
  if (opt.zero_center) return scale_csr_centred(ctx, view_of(X), opt);
  CsrF Y = X;
  ScaleResult st = scale_csr_uncentred(ctx, view_of(Y), opt);
  st.X = Matrix(std::move(Y));
  return st;
}

ScaleResult scale(const Context& ctx, Dataset& d, const ScaleOptions& opt) {
  Matrix* M = &d.X;
  std::string slot = "X";
  if (!opt.layer.empty()) {
    auto it = d.layers.find(opt.layer);
    if (it == d.layers.end()) fail_input("scale", "no layer named '", opt.layer, "'; use one of the dataset's layers or X");
    M = &it->second;
    slot = "layers/" + opt.layer;
  }
  if (M->empty()) fail_input("scale", slot, " is empty; load a matrix first");
  if (M->n_cols() != d.n_vars())
    fail_input("scale", slot, " has ", M->n_cols(), " columns but var has ", d.n_vars(), " rows");
  ScaleResult st;
  if (std::holds_alternative<CsrD>(M->m)) *M = Matrix(to_csr_f(*M));
  if (std::holds_alternative<DenseD>(M->m)) *M = Matrix(to_dense_f(*M));
  if (auto* x = std::get_if<DenseF>(&M->m)) {
    st = scale_inplace(ctx, *x, opt);
  } else {
    st = scale(ctx, M->csr_f(), opt);
    *M = std::move(st.X);
    st.X = Matrix();
  }
  M->dtype = DType::f32;
  write_scale(d, st);
  return st;
}

}  // namespace scurry
