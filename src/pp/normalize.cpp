#include "pp/normalize.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/cancel.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/matrix_view.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"

namespace scurry {
namespace {

// Fixed block partition (independent of the thread count): see pp/qc.cpp.
constexpr int64_t kBlockNnz = int64_t{1} << 18;
constexpr int kMemo = 64;  // the integer values whose log1p is computed once a row (normalize_impl)


// One row of a view: its column indices (null for a dense row: the column is the position) and values.
template <class T, class I>
struct RowSpan {
  const I* idx;
  T* val;
  int64_t n;
  int64_t col(int64_t k) const { return idx ? static_cast<int64_t>(idx[k]) : k; }
};

template <class T, class I, class P>
RowBlocks blocks_of(const CsrView<T, I, P>& X) { return row_blocks_by_nnz(X.indptr, X.n_rows, kBlockNnz); }
template <class T>
RowBlocks blocks_of(const DenseView<T>& X) {
  return RowBlocks::uniform(X.n_rows, std::max<int64_t>(1, kBlockNnz / std::max<int64_t>(1, X.n_cols)));
}
template <class T, class I, class P>
RowSpan<T, I> row_of(const CsrView<T, I, P>& X, int64_t r) {
  const int64_t s = X.row_begin(r);
  return {X.indices + s, X.data + s, X.row_end(r) - s};
}
template <class T>
RowSpan<T, int32_t> row_of(const DenseView<T>& X, int64_t r) { return {nullptr, X.row(r), X.n_cols}; }

template <class V>
struct is_dense_view : std::false_type {};
template <class T>
struct is_dense_view<DenseView<T>> : std::true_type {};

}  // namespace

void validate_normalize_total_options(const NormalizeTotalOptions& opt) {
  if (opt.target_sum && !(*opt.target_sum > 0.0 && std::isfinite(*opt.target_sum)))
    fail_input("normalize_total", "target_sum=", *opt.target_sum,
               " must be a positive number (e.g. 1e4); omit it to use the median of the cell totals");
  if (opt.exclude_highly_expressed && !(opt.max_fraction >= 0.0 && opt.max_fraction <= 1.0))
    fail_input("normalize_total", "max_fraction=", opt.max_fraction, " must be between 0 and 1");
}

namespace {

void validate(const NormalizeTotalOptions& opt) { validate_normalize_total_options(opt); }

// The kernel, over a view (CsrView of any index types, or DenseView): in place on its values.
template <class M>
NormalizeTotalResult normalize_impl(const Context& ctx, const M& X, const NormalizeTotalOptions& opt,
                                    const Log1pOptions* lg) {
  using T = typename M::value_type;
  validate(opt);
  if (lg) validate_log1p_options(*lg);
  const int64_t n = X.n_rows;
  const size_t g = static_cast<size_t>(X.n_cols);
  const RowBlocks rb = blocks_of(X);
  NormalizeTotalResult res;
  res.counts_per_cell.assign(static_cast<size_t>(n), 0.0);

  auto totals = [&](const uint8_t* include) {
    parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
      for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
        const auto row = row_of(X, r);
        double s = 0.0;
        for (int64_t k = 0; k < row.n; ++k)
          if (!include || include[row.col(k)]) s += static_cast<double>(row.val[k]);
        res.counts_per_cell[static_cast<size_t>(r)] = s;
      }
    });
  };
  totals(nullptr);
  if (opt.exclude_highly_expressed) {
    // A gene is excluded when x > total * max_fraction in any cell (float comparison, as scanpy).
    const T frac = static_cast<T>(opt.max_fraction);
    std::vector<double> over;
    reduce_blocks(ctx.threads(), rb.n_blocks(), g, over, [&](int64_t b, double* part) {
      for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
        const auto row = row_of(X, r);
        const T thr = static_cast<T>(static_cast<T>(res.counts_per_cell[static_cast<size_t>(r)]) * frac);
        for (int64_t k = 0; k < row.n; ++k)
          if (row.val[k] > thr) part[row.col(k)] = 1.0;
      }
    });
    ctx.comm().allreduce_sum(over.data(), over.size());
    res.gene_included.resize(g);
    int64_t excluded = 0;
    for (size_t j = 0; j < g; ++j) {
      res.gene_included[j] = over[j] == 0.0;
      excluded += over[j] != 0.0;
    }
    log::info(detail::concat("normalize_total: excluding ", excluded, " highly expressed genes from the totals"));
    totals(res.gene_included.data());
  }

  for (double c : res.counts_per_cell) res.n_zero_cells += c == 0.0;
  if (res.n_zero_cells > 0)
    log::warn(detail::concat("normalize_total: ", res.n_zero_cells, " cells have zero counts; they are left as they are"));

  if (opt.target_sum) {
    res.target_sum = *opt.target_sum;
  } else {
    // Median of the positive totals, taken on the float32 totals as scanpy does, over the cells of
    // all ranks (every rank gathers them: 8 bytes a cell; the median does not depend on their order).
    std::vector<double> pos;
    for (double c : res.counts_per_cell)
      if (c > 0) pos.push_back(static_cast<double>(static_cast<T>(c)));
    if (ctx.comm().size() > 1) pos = allgatherv(ctx.comm(), pos);
    if (pos.empty())
      fail_input("normalize_total", "every cell has a total of 0, so there is no median to scale to; give target_sum "
                 "or filter empty cells first");
    const size_t m = pos.size() / 2;
    std::nth_element(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(m), pos.end());
    double med = pos[m];
    if (pos.size() % 2 == 0) {
      const double lo = *std::max_element(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(m));
      med = static_cast<double>(static_cast<T>((lo + med) / 2.0));
    }
    res.target_sum = med;
  }

  const T after = static_cast<T>(res.target_sum);
  const bool has_base = lg && lg->base;
  const double log_scale = has_base ? 1.0 / std::log(*lg->base) : 1.0;
  const CancelShield shield;  // the writing pass is not cut in the middle (core/cancel.hpp)
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      T c = static_cast<T>(res.counts_per_cell[static_cast<size_t>(r)]);
      if (c == T(0)) c = T(1);
      c = c / after;
      const T inv = T(1) / c;
      const auto row = row_of(X, r);
      auto value = [&](T x) {
        T y;
        if constexpr (is_dense_view<M>::value) y = x / c;
        else y = x * inv;
        if (lg) {
          const double l = std::log1p(static_cast<double>(y));
          y = static_cast<T>(has_base ? l * log_scale : l);
        }
        return y;
      };
      if (!lg) {
        for (int64_t k = 0; k < row.n; ++k) row.val[k] = value(row.val[k]);
        continue;
      }
      // Counts are small integers: a row's values repeat, and the value of x depends on x and the
      // row only, so each of 0..kMemo-1 is computed once a row (on first use) and looked up after:
      // the same bits as computing every entry, without a log1p call per nonzero.
      T memo[kMemo];
      uint64_t have = 0;
      for (int64_t k = 0; k < row.n; ++k) {
        const T x = row.val[k];
        if (x >= T(0) && x < T(kMemo)) {
          const int i = static_cast<int>(x);
          if (static_cast<T>(i) == x) {
            if (!((have >> i) & 1u)) memo[i] = value(x), have |= uint64_t{1} << i;
            row.val[k] = memo[i];
            continue;
          }
        }
        row.val[k] = value(x);
      }
    }
  });
  return res;
}

NormalizeTotalResult dataset_impl(const Context& ctx, Dataset& d, const NormalizeTotalOptions& opt,
                                  const Log1pOptions* lg) {
  validate(opt);
  if (lg) validate_log1p_options(*lg);
  Matrix* M = &d.X;
  std::string slot = "X";
  if (!opt.layer.empty()) {
    auto it = d.layers.find(opt.layer);
    if (it == d.layers.end())
      fail_input("normalize_total", "no layer named '", opt.layer, "'; use one of the dataset's layers or X");
    M = &it->second;
    slot = "layers/" + opt.layer;
  }
  if (M->empty()) fail_input("normalize_total", slot, " is empty; load a matrix first");
  bool single = true;
  NormalizeTotalResult res = std::visit(
      [&](auto& x) -> NormalizeTotalResult {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) fail("internal: empty matrix");
        else {
          single = std::is_same_v<X, CsrF> || std::is_same_v<X, DenseF>;
          return normalize_impl(ctx, view_of(x), opt, lg);
        }
      },
      M->m);
  M->dtype = single ? DType::f32 : DType::f64;
  write_normalize_total(d, res, opt, single, lg);
  return res;
}

}  // namespace

void write_normalize_total(Dataset& d, const NormalizeTotalResult& res, const NormalizeTotalOptions& opt, bool single,
                           const Log1pOptions* lg) {
  if (!opt.key_added.empty()) {
    std::vector<double> v = res.counts_per_cell;
    if (single)
      for (double& x : v) x = static_cast<double>(static_cast<float>(x));
    d.obs.set(opt.key_added, Column::numeric(std::move(v), single ? DType::f32 : DType::f64));
  }
  if (lg) write_log1p(d, *lg);
}

#define SCURRY_NORMALIZE_VIEW(T, I, P)                                                                   \
  NormalizeTotalResult normalize_total(const Context& ctx, const CsrView<T, I, P>& X,                    \
                                       const NormalizeTotalOptions& opt) {                               \
    return normalize_impl(ctx, X, opt, nullptr);                                                         \
  }
SCURRY_NORMALIZE_VIEW(float, int32_t, int32_t)
SCURRY_NORMALIZE_VIEW(float, int32_t, int64_t)
SCURRY_NORMALIZE_VIEW(float, int64_t, int32_t)
SCURRY_NORMALIZE_VIEW(float, int64_t, int64_t)
SCURRY_NORMALIZE_VIEW(double, int32_t, int32_t)
SCURRY_NORMALIZE_VIEW(double, int32_t, int64_t)
SCURRY_NORMALIZE_VIEW(double, int64_t, int32_t)
SCURRY_NORMALIZE_VIEW(double, int64_t, int64_t)
#undef SCURRY_NORMALIZE_VIEW
NormalizeTotalResult normalize_total(const Context& ctx, const DenseView<float>& X, const NormalizeTotalOptions& opt) {
  return normalize_impl(ctx, X, opt, nullptr);
}
NormalizeTotalResult normalize_total(const Context& ctx, const DenseView<double>& X, const NormalizeTotalOptions& opt) {
  return normalize_impl(ctx, X, opt, nullptr);
}

NormalizeTotalResult normalize_total(const Context& ctx, CsrF& X, const NormalizeTotalOptions& opt) {
  return normalize_impl(ctx, view_of(X), opt, nullptr);
}
NormalizeTotalResult normalize_total(const Context& ctx, DenseF& X, const NormalizeTotalOptions& opt) {
  return normalize_impl(ctx, view_of(X), opt, nullptr);
}
NormalizeTotalResult normalize_total(const Context& ctx, Dataset& d, const NormalizeTotalOptions& opt) {
  return dataset_impl(ctx, d, opt, nullptr);
}
NormalizeTotalResult normalize_log1p(const Context& ctx, CsrF& X, const NormalizeTotalOptions& opt,
                                     const Log1pOptions& log_opt) {
  return normalize_impl(ctx, view_of(X), opt, &log_opt);
}
NormalizeTotalResult normalize_log1p(const Context& ctx, DenseF& X, const NormalizeTotalOptions& opt,
                                     const Log1pOptions& log_opt) {
  return normalize_impl(ctx, view_of(X), opt, &log_opt);
}
NormalizeTotalResult normalize_log1p(const Context& ctx, Dataset& d, const NormalizeTotalOptions& opt,
                                     const Log1pOptions& log_opt) {
  return dataset_impl(ctx, d, opt, &log_opt);
}

}  // namespace scurry
