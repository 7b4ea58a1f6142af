// scurry: distribution functions for the marker tests (see stats.hpp).
#include "tl/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace scurry::stats {

namespace {

constexpr double kEps = 1e-16;
constexpr double kTiny = 1e-300;
constexpr int kMaxIter = 100000;

// Continued fraction of I_x(a, b) (NR 6.4.5), evaluated by the modified Lentz method.
double beta_cf(double a, double b, double x) {
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

double log_beta(double a, double b) { return std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b); }

}  // namespace

double incomplete_beta(double a, double b, double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
  if (x <= 0.0) return 0.0;
  if (y <= 0.0) return 1.0;
  const double lx = y < 0.5 ? std::log1p(-y) : std::log(x);
  const double ly = x < 0.5 ? std::log1p(-x) : std::log(y);
  const double front = a * lx + b * ly - log_beta(a, b);
  if (x < (a + 1.0) / (a + b + 2.0)) return std::exp(front) * beta_cf(a, b, x) / a;
  return 1.0 - std::exp(front) * beta_cf(b, a, y) / b;
}

double t_two_sided_p(double t, double df) {
  if (std::isnan(t) || std::isnan(df)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(t)) return 0.0;
  const double t2 = t * t;
  // x = df / (df + t^2), y = 1 - x = t^2 / (df + t^2).
  return incomplete_beta(0.5 * df, 0.5, df / (df + t2), t2 / (df + t2));
}

double normal_two_sided_p(double z) {
  if (std::isnan(z)) return std::numeric_limits<double>::quiet_NaN();
  return std::erfc(std::fabs(z) / std::sqrt(2.0));
}

TTest welch(double mean1, double var1, double n1, double mean2, double var2, double n2) {
  const double vn1 = var1 / n1, vn2 = var2 / n2;
  double df = (vn1 + vn2) * (vn1 + vn2) / (vn1 * vn1 / (n1 - 1.0) + vn2 * vn2 / (n2 - 1.0));
  if (std::isnan(df)) df = 1.0;  // scipy: both variances zero; any df that is not NaN
  const double t = (mean1 - mean2) / std::sqrt(vn1 + vn2);
  return {t, t_two_sided_p(t, df)};
}

std::vector<double> benjamini_hochberg(const std::vector<double>& p) {
  const size_t n = p.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> out(n);
  double running = std::numeric_limits<double>::infinity();
  for (size_t k = n; k-- > 0;) {
    const double v = p[order[k]] * static_cast<double>(n) / static_cast<double>(k + 1);
    running = std::min(running, v);
    out[order[k]] = std::min(running, 1.0);
  }
  return out;
}

std::vector<double> bonferroni(const std::vector<double>& p) {
  std::vector<double> out(p.size());
  const double n = static_cast<double>(p.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = std::min(p[i] * n, 1.0);
  return out;
}

}  // namespace scurry::stats
