#include "pp/filter.hpp"
#include "pp/filter_view.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"

namespace scurry {
namespace {

// Fixed block partition (independent of the thread count): see pp/qc.cpp.
constexpr int64_t kBlockNnz = int64_t{1} << 18;


// The kernels read views (core/matrix_view.hpp): the owning Csr/Dense overloads pass view_of(X),
// the Python package the buffers of a scipy/numpy matrix; same blocks, same results.
template <class T, class I, class P>
RowBlocks blocks_of(const CsrView<T, I, P>& X) { return row_blocks_by_nnz(X.indptr, X.n_rows, kBlockNnz); }
template <class T>
RowBlocks blocks_of(const DenseView<T>& X) {
  return RowBlocks::uniform(X.n_rows, std::max<int64_t>(1, kBlockNnz / std::max<int64_t>(1, X.n_cols)));
}
// Calls f(col, value) for each stored entry of row r (dense: every entry).
template <class T, class I, class P, class F>
void for_row(const CsrView<T, I, P>& X, int64_t r, F&& f) {
  for (int64_t p = X.row_begin(r); p < X.row_end(r); ++p)
    f(static_cast<int32_t>(X.indices[p]), static_cast<double>(X.data[p]));
}
template <class T, class F>
void for_row(const DenseView<T>& X, int64_t r, F&& f) {
  const T* p = X.row(r);
  for (int64_t c = 0; c < X.n_cols; ++c) f(static_cast<int32_t>(c), static_cast<double>(p[c]));
}

template <class M>
void per_row(const Context& ctx, const M& X, std::vector<int64_t>& n_pos, std::vector<double>& sum) {
  n_pos.assign(static_cast<size_t>(X.n_rows), 0);
  sum.assign(static_cast<size_t>(X.n_rows), 0.0);
  const RowBlocks rb = blocks_of(X);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      int64_t k = 0;
      double s = 0.0;
      for_row(X, r, [&](int32_t, double v) {
        k += v > 0.0;
        s += v;
      });
      n_pos[static_cast<size_t>(r)] = k;
      sum[static_cast<size_t>(r)] = s;
    }
  });
}

template <class M>
void per_col(const Context& ctx, const M& X, std::vector<int64_t>& n_pos, std::vector<double>& sum) {
  const size_t g = static_cast<size_t>(X.n_cols);
  const RowBlocks rb = blocks_of(X);
  std::vector<double> acc;  // [0, g): entries > 0; [g, 2g): sums
  reduce_blocks(ctx.threads(), rb.n_blocks(), 2 * g, acc, [&](int64_t b, double* part) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r)
      for_row(X, r, [&](int32_t j, double v) {
        part[j] += v > 0.0 ? 1.0 : 0.0;
        part[g + static_cast<size_t>(j)] += v;
      });
  });
  ctx.comm().allreduce_sum(acc.data(), acc.size());
  n_pos.resize(g);
  sum.resize(g);
  for (size_t j = 0; j < g; ++j) {
    n_pos[j] = static_cast<int64_t>(acc[j]);
    sum[j] = acc[g + j];
  }
}

struct Criterion {
  std::string name;   // "min_genes"
  bool is_min;
  double threshold;
  bool on_number;     // genes/cells count (true) or counts sum (false)
};

template <class Opt>
std::vector<Criterion> criteria(const Opt& o, const char* nmin, const char* nmax, const char* cmin, const char* cmax,
                                const std::optional<int64_t>& min_n, const std::optional<int64_t>& max_n) {
  std::vector<Criterion> c;
  if (o.min_counts) c.push_back({cmin, true, *o.min_counts, false});
  if (min_n) c.push_back({nmin, true, static_cast<double>(*min_n), true});
  if (o.max_counts) c.push_back({cmax, false, *o.max_counts, false});
  if (max_n) c.push_back({nmax, false, static_cast<double>(*max_n), true});
  return c;
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// keep[i] = passes all criteria; throws when nothing passes, naming the criterion responsible.
// With `comm` (cells held in rows over several ranks), "nothing passes" and the values quoted are
// over all ranks, so every rank decides alike.
std::vector<uint8_t> apply(const std::vector<Criterion>& cs, const std::vector<int64_t>& number,
                           const std::vector<double>& counts, int64_t n, const char* what, const char* step,
                           Comm* comm) {
  auto value = [&](const Criterion& c, size_t i) {
    return c.on_number ? static_cast<double>(number[i]) : counts[i];
  };
  auto pass = [&](const Criterion& c, size_t i) {
    const double v = value(c, i);
    return c.is_min ? v >= c.threshold : v <= c.threshold;
  };
  const bool many = comm && comm->size() > 1;
  int64_t n_all = n;
  if (many) comm->allreduce_sum(&n_all, 1);
  std::vector<uint8_t> keep(static_cast<size_t>(n), 1);
  for (const auto& c : cs) {
    int64_t removed = 0;
    for (size_t i = 0; i < keep.size(); ++i)
      if (!pass(c, i)) ++removed;
    if (many) comm->allreduce_sum(&removed, 1);
    if (removed == n_all && n_all > 0) {
      const double none = c.is_min ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      double best = none;
      for (size_t i = 0; i < keep.size(); ++i) best = c.is_min ? std::max(best, value(c, i)) : std::min(best, value(c, i));
      if (many)
        for (double b : allgatherv(*comm, std::vector<double>{best})) best = c.is_min ? std::max(best, b) : std::min(best, b);
      fail_input(step, c.name, "=", fmt(c.threshold), " removes all ", n_all, " ", what, " (the ",
                 c.is_min ? "largest" : "smallest", " value is ", fmt(best), "); ", c.is_min ? "lower" : "raise", " it");
    }
    for (size_t i = 0; i < keep.size(); ++i)
      if (!pass(c, i)) keep[i] = 0;
  }
  int64_t kept = std::count_if(keep.begin(), keep.end(), [](uint8_t k) { return k != 0; });
  if (many) comm->allreduce_sum(&kept, 1);
  if (n_all > 0 && kept == 0)
    fail_input(step, "the thresholds together remove all ", n_all, " ", what, "; relax one of them");
  return keep;
}

std::vector<int64_t> indices_of(const std::vector<uint8_t>& keep) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < keep.size(); ++i)
    if (keep[i]) out.push_back(static_cast<int64_t>(i));
  return out;
}

FilterCellsResult cells_from_stats(std::vector<int64_t> number, std::vector<double> counts,
                                   const FilterCellsOptions& opt, Comm* comm) {
  const auto cs = criteria(opt, "min_genes", "max_genes", "min_counts", "max_counts", opt.min_genes, opt.max_genes);
  if (cs.empty())
    fail_input("filter_cells", "no criterion given; set one of min_counts, min_genes, max_counts, max_genes");
  FilterCellsResult r;
  r.keep = apply(cs, number, counts, static_cast<int64_t>(number.size()), "cells", "filter_cells", comm);
  r.kept = indices_of(r.keep);
  if (opt.min_genes || opt.max_genes) r.n_genes = std::move(number);
  if (opt.min_counts || opt.max_counts) r.n_counts = std::move(counts);
  return r;
}

FilterGenesResult genes_from_stats(std::vector<int64_t> number, std::vector<double> counts,
                                   const FilterGenesOptions& opt) {
  const auto cs = criteria(opt, "min_cells", "max_cells", "min_counts", "max_counts", opt.min_cells, opt.max_cells);
  if (cs.empty())
    fail_input("filter_genes", "no criterion given; set one of min_counts, min_cells, max_counts, max_cells");
  FilterGenesResult r;
  r.keep = apply(cs, number, counts, static_cast<int64_t>(number.size()), "genes", "filter_genes", nullptr);
  r.kept = indices_of(r.keep);
  if (opt.min_cells || opt.max_cells) r.n_cells = std::move(number);
  if (opt.min_counts || opt.max_counts) r.n_counts = std::move(counts);
  return r;
}

template <class M>
FilterCellsResult cells_impl(const Context& ctx, const M& X, const FilterCellsOptions& opt) {
  std::vector<int64_t> number;
  std::vector<double> counts;
  per_row(ctx, X, number, counts);
  return cells_from_stats(std::move(number), std::move(counts), opt, &ctx.comm());
}

template <class M>
FilterGenesResult genes_impl(const Context& ctx, const M& X, const FilterGenesOptions& opt) {
  std::vector<int64_t> number;
  std::vector<double> counts;
  per_col(ctx, X, number, counts);
  return genes_from_stats(std::move(number), std::move(counts), opt);
}

template <class R, class F>
R visit_x(const Dataset& d, const char* step, F&& f) {
  if (d.X.empty()) fail_input(step, "X is empty; load a matrix first");
  if (d.X.n_rows() != d.n_obs() || d.X.n_cols() != d.n_vars())
    fail_input(step, "X is ", d.X.n_rows(), "x", d.X.n_cols(), " but obs/var are ", d.n_obs(), "x", d.n_vars());
  return std::visit(
      [&](const auto& x) -> R {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) fail("internal: empty matrix");
        else return f(x);
      },
      d.X.m);
}

double round_to(double v, bool single) { return single ? static_cast<double>(static_cast<float>(v)) : v; }

}  // namespace

FilterCellsResult filter_cells(const Context& ctx, const CsrF& X, const FilterCellsOptions& opt) {
  return cells_impl(ctx, view_of(X), opt);
}
FilterCellsResult filter_cells(const Context& ctx, const DenseF& X, const FilterCellsOptions& opt) {
  return cells_impl(ctx, view_of(X), opt);
}
FilterGenesResult filter_genes(const Context& ctx, const CsrF& X, const FilterGenesOptions& opt) {
  return genes_impl(ctx, view_of(X), opt);
}
FilterGenesResult filter_genes(const Context& ctx, const DenseF& X, const FilterGenesOptions& opt) {
  return genes_impl(ctx, view_of(X), opt);
}
using CsrViewF32 = CsrView<const float, int32_t, int64_t>;
using CsrViewF64 = CsrView<const float, int64_t, int64_t>;
using CsrViewD32 = CsrView<const double, int32_t, int64_t>;
using CsrViewD64 = CsrView<const double, int64_t, int64_t>;
#define SCURRY_FILTER_VIEWS(V)                                                                    \
  FilterCellsResult filter_cells(const Context& ctx, const V& X, const FilterCellsOptions& opt) { \
    return cells_impl(ctx, X, opt);                                                               \
  }                                                                                               \
  FilterGenesResult filter_genes(const Context& ctx, const V& X, const FilterGenesOptions& opt) { \
    return genes_impl(ctx, X, opt);                                                               \
  }
SCURRY_FILTER_VIEWS(CsrViewF32)
SCURRY_FILTER_VIEWS(CsrViewF64)
SCURRY_FILTER_VIEWS(CsrViewD32)
SCURRY_FILTER_VIEWS(CsrViewD64)
SCURRY_FILTER_VIEWS(DenseView<const float>)
SCURRY_FILTER_VIEWS(DenseView<const double>)
#undef SCURRY_FILTER_VIEWS

FilterCellsResult filter_cells_from_stats(std::vector<int64_t> n_genes, std::vector<double> n_counts,
                                          const FilterCellsOptions& opt, Comm* comm) {
  return cells_from_stats(std::move(n_genes), std::move(n_counts), opt, comm);
}
FilterGenesResult filter_genes_from_stats(std::vector<int64_t> n_cells, std::vector<double> n_counts,
                                          const FilterGenesOptions& opt) {
  return genes_from_stats(std::move(n_cells), std::move(n_counts), opt);
}

FilterCellsResult filter_cells(const Context& ctx, Dataset& d, const FilterCellsOptions& opt) {
  FilterCellsResult r = visit_x<FilterCellsResult>(d, "filter_cells", [&](const auto& x) { return cells_impl(ctx, view_of(x), opt); });
  apply_filter_cells(d, r, std::holds_alternative<CsrF>(d.X.m) || std::holds_alternative<DenseF>(d.X.m));
  return r;
}

void apply_filter_cells(Dataset& d, const FilterCellsResult& r, bool single) {
  if (!r.n_genes.empty())
    d.obs.set("n_genes", Column::numeric(std::vector<double>(r.n_genes.begin(), r.n_genes.end()), DType::i64));
  if (!r.n_counts.empty()) {
    std::vector<double> v(r.n_counts.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = round_to(r.n_counts[i], single);
    d.obs.set("n_counts", Column::numeric(std::move(v), single ? DType::f32 : DType::f64));
  }
  const int64_t removed = d.n_obs() - static_cast<int64_t>(r.kept.size());
  if (removed > 0) {
    log::info(detail::concat("filter_cells: removed ", removed, " of ", d.n_obs(), " cells"));
    if (d.raw && !d.raw->X.empty() && d.raw->X.n_rows() == d.n_obs()) d.raw->X = take_rows(d.raw->X, r.kept);
    d.subset_obs(r.kept);
  }
}

FilterGenesResult filter_genes(const Context& ctx, Dataset& d, const FilterGenesOptions& opt) {
  FilterGenesResult r = visit_x<FilterGenesResult>(d, "filter_genes", [&](const auto& x) { return genes_impl(ctx, view_of(x), opt); });
  apply_filter_genes(d, r, std::holds_alternative<CsrF>(d.X.m) || std::holds_alternative<DenseF>(d.X.m));
  return r;
}

void apply_filter_genes(Dataset& d, const FilterGenesResult& r, bool single) {
  if (!r.n_cells.empty())
    d.var.set("n_cells", Column::numeric(std::vector<double>(r.n_cells.begin(), r.n_cells.end()), DType::i64));
  if (!r.n_counts.empty()) {
    std::vector<double> v(r.n_counts.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = round_to(r.n_counts[i], single);
    d.var.set("n_counts", Column::numeric(std::move(v), single ? DType::f32 : DType::f64));
  }
  const int64_t removed = d.n_vars() - static_cast<int64_t>(r.kept.size());
  if (removed > 0) {
    log::info(detail::concat("filter_genes: removed ", removed, " of ", d.n_vars(), " genes"));
    d.subset_vars(r.kept);
  }
}

}  // namespace scurry
