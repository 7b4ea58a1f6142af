#include "core/dataset.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/memory.hpp"

namespace scurry {

void Dataset::check_shapes(const std::string& where) const {
  const int64_t n = n_obs(), g = n_vars();
  auto bad = [&](const std::string& slot, const Matrix& m, const std::string& want) {
    fail_input(where, slot, " has shape ", m.n_rows(), "x", m.n_cols(), " but ", want);
  };
  if (!X.empty() && (X.n_rows() != n || X.n_cols() != g))
    bad("X", X, detail::concat("obs has ", n, " rows and var ", g));
  for (const auto& [k, m] : layers)
    if (m.n_rows() != n || m.n_cols() != g) bad("layers/" + k, m, detail::concat("X is ", n, "x", g));
  for (const auto& [k, m] : obsm)
    if (m.n_rows() != n) bad("obsm/" + k, m, detail::concat("obs has ", n, " rows"));
  for (const auto& [k, m] : varm)
    if (m.n_rows() != g) bad("varm/" + k, m, detail::concat("var has ", g, " rows"));
  for (const auto& [k, m] : obsp)
    if (m.n_rows() != n || m.n_cols() != n) bad("obsp/" + k, m, detail::concat("obs has ", n, " rows"));
  for (const auto& [k, m] : varp)
    if (m.n_rows() != g || m.n_cols() != g) bad("varp/" + k, m, detail::concat("var has ", g, " rows"));
  if (raw) {
    const int64_t rg = raw->var.n_rows();
    if (!raw->X.empty() && (raw->X.n_rows() != n || raw->X.n_cols() != rg))
      fail_input(where, "raw/X has shape ", raw->X.n_rows(), "x", raw->X.n_cols(), " but obs has ", n,
                 " rows and raw/var ", rg, " (shape mismatch)");
    for (const auto& [k, m] : raw->varm)
      if (m.n_rows() != rg)
        fail_input(where, "raw/varm/", k, " has ", m.n_rows(), " rows but raw/var has ", rg, " (shape mismatch)");
  }
}

// Row and column selection: a count pass, a prefix sum, then a fill pass; the passes run over fixed
// row ranges on all threads (OpenMP), and each row's output position is fixed by the prefix sum, so
// the result does not depend on the thread count.
template <class T>
Csr<T> take_rows(const Csr<T>& a, const std::vector<int64_t>& rows) {
  Csr<T> b;
  b.n_rows = static_cast<int64_t>(rows.size());
  b.n_cols = a.n_cols;
  b.indptr.assign(rows.size() + 1, 0);
  for (size_t i = 0; i < rows.size(); ++i) b.indptr[i + 1] = b.indptr[i] + a.row_nnz(rows[i]);
  resize_large(b.indices, static_cast<size_t>(b.indptr.back()));
  resize_large(b.data, static_cast<size_t>(b.indptr.back()));
  const int64_t n = b.n_rows;
#pragma omp parallel for schedule(static, 1024) if (b.indptr.back() > (1 << 20))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = a.indptr[rows[i]], len = a.row_nnz(rows[i]);
    std::copy_n(a.indices.begin() + s, len, b.indices.begin() + b.indptr[i]);
    std::copy_n(a.data.begin() + s, len, b.data.begin() + b.indptr[i]);
  }
  return b;
}

template <class T>
Csr<T> slice_rows(const Csr<T>& a, int64_t begin, int64_t end) {
  Csr<T> b;
  b.n_rows = end - begin;
  b.n_cols = a.n_cols;
  const int64_t s = a.indptr[begin], e = a.indptr[end];
  b.indptr.resize(static_cast<size_t>(b.n_rows) + 1);
  for (int64_t r = 0; r <= b.n_rows; ++r) b.indptr[r] = a.indptr[begin + r] - s;
  b.indices.assign(a.indices.begin() + s, a.indices.begin() + e);
  b.data.assign(a.data.begin() + s, a.data.begin() + e);
  return b;
}

template <class T>
Csr<T> take_cols(const Csr<T>& a, const std::vector<int64_t>& cols) {
  std::vector<int32_t> remap(static_cast<size_t>(a.n_cols), -1);
  for (size_t j = 0; j < cols.size(); ++j) remap[cols[j]] = static_cast<int32_t>(j);
  // Columns come out sorted within each row when `cols` is increasing (the usual case).
  Csr<T> b;
  b.n_rows = a.n_rows;
  b.n_cols = static_cast<int64_t>(cols.size());
  b.indptr.assign(static_cast<size_t>(a.n_rows) + 1, 0);
  const int64_t n = a.n_rows;
  const bool big = a.nnz() > (1 << 20);
#pragma omp parallel for schedule(static, 1024) if (big)
  for (int64_t r = 0; r < n; ++r) {
    int64_t c = 0;
    for (int64_t p = a.indptr[r]; p < a.indptr[r + 1]; ++p) c += remap[a.indices[p]] >= 0;
    b.indptr[r + 1] = c;
  }
  for (int64_t r = 0; r < n; ++r) b.indptr[r + 1] += b.indptr[r];
  resize_large(b.indices, static_cast<size_t>(b.indptr.back()));
  resize_large(b.data, static_cast<size_t>(b.indptr.back()));
#pragma omp parallel for schedule(static, 1024) if (big)
  for (int64_t r = 0; r < n; ++r) {
    int64_t q = b.indptr[r];
    for (int64_t p = a.indptr[r]; p < a.indptr[r + 1]; ++p) {
      const int32_t j = remap[a.indices[p]];
      if (j >= 0) {
        b.indices[q] = j;
        b.data[q] = a.data[p];
        ++q;
      }
    }
  }
  return b;
}

#define SCURRY_INST(T)                                                        \
  template Csr<T> take_rows(const Csr<T>&, const std::vector<int64_t>&);      \
  template Csr<T> slice_rows(const Csr<T>&, int64_t, int64_t);                \
  template Csr<T> take_cols(const Csr<T>&, const std::vector<int64_t>&);
SCURRY_INST(float)
SCURRY_INST(double)
#undef SCURRY_INST

template <class T>
static Dense<T> dense_take_rows(const Dense<T>& a, const std::vector<int64_t>& rows) {
  Dense<T> b(static_cast<int64_t>(rows.size()), a.n_cols);
  for (size_t i = 0; i < rows.size(); ++i) std::copy_n(a.row(rows[i]), a.n_cols, b.row(static_cast<int64_t>(i)));
  return b;
}
template <class T>
static Dense<T> dense_take_cols(const Dense<T>& a, const std::vector<int64_t>& cols) {
  Dense<T> b(a.n_rows, static_cast<int64_t>(cols.size()));
  for (int64_t r = 0; r < a.n_rows; ++r)
    for (size_t j = 0; j < cols.size(); ++j) b(r, static_cast<int64_t>(j)) = a(r, cols[j]);
  return b;
}

Matrix take_rows(const Matrix& m, const std::vector<int64_t>& rows) {
  Matrix out;
  out.dtype = m.dtype;
  std::visit([&](const auto& x) {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, std::monostate>) {}
    else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) out.m = take_rows(x, rows);
    else out.m = dense_take_rows(x, rows);
  }, m.m);
  return out;
}
Matrix take_cols(const Matrix& m, const std::vector<int64_t>& cols) {
  Matrix out;
  out.dtype = m.dtype;
  std::visit([&](const auto& x) {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, std::monostate>) {}
    else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) out.m = take_cols(x, cols);
    else out.m = dense_take_cols(x, cols);
  }, m.m);
  return out;
}

namespace {

bool increasing(const std::vector<int64_t>& v) {
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] <= v[i - 1]) return false;
  return true;
}

// In-place selection of increasing rows / columns of a CSR matrix: one sequential compaction pass
// (every entry moves to a position at or before its own), no second copy of the matrix in memory
// (a fresh multi-GB allocation costs more in page faults than the pass itself).
template <class T>
void keep_rows_inplace(Csr<T>& a, const std::vector<int64_t>& rows) {
  int64_t q = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t s = a.indptr[rows[i]], e = a.indptr[rows[i] + 1];
    if (q != s) {
      std::copy(a.indices.begin() + s, a.indices.begin() + e, a.indices.begin() + q);
      std::copy(a.data.begin() + s, a.data.begin() + e, a.data.begin() + q);
    }
    a.indptr[i] = q;
    q += e - s;
  }
  a.indptr[rows.size()] = q;
  a.indptr.resize(rows.size() + 1);
  a.indices.resize(static_cast<size_t>(q));
  a.data.resize(static_cast<size_t>(q));
  a.n_rows = static_cast<int64_t>(rows.size());
}

template <class T>
void keep_cols_inplace(Csr<T>& a, const std::vector<int64_t>& cols) {
  std::vector<int32_t> remap(static_cast<size_t>(a.n_cols), -1);
  for (size_t j = 0; j < cols.size(); ++j) remap[cols[j]] = static_cast<int32_t>(j);
  int64_t q = 0, start = 0;
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const int64_t e = a.indptr[r + 1];
    for (int64_t p = start; p < e; ++p) {
      const int32_t j = remap[a.indices[p]];
      if (j >= 0) {
        a.indices[q] = j;
        a.data[q] = a.data[p];
        ++q;
      }
    }
    start = e;
    a.indptr[r + 1] = q;
  }
  a.indices.resize(static_cast<size_t>(q));
  a.data.resize(static_cast<size_t>(q));
  a.n_cols = static_cast<int64_t>(cols.size());
}

// Rows (or columns) of m kept in place when m is CSR and the selection increasing; else a copy.
void select_rows(Matrix& m, const std::vector<int64_t>& keep) {
  if (auto* f = std::get_if<CsrF>(&m.m); f && increasing(keep)) return keep_rows_inplace(*f, keep);
  if (auto* d = std::get_if<CsrD>(&m.m); d && increasing(keep)) return keep_rows_inplace(*d, keep);
  m = take_rows(m, keep);
}
void select_cols(Matrix& m, const std::vector<int64_t>& keep) {
  if (auto* f = std::get_if<CsrF>(&m.m); f && increasing(keep)) return keep_cols_inplace(*f, keep);
  if (auto* d = std::get_if<CsrD>(&m.m); d && increasing(keep)) return keep_cols_inplace(*d, keep);
  m = take_cols(m, keep);
}

}  // namespace

void Dataset::subset_obs(const std::vector<int64_t>& keep) {
  device_x.reset();
  if (!X.empty()) select_rows(X, keep);
  for (auto& [k, m] : layers) select_rows(m, keep);
  for (auto& [k, m] : obsm) m = take_rows(m, keep);
  for (auto& [k, m] : obsp) m = take_cols(take_rows(m, keep), keep);
  obs = obs.take(keep);
}

void Dataset::subset_vars(const std::vector<int64_t>& keep) {
  device_x.reset();
  if (!X.empty()) select_cols(X, keep);
  for (auto& [k, m] : layers) select_cols(m, keep);
  for (auto& [k, m] : varm) m = take_rows(m, keep);
  for (auto& [k, m] : varp) m = take_cols(take_rows(m, keep), keep);
  var = var.take(keep);
}

}  // namespace scurry
