// scurry: the distribution functions and multiple-testing corrections of the marker tests
// (scipy.stats / statsmodels equivalents), in float64. Plain functions of scalars so a GPU kernel
// can reproduce them.
#pragma once
#include <cstdint>
#include <vector>

namespace scurry::stats {

// Regularized incomplete beta I_x(a, b), with y = 1 - x passed separately so that x near 1 keeps
// its precision. Continued fraction (modified Lentz), Numerical Recipes 3rd ed. section 6.4.
double incomplete_beta(double a, double b, double x, double y);

// Two-sided p-value of Student's t: 2 * sf(|t|, df) = I_{df/(df+t^2)}(df/2, 1/2), as scipy's
// t.sf (cephes stdtr). NaN in -> NaN out; |t| = inf -> 0.
double t_two_sided_p(double t, double df);

// Two-sided p-value of a standard normal z: 2 * norm.sf(|z|) = erfc(|z| / sqrt 2).
double normal_two_sided_p(double z);

// Welch's t-test from summary statistics, as scipy.stats.ttest_ind_from_stats(equal_var=False):
// df = (v1/n1 + v2/n2)^2 / ((v1/n1)^2/(n1-1) + (v2/n2)^2/(n2-1)) (NaN -> 1), t = (m1-m2)/sqrt(v1/n1+v2/n2).
struct TTest {
  double t, p;
};
TTest welch(double mean1, double var1, double n1, double mean2, double var2, double n2);

// Benjamini-Hochberg adjusted p-values, as statsmodels' multipletests(method='fdr_bh'): p sorted
// ascending, p_(i) * n / i, cumulative minimum from the largest, clipped at 1. NaN p-values must
// have been replaced before (scanpy sets them to 1).
std::vector<double> benjamini_hochberg(const std::vector<double>& p);
// Bonferroni, as scanpy: min(p * n, 1).
std::vector<double> bonferroni(const std::vector<double>& p);

}  // namespace scurry::stats
