// scurry: the regularized incomplete beta function and Student's t p-value (stats.hpp) as inline
// functions that compile for the host and the device, so that the CPU path (stats.cpp) and the GPU's
// t-tests (rank_genes_groups_gpu.cu) run the same continued fraction. The device's lgamma, log and
// exp are not the host's bit for bit (and nvcc contracts products into FMAs), so the two agree to
// a few ulps of the result, not in every bit.
#pragma once
#include <cmath>
#include <limits>

#if defined(__CUDACC__)
#define SCURRY_STATS_HD __host__ __device__
#else
#define SCURRY_STATS_HD
#endif

namespace scurry::stats::core {

constexpr double kEps = 1e-16;
constexpr double kTiny = 1e-300;
constexpr int kMaxIter = 100000;

// Continued fraction of I_x(a, b) (Numerical Recipes 3rd ed., eq. 6.4.5), by the modified Lentz
// method.
SCURRY_STATS_HD inline double beta_cf(double a, double b, double x) {
  const double qab = a + b, qap = a + 1.0, qam = a - 1.0;
  double c = 1.0, d = 1.0 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= kMaxIter; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < kEps) break;
  }
  return h;
}

SCURRY_STATS_HD inline double log_beta(double a, double b) {
  return std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b);
}

// I_x(a, b) with y = 1 - x given separately (stats.hpp).
SCURRY_STATS_HD inline double incomplete_beta(double a, double b, double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
  if (x <= 0.0) return 0.0;
  if (y <= 0.0) return 1.0;
  const double lx = y < 0.5 ? std::log1p(-y) : std::log(x);
  const double ly = x < 0.5 ? std::log1p(-x) : std::log(y);
  const double front = a * lx + b * ly - log_beta(a, b);
  if (x < (a + 1.0) / (a + b + 2.0)) return std::exp(front) * beta_cf(a, b, x) / a;
  return 1.0 - std::exp(front) * beta_cf(b, a, y) / b;
}

// 2 * sf(|t|, df) = I_{df/(df+t^2)}(df/2, 1/2) (stats.hpp).
SCURRY_STATS_HD inline double t_two_sided_p(double t, double df) {
  if (std::isnan(t) || std::isnan(df)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(t)) return 0.0;
  const double t2 = t * t;
  return incomplete_beta(0.5 * df, 0.5, df / (df + t2), t2 / (df + t2));
}

// Welch's t and its degrees of freedom from summary statistics (NaN df -> 1, as scipy).
struct TDf {
  double t, df;
};
SCURRY_STATS_HD inline TDf welch_t_df(double mean1, double var1, double n1, double mean2, double var2, double n2) {
  const double vn1 = var1 / n1, vn2 = var2 / n2;
  double df = (vn1 + vn2) * (vn1 + vn2) / (vn1 * vn1 / (n1 - 1.0) + vn2 * vn2 / (n2 - 1.0));
  if (std::isnan(df)) df = 1.0;  // scipy: both variances zero; any df that is not NaN
  return {(mean1 - mean2) / std::sqrt(vn1 + vn2), df};
}

}  // namespace scurry::stats::core
