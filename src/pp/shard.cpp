#include "pp/shard.hpp"

#include <map>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"

namespace scurry {
namespace {

// Every rank must hold the same kind of thing at the same place of a gather (they run the same code).
void check_same(Comm& c, int64_t what, const std::string& where) {
  for (int64_t v : allgather_count(c, what))
    if (v != what) fail("internal: ranks disagree on ", where, " (", v, " vs ", what, ") while gathering cells");
}

template <class T>
Csr<T> gather_csr(Comm& c, const Csr<T>& m, int root) {
  std::vector<int64_t> row_nnz(static_cast<size_t>(m.n_rows));
  for (int64_t r = 0; r < m.n_rows; ++r) row_nnz[r] = m.row_nnz(r);
  std::vector<int64_t> rows = gatherv(c, row_nnz, root);
  std::vector<int32_t> idx = gatherv(c, m.indices, root);
  std::vector<T> val = gatherv(c, m.data, root);
  Csr<T> out;
  if (c.rank() != root) return out;
  out.n_rows = static_cast<int64_t>(rows.size());
  out.n_cols = m.n_cols;
  out.indptr.assign(rows.size() + 1, 0);
  for (size_t r = 0; r < rows.size(); ++r) out.indptr[r + 1] = out.indptr[r] + rows[r];
  out.indices = std::move(idx);
  out.data = std::move(val);
  return out;
}

template <class T>
Dense<T> gather_dense(Comm& c, const Dense<T>& m, int root) {
  int64_t n = 0;
  for (int64_t r : allgather_count(c, m.n_rows)) n += r;
  Dense<T> out;
  out.data = gatherv(c, m.data, root);
  if (c.rank() != root) return Dense<T>();
  out.n_rows = n;
  out.n_cols = m.n_cols;
  return out;
}

Matrix gather_matrix(Comm& c, const Matrix& m, int root, const std::string& where) {
  check_same(c, static_cast<int64_t>(m.m.index()), where + " (kind)");
  check_same(c, m.empty() ? 0 : m.n_cols(), where + " (columns)");
  Matrix out = std::visit(
      [&](const auto& x) -> Matrix {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) return Matrix();
        else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) return Matrix(gather_csr(c, x, root));
        else return Matrix(gather_dense(c, x, root));
      },
      m.m);
  out.dtype = m.dtype;
  return out;
}

Column gather_column(Comm& c, const Column& col, int root) {
  return std::visit(
      [&](const auto& x) -> Column {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, NumericColumn>) {
          return NumericColumn{gatherv(c, x.values, root), x.dtype};
        } else if constexpr (std::is_same_v<X, BoolColumn>) {
          return BoolColumn{gatherv(c, x.values, root)};
        } else if constexpr (std::is_same_v<X, StringColumn>) {
          return StringColumn{gatherv_strings(c, x.values, root)};
        } else {
          // Categories of every rank; root maps each rank's codes into their union.
          const std::vector<int64_t> n_cats = allgather_count(c, static_cast<int64_t>(x.categories.size()));
          const std::vector<int64_t> n_codes = allgather_count(c, static_cast<int64_t>(x.codes.size()));
          std::vector<std::string> cats = gatherv_strings(c, x.categories, root);
          std::vector<int32_t> codes = gatherv(c, x.codes, root);
          CategoricalColumn out;
          out.ordered = x.ordered;
          if (c.rank() != root) return out;
          std::map<std::string, int32_t> pos;
          size_t ci = 0, k = 0;
          for (size_t r = 0; r < n_cats.size(); ++r) {
            std::vector<int32_t> map(static_cast<size_t>(n_cats[r]));
            for (int64_t j = 0; j < n_cats[r]; ++j, ++ci) {
              auto [it, fresh] = pos.emplace(cats[ci], static_cast<int32_t>(out.categories.size()));
              if (fresh) out.categories.push_back(cats[ci]);
              map[static_cast<size_t>(j)] = it->second;
            }
            for (int64_t j = 0; j < n_codes[r]; ++j, ++k)
              if (codes[k] >= 0) codes[k] = map.at(static_cast<size_t>(codes[k]));
          }
          out.codes = std::move(codes);
          return out;
        }
      },
      col.c);
}

Table gather_table(Comm& c, const Table& t, int root) {
  Table out;
  out.index_name = t.index_name;
  out.index = gatherv_strings(c, t.index, root);
  check_same(c, static_cast<int64_t>(t.names().size()), "the number of obs columns");
  for (const std::string& name : t.names()) {
    const Column& col = t.at(name);
    check_same(c, static_cast<int64_t>(col.c.index()), "the kind of obs['" + name + "']");
    Column g = gather_column(c, col, root);
    if (c.rank() == root) out.set(name, std::move(g));
  }
  return out;
}

}  // namespace

RowRange shard_range(const Matrix& X, int rank, int size) {
  const int64_t n = X.n_rows();
  if (size <= 1) return {0, n};
  if (const CsrF* c = std::get_if<CsrF>(&X.m)) {
    const RowBlocks b = RowBlocks::split_nnz(c->indptr, size);
    return {b.begin(rank), b.end(rank)};
  }
  if (const CsrD* c = std::get_if<CsrD>(&X.m)) {
    const RowBlocks b = RowBlocks::split_nnz(c->indptr, size);
    return {b.begin(rank), b.end(rank)};
  }
  return {n * rank / size, n * (rank + 1) / size};
}

RowRange shard_rows(const Context& ctx, Dataset& d) {
  Comm& c = ctx.comm();
  const int64_t n = d.n_obs();
  if (c.size() == 1) return {0, n};
  const RowRange rr = shard_range(d.X, c.rank(), c.size());
  if (!d.obsp.empty()) {
    if (c.rank() == 0) log::warn("the input's obsp slots (cells x cells) are dropped in a multi-rank run");
    d.obsp.clear();
  }
  std::vector<int64_t> keep(static_cast<size_t>(rr.end - rr.begin));
  std::iota(keep.begin(), keep.end(), rr.begin);
  if (d.raw && !d.raw->X.empty() && d.raw->X.n_rows() == n) d.raw->X = take_rows(d.raw->X, keep);
  d.subset_obs(keep);
  return rr;
}

void gather_rows(const Context& ctx, Dataset& d, int root) {
  d.settle();
  Comm& c = ctx.comm();
  if (c.size() == 1) return;
  if (!d.obsp.empty()) fail("internal: gather_rows: obsp (cells x cells) cannot be gathered by rows");
  Matrix X = gather_matrix(c, d.X, root, "X");
  check_same(c, static_cast<int64_t>(d.layers.size()), "the number of layers");
  std::map<std::string, Matrix> layers, obsm;
  for (const auto& [k, m] : d.layers) layers[k] = gather_matrix(c, m, root, "layers/" + k);
  check_same(c, static_cast<int64_t>(d.obsm.size()), "the number of obsm slots");
  for (const auto& [k, m] : d.obsm) obsm[k] = gather_matrix(c, m, root, "obsm/" + k);
  const bool raw_rows = d.raw && !d.raw->X.empty() && d.raw->X.n_rows() == d.n_obs();
  check_same(c, raw_rows ? 1 : 0, "raw.X");
  Matrix raw_x;
  if (raw_rows) raw_x = gather_matrix(c, d.raw->X, root, "raw/X");
  Table obs = gather_table(c, d.obs, root);
  if (c.rank() != root) return;
  d.X = std::move(X);
  d.layers = std::move(layers);
  d.obsm = std::move(obsm);
  if (raw_rows) d.raw->X = std::move(raw_x);
  d.obs = std::move(obs);
}

}  // namespace scurry
