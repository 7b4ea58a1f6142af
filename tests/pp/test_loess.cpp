// LOESS: the direct surface against a weighted least-squares oracle written here; exact
// reproduction of a quadratic by both surfaces; the interpolated surface close to the direct one;
// the k-d tree size; bad input.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "pp/loess.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

// Oracle: at q, the floor(n*span) nearest points, tricube weights (1 - (d/h)^3)^3 with h the
// distance to the farthest of them, weighted least squares in raw coordinates (t - q), solved by
// Gaussian elimination with partial pivoting in long double.
double oracle_fit(const std::vector<double>& x, const std::vector<double>& y, double q, double span, int degree) {
  const size_t n = x.size();
  const size_t nf = std::min(n, static_cast<size_t>(std::floor(n * span)));
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = std::fabs(x[i] - q);
  std::vector<double> ds = d;
  std::sort(ds.begin(), ds.end());
  const double h = ds[nf - 1];
  const int k = degree + 1;
  long double A[3][4] = {};
  for (size_t i = 0; i < n; ++i) {
    if (!(d[i] < h)) continue;
    const long double u = d[i] / h;
    const long double w = std::pow(1 - u * u * u, 3);
    long double basis[3] = {1, x[i] - q, (x[i] - q) * (x[i] - q)};
    for (int r = 0; r < k; ++r) {
      for (int c = 0; c < k; ++c) A[r][c] += w * basis[r] * basis[c];
      A[r][k] += w * basis[r] * y[i];
    }
  }
  for (int c = 0; c < k; ++c) {
    int piv = c;
    for (int r = c + 1; r < k; ++r)
      if (std::fabs(A[r][c]) > std::fabs(A[piv][c])) piv = r;
    for (int j = 0; j <= k; ++j) std::swap(A[c][j], A[piv][j]);
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const long double f = A[r][c] / A[c][c];
      for (int j = c; j <= k; ++j) A[r][j] -= f * A[c][j];
    }
  }
  return static_cast<double>(A[0][k] / A[0][0]);
}

struct Data {
  std::vector<double> x, y;
};
Data noisy_sine(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> ux(-1.0, 4.0);
  std::normal_distribution<double> noise(0.0, 0.3);
  Data d;
  for (int i = 0; i < n; ++i) {
    d.x.push_back(ux(rng));
    d.y.push_back(std::sin(d.x.back()) + noise(rng));
  }
  return d;
}

TEST(Loess, DirectMatchesWeightedLeastSquaresOracle) {
  const uint64_t seed = test::fresh_seed();
  const Data d = noisy_sine(400, seed);
  for (double span : {0.1, 0.3, 0.75, 1.0}) {
    for (int degree : {1, 2}) {
      LoessOptions o;
      o.span = span;
      o.degree = degree;
      o.surface = LoessSurface::direct;
      const LoessResult r = loess(d.x, d.y, o);
      ASSERT_EQ(r.fitted.size(), d.x.size());
      double maxdiff = 0;
      for (size_t i = 0; i < d.x.size(); ++i) {
        const double want = oracle_fit(d.x, d.y, d.x[i], span, degree);
        maxdiff = std::max(maxdiff, std::fabs(r.fitted[i] - want));
      }
      EXPECT_LT(maxdiff, 1e-9) << "span " << span << " degree " << degree;
    }
  }
}

TEST(Loess, ReproducesAQuadraticExactly) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> ux(-3.0, 2.0), uc(-2.0, 2.0);
  const double a = uc(rng), b = uc(rng), c = uc(rng);
  std::vector<double> x, y;
  for (int i = 0; i < 1000; ++i) {
    x.push_back(ux(rng));
    y.push_back(a + b * x.back() + c * x.back() * x.back());
  }
  x.push_back(x[5]);  // a tie
  y.push_back(y[5]);
  for (LoessSurface s : {LoessSurface::direct, LoessSurface::interpolate}) {
    LoessOptions o;
    o.span = 0.3;
    o.surface = s;
    const LoessResult r = loess(x, y, o);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(r.fitted[i], y[i], 1e-9 * (1 + std::fabs(y[i]))) << i;
  }
}

TEST(Loess, InterpolatedSurfaceFollowsTheDirectOne) {
  const uint64_t seed = test::fresh_seed();
  const Data d = noisy_sine(1000, seed);
  LoessOptions o;
  o.span = 0.3;
  o.surface = LoessSurface::direct;
  const LoessResult direct = loess(d.x, d.y, o);
  o.surface = LoessSurface::interpolate;
  const LoessResult interp = loess(d.x, d.y, o);
  // 1000 distinct x, cells of at most floor(1000 * 0.3 * 0.2) = 60 points: 32 leaves, 33 vertices.
  EXPECT_EQ(interp.n_vertices, 33);
  double maxdiff = 0;
  for (size_t i = 0; i < d.x.size(); ++i) maxdiff = std::max(maxdiff, std::fabs(direct.fitted[i] - interp.fitted[i]));
  std::printf("max |interpolate - direct| = %.3g\n", maxdiff);
  EXPECT_LT(maxdiff, 0.02);
  EXPECT_GT(maxdiff, 0.0);  // the surfaces are different methods
  // At a vertex the interpolated surface equals the local fit there: check at the data maximum's
  // neighbourhood through the local fit API against the oracle.
  std::vector<size_t> idx(d.x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return d.x[a] < d.x[b]; });
  std::vector<double> xs, ys;
  for (size_t i : idx) {
    xs.push_back(d.x[i]);
    ys.push_back(d.y[i]);
  }
  const double q = 1.2345;
  const std::vector<double> coef = loess_local_fit(xs, ys, q, 300, 2);
  EXPECT_NEAR(coef[0], oracle_fit(d.x, d.y, q, 0.3, 2), 1e-9);
}

TEST(Loess, BadInput) {
  std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, y{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  LoessOptions o;
  o.span = 0.3;  // 3 points per neighbourhood: too few for a quadratic
  EXPECT_THROW(loess(x, y, o), InputError);
  o.span = 1.5;
  EXPECT_THROW(loess(x, y, o), InputError);
  o.span = 0.75;
  EXPECT_THROW(loess(x, std::vector<double>{1, 2}, o), InputError);
  std::vector<double> same(10, 2.0);
  EXPECT_THROW(loess(same, y, o), InputError);  // zero-width neighbourhood
  y[3] = std::nan("");
  EXPECT_THROW(loess(x, y, o), InputError);
}

}  // namespace
}  // namespace scurry
