// scurry: distribution functions for the marker tests (see stats.hpp).
#include "tl/stats.hpp"

#include "tl/stats_core.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace scurry::stats {

double incomplete_beta(double a, double b, double x, double y) { return core::incomplete_beta(a, b, x, y); }

double t_two_sided_p(double t, double df) { return core::t_two_sided_p(t, df); }

double normal_two_sided_p(double z) {
  if (std::isnan(z)) return std::numeric_limits<double>::quiet_NaN();
  return std::erfc(std::fabs(z) / std::sqrt(2.0));
}

TTest welch(double mean1, double var1, double n1, double mean2, double var2, double n2) {
  const core::TDf w = core::welch_t_df(mean1, var1, n1, mean2, var2, n2);
  return {w.t, t_two_sided_p(w.t, w.df)};
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
