// scurry: LOESS with one predictor; see loess.hpp. The k-d tree build and the vertex interpolation
// follow dloess (lowesd, lowesb -> ehg131 -> ehg124/ehg139/ehg127, lowese -> ehg128) for d = 1.
#include "pp/loess.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>

#include "core/error.hpp"

namespace scurry {
namespace {

constexpr const char* kWhere = "loess";

// Eigen-decomposition of a small symmetric matrix (row-major k x k) by cyclic Jacobi rotations.
// On return a's diagonal holds the eigenvalues and v (row-major) the eigenvectors as columns.
void jacobi_eigen(int k, double* a, double* v) {
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) v[i * k + j] = (i == j) ? 1.0 : 0.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (int i = 0; i < k; ++i) {
      diag += a[i * k + i] * a[i * k + i];
      for (int j = i + 1; j < k; ++j) off += a[i * k + j] * a[i * k + j];
    }
    if (off <= 1e-36 * diag || off == 0) break;
    for (int p = 0; p < k; ++p) {
      for (int q = p + 1; q < k; ++q) {
        double apq = a[p * k + q];
        if (apq == 0) continue;
        double app = a[p * k + p], aqq = a[q * k + q];
        double theta = (aqq - app) / (2 * apq);
        double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int r = 0; r < k; ++r) {  // A <- A J
          double arp = a[r * k + p], arq = a[r * k + q];
          a[r * k + p] = c * arp - s * arq;
          a[r * k + q] = s * arp + c * arq;
        }
        for (int r = 0; r < k; ++r) {  // A <- J^T A
          double apr = a[p * k + r], aqr = a[q * k + r];
          a[p * k + r] = c * apr - s * aqr;
          a[q * k + r] = s * apr + c * aqr;
        }
        for (int r = 0; r < k; ++r) {  // V <- V J
          double vrp = v[r * k + p], vrq = v[r * k + q];
          v[r * k + p] = c * vrp - s * vrq;
          v[r * k + q] = s * vrp + c * vrq;
        }
      }
    }
  }
}

void check_nf(int64_t n, int64_t nf, int degree) {
  if (nf <= 0) fail_input(kWhere, "span is too small: floor(n * span) = 0 points per neighbourhood (n = ", n, "); use a larger span");
  const int k = degree + 1;
  if (k > nf - 1)
    fail_input(kWhere, "span too small: ", nf, " points per neighbourhood for a degree-", degree,
               " fit (n = ", n, "); use a larger span or more points");
}

}  // namespace

std::vector<double> loess_local_fit(const std::vector<double>& xs, const std::vector<double>& ys, double q,
                                    int64_t nf, int degree) {
  const int64_t n = static_cast<int64_t>(xs.size());
  const int k = degree + 1;
  // The nf nearest points form a contiguous window [lo, lo + nf) of the sorted x.
  int64_t lo = 0, hi = n - nf;  // smallest lo with (lo == n - nf) or q - xs[lo] <= xs[lo + nf] - q
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (q - xs[mid] <= xs[mid + nf] - q)
      hi = mid;
    else
      lo = mid + 1;
  }
  const double d0 = (xs[lo] - q) * (xs[lo] - q);
  const double d1 = (xs[lo + nf - 1] - q) * (xs[lo + nf - 1] - q);
  const double rho = std::max(d0, d1);  // squared distance to the nf-th nearest (span <= 1)
  if (!(rho > 0))
    fail_input(kWhere, "zero-width neighbourhood at x = ", q, ": more than floor(n * span) points share this x; use a larger span");
  // Tricube weights (their square roots scale the rows, as in ehg127), design columns 1, t-q, (t-q)^2.
  std::vector<double> B(static_cast<size_t>(nf) * k), eta(static_cast<size_t>(nf));
  double wmax = 0;
  for (int64_t i = 0; i < nf; ++i) {
    const double x = xs[lo + i];
    const double dist = (x - q) * (x - q);
    double w = std::sqrt(dist / rho);
    w = std::sqrt((1 - w * w * w) * (1 - w * w * w) * (1 - w * w * w));
    if (!(w > 0)) w = 0;  // points on the boundary (and rounding just past it) get weight 0
    wmax = std::max(wmax, w);
    double* b = &B[static_cast<size_t>(i) * k];
    b[0] = w;
    if (k >= 2) b[1] = w * (x - q);
    if (k >= 3) b[2] = w * (x - q) * (x - q);
    eta[i] = w * ys[lo + i];
  }
  if (wmax == 0) fail_input(kWhere, "all points on the boundary of the neighbourhood at x = ", q, "; use a larger span");
  // Equilibrate columns.
  double colnorm[3] = {1, 1, 1};
  for (int j = 0; j < k; ++j) {
    double s = 0;
    for (int64_t i = 0; i < nf; ++i) s += B[i * k + j] * B[i * k + j];
    s = std::sqrt(s);
    if (s > 0) {
      for (int64_t i = 0; i < nf; ++i) B[i * k + j] /= s;
      colnorm[j] = s;
    }
  }
  // Normal equations on the equilibrated design, solved by pseudo-inverse.
  double A[9] = {0}, V[9], rhs[3] = {0, 0, 0};
  for (int64_t i = 0; i < nf; ++i) {
    const double* b = &B[static_cast<size_t>(i) * k];
    for (int r = 0; r < k; ++r) {
      rhs[r] += b[r] * eta[i];
      for (int c = r; c < k; ++c) A[r * k + c] += b[r] * b[c];
    }
  }
  for (int r = 0; r < k; ++r)
    for (int c = 0; c < r; ++c) A[r * k + c] = A[c * k + r];
  jacobi_eigen(k, A, V);
  double smax = 0;
  for (int j = 0; j < k; ++j) smax = std::max(smax, std::sqrt(std::max(0.0, A[j * k + j])));
  const double tol = smax * (100 * DBL_EPSILON);
  double gamma[3] = {0, 0, 0};
  for (int j = 0; j < k; ++j) {
    const double lam = A[j * k + j];
    const double sig = std::sqrt(std::max(0.0, lam));
    if (!(sig > tol)) continue;
    double proj = 0;
    for (int r = 0; r < k; ++r) proj += V[r * k + j] * rhs[r];
    proj /= lam;
    for (int r = 0; r < k; ++r) gamma[r] += V[r * k + j] * proj;
  }
  std::vector<double> coef(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) coef[j] = gamma[j] / colnorm[j];
  return coef;
}

LoessResult loess(const std::vector<double>& x, const std::vector<double>& y, const LoessOptions& opt) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (static_cast<int64_t>(y.size()) != n) fail_input(kWhere, "x has ", n, " values but y has ", y.size());
  if (!(opt.span > 0 && opt.span <= 1)) fail_input(kWhere, "span must be in (0, 1], got ", opt.span);
  if (opt.degree < 0 || opt.degree > 2) fail_input(kWhere, "degree must be 0, 1 or 2, got ", opt.degree);
  if (!(opt.cell > 0)) fail_input(kWhere, "cell must be > 0, got ", opt.cell);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]) || !std::isfinite(y[i]))
      fail_input(kWhere, "non-finite value at point ", i, " (x = ", x[i], ", y = ", y[i], ")");
  const int64_t nf = std::min<int64_t>(n, static_cast<int64_t>(std::floor(static_cast<double>(n) * opt.span)));
  check_nf(n, nf, opt.degree);

  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] < x[b]; });
  std::vector<double> xs(static_cast<size_t>(n)), ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    xs[i] = x[order[i]];
    ys[i] = y[order[i]];
  }

  LoessResult res;
  res.fitted.assign(static_cast<size_t>(n), 0.0);
  if (opt.surface == LoessSurface::direct) {
    for (int64_t i = 0; i < n; ++i) res.fitted[i] = loess_local_fit(xs, ys, x[i], nf, opt.degree)[0];
    return res;
  }

  // k-d tree (d = 1): cells are ranges [l, u] of the sorted points, split at the median.
  const int64_t fc = static_cast<int64_t>(std::floor(static_cast<double>(n) * (opt.span * opt.cell)));
  const int64_t nvmax = std::max<int64_t>(200, n), ncmax = nvmax;
  const double alpha = xs.front(), beta = xs.back();
  const double mu = 0.005 * std::max(beta - alpha, 1e-10 * std::max(std::fabs(alpha), std::fabs(beta)) + 1e-30);
  struct Cell {
    int64_t l, u;
    double vlo, vhi;
  };
  std::vector<Cell> cells{{0, n - 1, alpha - mu, beta + mu}};
  std::vector<double> verts{alpha - mu, beta + mu};
  for (size_t p = 0; p < cells.size(); ++p) {
    const Cell c = cells[p];
    const double diam = c.vhi - c.vlo;
    bool leaf = (c.u - c.l + 1 <= fc) || (diam <= 0.0);
    if (!leaf) leaf = (ncmax < static_cast<int64_t>(cells.size()) + 2) ||
                      (static_cast<double>(nvmax) < static_cast<double>(verts.size()) + 0.5);
    int64_t m = 0;
    if (!leaf) {
      m = (c.l + c.u) / 2;
      // All ties go with the upper son: move the split to the nearest gap between distinct values.
      int64_t offset = 0;
      while (!((m + offset) >= c.u || (m + offset) < c.l)) {
        if (xs[m + offset] == xs[m + offset + 1]) {
          offset = -offset;
          if (offset >= 0) offset += 1;
        } else {
          m += offset;
          break;
        }
      }
      leaf = (c.vlo == xs[m]) || (c.vhi == xs[m]);
    }
    if (!leaf) {
      const double xi = xs[m];
      cells.push_back({c.l, m, c.vlo, xi});
      cells.push_back({m + 1, c.u, xi, c.vhi});
      verts.push_back(xi);
    }
  }
  std::sort(verts.begin(), verts.end());
  verts.erase(std::unique(verts.begin(), verts.end()), verts.end());
  const int64_t nv = static_cast<int64_t>(verts.size());
  std::vector<double> val(static_cast<size_t>(nv)), slope(static_cast<size_t>(nv));
  for (int64_t i = 0; i < nv; ++i) {
    std::vector<double> coef = loess_local_fit(xs, ys, verts[i], nf, opt.degree);
    val[i] = coef[0];
    slope[i] = coef.size() > 1 ? coef[1] : 0.0;
  }
  res.n_vertices = nv;
  for (int64_t i = 0; i < n; ++i) {
    const double z = x[i];
    int64_t j = std::lower_bound(verts.begin(), verts.end(), z) - verts.begin();
    j = std::clamp<int64_t>(j, 1, nv - 1);
    const double v0 = verts[j - 1], v1 = verts[j];
    const double h = (z - v0) / (v1 - v0);
    const double phi0 = (1 - h) * (1 - h) * (1 + 2 * h), phi1 = h * h * (3 - 2 * h);
    const double psi0 = h * (1 - h) * (1 - h), psi1 = h * h * (h - 1);
    res.fitted[i] = phi0 * val[j - 1] + phi1 * val[j] + (psi0 * slope[j - 1] + psi1 * slope[j]) * (v1 - v0);
  }
  return res;
}

}  // namespace scurry
