// scurry: thin wrappers over BLAS (CBLAS) and LAPACK (Fortran symbols, so no LAPACKE needed) on
// row-major double/float matrices, as the algorithms use them. Every size is checked to fit
// LAPACK's 32-bit integers; a LAPACK failure throws scurry::Error naming the routine and its info.
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"

namespace scurry::linalg {

// Inverse of a small p x p matrix (Gauss-Jordan elimination with partial pivoting, float64), as
// numpy.linalg.inv gives it; `a` is overwritten. Returns false (inv unspecified) at the first pivot
// whose magnitude is not above pivot_min (a singular or near-singular matrix).
bool invert_gauss_jordan(std::vector<double>& a, int64_t p, std::vector<double>& inv, double pivot_min);

// C (m x n) = alpha * op(A) * op(B) + beta * C, all row-major with leading dimensions lda/ldb/ldc
// (op(A) is m x k, op(B) is k x n).
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// C (n x n, row-major; only the lower triangle is referenced and updated) = alpha * op(A) op(A)^T
// + beta * C, where op(A) = A (n x k) or, with trans, A^T (A is k x n).
void dsyrk_lower(bool trans, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, double beta,
                 double* c, int64_t ldc);

// Eigenpairs of a symmetric matrix.
struct SymEigen {
  std::vector<double> values;  // descending
  DenseD vectors;              // n x m, column j is the unit eigenvector of values[j]
};
// The m largest eigenpairs of the symmetric n x n matrix `a` (row-major; only its lower triangle
// is read; `a` is used as scratch and destroyed). LAPACK dsyevr (MRRR).
SymEigen eigh_top(DenseD& a, int64_t m);
// The same in float32 (LAPACK ssyevr on a float copy of the lower triangle; `a` is kept): half the
// memory traffic of dsyevr's tridiagonalisation, vectors to float32 accuracy (eps_f32 ||a|| / gap).
SymEigen eigh_top_f32(const DenseD& a, int64_t m);

// Replaces the columns of `a` (rows x cols, rows >= cols) by an orthonormal basis of their span
// (Householder QR: dgeqrf + dorgqr). Deterministic for a given input.
void orthonormalize_columns(DenseD& a);

// Thin SVD of a (m x n): a = U diag(s) Vt, U m x r, Vt r x n, r = min(m, n), s descending
// (LAPACK dgesdd).
struct Svd {
  std::vector<double> s;
  DenseD u, vt;
};
Svd svd_thin(const DenseD& a);

// While alive, BLAS runs single-threaded (OpenBLAS: openblas_set_num_threads(1), restored on
// destruction). BLAS called inside scurry::parallel_for blocks must be single-threaded, both for
// safety and so that results do not depend on how many threads BLAS would have used. A no-op for
// BLAS libraries without that call.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int saved_ = -1;
};

}  // namespace scurry::linalg
