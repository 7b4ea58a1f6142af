// scurry: non-owning views of a matrix's buffers (pointers and sizes), so that a step can work in
// place on memory it does not own: the Python package's numpy / scipy arrays (CSR with int32 or
// int64 indices and row pointers, C-contiguous dense). The owning Csr<T> / Dense<T> hand out views
// of themselves (view_of), and the in-place CPU kernels (normalize_total, log1p, scale) are written
// once over views; the owning overloads delegate to them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/matrix.hpp"
#include "core/row_blocks.hpp"

namespace scurry {

// CSR: row r's entries are [indptr[r], indptr[r + 1]) of indices/data. P: row pointer type, I:
// column index type (int32_t or int64_t each). Values are writable; the structure is not.
template <class T, class I = int32_t, class P = int64_t>
struct CsrView {
  using value_type = T;
  using index_type = I;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  const P* indptr = nullptr;  // n_rows + 1
  const I* indices = nullptr;
  T* data = nullptr;

  int64_t row_begin(int64_t r) const { return static_cast<int64_t>(indptr[r]); }
  int64_t row_end(int64_t r) const { return static_cast<int64_t>(indptr[r + 1]); }
  int64_t nnz() const { return n_rows > 0 ? row_end(n_rows - 1) - row_begin(0) : 0; }
};

// Row-major dense, rows n_cols apart (C-contiguous).
template <class T>
struct DenseView {
  using value_type = T;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  T* data = nullptr;

  T* row(int64_t r) const { return data + static_cast<size_t>(r) * static_cast<size_t>(n_cols); }
};

template <class T>
CsrView<T> view_of(Csr<T>& m) {
  return {m.n_rows, m.n_cols, m.indptr.data(), m.indices.data(), m.data.data()};
}
template <class T>
CsrView<const T> view_of(const Csr<T>& m) {
  return {m.n_rows, m.n_cols, m.indptr.data(), m.indices.data(), m.data.data()};
}
template <class T>
DenseView<T> view_of(Dense<T>& m) {
  return {m.n_rows, m.n_cols, m.data.data()};
}
template <class T>
DenseView<const T> view_of(const Dense<T>& m) {
  return {m.n_rows, m.n_cols, m.data.data()};
}

// Blocks of about nnz_per_block nonzeros over any row pointer array (RowBlocks::by_nnz's rule:
// a block ends at the first row where it reaches nnz_per_block).
template <class P>
RowBlocks row_blocks_by_nnz(const P* indptr, int64_t n_rows, int64_t nnz_per_block) {
  RowBlocks b;
  int64_t start = 0;
  for (int64_t r = 0; r < n_rows; ++r)
    if (static_cast<int64_t>(indptr[r + 1]) - static_cast<int64_t>(indptr[start]) >= nnz_per_block) {
      b.bounds.push_back(r + 1);
      start = r + 1;
    }
  if (n_rows > 0 && b.bounds.back() != n_rows) b.bounds.push_back(n_rows);
  return b;
}

}  // namespace scurry
