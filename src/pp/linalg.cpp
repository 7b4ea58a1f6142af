#include "pp/linalg.hpp"

#include <cmath>
#include <utility>

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <limits>
#include <type_traits>
#include <cstddef>

#include "core/error.hpp"

// OpenBLAS' thread control, declared weak so that another BLAS links too (the calls are skipped).
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

// LAPACK's Fortran entry points (gfortran calling convention: hidden string lengths at the end).
extern "C" {
void dsyevr_(const char* jobz, const char* range, const char* uplo, const int* n, double* a, const int* lda,
             const double* vl, const double* vu, const int* il, const int* iu, const double* abstol, int* m,
             double* w, double* z, const int* ldz, int* isuppz, double* work, const int* lwork, int* iwork,
             const int* liwork, int* info, size_t, size_t, size_t);
void ssyevr_(const char* jobz, const char* range, const char* uplo, const int* n, float* a, const int* lda,
             const float* vl, const float* vu, const int* il, const int* iu, const float* abstol, int* m, float* w,
             float* z, const int* ldz, int* isuppz, float* work, const int* lwork, int* iwork, const int* liwork,
             int* info, size_t, size_t, size_t);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t);
}

namespace scurry::linalg {

bool invert_gauss_jordan(std::vector<double>& a, int64_t p, std::vector<double>& inv, double pivot_min) {
  inv.assign(static_cast<size_t>(p * p), 0.0);
  for (int64_t i = 0; i < p; ++i) inv[i * p + i] = 1.0;
  for (int64_t c = 0; c < p; ++c) {
    int64_t piv = c;
    for (int64_t r = c + 1; r < p; ++r)
      if (std::fabs(a[r * p + c]) > std::fabs(a[piv * p + c])) piv = r;
    if (!(std::fabs(a[piv * p + c]) > pivot_min)) return false;
    for (int64_t k = 0; k < p; ++k) {
      std::swap(a[c * p + k], a[piv * p + k]);
      std::swap(inv[c * p + k], inv[piv * p + k]);
    }
    const double d = a[c * p + c];
    for (int64_t k = 0; k < p; ++k) {
      a[c * p + k] /= d;
      inv[c * p + k] /= d;
    }
    for (int64_t r = 0; r < p; ++r) {
      if (r == c) continue;
      const double f = a[r * p + c];
      if (f == 0) continue;
      for (int64_t k = 0; k < p; ++k) {
        a[r * p + k] -= f * a[c * p + k];
        inv[r * p + k] -= f * inv[c * p + k];
      }
    }
  }
  return true;
}

namespace {

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) fail("internal: ", what, " = ", v, " does not fit LAPACK/BLAS 32-bit integers");
  return static_cast<int>(v);
}

CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

// Row-major (rows x cols) -> column-major copy.
std::vector<double> to_col_major(const DenseD& a) {
  std::vector<double> out(a.data.size());
  for (int64_t i = 0; i < a.n_rows; ++i)
    for (int64_t j = 0; j < a.n_cols; ++j) out[static_cast<size_t>(j) * a.n_rows + i] = a(i, j);
  return out;
}

}  // namespace

void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, tr(trans_a), tr(trans_b), to_int(m, "m"), to_int(n, "n"), to_int(k, "k"), alpha, a,
              to_int(lda, "lda"), b, to_int(ldb, "ldb"), beta, c, to_int(ldc, "ldc"));
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, tr(trans_a), tr(trans_b), to_int(m, "m"), to_int(n, "n"), to_int(k, "k"), alpha, a,
              to_int(lda, "lda"), b, to_int(ldb, "ldb"), beta, c, to_int(ldc, "ldc"));
}

void dsyrk_lower(bool trans, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, double beta,
                 double* c, int64_t ldc) {
  if (n == 0) return;
  cblas_dsyrk(CblasRowMajor, CblasLower, tr(trans), to_int(n, "n"), to_int(k, "k"), alpha, a, to_int(lda, "lda"),
              beta, c, to_int(ldc, "ldc"));
}

namespace {

// The m largest eigenpairs of the n x n row-major lower triangle `a` (destroyed) by LAPACK ?syevr in T.
template <class T>
SymEigen eigh_top_in(std::vector<T>& a, int64_t n64, int64_t m, const char* routine) {
  if (m < 1 || m > n64) fail("internal: eigh_top asked for ", m, " eigenpairs of a ", n64, "x", n64, " matrix");
  const int n = to_int(n64, "n");
  // Row-major lower triangle == column-major upper triangle.
  const char jobz = 'V', range = m == n64 ? 'A' : 'I', uplo = 'U';
  const int il = n - static_cast<int>(m) + 1, iu = n;
  const T vl = 0, vu = 0;
  const T abstol = std::numeric_limits<T>::min();  // ?lamch('S'): highest relative accuracy
  int found = 0, info = 0;
  std::vector<T> w(static_cast<size_t>(n));
  std::vector<T> z(static_cast<size_t>(n) * static_cast<size_t>(m));
  std::vector<int> isuppz(2 * static_cast<size_t>(std::max<int64_t>(1, m)));
  const int lda = std::max(1, n), ldz = std::max(1, n);
  auto syevr = [&](T* work, const int* lwork, int* iwork, const int* liwork) {
    if constexpr (std::is_same_v<T, double>)
      dsyevr_(&jobz, &range, &uplo, &n, a.data(), &lda, &vl, &vu, &il, &iu, &abstol, &found, w.data(), z.data(), &ldz,
              isuppz.data(), work, lwork, iwork, liwork, &info, 1, 1, 1);
    else
      ssyevr_(&jobz, &range, &uplo, &n, a.data(), &lda, &vl, &vu, &il, &iu, &abstol, &found, w.data(), z.data(), &ldz,
              isuppz.data(), work, lwork, iwork, liwork, &info, 1, 1, 1);
  };
  // Workspace query.
  T wq = 0;
  int iwq = 0, lwork = -1, liwork = -1;
  syevr(&wq, &lwork, &iwq, &liwork);
  if (info != 0) fail("internal: LAPACK ", routine, " workspace query failed, info = ", info);
  lwork = static_cast<int>(wq) + 1;
  liwork = iwq;
  std::vector<T> work(static_cast<size_t>(lwork));
  std::vector<int> iwork(static_cast<size_t>(std::max(1, liwork)));
  syevr(work.data(), &lwork, iwork.data(), &liwork);
  if (info != 0) fail("internal: LAPACK ", routine, " failed, info = ", info);
  if (found != m) fail("internal: LAPACK ", routine, " returned ", found, " eigenpairs instead of ", m);
  SymEigen out;
  out.values.resize(static_cast<size_t>(m));
  out.vectors = DenseD(n64, m);
  for (int64_t j = 0; j < m; ++j) {
    const int64_t src = m - 1 - j;  // ?syevr returns ascending order
    out.values[j] = w[src];
    for (int64_t i = 0; i < n64; ++i) out.vectors(i, j) = z[static_cast<size_t>(src) * n64 + i];
  }
  return out;
}

}  // namespace

SymEigen eigh_top(DenseD& a, int64_t m) {
  if (a.n_cols != a.n_rows) fail("internal: eigh_top on a non-square ", a.n_rows, "x", a.n_cols, " matrix");
  return eigh_top_in(a.data, a.n_rows, m, "dsyevr");
}

SymEigen eigh_top_f32(const DenseD& a, int64_t m) {
  const int64_t n = a.n_rows;
  if (a.n_cols != n) fail("internal: eigh_top_f32 on a non-square ", a.n_rows, "x", a.n_cols, " matrix");
  std::vector<float> af(static_cast<size_t>(n) * static_cast<size_t>(n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) af[static_cast<size_t>(i) * n + j] = static_cast<float>(a(i, j));
  return eigh_top_in(af, n, m, "ssyevr");
}

void orthonormalize_columns(DenseD& a) {
  const int64_t rows = a.n_rows, cols = a.n_cols;
  if (cols == 0) return;
  if (rows < cols) fail("internal: orthonormalize_columns on a ", rows, "x", cols, " matrix (needs rows >= cols)");
  const int m = to_int(rows, "rows"), n = to_int(cols, "cols"), lda = std::max(1, m);
  std::vector<double> cm = to_col_major(a);
  std::vector<double> tau(static_cast<size_t>(n));
  int info = 0, lwork = -1;
  double wq = 0, wq2 = 0;
  dgeqrf_(&m, &n, cm.data(), &lda, tau.data(), &wq, &lwork, &info);
  if (info != 0) fail("internal: LAPACK dgeqrf workspace query failed, info = ", info);
  dorgqr_(&m, &n, &n, cm.data(), &lda, tau.data(), &wq2, &lwork, &info);
  if (info != 0) fail("internal: LAPACK dorgqr workspace query failed, info = ", info);
  lwork = static_cast<int>(std::max(wq, wq2)) + 1;
  std::vector<double> work(static_cast<size_t>(lwork));
  dgeqrf_(&m, &n, cm.data(), &lda, tau.data(), work.data(), &lwork, &info);
  if (info != 0) fail("internal: LAPACK dgeqrf failed, info = ", info);
  dorgqr_(&m, &n, &n, cm.data(), &lda, tau.data(), work.data(), &lwork, &info);
  if (info != 0) fail("internal: LAPACK dorgqr failed, info = ", info);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) a(i, j) = cm[static_cast<size_t>(j) * rows + i];
}

Svd svd_thin(const DenseD& a) {
  const int64_t rows = a.n_rows, cols = a.n_cols, r = std::min(rows, cols);
  Svd out;
  if (r == 0) {
    out.u = DenseD(rows, 0);
    out.vt = DenseD(0, cols);
    return out;
  }
  const int m = to_int(rows, "rows"), n = to_int(cols, "cols"), k = static_cast<int>(r);
  const int lda = std::max(1, m), ldu = std::max(1, m), ldvt = std::max(1, k);
  std::vector<double> cm = to_col_major(a);
  std::vector<double> s(static_cast<size_t>(k)), u(static_cast<size_t>(m) * k), vt(static_cast<size_t>(k) * n);
  std::vector<int> iwork(8 * static_cast<size_t>(k));
  const char jobz = 'S';
  int info = 0, lwork = -1;
  double wq = 0;
  dgesdd_(&jobz, &m, &n, cm.data(), &lda, s.data(), u.data(), &ldu, vt.data(), &ldvt, &wq, &lwork, iwork.data(),
          &info, 1);
  if (info != 0) fail("internal: LAPACK dgesdd workspace query failed, info = ", info);
  lwork = static_cast<int>(wq) + 1;
  std::vector<double> work(static_cast<size_t>(lwork));
  dgesdd_(&jobz, &m, &n, cm.data(), &lda, s.data(), u.data(), &ldu, vt.data(), &ldvt, work.data(), &lwork,
          iwork.data(), &info, 1);
  if (info != 0) fail("internal: LAPACK dgesdd failed, info = ", info);
  out.s = s;
  out.u = DenseD(rows, r);
  out.vt = DenseD(r, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < r; ++j) out.u(i, j) = u[static_cast<size_t>(j) * rows + i];
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < cols; ++j) out.vt(i, j) = vt[static_cast<size_t>(j) * r + i];
  return out;
}

SingleThreadedBlas::SingleThreadedBlas() {
  if (openblas_set_num_threads && openblas_get_num_threads) {
    saved_ = openblas_get_num_threads();
    openblas_set_num_threads(1);
  }
}

SingleThreadedBlas::~SingleThreadedBlas() {
  if (saved_ > 0 && openblas_set_num_threads) openblas_set_num_threads(saved_);
}

}  // namespace scurry::linalg
