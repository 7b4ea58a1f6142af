#include "pp/qc.hpp"
#include "pp/qc_view.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"

namespace scurry {
namespace {

// Rows per block are chosen to hold about this many stored entries. The block partition depends
// only on the matrix, never on the thread count, so per-gene sums are bit-identical for any thread
// count.
constexpr int64_t kBlockNnz = int64_t{1} << 18;


template <class T, class I = int32_t>
struct RowRef {
  const I* idx;
  const T* val;
  int64_t n;
};

// The kernel reads views (core/matrix_view.hpp): the owning Csr/Dense overloads pass view_of(X),
// the Python package the buffers of a scipy/numpy matrix. Same blocks (row_blocks_by_nnz is
// RowBlocks::by_nnz's rule), same results.
template <class T, class I>
struct CsrAccess {
  using value_type = T;
  CsrView<const T, I, int64_t> X;
  int64_t rows() const { return X.n_rows; }
  int64_t cols() const { return X.n_cols; }
  RowBlocks blocks() const { return row_blocks_by_nnz(X.indptr, X.n_rows, kBlockNnz); }
  RowRef<T, I> row(int64_t r, std::vector<int32_t>&, std::vector<T>&) const {
    const int64_t s = X.row_begin(r);
    return {X.indices + s, X.data + s, X.row_end(r) - s};
  }
};

template <class T>
struct DenseAccess {
  using value_type = T;
  DenseView<const T> X;
  int64_t rows() const { return X.n_rows; }
  int64_t cols() const { return X.n_cols; }
  RowBlocks blocks() const {
    return RowBlocks::uniform(X.n_rows, std::max<int64_t>(1, kBlockNnz / std::max<int64_t>(1, X.n_cols)));
  }
  // The row's nonzeros, gathered into the scratch vectors.
  RowRef<T> row(int64_t r, std::vector<int32_t>& si, std::vector<T>& sv) const {
    si.clear();
    sv.clear();
    const T* p = X.row(r);
    for (int64_t c = 0; c < X.n_cols; ++c)
      if (p[c] != T(0)) {
        si.push_back(static_cast<int32_t>(c));
        sv.push_back(p[c]);
      }
    return {si.data(), sv.data(), static_cast<int64_t>(sv.size())};
  }
};

std::vector<int64_t> sorted_ranks(const std::vector<int64_t>& ns, int64_t n_cols) {
  std::vector<int64_t> out = ns;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  for (int64_t n : out)
    if (n < 1 || n > n_cols)
      fail_input("calculate_qc_metrics", "percent_top contains ", n, " but the matrix has ", n_cols,
                 " genes; give ranks between 1 and ", n_cols, " (or none)");
  return out;
}

// Rows whose nonzeros are all integers below this (counts) get their top-n sums from a histogram of
// their values: one pass, where nth_element's partitions over ~2,000 doubles a cell were most of
// QC's time (0.2 of 0.3 s at 20k x 20k on 2 cores).
constexpr int32_t kTopHist = 4096;

template <class Acc>
QcResult qc_impl(const Context& ctx, const Acc& A, const QcOptions& opt,
                 const std::vector<std::vector<uint8_t>>& masks) {
  using T = typename Acc::value_type;
  const int64_t n = A.rows(), g = A.cols();
  int64_t n_total = n;  // cells over all ranks (this rank holds rows of them)
  ctx.comm().allreduce_sum(&n_total, 1);
  if (n_total == 0 || g == 0)
    fail_input("calculate_qc_metrics", "the matrix is ", n_total, "x", g, "; it needs at least one cell and one gene");
  if (masks.size() != opt.qc_vars.size())
    fail("internal: calculate_qc_metrics got ", masks.size(), " masks for ", opt.qc_vars.size(), " qc_vars");
  for (size_t q = 0; q < masks.size(); ++q)
    if (static_cast<int64_t>(masks[q].size()) != g)
      fail("internal: qc mask '", opt.qc_vars[q], "' has ", masks[q].size(), " entries for ", g, " genes");

  QcResult res;
  res.percent_top = sorted_ranks(opt.percent_top, g);
  const size_t nq = masks.size(), nk = res.percent_top.size();
  const size_t un = static_cast<size_t>(n), ug = static_cast<size_t>(g);
  res.n_genes_by_counts.assign(un, 0);
  res.total_counts.assign(un, 0.0);
  res.pct_counts_in_top.assign(nk, std::vector<double>(un, 0.0));
  res.total_counts_qc.assign(nq, std::vector<double>(un, 0.0));
  res.pct_counts_qc.assign(nq, std::vector<double>(un, 0.0));

  const RowBlocks rb = A.blocks();
  std::vector<double> acc;  // [0, g): nonzero count per gene; [g, 2g): sum per gene
  reduce_blocks(ctx.threads(), rb.n_blocks(), 2 * ug, acc, [&](int64_t b, double* part) {
    std::vector<int32_t> si;
    std::vector<T> sv;
    std::vector<double> top, qt(nq);
    std::vector<int32_t> hist(nk ? kTopHist : 0, 0);
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      const auto row = A.row(r, si, sv);
      int64_t nz = 0;
      double tot = 0.0;
      std::fill(qt.begin(), qt.end(), 0.0);
      top.clear();
      bool counts = true;  // every nonzero an integer in [1, kTopHist): counted in hist
      int32_t maxv = 0;
      for (int64_t k = 0; k < row.n; ++k) {
        const double v = static_cast<double>(row.val[k]);
        if (v == 0.0) continue;  // explicit zeros do not count (scanpy eliminates them first)
        const size_t j = static_cast<size_t>(row.idx[k]);
        ++nz;
        tot += v;
        part[j] += 1.0;
        part[ug + j] += v;
        for (size_t q = 0; q < nq; ++q)
          if (masks[q][j]) qt[q] += v;
        if (nk) {
          top.push_back(v);
          if (counts) {
            const bool small = v >= 1.0 && v < static_cast<double>(kTopHist) && v == static_cast<double>(static_cast<int32_t>(v));
            if (small) {
              const int32_t iv = static_cast<int32_t>(v);
              ++hist[static_cast<size_t>(iv)];
              maxv = std::max(maxv, iv);
            } else {
              counts = false;
            }
          }
        }
      }
      const size_t ur = static_cast<size_t>(r);
      res.n_genes_by_counts[ur] = nz;
      res.total_counts[ur] = tot;
      for (size_t q = 0; q < nq; ++q) {
        res.total_counts_qc[q][ur] = qt[q];
        res.pct_counts_qc[q][ur] = tot != 0.0 ? qt[q] / tot * 100.0 : 0.0;
      }
      if (nk && counts) {
        // Counts: the top-n sums from the histogram of the row's values, walked from the largest
        // (integers below 2^53: each sum exact, the same double as any order of adding them).
        size_t k = 0;
        int64_t taken = 0;
        double sum = 0.0;
        for (int32_t v = maxv; v >= 1 && k < nk; --v) {
          const int64_t c = hist[static_cast<size_t>(v)];
          while (k < nk && taken + c >= res.percent_top[k]) {
            const double s = sum + static_cast<double>(res.percent_top[k] - taken) * v;
            res.pct_counts_in_top[k][ur] = tot != 0.0 ? s / tot * 100.0 : 0.0;
            ++k;
          }
          taken += c;
          sum += static_cast<double>(c) * v;
        }
        for (; k < nk; ++k) res.pct_counts_in_top[k][ur] = tot != 0.0 ? sum / tot * 100.0 : 0.0;  // fewer genes than n
      }
      if (nk) std::fill_n(hist.begin(), static_cast<size_t>(maxv) + 1, 0);  // (also a row that left it midway)
      if (nk && counts) continue;
      // Top-n sums: successive partial partitions, largest n first, each within the previous top.
      size_t cur = top.size();
      for (size_t k = nk; k-- > 0;) {
        const size_t nn = static_cast<size_t>(res.percent_top[k]);
        if (nn < cur) {
          std::nth_element(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(nn),
                           top.begin() + static_cast<std::ptrdiff_t>(cur), std::greater<double>());
          cur = nn;
        }
        double s = 0.0;
        for (size_t i = 0; i < cur; ++i) s += top[i];
        res.pct_counts_in_top[k][ur] = tot != 0.0 ? s / tot * 100.0 : 0.0;
      }
    }
  });
  ctx.comm().allreduce_sum(acc.data(), acc.size());

  res.n_cells_by_counts.resize(ug);
  res.mean_counts.resize(ug);
  res.pct_dropout_by_counts.resize(ug);
  res.var_total_counts.resize(ug);
  const double dn = static_cast<double>(n_total);
  for (size_t j = 0; j < ug; ++j) {
    res.n_cells_by_counts[j] = static_cast<int64_t>(acc[j]);
    res.var_total_counts[j] = acc[ug + j];
    res.mean_counts[j] = acc[ug + j] / dn;
    res.pct_dropout_by_counts[j] = (1.0 - acc[j] / dn) * 100.0;
  }
  return res;
}

double f32(double v) { return static_cast<double>(static_cast<float>(v)); }

std::vector<double> log1p_of(const std::vector<double>& v, bool as_f32) {
  std::vector<double> out(v.size());
  const int64_t n = static_cast<int64_t>(v.size());
#pragma omp parallel for schedule(static) if (n > 100000)
  for (int64_t i = 0; i < n; ++i) out[i] = as_f32 ? f32(std::log1p(f32(v[i]))) : std::log1p(v[i]);
  return out;
}
void round_f32_inplace(std::vector<double>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
#pragma omp parallel for schedule(static) if (n > 100000)
  for (int64_t i = 0; i < n; ++i) v[i] = f32(v[i]);
}
template <class I>
std::vector<double> as_double(const std::vector<I>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace

QcResult calculate_qc_metrics(const Context& ctx, const CsrF& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks) {
  return calculate_qc_metrics(ctx, view_of(X), opt, qc_masks);
}
QcResult calculate_qc_metrics(const Context& ctx, const DenseF& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks) {
  return calculate_qc_metrics(ctx, view_of(X), opt, qc_masks);
}
#define SCURRY_QC_CSR_VIEW(T, I)                                                                   \
  QcResult calculate_qc_metrics(const Context& ctx, const CsrView<const T, I, int64_t>& X,           \
                                const QcOptions& opt, const std::vector<std::vector<uint8_t>>& qc_masks) { \
    return qc_impl(ctx, CsrAccess<T, I>{X}, opt, qc_masks);                                          \
  }
SCURRY_QC_CSR_VIEW(float, int32_t)
SCURRY_QC_CSR_VIEW(float, int64_t)
SCURRY_QC_CSR_VIEW(double, int32_t)
SCURRY_QC_CSR_VIEW(double, int64_t)
#undef SCURRY_QC_CSR_VIEW
QcResult calculate_qc_metrics(const Context& ctx, const DenseView<const float>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks) {
  return qc_impl(ctx, DenseAccess<float>{X}, opt, qc_masks);
}
QcResult calculate_qc_metrics(const Context& ctx, const DenseView<const double>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks) {
  return qc_impl(ctx, DenseAccess<double>{X}, opt, qc_masks);
}

std::vector<std::vector<uint8_t>> qc_var_masks(const Dataset& d, const QcOptions& opt) {
  std::vector<std::vector<uint8_t>> masks;
  for (const auto& v : opt.qc_vars) {
    if (!d.var.has(v))
      fail_input("calculate_qc_metrics", "qc var '", v, "' is not a var column; mark it first (e.g. --qc-vars mt)");
    const Column& c = d.var.at(v);
    if (!std::holds_alternative<BoolColumn>(c.c))
      fail_input("calculate_qc_metrics", "qc var '", v, "' is a ", c.kind(), " column; it must be bool");
    masks.push_back(std::get<BoolColumn>(c.c).values);
  }
  return masks;
}

std::vector<int64_t> qc_percent_top(const QcOptions& opt, int64_t n_genes) { return sorted_ranks(opt.percent_top, n_genes); }

void calculate_qc_metrics(const Context& ctx, Dataset& d, const QcOptions& opt) {
  const Matrix* M = &d.X;
  std::string slot = "X";
  if (!opt.layer.empty()) {
    auto it = d.layers.find(opt.layer);
    if (it == d.layers.end())
      fail_input("calculate_qc_metrics", "no layer named '", opt.layer, "'; use one of the dataset's layers or X");
    M = &it->second;
    slot = "layers/" + opt.layer;
  }
  if (M->empty()) fail_input("calculate_qc_metrics", slot, " is empty; load a matrix first");
  if (M->n_rows() != d.n_obs() || M->n_cols() != d.n_vars())
    fail_input("calculate_qc_metrics", slot, " is ", M->n_rows(), "x", M->n_cols(), " but obs/var are ",
               d.n_obs(), "x", d.n_vars());
  const std::vector<std::vector<uint8_t>> masks = qc_var_masks(d, opt);
  QcResult res = std::visit(
      [&](const auto& x) -> QcResult {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) fail("internal: empty matrix");
        else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>)
          return qc_impl(ctx, CsrAccess<typename decltype(x.data)::value_type, int32_t>{view_of(x)}, opt, masks);
        else return qc_impl(ctx, DenseAccess<typename decltype(x.data)::value_type>{view_of(x)}, opt, masks);
      },
      M->m);
  // scanpy writes float32 sums for float32 data (float64 for float64 data).
  write_qc_metrics(d, std::move(res), opt, std::holds_alternative<CsrF>(M->m) || std::holds_alternative<DenseF>(M->m));
}

// Each column built once and moved into its table (at 1.3M cells a copy of a column is 10 MB of
// fresh memory): the float32 columns rounded in place, the log1p columns from the rounded values
// (f32(log1p(f32(v))) is the same whether v was rounded before or not).
void write_qc_metrics(Dataset& d, QcResult&& res, const QcOptions& opt, bool single) {
  const DType ft = single ? DType::f32 : DType::f64;
  auto fv = [&](std::vector<double>& v) -> std::vector<double>&& {
    if (single) round_f32_inplace(v);
    return std::move(v);
  };
  const std::string& e = opt.expr_type;
  const std::string& vt = opt.var_type;

  Table& obs = d.obs;
  {
    std::vector<double> ng = as_double(res.n_genes_by_counts);
    res.n_genes_by_counts = {};
    std::vector<double> l1p = opt.log1p ? log1p_of(ng, false) : std::vector<double>{};
    obs.set("n_" + vt + "_by_" + e, Column::numeric(std::move(ng), DType::i32));
    if (opt.log1p) obs.set("log1p_n_" + vt + "_by_" + e, Column::numeric(std::move(l1p)));
  }
  auto with_log1p = [&](const std::string& name, const std::string& log1p_name, std::vector<double>& v, Table& t) {
    std::vector<double>&& r = fv(v);
    std::vector<double> l1p = opt.log1p ? log1p_of(r, single) : std::vector<double>{};
    t.set(name, Column::numeric(std::move(r), ft));
    if (opt.log1p) t.set(log1p_name, Column::numeric(std::move(l1p), ft));
  };
  with_log1p("total_" + e, "log1p_total_" + e, res.total_counts, obs);
  for (size_t k = 0; k < res.percent_top.size(); ++k)
    obs.set("pct_" + e + "_in_top_" + std::to_string(res.percent_top[k]) + "_" + vt,
            Column::numeric(std::move(res.pct_counts_in_top[k])));
  for (size_t q = 0; q < opt.qc_vars.size(); ++q) {
    const std::string& v = opt.qc_vars[q];
    with_log1p("total_" + e + "_" + v, "log1p_total_" + e + "_" + v, res.total_counts_qc[q], obs);
    obs.set("pct_" + e + "_" + v, Column::numeric(fv(res.pct_counts_qc[q]), ft));
  }

  Table& var = d.var;
  var.set("n_cells_by_" + e, Column::numeric(as_double(res.n_cells_by_counts), DType::i64));
  with_log1p("mean_" + e, "log1p_mean_" + e, res.mean_counts, var);
  var.set("pct_dropout_by_" + e, Column::numeric(std::move(res.pct_dropout_by_counts)));
  with_log1p("total_" + e, "log1p_total_" + e, res.var_total_counts, var);
}


int64_t mark_gene_prefix(Dataset& d, const std::string& column, const std::vector<std::string>& prefixes) {
  std::vector<uint8_t> mark(static_cast<size_t>(d.n_vars()), 0);
  int64_t count = 0;
  for (size_t j = 0; j < mark.size(); ++j) {
    const std::string& name = d.var.index[j];
    for (const auto& p : prefixes)
      if (name.compare(0, p.size(), p) == 0) {
        mark[j] = 1;
        ++count;
        break;
      }
  }
  if (count == 0) {
    std::string list;
    for (const auto& p : prefixes) list += (list.empty() ? "'" : ", '") + p + "'";
    log::warn(detail::concat("no gene name starts with ", list, "; var['", column,
                             "'] is all false and its QC columns will be 0"));
  }
  d.var.set(column, Column::boolean(std::move(mark)));
  return count;
}

}  // namespace scurry
