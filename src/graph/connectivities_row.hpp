// scurry: the per-row arithmetic of the UMAP connectivities (connectivities.hpp), shared by the
// threaded CPU path (connectivities.cpp) and the GPU kernels (connectivities_gpu.cu) so that both
// do the same operations in the same order and rounding. Device code spells every product and sum
// with round-to-nearest intrinsics: nvcc would otherwise contract a * b + c into one FMA (single
// rounding), which the host compiler (-O2, no -march) never does.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define SCURRY_CONN_HD __host__ __device__
#else
#define SCURRY_CONN_HD
#endif

namespace scurry::conn {

constexpr double kSmoothKTolerance = 1e-5;  // umap's SMOOTH_K_TOLERANCE
constexpr double kMinKDistScale = 1e-3;     // umap's MIN_K_DIST_SCALE

SCURRY_CONN_HD inline double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SCURRY_CONN_HD inline double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SCURRY_CONN_HD inline float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SCURRY_CONN_HD inline float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SCURRY_CONN_HD inline float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SCURRY_CONN_HD inline bool finite(float x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

// What smooth_row needs besides the row.
struct SmoothParams {
  double local_connectivity = 1.0;
  double target = 0.0;  // log2(k) * bandwidth
  int n_iter = 64;
};

// umap's smooth_knn_dist for one row di[0..k) (see connectivities.hpp). The sigma floor of a row
// with rho = 0 is 1e-3 times the mean of all distances of the graph (`mean_all`): when the caller
// does not have it yet (have_mean_all false) such a row is left unfinished (returns false, *rho set,
// *sigma untouched) so that the global mean is computed only when some row needs it.
SCURRY_CONN_HD inline bool smooth_row(const float* di, int64_t k, const SmoothParams& p, double mean_all,
                                      bool have_mean_all, float* rho_out, float* sigma_out) {
  // rho from the non-zero finite distances in row order: the index-th and (index+1)-th of them, or
  // their maximum.
  const int64_t index = static_cast<int64_t>(floor(p.local_connectivity));
  const double interpolation = p.local_connectivity - static_cast<double>(index);
  double row_sum = 0;
  int64_t row_count = 0, n_nonzero = 0;
  float nz_prev = 0.0f, nz_at = 0.0f, nz_first = 0.0f, nz_max = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    const float d = di[j];
    if (!finite(d)) continue;
    row_sum = dadd(row_sum, static_cast<double>(d));
    ++row_count;
    if (d > 0.0f) {
      if (n_nonzero == 0) nz_first = d;
      if (n_nonzero == index - 1) nz_prev = d;
      if (n_nonzero == index) nz_at = d;
      if (n_nonzero == 0 || d > nz_max) nz_max = d;
      ++n_nonzero;
    }
  }
  float rho = 0.0f;
  if (static_cast<double>(n_nonzero) >= p.local_connectivity) {
    if (index > 0) {
      double r = nz_prev;
      if (interpolation > kSmoothKTolerance)
        r = dadd(r, dmul(interpolation, static_cast<double>(nz_at) - static_cast<double>(nz_prev)));
      rho = static_cast<float>(r);
    } else {
      rho = static_cast<float>(dmul(interpolation, static_cast<double>(nz_first)));
    }
  } else if (n_nonzero > 0) {
    rho = nz_max;
  }
  *rho_out = rho;
  if (!(rho > 0.0f) && !have_mean_all) return false;
  // sigma: binary search on sum_{j>=1} exp(-max(0, d_j - rho) / sigma) = target.
  double lo = 0.0, hi = std::numeric_limits<double>::infinity(), mid = 1.0;
  for (int it = 0; it < p.n_iter; ++it) {
    double psum = 0.0;
    for (int64_t j = 1; j < k; ++j) {
      if (!finite(di[j])) continue;
      const float d = fsub(di[j], rho);  // float32, as umap's arrays
      psum = dadd(psum, d > 0 ? exp(-(static_cast<double>(d) / mid)) : 1.0);
    }
    if (fabs(psum - p.target) < kSmoothKTolerance) break;
    if (psum > p.target) {
      hi = mid;
      mid = (lo + hi) / 2.0;
    } else {
      lo = mid;
      mid = hi == std::numeric_limits<double>::infinity() ? mid * 2 : (lo + hi) / 2.0;
    }
  }
  double sigma = mid;
  const double floor_mean = rho > 0.0f ? (row_count > 0 ? row_sum / static_cast<double>(row_count) : 0.0) : mean_all;
  if (sigma < dmul(kMinKDistScale, floor_mean)) sigma = dmul(kMinKDistScale, floor_mean);
  *sigma_out = static_cast<float>(sigma);
  return true;
}

// The directed membership of a neighbour at distance d: exp(-(d - rho) / sigma) in float32, 1 when
// d <= rho or sigma = 0. The device evaluates the float exp in float64 and rounds (CUDA's expf is
// within 2 ulp, glibc's within 0.502 ulp of the exact value).
SCURRY_CONN_HD inline float membership(float d, float rho, float sigma) {
  const float x = fsub(d, rho);
  if (x <= 0.0f || sigma == 0.0f) return 1.0f;
#if defined(__CUDA_ARCH__)
  return static_cast<float>(exp(static_cast<double>(-(x / sigma))));
#else
  return std::exp(-(x / sigma));
#endif
}

// The fuzzy set operation on a pair of directed memberships x = A_ij, y = A_ji (0 when absent):
// ratio (x + y - x y) + (1 - ratio) x y, in float32.
SCURRY_CONN_HD inline float fuzzy_union(float x, float y, float ratio) {
  const float prod = fmul(x, y);
  return fadd(fmul(ratio, fsub(fadd(x, y), prod)), fmul(fsub(1.0f, ratio), prod));
}

// The mean of the finite distances d[0..n) (missing neighbours are infinite), summed in order in
// float64 on the host: the floor of sigma for rows with rho = 0.
inline double mean_finite(const float* d, size_t n) {
  double total = 0;
  int64_t count = 0;
  for (size_t p = 0; p < n; ++p)
    if (std::isfinite(d[p])) total += d[p], ++count;
  return count > 0 ? total / static_cast<double>(count) : 0.0;
}

}  // namespace scurry::conn
