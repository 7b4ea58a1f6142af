// scurry: t-SNE with FFT-accelerated interpolation of the repulsion (see tsne.hpp).
#include "tl/tsne.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/knn.hpp"
#include "graph/neighbors.hpp"

namespace scurry {

namespace {

const char* kWhere = "tsne";
using cd = std::complex<double>;

constexpr int64_t kRowBlock = 1024;      // points per block of the per-point loops
constexpr int64_t kSpreadBlock = 16384;  // points per partial grid when spreading charges
constexpr int kTerms = 4;                // charges 1, y1, y2, |y|^2

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }

// Complex FFT of size 2^a (iterative radix-2, Cooley & Tukey 1965) or 3 * 2^a (one radix-3
// decimation-in-time stage over three radix-2 transforms), twiddles precomputed.
class Fft {
 public:
  explicit Fft(int64_t n) : n_(n) {
    l_ = n % 3 == 0 ? n / 3 : n;
    int bits = 0;
    while ((int64_t{1} << bits) < l_) ++bits;
    if ((int64_t{1} << bits) != l_) fail("internal: FFT size ", n, " is not 2^a or 3 * 2^a");
    rev_.resize(static_cast<size_t>(l_));
    for (int64_t i = 0; i < l_; ++i) {
      int64_t r = 0;
      for (int b = 0; b < bits; ++b)
        if (i & (int64_t{1} << b)) r |= int64_t{1} << (bits - 1 - b);
      rev_[static_cast<size_t>(i)] = r;
    }
    tw_.resize(static_cast<size_t>(std::max<int64_t>(1, l_ / 2)));
    for (int64_t k = 0; k < l_ / 2; ++k) tw_[static_cast<size_t>(k)] = root(k, l_);
    if (l_ != n_) {
      tw3_.resize(static_cast<size_t>(2 * l_));
      for (int64_t k = 0; k < 2 * l_; ++k) tw3_[static_cast<size_t>(k)] = root(k, n_);
    }
  }
  // In place; inverse: conjugate twiddles, no 1/n scaling. `scratch`: n elements (radix-3 sizes).
  void run(cd* a, bool inverse, cd* scratch) const {
    if (l_ == n_) {
      radix2(a, inverse);
      return;
    }
    // F_r = FFT_L of x[3m + r]; X[k + jL] = F_0[k] + W^(k + jL) F_1[k] + W^(2(k + jL)) F_2[k].
    for (int r = 0; r < 3; ++r)
      for (int64_t m = 0; m < l_; ++m) scratch[r * l_ + m] = a[3 * m + r];
    for (int r = 0; r < 3; ++r) radix2(scratch + r * l_, inverse);
    const double s3 = (inverse ? 1.0 : -1.0) * std::sqrt(3.0) / 2.0;  // Im of W_3 = exp(-+2 pi i / 3)
    for (int64_t k = 0; k < l_; ++k) {
      const cd w1 = tw3_[static_cast<size_t>(k)], w2 = tw3_[static_cast<size_t>(2 * k)];
      const cd f0 = scratch[k];
      const cd t1 = mul(scratch[l_ + k], w1.real(), inverse ? -w1.imag() : w1.imag());
      const cd t2 = mul(scratch[2 * l_ + k], w2.real(), inverse ? -w2.imag() : w2.imag());
      const cd sum = t1 + t2, dif = t1 - t2;
      a[k] = f0 + sum;
      // W_3 t1 + W_3^2 t2 = -sum / 2 + i s3 (t1 - t2); the conjugate pairing for k + 2L.
      const cd half = f0 - 0.5 * sum;
      const cd rot(-s3 * dif.imag(), s3 * dif.real());
      a[k + l_] = half + rot;
      a[k + 2 * l_] = half - rot;
    }
  }
  int64_t size() const { return n_; }

 private:
  static cd root(int64_t k, int64_t n) {
    const double a = -2.0 * M_PI * static_cast<double>(k) / static_cast<double>(n);
    return cd(std::cos(a), std::sin(a));
  }
  // std::complex's operator* goes through __muldc3 (NaN handling) and is slow: written out.
  static cd mul(const cd& x, double wr, double wi) {
    return cd(x.real() * wr - x.imag() * wi, x.real() * wi + x.imag() * wr);
  }
  void radix2(cd* a, bool inverse) const {
    for (int64_t i = 0; i < l_; ++i) {
      const int64_t r = rev_[static_cast<size_t>(i)];
      if (i < r) std::swap(a[i], a[r]);
    }
    for (int64_t len = 2; len <= l_; len <<= 1) {
      const int64_t half = len / 2, step = l_ / len;
      for (int64_t i = 0; i < l_; i += len) {
        for (int64_t j = 0; j < half; ++j) {
          const cd w = tw_[static_cast<size_t>(j * step)];
          const cd v = mul(a[i + j + half], w.real(), inverse ? -w.imag() : w.imag());
          const cd u = a[i + j];
          a[i + j] = u + v;
          a[i + j + half] = u - v;
        }
      }
    }
  }
  int64_t n_, l_;
  std::vector<int64_t> rev_;
  std::vector<cd> tw_, tw3_;
};

// Lagrange weights of the p equispaced nodes (j + 1/2) / p of a unit box at t in [0, 1].
void lagrange(double t, int64_t p, double* w) {
  for (int64_t j = 0; j < p; ++j) {
    const double xj = (static_cast<double>(j) + 0.5) / static_cast<double>(p);
    double num = 1, den = 1;
    for (int64_t m = 0; m < p; ++m) {
      if (m == j) continue;
      const double xm = (static_cast<double>(m) + 0.5) / static_cast<double>(p);
      num *= t - xm;
      den *= xj - xm;
    }
    w[j] = num / den;
  }
}

double repulsion_exact(const std::vector<double>& y, int64_t n, int threads, std::vector<double>& rep) {
  rep.assign(static_cast<size_t>(2 * n), 0.0);
  std::vector<double> zpart(static_cast<size_t>(blocks_of(n, kRowBlock)), 0.0);
  parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
    double z = 0;
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      double r0 = 0, r1 = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const double d0 = y[2 * i] - y[2 * j], d1 = y[2 * i + 1] - y[2 * j + 1];
        const double w = 1.0 / (1.0 + d0 * d0 + d1 * d1);
        z += w;
        r0 += w * w * d0;
        r1 += w * w * d1;
      }
      rep[2 * i] = r0;
      rep[2 * i + 1] = r1;
    }
    zpart[static_cast<size_t>(b)] = z;
  });
  double z = 0;
  for (double v : zpart) z += v;
  return z;
}

// The least FFT size 2^a or 3 * 2^a that is >= x.
int64_t fft_size(int64_t x) {
  int64_t m = 1;
  while (m < x) m <<= 1;
  if (m % 4 == 0 && 3 * (m / 4) >= x) return 3 * (m / 4);
  return m;
}

}  // namespace

// The kernel's spectrum on the last grid (M, node spacing): reused while the boxes keep their
// width (once the layout spans more than min_num_intervals boxes of width 1 / intervals_per_integer).
struct TsneFftCache {
  int64_t M = 0;
  double delta = 0;
  std::vector<double> spectrum;  // M x M, real (the kernel is real and even)
};

namespace {

constexpr int64_t kColBlock = 8;  // columns gathered together (a cache line holds 4 complex)

// FFT along the columns of the M x M row-major grid `a`, kColBlock columns at a time; with `mult`,
// each transformed column is multiplied by mult's column and transformed back (inverse).
void column_pass(const Fft& fft, std::vector<cd>& a, int64_t M, bool inverse, const std::vector<double>* mult,
                 int threads) {
  parallel_for(threads, blocks_of(M, kColBlock), [&](int64_t b) {
    std::vector<cd> col(static_cast<size_t>(kColBlock * M)), scratch(static_cast<size_t>(M));
    const int64_t c0 = b * kColBlock, c1 = std::min(M, c0 + kColBlock), w = c1 - c0;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < w; ++c) col[c * M + r] = a[static_cast<size_t>(r * M + c0 + c)];
    for (int64_t c = 0; c < w; ++c) {
      cd* x = &col[c * M];
      fft.run(x, inverse, scratch.data());
      if (mult) {
        for (int64_t r = 0; r < M; ++r) x[r] *= (*mult)[static_cast<size_t>(r * M + c0 + c)];
        fft.run(x, true, scratch.data());
      }
    }
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < w; ++c) a[static_cast<size_t>(r * M + c0 + c)] = col[c * M + r];
  });
}

// FIt-SNE's interpolation (Linderman et al. 2019, "Online methods"): see tsne.hpp.
double repulsion_fft(const std::vector<double>& y, int64_t n, const TsneOptions& opt, int threads,
                     std::vector<double>& rep, TsneFftCache& cache) {
  const int64_t p = opt.n_interpolation_points;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < 2 * n; ++i) {
    lo = std::min(lo, y[static_cast<size_t>(i)]);
    hi = std::max(hi, y[static_cast<size_t>(i)]);
  }
  if (!std::isfinite(lo) || !std::isfinite(hi))
    fail("tsne: the layout diverged (non-finite coordinates); lower the learning_rate");
  double span = hi - lo;
  if (!(span > 0)) span = 1e-12;
  // Boxes: at least min_num_intervals, of width 1 / intervals_per_integer once the layout is wider
  // than that (so the kernel's spectrum is reused), else span / boxes; their number then raised to
  // fill the FFT (2 p boxes <= M, M = 2^a or 3 2^a): finer boxes at no extra cost.
  const double unit = 1.0 / opt.intervals_per_integer;
  // Past max_num_intervals boxes of unit width (a transient of the early exaggeration at high
  // learning rates: the layout swells, then settles) the boxes widen instead.
  const bool fixed = span >= static_cast<double>(opt.min_num_intervals) * unit &&
                     span <= static_cast<double>(opt.max_num_intervals) * unit;
  const int64_t want = fixed ? static_cast<int64_t>(std::ceil(span / unit))
                             : (span > static_cast<double>(opt.min_num_intervals) * unit ? opt.max_num_intervals
                                                                                           : opt.min_num_intervals);
  const int64_t M = fft_size(2 * p * want);
  const int64_t boxes = M / (2 * p);
  const int64_t G = boxes * p;  // grid nodes a side
  const double bw = fixed ? unit : span / static_cast<double>(boxes);
  const double delta = bw / static_cast<double>(p);  // node spacing
  // Box and weights of every point.
  std::vector<int32_t> cell(static_cast<size_t>(2 * n));
  std::vector<double> wts(static_cast<size_t>(2 * n * p));
  parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i)
      for (int c = 0; c < 2; ++c) {
        const double u = (y[2 * i + c] - lo) / bw;
        int64_t bx = std::min<int64_t>(boxes - 1, std::max<int64_t>(0, static_cast<int64_t>(std::floor(u))));
        cell[2 * i + c] = static_cast<int32_t>(bx);
        lagrange(u - static_cast<double>(bx), p, &wts[static_cast<size_t>((2 * i + c) * p)]);
      }
  });
  // Charges on the grid (G x G per term), spread in fixed blocks of points, partials summed in order.
  const size_t gsz = static_cast<size_t>(G * G);
  std::vector<double> grid;
  const double mid = 0.5 * (lo + hi);  // coordinates relative to the centre (less cancellation in Z)
  reduce_blocks(threads, blocks_of(n, kSpreadBlock), kTerms * gsz, grid, [&](int64_t b, double* part) {
    for (int64_t i = b * kSpreadBlock; i < std::min(n, (b + 1) * kSpreadBlock); ++i) {
      const double y0 = y[2 * i] - mid, y1 = y[2 * i + 1] - mid;
      const double q[kTerms] = {1.0, y0, y1, y0 * y0 + y1 * y1};
      const int64_t r0 = cell[2 * i] * p, c0 = cell[2 * i + 1] * p;
      const double* wx = &wts[static_cast<size_t>(2 * i * p)];
      const double* wy = wx + p;
      for (int64_t a = 0; a < p; ++a)
        for (int64_t e = 0; e < p; ++e) {
          const double w = wx[a] * wy[e];
          const size_t at = static_cast<size_t>((r0 + a) * G + c0 + e);
          for (int t = 0; t < kTerms; ++t) part[t * gsz + at] += w * q[t];
        }
    }
  });
  const Fft fft(M);
  // The kernel w^2 = 1 / (1 + d^2)^2 on the circulant M x M grid, and its spectrum (real: the
  // kernel is real and even), unless the cache holds this grid's.
  if (cache.M != M || cache.delta != delta) {
    std::vector<cd> ker(static_cast<size_t>(M * M));
    auto wrap = [M](int64_t k) { return k <= M / 2 ? k : k - M; };
    parallel_for(threads, M, [&](int64_t r) {
      std::vector<cd> scratch(static_cast<size_t>(M));
      const double dr = delta * static_cast<double>(wrap(r));
      for (int64_t c = 0; c < M; ++c) {
        const double dc = delta * static_cast<double>(wrap(c));
        const double w = 1.0 / (1.0 + dr * dr + dc * dc);
        ker[static_cast<size_t>(r * M + c)] = cd(w * w, 0);
      }
      fft.run(&ker[static_cast<size_t>(r * M)], false, scratch.data());
    });
    column_pass(fft, ker, M, false, nullptr, threads);
    cache.spectrum.resize(static_cast<size_t>(M * M));
    const double scale = 1.0 / static_cast<double>(M * M);  // the inverse transform's 1 / M^2
    for (size_t i = 0; i < ker.size(); ++i) cache.spectrum[i] = ker[i].real() * scale;
    cache.M = M;
    cache.delta = delta;
  }
  // Two real terms a complex grid: (1, y1) and (y2, |y|^2).
  std::vector<double> pot(kTerms * gsz);
  std::vector<cd> g(static_cast<size_t>(M * M));
  for (int pair = 0; pair < 2; ++pair) {
    std::fill(g.begin(), g.end(), cd(0, 0));
    const double* re = &grid[(2 * pair) * gsz];
    const double* im = &grid[(2 * pair + 1) * gsz];
    parallel_for(threads, blocks_of(G, 8), [&](int64_t b) {
      std::vector<cd> scratch(static_cast<size_t>(M));
      for (int64_t r = b * 8; r < std::min(G, (b + 1) * 8); ++r) {
        for (int64_t c = 0; c < G; ++c) g[static_cast<size_t>(r * M + c)] = cd(re[r * G + c], im[r * G + c]);
        fft.run(&g[static_cast<size_t>(r * M)], false, scratch.data());
      }
    });
    column_pass(fft, g, M, false, &cache.spectrum, threads);  // forward, times the spectrum, inverse
    parallel_for(threads, blocks_of(G, 8), [&](int64_t b) {
      std::vector<cd> scratch(static_cast<size_t>(M));
      for (int64_t r = b * 8; r < std::min(G, (b + 1) * 8); ++r) {
        fft.run(&g[static_cast<size_t>(r * M)], true, scratch.data());
        for (int64_t c = 0; c < G; ++c) {
          const cd v = g[static_cast<size_t>(r * M + c)];
          pot[(2 * pair) * gsz + r * G + c] = v.real();
          pot[(2 * pair + 1) * gsz + r * G + c] = v.imag();
        }
      }
    });
  }
  // Potentials back at the points; Z and the repulsive sums.
  rep.assign(static_cast<size_t>(2 * n), 0.0);
  std::vector<double> zpart(static_cast<size_t>(blocks_of(n, kRowBlock)), 0.0);
  parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
    double z = 0;
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      double phi[kTerms] = {0, 0, 0, 0};
      const int64_t r0 = cell[2 * i] * p, c0 = cell[2 * i + 1] * p;
      const double* wx = &wts[static_cast<size_t>(2 * i * p)];
      const double* wy = wx + p;
      for (int64_t a = 0; a < p; ++a)
        for (int64_t e = 0; e < p; ++e) {
          const double w = wx[a] * wy[e];
          const size_t at = static_cast<size_t>((r0 + a) * G + c0 + e);
          for (int t = 0; t < kTerms; ++t) phi[t] += w * pot[t * gsz + at];
        }
      const double y0 = y[2 * i] - mid, y1 = y[2 * i + 1] - mid;
      // sum_j w_ij = sum_j w_ij^2 (1 + |y_i|^2 - 2 y_i.y_j + |y_j|^2), the j = i term (1) removed.
      z += (1.0 + y0 * y0 + y1 * y1) * phi[0] - 2.0 * (y0 * phi[1] + y1 * phi[2]) + phi[3] - 1.0;
      rep[2 * i] = y0 * phi[0] - phi[1];
      rep[2 * i + 1] = y1 * phi[0] - phi[2];
    }
    zpart[static_cast<size_t>(b)] = z;
  });
  double z = 0;
  for (double v : zpart) z += v;
  return z;
}

// Attractive sums att[i] = sum_j p_ij w_ij (y_i - y_j) over the stored affinities; returns
// sum_ij p_ij log(p_ij / w_ij) pieces (for the KL divergence) when asked.
void attraction(const CsrD& P, const std::vector<double>& y, int threads, double exaggeration,
                std::vector<double>& att) {
  const int64_t n = P.n_rows;
  att.assign(static_cast<size_t>(2 * n), 0.0);
  parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      double a0 = 0, a1 = 0;
      for (int64_t e = P.indptr[i]; e < P.indptr[i + 1]; ++e) {
        const int64_t j = P.indices[e];
        const double d0 = y[2 * i] - y[2 * j], d1 = y[2 * i + 1] - y[2 * j + 1];
        const double w = P.data[e] * exaggeration / (1.0 + d0 * d0 + d1 * d1);
        a0 += w * d0;
        a1 += w * d1;
      }
      att[2 * i] = a0;
      att[2 * i + 1] = a1;
    }
  });
}

double kl_divergence(const CsrD& P, const std::vector<double>& y, double z) {
  double kl = 0;
  for (int64_t i = 0; i < P.n_rows; ++i)
    for (int64_t e = P.indptr[i]; e < P.indptr[i + 1]; ++e) {
      const int64_t j = P.indices[e];
      const double p = P.data[e];
      if (p <= 0) continue;
      const double d0 = y[2 * i] - y[2 * j], d1 = y[2 * i + 1] - y[2 * j + 1];
      const double q = 1.0 / (1.0 + d0 * d0 + d1 * d1) / z;
      kl += p * std::log(std::max(p, 1e-300) / std::max(q, 1e-300));
    }
  return kl;
}

// sklearn's PCA init: two leading principal components (exact, via the d x d covariance and power
// iteration with deflation would do; here Jacobi on the covariance for exactness), svd_flip signs,
// scaled so that column 0 has std 1e-4.
std::vector<double> pca_init(const DenseF& X) {
  const int64_t n = X.n_rows, d = X.n_cols;
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) mean[c] += X(i, c);
  for (auto& m : mean) m /= static_cast<double>(n);
  std::vector<double> C(static_cast<size_t>(d * d), 0.0);
  std::vector<double> row(static_cast<size_t>(d));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < d; ++c) row[c] = X(i, c) - mean[c];
    for (int64_t a = 0; a < d; ++a)
      for (int64_t b = 0; b <= a; ++b) C[a * d + b] += row[a] * row[b];
  }
  for (int64_t a = 0; a < d; ++a)
    for (int64_t b = 0; b < a; ++b) C[b * d + a] = C[a * d + b];
  // Cyclic Jacobi (Golub & Van Loan, Algorithm 8.4.3): d is small (the PCs).
  std::vector<double> V(static_cast<size_t>(d * d), 0.0);
  for (int64_t a = 0; a < d; ++a) V[a * d + a] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, tot = 0;
    for (int64_t a = 0; a < d; ++a)
      for (int64_t b = 0; b < d; ++b) (a == b ? tot : off) += C[a * d + b] * C[a * d + b];
    if (off <= 1e-30 * std::max(tot, 1e-300)) break;
    for (int64_t pI = 0; pI < d; ++pI)
      for (int64_t q = pI + 1; q < d; ++q) {
        const double apq = C[pI * d + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (C[q * d + q] - C[pI * d + pI]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < d; ++k) {
          const double ckp = C[k * d + pI], ckq = C[k * d + q];
          C[k * d + pI] = c * ckp - s * ckq;
          C[k * d + q] = s * ckp + c * ckq;
        }
        for (int64_t k = 0; k < d; ++k) {
          const double cpk = C[pI * d + k], cqk = C[q * d + k];
          C[pI * d + k] = c * cpk - s * cqk;
          C[q * d + k] = s * cpk + c * cqk;
        }
        for (int64_t k = 0; k < d; ++k) {
          const double vkp = V[k * d + pI], vkq = V[k * d + q];
          V[k * d + pI] = c * vkp - s * vkq;
          V[k * d + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<int64_t> order(static_cast<size_t>(d));
  for (int64_t a = 0; a < d; ++a) order[a] = a;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return C[a * d + a] > C[b * d + b]; });
  std::vector<double> y(static_cast<size_t>(2 * n), 0.0);
  for (int comp = 0; comp < 2 && comp < d; ++comp) {
    const int64_t v = order[comp];
    double best = 0;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += (X(i, c) - mean[c]) * V[c * d + v];
      y[2 * i + comp] = s;
      if (std::abs(s) > std::abs(best)) best = s;
    }
    if (best < 0)
      for (int64_t i = 0; i < n; ++i) y[2 * i + comp] = -y[2 * i + comp];
  }
  // sklearn casts to float32, then divides by np.std of column 0 (ddof 0).
  double m0 = 0, s0 = 0;
  for (int64_t i = 0; i < n; ++i) m0 += y[2 * i];
  m0 /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) s0 += (y[2 * i] - m0) * (y[2 * i] - m0);
  s0 = std::sqrt(s0 / static_cast<double>(n));
  const double f = s0 > 0 ? 1e-4 / s0 : 1.0;
  for (auto& v : y) v *= f;
  return y;
}

}  // namespace

CsrD tsne_affinities(const std::vector<int32_t>& nbr, const std::vector<double>& sqdist, int64_t n, int64_t k,
                     double perplexity, int threads) {
  // sklearn's _binary_search_perplexity: conditional P of each row at the entropy log(perplexity).
  std::vector<double> cond(static_cast<size_t>(n * k), 0.0);
  const double desired = std::log(perplexity);
  parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      double beta = 1, beta_min = -std::numeric_limits<double>::infinity(),
             beta_max = std::numeric_limits<double>::infinity();
      const double* d = &sqdist[static_cast<size_t>(i * k)];
      double* P = &cond[static_cast<size_t>(i * k)];
      for (int step = 0; step < 100; ++step) {
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) {
          P[j] = std::exp(-d[j] * beta);
          sum += P[j];
        }
        if (sum == 0) sum = 1e-8;
        double sum_dp = 0;
        for (int64_t j = 0; j < k; ++j) {
          P[j] /= sum;
          sum_dp += d[j] * P[j];
        }
        const double entropy = std::log(sum) + beta * sum_dp;
        const double diff = entropy - desired;
        if (std::abs(diff) <= 1e-5) break;
        if (diff > 0) {
          beta_min = beta;
          beta = std::isinf(beta_max) ? beta * 2 : (beta + beta_max) / 2;
        } else {
          beta_max = beta;
          beta = std::isinf(beta_min) ? beta / 2 : (beta + beta_min) / 2;
        }
      }
    }
  });
  // P + P^T, normalised to sum 1: build the symmetric pattern by rows (both directions), merge.
  std::vector<int64_t> cnt(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      ++cnt[i + 1];
      ++cnt[nbr[static_cast<size_t>(i * k + j)] + 1];
    }
  for (int64_t i = 0; i < n; ++i) cnt[i + 1] += cnt[i];
  std::vector<int32_t> idx(static_cast<size_t>(cnt[n]));
  std::vector<double> val(static_cast<size_t>(cnt[n]));
  std::vector<int64_t> pos(cnt.begin(), cnt.end() - 1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t t = nbr[static_cast<size_t>(i * k + j)];
      const double v = cond[static_cast<size_t>(i * k + j)];
      idx[pos[i]] = t;
      val[pos[i]++] = v;
      idx[pos[t]] = static_cast<int32_t>(i);
      val[pos[t]++] = v;
    }
  CsrD P;
  P.n_rows = P.n_cols = n;
  P.indptr.assign(static_cast<size_t>(n) + 1, 0);
  std::vector<std::pair<int32_t, double>> row;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    row.clear();
    for (int64_t e = cnt[i]; e < cnt[i + 1]; ++e) row.emplace_back(idx[e], val[e]);
    std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t e = 0; e < row.size();) {
      size_t f = e;
      double s = 0;
      while (f < row.size() && row[f].first == row[e].first) s += row[f++].second;
      P.indices.push_back(row[e].first);
      P.data.push_back(s);
      total += s;
      e = f;
    }
    P.indptr[i + 1] = static_cast<int64_t>(P.indices.size());
  }
  total = std::max(total, std::numeric_limits<double>::epsilon());
  for (auto& v : P.data) v /= total;
  return P;
}

double tsne_repulsion(const std::vector<double>& y, int64_t n, const TsneOptions& opt, int threads,
                      std::vector<double>& rep) {
  if (opt.method == "exact") return repulsion_exact(y, n, threads, rep);
  TsneFftCache cache;
  return repulsion_fft(y, n, opt, threads, rep, cache);
}

TsneResult tsne(const Context& ctx, const DenseF& X, const TsneOptions& opt) {
  const int64_t n = X.n_rows;
  if (opt.method != "fft" && opt.method != "exact")
    fail_input(kWhere, "method '", opt.method, "' is not supported; use fft or exact");
  if (opt.init != "pca" && opt.init != "random")
    fail_input(kWhere, "init '", opt.init, "' is not supported; use pca or random");
  if (n < 4) fail_input(kWhere, "t-SNE needs at least 4 cells, got ", n);
  if (!(opt.perplexity > 0) || opt.perplexity >= static_cast<double>(n - 1))
    fail_input(kWhere, "perplexity = ", opt.perplexity, " must be positive and less than the number of cells - 1 (",
               n - 1, ")");
  if (!(opt.learning_rate > 0)) fail_input(kWhere, "learning_rate = ", opt.learning_rate, " must be positive");
  if (!(opt.early_exaggeration >= 1))
    fail_input(kWhere, "early_exaggeration = ", opt.early_exaggeration, " must be at least 1");
  if (opt.n_iter < 1 || opt.exaggeration_iter < 0)
    fail_input(kWhere, "n_iter must be positive and exaggeration_iter non-negative");
  if (opt.n_interpolation_points < 2 || opt.min_num_intervals < 1 || !(opt.intervals_per_integer > 0))
    fail_input(kWhere, "the interpolation grid needs >= 2 points a box, >= 1 box and intervals_per_integer > 0");
  const int threads = opt.n_jobs > 0 ? opt.n_jobs : ctx.threads();
  const Context kctx = Context::cpu(threads);
  TsneResult res;
  auto t0 = std::chrono::steady_clock::now();
  // sklearn: n_neighbors = min(n - 1, int(3 * perplexity + 1)), the cell itself excluded.
  const int64_t k = std::min<int64_t>(n - 1, static_cast<int64_t>(3.0 * opt.perplexity + 1.0));
  const KnnMetric metric = parse_knn_metric(opt.metric, kWhere);
  const Knn knn = knn_exact(kctx, X, k + 1, metric);
  std::vector<int32_t> nbr(static_cast<size_t>(n * k));
  std::vector<double> sq(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i) {
    // Column 0 is the cell itself unless duplicates tie with it: drop the cell wherever it sits.
    int64_t o = 0;
    for (int64_t j = 0; j <= k && o < k; ++j) {
      const int32_t t = knn.index(i, j);
      if (t == i) continue;
      const double dist = knn.distance(i, j);
      nbr[static_cast<size_t>(i * k + o)] = t;
      sq[static_cast<size_t>(i * k + o)] = metric == KnnMetric::euclidean ? dist * dist : dist;
      ++o;
    }
  }
  const CsrD P = tsne_affinities(nbr, sq, n, k, opt.perplexity, threads);
  res.affinity_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();

  std::vector<double> y;
  if (opt.init == "pca") {
    y = pca_init(X);
  } else {
    std::mt19937_64 rng(opt.random_state);
    std::normal_distribution<double> nd(0.0, 1.0);
    y.resize(static_cast<size_t>(2 * n));
    for (auto& v : y) v = 1e-4 * nd(rng);
  }
  std::vector<double> update(y.size(), 0.0), gains(y.size(), 1.0), att, rep;
  double z = 1;
  TsneFftCache cache;
  auto repulsion = [&]() {
    return opt.method == "exact" ? repulsion_exact(y, n, threads, rep) : repulsion_fft(y, n, opt, threads, rep, cache);
  };
  for (int64_t it = 0; it < opt.n_iter; ++it) {
    const bool explore = it < opt.exaggeration_iter;
    const double momentum = explore ? 0.5 : 0.8;
    const double ex = explore ? opt.early_exaggeration : 1.0;
    attraction(P, y, threads, ex, att);
    z = repulsion();
    const double invz = 1.0 / std::max(z, 1e-300);
    parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
      for (int64_t i = 2 * b * kRowBlock; i < std::min(2 * n, 2 * (b + 1) * kRowBlock); ++i) {
        const double grad = 4.0 * (att[i] - rep[i] * invz);
        const bool inc = update[i] * grad < 0;
        gains[i] = inc ? gains[i] + 0.2 : gains[i] * 0.8;
        gains[i] = std::max(gains[i], 0.01);
        update[i] = momentum * update[i] - opt.learning_rate * gains[i] * grad;
        y[i] += update[i];
      }
    });
  }
  z = repulsion();
  res.kl_divergence = kl_divergence(P, y, z);
  res.embedding = DenseF(n, 2);
  for (int64_t i = 0; i < 2 * n; ++i) res.embedding.data[static_cast<size_t>(i)] = static_cast<float>(y[i]);
  res.optimize_seconds = seconds_since(t0);
  return res;
}

TsneResult tsne(const Context& ctx, Dataset& d, const TsneOptions& opt) {
  std::string used;
  const DenseF x = choose_representation(d, opt.use_rep, opt.n_pcs, &used);
  TsneResult res = tsne(ctx, x, opt);
  d.obsm[opt.key_added] = Matrix(res.embedding, DType::f32);
  Dict params;
  params["perplexity"] = opt.perplexity;
  params["early_exaggeration"] = opt.early_exaggeration;
  params["learning_rate"] = opt.learning_rate;
  params["n_jobs"] = static_cast<int64_t>(opt.n_jobs > 0 ? opt.n_jobs : ctx.threads());
  params["metric"] = opt.metric;
  if (!opt.use_rep.empty()) params["use_rep"] = opt.use_rep;
  if (opt.n_pcs) params["n_pcs"] = *opt.n_pcs;
  Dict t;
  t["params"] = Value(std::move(params));
  d.uns["tsne"] = Value(std::move(t));
  log::info(detail::concat("tsne: ", x.n_rows, " cells in ", used, " (", x.n_cols, " dims): affinities ",
                           res.affinity_seconds, " s, ", opt.n_iter, " iterations ", res.optimize_seconds,
                           " s, KL ", res.kl_divergence));
  return res;
}

double knn_preservation(const Context& ctx, const DenseF& high, const DenseF& low, int64_t k) {
  if (high.n_rows != low.n_rows) fail("knn_preservation: row counts differ");
  const Knn a = knn_exact(ctx, high, k + 1, KnnMetric::euclidean);
  const Knn b = knn_exact(ctx, low, k + 1, KnnMetric::euclidean);
  const int64_t n = high.n_rows;
  double tot = 0;
  std::vector<int32_t> sa, sb;
  for (int64_t i = 0; i < n; ++i) {
    sa.clear();
    sb.clear();
    for (int64_t j = 0; j <= k; ++j) {
      if (a.index(i, j) != i && static_cast<int64_t>(sa.size()) < k) sa.push_back(a.index(i, j));
      if (b.index(i, j) != i && static_cast<int64_t>(sb.size()) < k) sb.push_back(b.index(i, j));
    }
    std::sort(sa.begin(), sa.end());
    std::sort(sb.begin(), sb.end());
    std::vector<int32_t> common;
    std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(common));
    tot += static_cast<double>(common.size()) / static_cast<double>(k);
  }
  return tot / static_cast<double>(n);
}

}  // namespace scurry
