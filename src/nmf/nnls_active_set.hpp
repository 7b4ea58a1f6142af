// scurry: one non-negative least squares problem in normal-equation form, min_w w^T G w - 2 b^T w,
// w >= 0 (G = H H^T, k x k, positive semi-definite; b = H x), by Lawson & Hanson's active-set method
// (Solving Least Squares Problems, 1974, ch. 23; the passive set's subproblem by Cholesky). The one
// implementation of starCAT's exact fit (nmf/starcat.hpp) for both backends: the CPU calls it per
// cell over the threads, the GPU kernel (nmf/starcat_gpu.cu) a thread per cell. Every product is
// formed by nnls_mul, which on the device is __dmul_rn (never contracted into an FMA), and every
// other operation (+, -, /, sqrt) is correctly rounded on both, so the device's usages are the
// host's bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define SCURRY_NNLS_HD __host__ __device__ inline
#else
#define SCURRY_NNLS_HD inline
#endif

namespace scurry {

SCURRY_NNLS_HD double nnls_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SCURRY_NNLS_HD double nnls_max(double a, double b) { return a > b ? a : b; }
SCURRY_NNLS_HD double nnls_min(double a, double b) { return a < b ? a : b; }
SCURRY_NNLS_HD double nnls_abs(double a) { return a < 0 ? -a : a; }

// The stopping tolerance on the gradient for a Gram G (k x k): 1e-12 * max(1, max_j G_jj) * k.
SCURRY_NNLS_HD double nnls_tolerance(const double* G, int k) {
  double scale = 0;
  for (int i = 0; i < k; ++i) scale = nnls_max(scale, G[i * k + i]);
  return 1e-12 * nnls_max(1.0, scale) * k;
}

// Solves G_PP z = b_P (P: the m passive programs, ascending) by Cholesky, L packed row-major lower
// triangular (m (m + 1) / 2 doubles). False when G_PP is singular to working precision.
SCURRY_NNLS_HD bool nnls_solve_passive(const double* G, int k, const double* b, const int* P, int m, double* L,
                                       double* z) {
  for (int i = 0; i < m; ++i) {
    double* Li = L + i * (i + 1) / 2;
    for (int j = 0; j <= i; ++j) {
      const double* Lj = L + j * (j + 1) / 2;
      double s = G[P[i] * k + P[j]];
      for (int q = 0; q < j; ++q) s = s - nnls_mul(Li[q], Lj[q]);
      if (i == j) {
        if (!(s > nnls_mul(1e-14, nnls_max(1.0, G[P[i] * k + P[i]])))) return false;
        Li[i] = sqrt(s);
      } else {
        Li[j] = s / Lj[j];
      }
    }
  }
  for (int i = 0; i < m; ++i) {
    const double* Li = L + i * (i + 1) / 2;
    double s = b[P[i]];
    for (int q = 0; q < i; ++q) s = s - nnls_mul(Li[q], z[q]);
    z[i] = s / Li[i];
  }
  for (int i = m; i-- > 0;) {
    double s = z[i];
    for (int q = i + 1; q < m; ++q) s = s - nnls_mul(L[q * (q + 1) / 2 + i], z[q]);
    z[i] = s / L[i * (i + 1) / 2 + i];
  }
  return true;
}

// w (k) := argmin. Scratch: z and P of k entries, passive of k bytes, L of k (k + 1) / 2 doubles.
// tol: nnls_tolerance(G, k). Stops when no zero program has a gradient above tol; a program whose
// column makes G_PP singular is left at zero and the fit stops there.
SCURRY_NNLS_HD void nnls_active_set(const double* G, int k, const double* b, double tol, double* w, double* z,
                                    int* P, unsigned char* passive, double* L) {
  for (int j = 0; j < k; ++j) w[j] = 0, passive[j] = 0;
  for (int outer = 0; outer < 3 * k + 10; ++outer) {
    // The most positive entry of the negative half-gradient b - G w among the zero programs.
    int best = -1;
    double gmax = tol;
    for (int j = 0; j < k; ++j) {
      if (passive[j]) continue;
      double g = b[j];
      for (int q = 0; q < k; ++q) g = g - nnls_mul(G[j * k + q], w[q]);
      if (g > gmax) gmax = g, best = j;
    }
    if (best < 0) return;
    passive[best] = 1;
    for (int inner = 0; inner < 3 * k + 10; ++inner) {
      int m = 0;
      for (int j = 0; j < k; ++j)
        if (passive[j]) P[m++] = j;
      if (!nnls_solve_passive(G, k, b, P, m, L, z)) {  // dependent programs: drop the newest and stop
        passive[best] = 0;
        return;
      }
      bool feasible = true;
      for (int q = 0; q < m; ++q) feasible = feasible && z[q] > 0;
      if (feasible) {
        for (int q = 0; q < m; ++q) w[P[q]] = z[q];
        break;
      }
      // Step from w towards z as far as feasibility allows; programs that reach 0 leave the set.
      double alpha = 1;
      for (int q = 0; q < m; ++q)
        if (z[q] <= 0) alpha = nnls_min(alpha, w[P[q]] / (w[P[q]] - z[q]));
      for (int q = 0; q < m; ++q) {
        w[P[q]] = w[P[q]] + nnls_mul(alpha, z[q] - w[P[q]]);
        if (w[P[q]] <= nnls_mul(1e-15, nnls_max(1.0, nnls_abs(z[q])))) w[P[q]] = 0, passive[P[q]] = 0;
      }
    }
  }
}

}  // namespace scurry
