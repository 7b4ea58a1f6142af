#include "pp/pca.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <utility>

#include <cblas.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "pp/linalg.hpp"

namespace scurry {
void validate_pca_options(const PcaOptions& opt) {
  if (opt.n_comps && *opt.n_comps < 1) fail_input("pca", "n_comps = ", *opt.n_comps, " must be at least 1");
  if (opt.dtype != DType::f32 && opt.dtype != DType::f64)
    fail_input("pca", "dtype ", dtype_name(opt.dtype), " is not supported for X_pca; use float32 or float64");
  if (opt.svd_solver != "auto" && opt.svd_solver != "gram" && opt.svd_solver != "arpack" && opt.svd_solver != "randomized")
    fail_input("pca", "svd_solver '", opt.svd_solver, "' is unknown; use auto, gram, randomized or arpack");
}

namespace {

// Work partition constants. None depends on the thread count, so results do not either.
constexpr int64_t kNnzPerBlock = int64_t{1} << 16;        // sparse row blocks (products, statistics)
constexpr int64_t kDenseElemsPerBlock = int64_t{1} << 19;  // dense row blocks: rows * genes
constexpr int64_t kGramBlockElems = int64_t{1} << 22;      // rows * genes densified per Gram block
constexpr int64_t kGramChunkRows = 256;                    // rows densified per task in a Gram block
constexpr int64_t kGramTile = 128;                         // Gram columns per task
constexpr int64_t kMaxPartials = 16;                       // partial accumulators of a reduction
constexpr int64_t kPartialBytes = int64_t{512} << 20;      // memory budget of those partials
constexpr double kCellGramMaxElems = 2e8;                   // cells x genes densified for the cells' Gram

constexpr int64_t kGram32Rows = 1024;   // rows per float32 Gram product (its float32 sums are this long)
constexpr int64_t kGram32Groups = 4;    // float64 partial Gram matrices (memory: this many g^2 doubles)
constexpr double kKeepProjBytes = 256.0 * (1 << 20);  // most bytes of Xc Q kept for X_pca (else a pass over X)

const char* kWhere = "pca";

// The matrix PCA runs on: CSR or dense float rows, optionally restricted to a subset of columns.
struct Input {
  const CsrF* csr = nullptr;
  const DenseF* dense = nullptr;
  std::vector<int64_t> cols;    // used column -> input column; empty = all columns
  std::vector<int32_t> colmap;  // input column -> used column or -1; empty = identity
  int64_t n = 0;                // rows (cells, this rank)
  int64_t g = 0;                // used columns (genes)
  RowBlocks blocks;             // fixed row blocks for products and statistics

  int64_t in_cols() const { return csr ? csr->n_cols : dense->n_cols; }
  // Rows [r0, r1) as dense float64 (r1 - r0) x g, row-major, into out.
  void densify(int64_t r0, int64_t r1, double* out) const {
    const size_t len = static_cast<size_t>(r1 - r0) * static_cast<size_t>(g);
    if (csr) {
      std::fill(out, out + len, 0.0);
      for (int64_t r = r0; r < r1; ++r) {
        double* o = out + static_cast<size_t>(r - r0) * g;
        for (int64_t p = csr->indptr[r]; p < csr->indptr[r + 1]; ++p) {
          const int32_t j = colmap.empty() ? csr->indices[p] : colmap[csr->indices[p]];
          if (j >= 0) o[j] += csr->data[p];
        }
      }
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        const float* src = dense->row(r);
        double* o = out + static_cast<size_t>(r - r0) * g;
        if (cols.empty())
          for (int64_t j = 0; j < g; ++j) o[j] = src[j];
        else
          for (int64_t j = 0; j < g; ++j) o[j] = src[cols[j]];
      }
    }
  }
};

// Rows [r0, r1) minus mu (empty: no shift) as dense float32 (r1 - r0) x g, row-major, into out.
void densify_centred_f(const Input& in, int64_t r0, int64_t r1, const std::vector<double>& mu, float* out) {
  const int64_t g = in.g;
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out + static_cast<size_t>(r - r0) * g;
    if (in.csr) {
      if (mu.empty())
        std::fill(o, o + g, 0.0f);
      else
        for (int64_t j = 0; j < g; ++j) o[j] = static_cast<float>(-mu[j]);
      for (int64_t p = in.csr->indptr[r]; p < in.csr->indptr[r + 1]; ++p) {
        const int32_t j = in.colmap.empty() ? in.csr->indices[p] : in.colmap[in.csr->indices[p]];
        if (j >= 0) o[j] = static_cast<float>(static_cast<double>(o[j]) + in.csr->data[p]);
      }
    } else {
      const float* src = in.dense->row(r);
      for (int64_t j = 0; j < g; ++j) {
        const double x = src[in.cols.empty() ? j : in.cols[j]];
        o[j] = static_cast<float>(mu.empty() ? x : x - mu[j]);
      }
    }
  }
}

// Sums fn's per-block contributions (len doubles) over all blocks. The blocks are split into a
// fixed number of contiguous groups (independent of the thread count); each group accumulates its
// blocks in order into its own buffer; the buffers are summed in group order. Then allreduce.
std::vector<double> sum_over_blocks(const Context& ctx, int64_t n_blocks, size_t len,
                                    const std::function<void(int64_t, double*)>& fn) {
  std::vector<double> out(len, 0.0);
  if (n_blocks > 0) {
    const int64_t by_memory = std::max<int64_t>(1, kPartialBytes / static_cast<int64_t>(std::max<size_t>(1, len * 8)));
    const int64_t groups = std::min({n_blocks, kMaxPartials, by_memory});
    std::vector<std::vector<double>> part(static_cast<size_t>(groups));
    parallel_for(ctx.threads(), groups, [&](int64_t p) {
      std::vector<double>& acc = part[p];
      acc.assign(len, 0.0);
      const int64_t b0 = n_blocks * p / groups, b1 = n_blocks * (p + 1) / groups;
      for (int64_t b = b0; b < b1; ++b) fn(b, acc.data());
    });
    for (const auto& acc : part)
      for (size_t i = 0; i < len; ++i) out[i] += acc[i];
  }
  ctx.comm().allreduce_sum(out.data(), len);
  return out;
}

void check_finite(const std::vector<double>& v, const char* what) {
  for (double x : v)
    if (!std::isfinite(x))
      fail_input(kWhere, "X contains NaN or infinite values (found while computing ", what,
                 "); clean or re-normalise the data before PCA");
}

// Per-gene statistics: sums, and variance with the given ddof.
struct GeneStats {
  std::vector<double> mean, var;
};

GeneStats gene_stats(const Context& ctx, const Input& in, int64_t n_total, int ddof) {
  const int64_t g = in.g;
  std::vector<double> s = sum_over_blocks(ctx, in.blocks.n_blocks(), static_cast<size_t>(2 * g), [&](int64_t b, double* acc) {
    const int64_t r0 = in.blocks.begin(b), r1 = in.blocks.end(b);
    if (in.csr) {
      for (int64_t p = in.csr->indptr[r0]; p < in.csr->indptr[r1]; ++p) {
        const int32_t j = in.colmap.empty() ? in.csr->indices[p] : in.colmap[in.csr->indices[p]];
        if (j < 0) continue;
        const double x = in.csr->data[p];
        acc[j] += x;
        acc[g + j] += x * x;
      }
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = in.dense->row(r);
        for (int64_t j = 0; j < g; ++j) {
          const double x = row[in.cols.empty() ? j : in.cols[j]];
          acc[j] += x;
          acc[g + j] += x * x;
        }
      }
    }
  });
  check_finite(s, "per-gene sums");
  GeneStats st;
  st.mean.resize(g);
  st.var.resize(g);
  const double n = static_cast<double>(n_total);
  for (int64_t j = 0; j < g; ++j) {
    st.mean[j] = s[j] / n;
    st.var[j] = std::max(0.0, (s[g + j] - s[j] * st.mean[j]) / (n - ddof));
  }
  return st;
}

// Gram pass: lower triangle of X^T X (g x g) and column sums, in float64. Blocks of rows are
// densified (in fixed chunks), then each tile of kGramTile columns of the lower triangle is
// updated by one task with dgemm: every entry is computed by one task in a fixed order.
void gram(const Context& ctx, const Input& in, DenseD& c, std::vector<double>& sums) {
  const int64_t g = in.g;
  c = DenseD(g, g);
  sums.assign(g, 0.0);
  const int64_t rows_per_block = std::clamp<int64_t>(kGramBlockElems / std::max<int64_t>(1, g), 64, 1 << 16);
  const int64_t n_tiles = (g + kGramTile - 1) / kGramTile;
  std::vector<double> d;
  for (int64_t r0 = 0; r0 < in.n; r0 += rows_per_block) {
    const int64_t r1 = std::min(in.n, r0 + rows_per_block), rows = r1 - r0;
    d.resize(static_cast<size_t>(rows) * g);
    const int64_t n_chunks = (rows + kGramChunkRows - 1) / kGramChunkRows;
    parallel_for(ctx.threads(), n_chunks, [&](int64_t ch) {
      const int64_t a = r0 + ch * kGramChunkRows, e = std::min(r1, a + kGramChunkRows);
      in.densify(a, e, d.data() + static_cast<size_t>(a - r0) * g);
    });
    parallel_for(ctx.threads(), n_tiles, [&](int64_t t) {
      const int64_t j0 = t * kGramTile, w = std::min(g, j0 + kGramTile) - j0;
      // C[j0:g, j0:j0+w] += D[:, j0:g]^T D[:, j0:j0+w]
      linalg::dgemm(true, false, g - j0, w, rows, 1.0, d.data() + j0, g, d.data() + j0, g, 1.0,
                    c.row(j0) + j0, g);
      for (int64_t r = 0; r < rows; ++r) {
        const double* dr = d.data() + static_cast<size_t>(r) * g;
        for (int64_t j = j0; j < j0 + w; ++j) sums[j] += dr[j];
      }
    });
  }
  ctx.comm().allreduce_sum(c.data.data(), c.data.size());
  ctx.comm().allreduce_sum(sums.data(), sums.size());
}

// Lower triangle of Xc^T Xc (Xc = X - 1 mu^T; mu empty: X^T X), g x g, at float32 BLAS speed:
// the centred rows are taken in fixed blocks of kGram32Rows, each block's product by ssyrk (float32
// sums of kGram32Rows terms: the data are centred first, so no cancellation follows), the block
// products added in float64 in block order within kGram32Groups fixed groups, the groups in order.
// Independent of the thread count.
void gram_f32(const Context& ctx, const Input& in, const std::vector<double>& mu, DenseD& c) {
  const int64_t g = in.g;
  const int64_t n_blocks = (in.n + kGram32Rows - 1) / kGram32Rows;
  const int64_t groups = std::max<int64_t>(1, std::min(n_blocks, kGram32Groups));
  std::vector<DenseD> part(static_cast<size_t>(groups));
  parallel_for(ctx.threads(), groups, [&](int64_t p) {
    DenseD& acc = part[p];
    acc = DenseD(g, g);
    std::vector<float> buf(static_cast<size_t>(kGram32Rows * g)), prod(static_cast<size_t>(g * g));
    const int64_t b0 = n_blocks * p / groups, b1 = n_blocks * (p + 1) / groups;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kGram32Rows, r1 = std::min(in.n, r0 + kGram32Rows);
      densify_centred_f(in, r0, r1, mu, buf.data());
      cblas_ssyrk(CblasRowMajor, CblasLower, CblasTrans, static_cast<int>(g), static_cast<int>(r1 - r0), 1.0f, buf.data(),
                  static_cast<int>(g), 0.0f, prod.data(), static_cast<int>(g));
      for (int64_t i = 0; i < g; ++i) {
        double* a = acc.row(i);
        const float* q = prod.data() + static_cast<size_t>(i) * g;
        for (int64_t j = 0; j <= i; ++j) a[j] += q[j];
      }
    }
  });
  c = std::move(part[0]);
  for (size_t p = 1; p < part.size(); ++p)
    for (int64_t i = 0; i < g; ++i) {
      double* a = c.row(i);
      const double* q = part[p].row(i);
      for (int64_t j = 0; j <= i; ++j) a[j] += q[j];
    }
  ctx.comm().allreduce_sum(c.data.data(), c.data.size());
}

// Z = A Q with A = Xc^T Xc (Xc = X - 1 mu^T; mu empty = no centring), Q g x l. With xq, also
// Xc Q (n x l, this rank's rows) into *xq: the projection onto span(Q) that X_pca is made from.
DenseD apply_cov(const Context& ctx, const Input& in, const std::vector<double>& mu, const DenseD& q,
                 DenseD* xq = nullptr) {
  const int64_t g = in.g, l = q.n_cols;
  std::vector<double> shift(l, 0.0);  // mu^T Q
  if (!mu.empty())
    for (int64_t j = 0; j < g; ++j)
      for (int64_t c = 0; c < l; ++c) shift[c] += mu[j] * q(j, c);
  const size_t len = static_cast<size_t>(g * l + l);
  if (xq) *xq = DenseD(in.n, l);
  std::vector<double> acc = sum_over_blocks(ctx, in.blocks.n_blocks(), len, [&](int64_t b, double* z) {
    const int64_t r0 = in.blocks.begin(b), r1 = in.blocks.end(b);
    double* tsum = z + g * l;
    if (in.csr) {
      std::vector<double> t(l);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = 0; c < l; ++c) t[c] = -shift[c];
        const int64_t p0 = in.csr->indptr[r], p1 = in.csr->indptr[r + 1];
        for (int64_t p = p0; p < p1; ++p) {
          const int32_t j = in.colmap.empty() ? in.csr->indices[p] : in.colmap[in.csr->indices[p]];
          if (j < 0) continue;
          const double x = in.csr->data[p];
          const double* qj = q.row(j);
          for (int64_t c = 0; c < l; ++c) t[c] += x * qj[c];
        }
        for (int64_t p = p0; p < p1; ++p) {
          const int32_t j = in.colmap.empty() ? in.csr->indices[p] : in.colmap[in.csr->indices[p]];
          if (j < 0) continue;
          const double x = in.csr->data[p];
          double* zj = z + j * l;
          for (int64_t c = 0; c < l; ++c) zj[c] += x * t[c];
        }
        for (int64_t c = 0; c < l; ++c) tsum[c] += t[c];
        if (xq) std::copy(t.begin(), t.end(), xq->row(r));
      }
    } else {
      const int64_t rows = r1 - r0;
      std::vector<double> d(static_cast<size_t>(rows) * g), t(static_cast<size_t>(rows) * l);
      in.densify(r0, r1, d.data());
      linalg::dgemm(false, false, rows, l, g, 1.0, d.data(), g, q.data.data(), l, 0.0, t.data(), l);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < l; ++c) {
          t[r * l + c] -= shift[c];
          tsum[c] += t[r * l + c];
        }
      linalg::dgemm(true, false, g, l, rows, 1.0, d.data(), g, t.data(), l, 1.0, z, l);
      if (xq) std::copy(t.begin(), t.end(), xq->row(r0));
    }
  });
  DenseD out(g, l);
  for (int64_t j = 0; j < g; ++j)
    for (int64_t c = 0; c < l; ++c) {
      double v = acc[j * l + c];
      if (!mu.empty()) v -= mu[j] * acc[g * l + c];  // - mu (1^T Xc Q)
      out(j, c) = v;
    }
  return out;
}

// Gaussian g x l block, seeded (own Box-Muller on mt19937_64, whose sequence the standard fixes).
DenseD gaussian(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  DenseD m(rows, cols);
  for (size_t i = 0; i < m.data.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * M_PI * uniform();
    m.data[i] = r * std::cos(a);
    if (i + 1 < m.data.size()) m.data[i + 1] = r * std::sin(a);
  }
  return m;
}

// X_pca = (X - 1 mu^T) V (mu empty: X V), rows written into out (n x k).
template <class T>
void project(const Context& ctx, const Input& in, const std::vector<double>& mu, const DenseD& v, Dense<T>& out) {
  const int64_t g = in.g, k = v.n_cols;
  std::vector<double> shift(k, 0.0);
  if (!mu.empty())
    for (int64_t j = 0; j < g; ++j)
      for (int64_t c = 0; c < k; ++c) shift[c] += mu[j] * v(j, c);
  out = Dense<T>(in.n, k);
  parallel_for(ctx.threads(), in.blocks.n_blocks(), [&](int64_t b) {
    const int64_t r0 = in.blocks.begin(b), r1 = in.blocks.end(b), rows = r1 - r0;
    std::vector<double> t(static_cast<size_t>(rows) * k);
    if (in.csr) {
      for (int64_t r = r0; r < r1; ++r) {
        double* tr = t.data() + (r - r0) * k;
        for (int64_t p = in.csr->indptr[r]; p < in.csr->indptr[r + 1]; ++p) {
          const int32_t j = in.colmap.empty() ? in.csr->indices[p] : in.colmap[in.csr->indices[p]];
          if (j < 0) continue;
          const double x = in.csr->data[p];
          const double* vj = v.row(j);
          for (int64_t c = 0; c < k; ++c) tr[c] += x * vj[c];
        }
      }
    } else {
      std::vector<double> d(static_cast<size_t>(rows) * g);
      in.densify(r0, r1, d.data());
      linalg::dgemm(false, false, rows, k, g, 1.0, d.data(), g, v.data.data(), k, 0.0, t.data(), k);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < k; ++c) out(r0 + r, c) = static_cast<T>(t[r * k + c] - shift[c]);
  });
}

// scikit-learn's svd_flip(u_based_decision=True): per component, the entry of X_pca with the
// largest magnitude (first one on ties, ranks in order) becomes positive; loadings follow.
template <class T>
void flip_signs(const Context& ctx, Dense<T>& x, DenseD& v) {
  const int64_t k = x.n_cols;
  std::vector<double> local(2 * k, 0.0);  // per component: max |x|, its signed value
  for (int64_t c = 0; c < k; ++c) {
    double best = -1, val = 0;
    for (int64_t i = 0; i < x.n_rows; ++i) {
      const double a = std::fabs(static_cast<double>(x(i, c)));
      if (a > best) best = a, val = x(i, c);
    }
    local[2 * c] = best;
    local[2 * c + 1] = val;
  }
  const int ranks = ctx.comm().size();
  std::vector<double> all(static_cast<size_t>(ranks) * 2 * k);
  ctx.comm().allgather(local.data(), local.size() * sizeof(double), all.data());
  for (int64_t c = 0; c < k; ++c) {
    double best = -1, val = 0;
    for (int r = 0; r < ranks; ++r) {
      const double* p = all.data() + static_cast<size_t>(r) * 2 * k + 2 * c;
      if (p[0] > best) best = p[0], val = p[1];
    }
    if (val < 0) {
      for (int64_t i = 0; i < x.n_rows; ++i) x(i, c) = -x(i, c);
      for (int64_t j = 0; j < v.n_rows; ++j) v(j, c) = -v(j, c);
    }
  }
}

// Variance (ddof 0) of each column of x over all ranks: two passes (mean, then squared deviations).
template <class T>
std::vector<double> column_variance(const Context& ctx, const Dense<T>& x, int64_t n_total) {
  const int64_t k = x.n_cols;
  const RowBlocks rb = RowBlocks::uniform(x.n_rows, 4096);
  std::vector<double> mean = sum_over_blocks(ctx, rb.n_blocks(), k, [&](int64_t b, double* acc) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i)
      for (int64_t c = 0; c < k; ++c) acc[c] += x(i, c);
  });
  for (double& m : mean) m /= static_cast<double>(n_total);
  std::vector<double> ss = sum_over_blocks(ctx, rb.n_blocks(), k, [&](int64_t b, double* acc) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i)
      for (int64_t c = 0; c < k; ++c) {
        const double dlt = x(i, c) - mean[c];
        acc[c] += dlt * dlt;
      }
  });
  for (double& s : ss) s /= static_cast<double>(n_total);
  return ss;
}

// X_pca = P F from P = Xc Q (n x l, kept by apply_cov) and the Ritz vectors F (l x k): the
// components are Q F, so no pass over X. Row blocks, one-threaded BLAS: thread-count independent.
template <class T>
void project_from(const Context& ctx, const DenseD& p, const DenseD& f, Dense<T>& out) {
  const int64_t n = p.n_rows, l = p.n_cols, k = f.n_cols;
  out = Dense<T>(n, k);
  const RowBlocks rb = RowBlocks::uniform(n, 4096);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    const int64_t r0 = rb.begin(b), rows = rb.end(b) - r0;
    std::vector<double> t(static_cast<size_t>(rows) * k);
    linalg::dgemm(false, false, rows, k, l, 1.0, p.row(r0), l, f.data.data(), k, 0.0, t.data(), k);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < k; ++c) out(r0 + r, c) = static_cast<T>(t[r * k + c]);
  });
}

// proj: X_pca's pre-image (P, F) when the solver kept it (project_from), else null (one pass over X).
template <class T>
void finish(const Context& ctx, const Input& in, const PcaOptions& opt, const std::vector<double>& mu,
            int64_t n_total, PcaResult& res, const std::pair<DenseD, DenseD>* proj) {
  Dense<T> x;
  if (proj && proj->first.n_rows == in.n)
    project_from(ctx, proj->first, proj->second, x);
  else
    project(ctx, in, opt.zero_center ? mu : std::vector<double>{}, res.components, x);
  flip_signs(ctx, x, res.components);
  if (!opt.zero_center) res.variance = column_variance(ctx, x, n_total);
  res.x_pca = Matrix(std::move(x));
}

PcaResult run(const Context& ctx, Input& in, const PcaOptions& opt) {
  validate_pca_options(opt);
  // Sizes over all ranks.
  int64_t n_total = in.n;
  ctx.comm().allreduce_sum(&n_total, 1);
  const int64_t g = in.g, min_dim = std::min(n_total, g);
  if (min_dim < 2)
    fail_input(kWhere, "X has ", n_total, " cells x ", g, " genes; PCA needs at least 2 of each");
  int64_t k = opt.n_comps ? *opt.n_comps : std::min<int64_t>(50, min_dim - 1);
  if (k < 1 || k >= min_dim)
    fail_input(kWhere, "n_comps = ", k, " is out of range for ", n_total, " cells x ", g,
               " genes: it must be between 1 and min(n_cells, n_genes) - 1 = ", min_dim - 1,
               "; pass a smaller n_comps");
  if (opt.dtype != DType::f32 && opt.dtype != DType::f64)
    fail_input(kWhere, "dtype ", dtype_name(opt.dtype), " is not supported for X_pca; use float32 or float64");

  std::string solver = opt.svd_solver;
  if (solver == "arpack") solver = "gram";
  if (solver == "auto") solver = g <= opt.auto_gram_max_genes ? "gram" : "randomized";
  if (solver != "gram" && solver != "randomized")
    fail_input(kWhere, "svd_solver '", opt.svd_solver, "' is unknown; use auto, gram, randomized or arpack");

  in.blocks = in.csr ? RowBlocks::by_nnz(in.csr->indptr, kNnzPerBlock)
                     : RowBlocks::uniform(in.n, std::max<int64_t>(1, kDenseElemsPerBlock / std::max<int64_t>(1, g)));
  if (in.n == 0) in.blocks = RowBlocks{};

  linalg::SingleThreadedBlas blas_guard;
  const double n = static_cast<double>(n_total);
  PcaResult res;
  res.solver = solver;
  std::vector<double> mu(g);
  std::pair<DenseD, DenseD> proj;  // (Xc Q, F) when the refinement kept them: X_pca = (Xc Q) F

  // Fewer cells than genes (small enough to hold densely): the same exact PCA from the cells' Gram
  // matrix Xc Xc^T (n x n) instead of the genes' (g x g): the eigen-solve is (g/n)^3 cheaper.
  // Components V = Xc^T U / sqrt((n - 1) lambda). Several ranks: every rank gathers all rows (small,
  // by the condition) and solves the same problem, so the result is the one-rank result.
  if (solver == "gram" && opt.zero_center && n_total < g &&
      static_cast<double>(n_total) * static_cast<double>(g) <= kCellGramMaxElems) {
    res.solver = "gram (cells)";
    const int64_t nn = n_total;
    DenseD xc(in.n, g);
    in.densify(0, in.n, xc.data.data());
    if (ctx.comm().size() > 1) {
      xc.data = allgatherv(ctx.comm(), xc.data);
      xc.n_rows = nn;
    }
    for (int64_t j = 0; j < g; ++j) mu[j] = 0;
    for (int64_t i = 0; i < nn; ++i)
      for (int64_t j = 0; j < g; ++j) mu[j] += xc(i, j);
    for (int64_t j = 0; j < g; ++j) mu[j] /= n;
    check_finite(mu, "per-gene means");
    for (int64_t i = 0; i < nn; ++i)
      for (int64_t j = 0; j < g; ++j) xc(i, j) -= mu[j];
    DenseD kk(nn, nn);
    linalg::dsyrk_lower(false, nn, g, 1.0 / (n - 1), xc.data.data(), g, 0.0, kk.data.data(), nn);
    for (int64_t i = 0; i < nn; ++i) res.total_variance += std::max(0.0, kk(i, i));
    linalg::SymEigen e = linalg::eigh_top(kk, k);
    res.variance = std::move(e.values);
    for (double& v : res.variance) v = std::max(0.0, v);
    res.components = DenseD(g, k);
    linalg::dgemm(true, false, g, k, nn, 1.0, xc.data.data(), g, e.vectors.data.data(), k, 0.0,
                  res.components.data.data(), k);
    for (int64_t c = 0; c < k; ++c) {
      const double s = res.variance[c] > 0 ? 1.0 / std::sqrt(res.variance[c] * (n - 1)) : 0.0;
      for (int64_t j = 0; j < g; ++j) res.components(j, c) *= s;
    }
  } else if (solver == "gram" && opt.gram_float32) {
    GeneStats st = gene_stats(ctx, in, n_total, opt.zero_center ? 1 : 0);
    mu = st.mean;
    for (double v : st.var) res.total_variance += v;
    const std::vector<double> center = opt.zero_center ? mu : std::vector<double>{};
    DenseD c;
    gram_f32(ctx, in, center, c);
    const double scale = 1.0 / (opt.zero_center ? n - 1 : n);
    for (int64_t i = 0; i < g; ++i) {
      if (!std::isfinite(c(i, i))) fail_input(kWhere, "X contains NaN or infinite values; clean the data before PCA");
      for (int64_t j = 0; j <= i; ++j) c(i, j) *= scale;
    }
    const int64_t l = opt.gram_refine > 0 ? std::min(g, k + std::max<int64_t>(0, opt.n_oversamples)) : k;
    // With the refinement, the start vectors need only float32 accuracy (the Rayleigh-Ritz step makes
    // the variances' error second order in theirs, and rotates within span(Q) exactly): ssyevr,
    // whose tridiagonalisation moves half dsyevr's bytes (0.43 against 0.81 CPU s at g = 2,000).
    linalg::SymEigen e = opt.gram_refine > 0 ? linalg::eigh_top_f32(c, l) : linalg::eigh_top(c, l);
    if (opt.gram_refine <= 0) {
      res.components = std::move(e.vectors);
      res.variance = std::move(e.values);
    } else {
      // Rayleigh-Ritz in float64 over X itself on the float32 Gram's top l eigenvectors (subspace
      // iteration from a nearly converged start): the eigenvalues' error becomes second order in
      // the vectors' error, i.e. that of a float64 Gram.
      DenseD q = std::move(e.vectors);
      linalg::orthonormalize_columns(q);  // float32 vectors are orthonormal only to ~g eps_f32
      DenseD z;
      // Keep Xc Q (n x l doubles) for X_pca when it is small: saves the projection's pass over X.
      const bool keep_proj = static_cast<double>(in.n) * static_cast<double>(l) * 8.0 <= kKeepProjBytes;
      for (int it = 0; it < opt.gram_refine; ++it) {
        if (it > 0) {
          q = std::move(z);
          linalg::orthonormalize_columns(q);
        }
        const bool last = it + 1 == opt.gram_refine;
        z = apply_cov(ctx, in, center, q, last && keep_proj ? &proj.first : nullptr);
      }
      DenseD bm(l, l);
      linalg::dgemm(true, false, l, l, g, 1.0, q.data.data(), l, z.data.data(), l, 0.0, bm.data.data(), l);
      for (int64_t i = 0; i < l; ++i)
        for (int64_t j = 0; j < i; ++j) bm(i, j) = 0.5 * (bm(i, j) + bm(j, i));
      linalg::SymEigen f = linalg::eigh_top(bm, k);
      res.components = DenseD(g, k);
      linalg::dgemm(false, false, g, k, l, 1.0, q.data.data(), l, f.vectors.data.data(), k, 0.0,
                    res.components.data.data(), k);
      res.variance.resize(k);
      for (int64_t cc = 0; cc < k; ++cc) res.variance[cc] = f.values[cc] * scale;
      if (keep_proj) proj.second = std::move(f.vectors);
    }
    for (double& v : res.variance) v = std::max(0.0, v);
  } else if (solver == "gram") {
    DenseD c;
    std::vector<double> sums;
    gram(ctx, in, c, sums);
    check_finite(sums, "per-gene sums");
    for (int64_t j = 0; j < g; ++j) mu[j] = sums[j] / n;
    // Centred Gram (lower triangle): C - n mu mu^T.
    DenseD cc(g, g);
    double total = 0;
    for (int64_t i = 0; i < g; ++i) {
      for (int64_t j = 0; j <= i; ++j) cc(i, j) = c(i, j) - sums[i] * mu[j];
      if (!std::isfinite(c(i, i))) fail_input(kWhere, "X contains NaN or infinite values; clean the data before PCA");
      total += std::max(0.0, cc(i, i));
    }
    res.total_variance = total / (opt.zero_center ? n - 1 : n);
    DenseD& a = opt.zero_center ? cc : c;
    const double scale = 1.0 / (opt.zero_center ? n - 1 : n);
    for (int64_t i = 0; i < g; ++i)
      for (int64_t j = 0; j <= i; ++j) a(i, j) *= scale;
    linalg::SymEigen e = linalg::eigh_top(a, k);
    res.components = std::move(e.vectors);
    res.variance = std::move(e.values);
    for (double& v : res.variance) v = std::max(0.0, v);
  } else {
    GeneStats st = gene_stats(ctx, in, n_total, opt.zero_center ? 1 : 0);
    mu = st.mean;
    for (double v : st.var) res.total_variance += v;
    const std::vector<double> center = opt.zero_center ? mu : std::vector<double>{};
    const int64_t l = std::min(min_dim, k + std::max<int64_t>(0, opt.n_oversamples));
    const int iters = std::max(0, opt.n_iter);
    DenseD q = gaussian(g, l, opt.random_state);
    linalg::orthonormalize_columns(q);
    for (int it = 0; it < iters; ++it) {
      q = apply_cov(ctx, in, center, q);
      linalg::orthonormalize_columns(q);
    }
    // Rayleigh-Ritz: B = Q^T A Q (l x l), its top k eigenpairs.
    DenseD z = apply_cov(ctx, in, center, q);
    DenseD bm(l, l);
    linalg::dgemm(true, false, l, l, g, 1.0, q.data.data(), l, z.data.data(), l, 0.0, bm.data.data(), l);
    for (int64_t i = 0; i < l; ++i)
      for (int64_t j = 0; j < i; ++j) bm(i, j) = 0.5 * (bm(i, j) + bm(j, i));
    linalg::SymEigen e = linalg::eigh_top(bm, k);
    res.components = DenseD(g, k);
    linalg::dgemm(false, false, g, k, l, 1.0, q.data.data(), l, e.vectors.data.data(), k, 0.0,
                  res.components.data.data(), k);
    res.variance.resize(k);
    for (int64_t c = 0; c < k; ++c) res.variance[c] = std::max(0.0, e.values[c]) / (opt.zero_center ? n - 1 : n);
  }
  if (!(res.total_variance > 0))
    fail_input(kWhere, "every gene is constant across cells (total variance 0); PCA has nothing to explain");

  const std::pair<DenseD, DenseD>* kept = proj.second.n_cols > 0 ? &proj : nullptr;
  if (opt.dtype == DType::f64)
    finish<double>(ctx, in, opt, mu, n_total, res, kept);
  else
    finish<float>(ctx, in, opt, mu, n_total, res, kept);
  res.variance_ratio.resize(k);
  for (int64_t c = 0; c < k; ++c) res.variance_ratio[c] = res.variance[c] / res.total_variance;
  return res;
}

NumArray float_array(const std::vector<double>& v) {
  NumArray a;
  a.shape = {static_cast<int64_t>(v.size())};
  for (double x : v) a.data.push_back(static_cast<double>(static_cast<float>(x)));
  a.dtype = DType::f32;
  return a;
}

}  // namespace

PcaResult pca(const Context& ctx, const CsrF& X, const PcaOptions& opt) {
  Input in;
  in.csr = &X;
  in.n = X.n_rows;
  in.g = X.n_cols;
  return run(ctx, in, opt);
}

PcaResult pca(const Context& ctx, const DenseF& X, const PcaOptions& opt) {
  Input in;
  in.dense = &X;
  in.n = X.n_rows;
  in.g = X.n_cols;
  return run(ctx, in, opt);
}

PcaResult pca(const Context& ctx, Dataset& d, const PcaOptions& opt) {
  if (d.X.empty()) fail_input(kWhere, "the dataset has no X; load a matrix before PCA");
  const int64_t n_vars = d.X.n_cols();
  // Genes: var['highly_variable'] when asked or (unset) when present, as scanpy 1.9.6.
  bool use_hvg = opt.use_highly_variable.value_or(d.var.has("highly_variable"));
  std::vector<int64_t> genes;
  if (use_hvg) {
    if (!d.var.has("highly_variable"))
      fail_input(kWhere, "use_highly_variable is set but var has no 'highly_variable' column; run "
                         "highly_variable_genes first or unset use_highly_variable");
    const Column& col = d.var.at("highly_variable");
    if (!std::holds_alternative<BoolColumn>(col.c))
      fail_input(kWhere, "var['highly_variable'] is a ", col.kind(), " column, not bool; recompute it with "
                         "highly_variable_genes");
    const auto& flags = std::get<BoolColumn>(col.c).values;
    if (static_cast<int64_t>(flags.size()) != n_vars)
      fail_input(kWhere, "var['highly_variable'] has ", flags.size(), " entries but X has ", n_vars, " genes");
    for (int64_t j = 0; j < n_vars; ++j)
      if (flags[j]) genes.push_back(j);
    if (genes.empty())
      fail_input(kWhere, "var['highly_variable'] marks no gene; rerun highly_variable_genes or pass "
                         "use_highly_variable=false");
  }

  // float32 views of X (converted copies for float64 storage).
  CsrF csr_copy;
  DenseF dense_copy;
  Input in;
  if (std::holds_alternative<CsrF>(d.X.m)) {
    in.csr = &std::get<CsrF>(d.X.m);
  } else if (std::holds_alternative<DenseF>(d.X.m)) {
    in.dense = &std::get<DenseF>(d.X.m);
  } else if (d.X.is_sparse()) {
    csr_copy = to_csr_f(d.X);
    in.csr = &csr_copy;
  } else {
    dense_copy = to_dense_f(d.X);
    in.dense = &dense_copy;
  }
  in.n = d.X.n_rows();
  in.g = n_vars;
  if (use_hvg && static_cast<int64_t>(genes.size()) != n_vars) {
    in.cols = genes;
    in.colmap.assign(static_cast<size_t>(n_vars), -1);
    for (size_t u = 0; u < genes.size(); ++u) in.colmap[genes[u]] = static_cast<int32_t>(u);
    in.g = static_cast<int64_t>(genes.size());
  }

  PcaResult res = run(ctx, in, opt);
  res.use_highly_variable = use_hvg;
  if (genes.empty()) {
    genes.resize(n_vars);
    for (int64_t j = 0; j < n_vars; ++j) genes[j] = j;
  }
  res.genes = genes;
  write_pca(d, res, opt);
  double explained = 0;
  for (double r : res.variance_ratio) explained += r;
  int64_t n_cells = in.n;  // over all ranks
  ctx.comm().allreduce_sum(&n_cells, 1);
  log::info(detail::concat("pca: ", res.components.n_cols, " components of ", n_cells, " cells x ", in.g, " genes (",
                           res.solver, " solver), variance explained ", explained));
  return res;
}

void write_pca(Dataset& d, const PcaResult& res, const PcaOptions& opt) {
  const int64_t k = res.components.n_cols, n_vars = d.n_vars();
  const bool use_hvg = res.use_highly_variable;
  const std::vector<int64_t>& genes = res.genes;
  d.obsm["X_pca"] = res.x_pca;
  if (use_hvg) {
    // scanpy 1.9.6: np.zeros((n_vars, n_comps)) (float64) with the HVG rows filled in.
    DenseD pcs(n_vars, k);
    for (size_t u = 0; u < genes.size(); ++u)
      for (int64_t c = 0; c < k; ++c) pcs(genes[u], c) = static_cast<float>(res.components(u, c));
    d.varm["PCs"] = Matrix(std::move(pcs), DType::f64);
  } else {
    DenseF pcs(n_vars, k);
    for (int64_t j = 0; j < n_vars; ++j)
      for (int64_t c = 0; c < k; ++c) pcs(j, c) = static_cast<float>(res.components(j, c));
    d.varm["PCs"] = Matrix(std::move(pcs), DType::f32);
  }
  Dict params;
  params["zero_center"] = Value(opt.zero_center);
  params["use_highly_variable"] = Value(use_hvg);
  Dict u;
  u["variance"] = Value(float_array(res.variance));
  u["variance_ratio"] = Value(float_array(res.variance_ratio));
  u["params"] = Value(std::move(params));
  d.uns["pca"] = Value(std::move(u));
}

}  // namespace scurry
