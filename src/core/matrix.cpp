#include "core/matrix.hpp"

#include <algorithm>
#include <functional>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"

namespace scurry {

int64_t Matrix::n_rows() const {
  return std::visit([](const auto& x) -> int64_t {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) return 0;
    else return x.n_rows;
  }, m);
}
int64_t Matrix::n_cols() const {
  return std::visit([](const auto& x) -> int64_t {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) return 0;
    else return x.n_cols;
  }, m);
}
int64_t Matrix::nnz() const {
  return std::visit([](const auto& x) -> int64_t {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, std::monostate>) return 0;
    else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) return x.nnz();
    else return x.n_rows * x.n_cols;
  }, m);
}

std::string Matrix::describe() const {
  const char* kind = empty() ? "empty" : is_sparse() ? "csr" : "dense";
  return detail::concat(kind, " ", dtype_name(dtype), " ", n_rows(), "x", n_cols(), " nnz=", nnz());
}

#define SCURRY_VIEW(NAME, TYPE)                                                            \
  TYPE& Matrix::NAME() {                                                                   \
    if (auto* p = std::get_if<TYPE>(&m)) return *p;                                        \
    fail("internal: expected a " #TYPE " matrix, found ", describe());                     \
  }                                                                                        \
  const TYPE& Matrix::NAME() const {                                                       \
    if (auto* p = std::get_if<TYPE>(&m)) return *p;                                        \
    fail("internal: expected a " #TYPE " matrix, found ", describe());                     \
  }
SCURRY_VIEW(csr_f, CsrF)
SCURRY_VIEW(dense_f, DenseF)
SCURRY_VIEW(dense_d, DenseD)
#undef SCURRY_VIEW

namespace {
template <class Out, class In>
Csr<Out> cast_csr(const Csr<In>& a) {
  Csr<Out> b;
  b.n_rows = a.n_rows;
  b.n_cols = a.n_cols;
  b.indptr = a.indptr;
  b.indices = a.indices;
  b.data.assign(a.data.begin(), a.data.end());
  return b;
}
// Two passes on the OpenMP threads: each row's nonzeros counted, then written at its offset (the
// same result as one serial pass; a 1.3M x 2,000 dense matrix is 2.6e9 entries).
template <class Out, class In>
Csr<Out> dense_to_csr(const Dense<In>& a) {
  Csr<Out> b;
  b.n_rows = a.n_rows;
  b.n_cols = a.n_cols;
  b.indptr.assign(static_cast<size_t>(a.n_rows) + 1, 0);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const In* row = a.row(r);
    int64_t n = 0;
    for (int64_t c = 0; c < a.n_cols; ++c) n += row[c] != In(0);
    b.indptr[r + 1] = n;
  }
  for (int64_t r = 0; r < a.n_rows; ++r) b.indptr[r + 1] += b.indptr[r];
  const size_t nnz = static_cast<size_t>(b.indptr.back());
  resize_large(b.indices, nnz);
  resize_large(b.data, nnz);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const In* row = a.row(r);
    int64_t q = b.indptr[r];
    for (int64_t c = 0; c < a.n_cols; ++c)
      if (row[c] != In(0)) {
        b.indices[q] = static_cast<int32_t>(c);
        b.data[q++] = static_cast<Out>(row[c]);
      }
  }
  return b;
}
template <class Out, class In>
Dense<Out> csr_to_dense(const Csr<In>& a) {
  Dense<Out> d(a.n_rows, a.n_cols);
  for (int64_t r = 0; r < a.n_rows; ++r)
    for (int64_t p = a.indptr[r]; p < a.indptr[r + 1]; ++p) d(r, a.indices[p]) += static_cast<Out>(a.data[p]);
  return d;
}
template <class Out, class In>
Dense<Out> cast_dense(const Dense<In>& a) {
  Dense<Out> d;
  d.n_rows = a.n_rows;
  d.n_cols = a.n_cols;
  d.data.assign(a.data.begin(), a.data.end());
  return d;
}
}  // namespace

CsrF to_csr_f(const Matrix& m) {
  return std::visit([](const auto& x) -> CsrF {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, std::monostate>) return CsrF{};
    else if constexpr (std::is_same_v<X, CsrF>) return x;
    else if constexpr (std::is_same_v<X, CsrD>) return cast_csr<float>(x);
    else return dense_to_csr<float>(x);
  }, m.m);
}

template <class Out>
static Dense<Out> to_dense_impl(const Matrix& m) {
  return std::visit([](const auto& x) -> Dense<Out> {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, std::monostate>) return Dense<Out>{};
    else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) return csr_to_dense<Out>(x);
    else return cast_dense<Out>(x);
  }, m.m);
}
DenseD to_dense_d(const Matrix& m) { return to_dense_impl<double>(m); }
DenseF to_dense_f(const Matrix& m) { return to_dense_impl<float>(m); }

CsrF csr_from_dense_rows(const float* rows, int64_t n_rows, int64_t n_cols) {
  CsrF out = CsrF::zeros(n_rows, n_cols);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = rows + static_cast<size_t>(r) * static_cast<size_t>(n_cols);
    for (int64_t c = 0; c < n_cols; ++c)
      if (row[c] != 0.0f) {
        out.indices.push_back(static_cast<int32_t>(c));
        out.data.push_back(row[c]);
      }
    out.indptr[r + 1] = out.nnz();
  }
  return out;
}

template <class T>
Csr<T> transpose(const Csr<T>& a, int threads) {
  Csr<T> t;
  t.n_rows = a.n_cols;
  t.n_cols = a.n_rows;
  t.indptr.assign(static_cast<size_t>(t.n_rows) + 1, 0);
  t.indices.resize(a.indices.size());
  t.data.resize(a.data.size());
  const int64_t g = a.n_cols;
  // Row blocks: one (sequential) or ~4 a thread; off[b * g + c]: where block b's entries of column c go.
  const int64_t nb = threads > 1 ? std::min<int64_t>(std::max<int64_t>(a.n_rows, 1), 4 * static_cast<int64_t>(threads)) : 1;
  const RowBlocks rb = RowBlocks::uniform(a.n_rows, std::max<int64_t>(1, (a.n_rows + nb - 1) / nb));
  const int64_t blocks = rb.n_blocks();
  std::vector<int64_t> off(static_cast<size_t>(blocks) * g, 0);
  const auto each_block = [&](const std::function<void(int64_t)>& fn) {  // (one block: a plain loop)
    if (threads > 1) parallel_for(threads, blocks, fn);
    else for (int64_t b = 0; b < blocks; ++b) fn(b);
  };
  each_block([&](int64_t b) {
    int64_t* c = off.data() + b * g;
    for (int64_t p = a.indptr[rb.begin(b)]; p < a.indptr[rb.end(b)]; ++p) ++c[a.indices[p]];
  });
  int64_t run = 0;
  for (int64_t c = 0; c < g; ++c) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k = off[b * g + c];
      off[b * g + c] = run;
      run += k;
    }
    t.indptr[c + 1] = run;
  }
  each_block([&](int64_t b) {
    int64_t* o = off.data() + b * g;
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r)
      for (int64_t p = a.indptr[r]; p < a.indptr[r + 1]; ++p) {
        const int64_t q = o[a.indices[p]]++;
        t.indices[q] = static_cast<int32_t>(r);
        t.data[q] = a.data[p];
      }
  });
  return t;
}
template CsrF transpose(const CsrF&, int);
template CsrD transpose(const CsrD&, int);

template <class T>
void validate_csr(const Csr<T>& a, const std::string& where) {
  if (a.n_rows < 0 || a.n_cols < 0) fail_input(where, "negative shape ", a.n_rows, "x", a.n_cols);
  if (static_cast<int64_t>(a.indptr.size()) != a.n_rows + 1)
    fail_input(where, "row pointer array has ", a.indptr.size(), " entries, expected ", a.n_rows + 1);
  if (a.indices.size() != a.data.size())
    fail_input(where, "indices (", a.indices.size(), ") and data (", a.data.size(), ") differ in length");
  if (a.indptr[0] != 0) fail_input(where, "row pointers must start at 0, found ", a.indptr[0]);
  // (pieces on the OpenMP threads; the first bad row or position is reported, whatever the threads)
  constexpr int64_t kPiece = int64_t(1) << 20;
  const int64_t row_pieces = (a.n_rows + kPiece - 1) / kPiece;
  std::vector<int64_t> bad_row(static_cast<size_t>(row_pieces), -1);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < row_pieces; ++b) {
    const int64_t r1 = std::min(a.n_rows, (b + 1) * kPiece);
    for (int64_t r = b * kPiece; r < r1; ++r)
      if (a.indptr[r + 1] < a.indptr[r]) {
        bad_row[b] = r;
        break;
      }
  }
  for (int64_t r : bad_row)
    if (r >= 0) fail_input(where, "row pointers decrease at row ", r, " (", a.indptr[r], " > ", a.indptr[r + 1], ")");
  if (a.indptr[a.n_rows] != static_cast<int64_t>(a.data.size()))
    fail_input(where, "last row pointer ", a.indptr[a.n_rows], " does not equal the number of stored values ",
               a.data.size());
  const int64_t n = static_cast<int64_t>(a.indices.size());
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<int64_t> bad(static_cast<size_t>(pieces), -1);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < pieces; ++b) {
    const int64_t p1 = std::min(n, (b + 1) * kPiece);
    for (int64_t p = b * kPiece; p < p1; ++p)
      if (a.indices[p] < 0 || a.indices[p] >= a.n_cols) {
        bad[b] = p;
        break;
      }
  }
  for (int64_t p : bad)
    if (p >= 0)
      fail_input(where, "column index ", a.indices[p], " at position ", p, " is out of range [0, ", a.n_cols, ")");
}
template void validate_csr(const CsrF&, const std::string&);
template void validate_csr(const CsrD&, const std::string&);

}  // namespace scurry
