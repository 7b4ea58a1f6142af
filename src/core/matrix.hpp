// scurry: matrices. Csr (compressed sparse rows: int64 row pointers, so no limit on nonzeros; int32
// column indices) and Dense (row-major), each templated on the value type (float or double), and
// Matrix, the tagged union the Dataset stores in its slots.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.hpp"

namespace scurry {

template <class T>
struct Csr {
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  std::vector<int64_t> indptr;   // n_rows + 1, non-decreasing, indptr[0] == 0
  std::vector<int32_t> indices;  // nnz column indices, each in [0, n_cols)
  std::vector<T> data;           // nnz values

  int64_t nnz() const { return static_cast<int64_t>(data.size()); }
  int64_t row_nnz(int64_t r) const { return indptr[r + 1] - indptr[r]; }
  // An empty matrix of the given shape (indptr all zeros).
  static Csr zeros(int64_t rows, int64_t cols) {
    Csr m;
    m.n_rows = rows;
    m.n_cols = cols;
    m.indptr.assign(static_cast<size_t>(rows) + 1, 0);
    return m;
  }
};

template <class T>
struct Dense {
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  std::vector<T> data;  // row-major, n_rows * n_cols

  Dense() = default;
  Dense(int64_t r, int64_t c, T fill = T(0))
      : n_rows(r), n_cols(c), data(static_cast<size_t>(r) * static_cast<size_t>(c), fill) {}
  T& operator()(int64_t r, int64_t c) { return data[static_cast<size_t>(r) * n_cols + c]; }
  const T& operator()(int64_t r, int64_t c) const { return data[static_cast<size_t>(r) * n_cols + c]; }
  T* row(int64_t r) { return data.data() + static_cast<size_t>(r) * n_cols; }
  const T* row(int64_t r) const { return data.data() + static_cast<size_t>(r) * n_cols; }
};

using CsrF = Csr<float>;
using CsrD = Csr<double>;
using DenseF = Dense<float>;
using DenseD = Dense<double>;

// A matrix slot: sparse or dense, float or double values. `dtype` is the element type to write to
// disk (the type it was read with; integer counts are held as float/double in memory and written
// back as integers).
struct Matrix {
  std::variant<std::monostate, CsrF, CsrD, DenseF, DenseD> m;
  DType dtype = DType::f32;

  Matrix() = default;
  Matrix(CsrF x, DType t = DType::f32) : m(std::move(x)), dtype(t) {}
  Matrix(CsrD x, DType t = DType::f64) : m(std::move(x)), dtype(t) {}
  Matrix(DenseF x, DType t = DType::f32) : m(std::move(x)), dtype(t) {}
  Matrix(DenseD x, DType t = DType::f64) : m(std::move(x)), dtype(t) {}

  bool empty() const { return std::holds_alternative<std::monostate>(m); }
  bool is_sparse() const { return std::holds_alternative<CsrF>(m) || std::holds_alternative<CsrD>(m); }
  bool is_dense() const { return std::holds_alternative<DenseF>(m) || std::holds_alternative<DenseD>(m); }
  int64_t n_rows() const;
  int64_t n_cols() const;
  int64_t nnz() const;  // stored entries; rows*cols for dense

  // Views: throw scurry::Error naming the actual kind if the matrix is not of that kind.
  CsrF& csr_f();
  const CsrF& csr_f() const;
  DenseF& dense_f();
  const DenseF& dense_f() const;
  DenseD& dense_d();
  const DenseD& dense_d() const;
  std::string describe() const;  // e.g. "csr float32 1000x13714 nnz=845352"
};

// Conversions (copies).
CsrF to_csr_f(const Matrix& m);    // any kind -> CSR float (dense zeros dropped)
DenseD to_dense_d(const Matrix& m);  // any kind -> dense double
DenseF to_dense_f(const Matrix& m);
// threads > 1: the entries counted and placed by contiguous row blocks on that many threads (each
// block writes at its own offsets in every output row, ~4 blocks a thread); the same matrix.
template <class T>
Csr<T> transpose(const Csr<T>& a, int threads = 1);
// CSR of n_rows dense rows (row-major, n_cols each) held in a buffer; zeros dropped.
CsrF csr_from_dense_rows(const float* rows, int64_t n_rows, int64_t n_cols);  // CSC <-> CSR conversion is a transpose

// Structural check: indptr size/monotonicity/bounds, indices in range. Throws InputError
// "<where>: <problem>" on the first violation. Values are not inspected.
template <class T>
void validate_csr(const Csr<T>& a, const std::string& where);

}  // namespace scurry
