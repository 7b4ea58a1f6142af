// scurry: LOESS with one predictor (Cleveland, Grosse & Shyu; R's `loess`, skmisc.loess), the
// smoother behind highly_variable_genes(flavor="seurat_v3"): local weighted polynomial regression
// with tricube weights over the q = floor(n * span) nearest points, family "gaussian" (no
// robustness iterations), one predictor (so `normalize` has no effect).
//
// Two surfaces, as in the original code:
// - interpolate (skmisc's and R's default): the local fit (value and slope) is computed only at the
//   vertices of a k-d tree over x (cells of at most floor(n * span * cell) points, split at the
//   median, ties kept together, box widened by 0.5 % of the range) and the surface is the cubic
//   Hermite interpolant between consecutive vertices. This follows lowesd/lowesb/ehg124/ehg128 of
//   dloess step by step, so the fitted values match skmisc's to rounding.
// - direct: the local fit evaluated at every point (exact local regression, O(n * q)).
// The local least-squares problem is solved, as in ehg127, on equilibrated columns with a
// pseudo-inverse that drops singular values below 100 * DBL_EPSILON * sigma_max (here through the
// eigen-decomposition of the 3x3 normal matrix, not a QR + SVD of the design).
#pragma once
#include <cstdint>
#include <vector>

namespace scurry {

enum class LoessSurface { interpolate, direct };

struct LoessOptions {
  double span = 0.75;   // fraction of the points in each local neighbourhood, in (0, 1] (skmisc: 0.75)
  int degree = 2;       // degree of the local polynomial: 0, 1 or 2
  LoessSurface surface = LoessSurface::interpolate;  // skmisc's default surface
  double cell = 0.2;    // interpolate: a k-d cell holds at most floor(n * span * cell) points
};

struct LoessResult {
  std::vector<double> fitted;  // the smooth at each input x, in input order
  int64_t n_vertices = 0;      // interpolate: k-d tree vertices fitted (0 for direct)
};

// Fits y ~ x. Throws InputError on sizes that differ, non-finite values, a span outside (0, 1], a
// neighbourhood with fewer points than coefficients, or a zero-width neighbourhood (too many equal x).
LoessResult loess(const std::vector<double>& x, const std::vector<double>& y, const LoessOptions& opt = {});

// The local fit at q (coefficients of 1, (t - q), (t - q)^2 for degree 2): value = coef[0],
// slope = coef[1]. x must be sorted ascending (y in the same order). Exposed for tests.
std::vector<double> loess_local_fit(const std::vector<double>& xs, const std::vector<double>& ys, double q,
                                    int64_t nf, int degree);

}  // namespace scurry
