// scurry: t-SNE with FFT-accelerated interpolation of the repulsion (see tsne.hpp).
#include "tl/tsne.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <random>

#include <fftw3.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/knn.hpp"
#include "graph/neighbors.hpp"
#include "tl/tsne_detail.hpp"
#include "tl/tsne_gpu.hpp"

namespace scurry {

namespace tsne_detail {

// FFTW (Frigo & Johnson 2005, "The design and implementation of FFTW3", Proc. IEEE 93) is fastest on
// sizes whose factors are small: 2^a 3^b 5^c.
bool fft_friendly(int64_t m) {
  for (int64_t f : {2, 3, 5})
    while (m % f == 0) m /= f;
  return m == 1;
}

// Boxes of width 1 / intervals_per_integer while the layout spans between min_num_intervals and
// max_num_intervals of them (FIt-SNE's rule: the kernel's spectrum is the same while the grid size
// is); outside that range (the start, where the layout is tiny, and the swell of the early
// exaggeration) min or max boxes whose width is rounded up to a ladder of 2^(1/8) steps, so that the
// spectrum is recomputed only when the layout has grown or shrunk by 9 %, not every iteration. The
// number of boxes is then raised to the least with an FFT-friendly M (finer boxes cost nothing).
GridShape grid_shape(double span, const TsneOptions& opt) {
  const double unit = 1.0 / opt.intervals_per_integer;
  const auto ladder = [unit](double w) { return unit * std::exp2(std::ceil(8.0 * std::log2(w / unit)) / 8.0); };
  GridShape g;
  int64_t want;
  if (span < static_cast<double>(opt.min_num_intervals) * unit) {
    want = opt.min_num_intervals;
    g.bw = ladder(span / static_cast<double>(want));
  } else if (span <= static_cast<double>(opt.max_num_intervals) * unit) {
    want = static_cast<int64_t>(std::ceil(span / unit));
    g.bw = unit;
  } else {
    want = opt.max_num_intervals;
    g.bw = ladder(span / static_cast<double>(want));
  }
  const int64_t p = opt.n_interpolation_points;
  g.boxes = want;
  while (!fft_friendly(2 * p * g.boxes)) ++g.boxes;
  g.M = 2 * p * g.boxes;
  return g;
}

}  // namespace tsne_detail

using tsne_detail::GridShape;
using tsne_detail::grid_shape;

namespace {

const char* kWhere = "tsne";

constexpr int64_t kRowBlock = 1024;      // points per block of the per-point loops
constexpr int64_t kSpreadBlock = 16384;  // points per partial grid when spreading charges
constexpr int kTerms = 4;                // charges 1, y1, y2, |y|^2

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

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

// All pairs (the oracle, and method "auto" below exact_below cells). The coordinates in two flat
// arrays and kLanes independent accumulators a row (summed in lane order), so the compiler can keep
// the inner loop in vector registers; the j = i term (w = 1, d = 0) is taken out afterwards.
constexpr int64_t kLanes = 4;
double repulsion_exact(const std::vector<double>& y, int64_t n, int threads, std::vector<double>& rep) {
  rep.assign(static_cast<size_t>(2 * n), 0.0);
  const int64_t np = round_up(n, kLanes);
  // Padding points far away (w ~ 1e-60): they add nothing a double can hold next to the j = i term.
  std::vector<double> y0(static_cast<size_t>(np), 1e30), y1(static_cast<size_t>(np), 1e30);
  for (int64_t i = 0; i < n; ++i) {
    y0[static_cast<size_t>(i)] = y[2 * i];
    y1[static_cast<size_t>(i)] = y[2 * i + 1];
  }
  std::vector<double> zpart(static_cast<size_t>(blocks_of(n, kRowBlock)), 0.0);
  parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
    double z = 0;
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      const double a0 = y0[i], a1 = y1[i];
      double zs[kLanes] = {}, r0[kLanes] = {}, r1[kLanes] = {};
      for (int64_t j = 0; j < np; j += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) {
          const double d0 = a0 - y0[j + l], d1 = a1 - y1[j + l];
          const double w = 1.0 / (1.0 + d0 * d0 + d1 * d1);
          zs[l] += w;
          r0[l] += w * w * d0;
          r1[l] += w * w * d1;
        }
      rep[2 * i] = (r0[0] + r0[1]) + (r0[2] + r0[3]);
      rep[2 * i + 1] = (r1[0] + r1[1]) + (r1[2] + r1[3]);
      z += (zs[0] + zs[1]) + (zs[2] + zs[3]) - 1.0;
    }
    zpart[static_cast<size_t>(b)] = z;
  });
  double z = 0;
  for (double v : zpart) z += v;
  return z;
}

constexpr int64_t kFftRows = 8;   // grid rows a real-to-complex (and back) transform batch
constexpr int64_t kFftCols = 16;  // spectrum columns a column transform batch

// FFTW's planner is not thread-safe (its execute is): plans are made and destroyed under this lock.
std::mutex& fftw_planner_lock() {
  static std::mutex m;
  return m;
}

// The circular convolution of kTerms real G x G charge grids (zero-padded to M x M) with the kernel
// w^2 = 1 / (1 + d^2)^2 by FFTW, its buffers and plans made once per grid size and reused by every
// iteration with that size (the kernel's spectrum again whenever the node spacing changes). A 2-D
// transform pruned to the charges: real-to-complex along the G rows that hold charges (M / 2 + 1
// outputs each); the columns gathered into contiguous rows (zero past G), transformed, times the
// kernel's spectrum, transformed back and scattered; complex-to-real along the G rows wanted. Work
// is cut into fixed batches of rows and of columns (kFftRows, kFftCols), each run by one plan on its
// own slice of the buffers: the bits do not depend on the thread count. FFTW_ESTIMATE plans pick
// their algorithm from the sizes alone (not from timings), so every run computes the same bits; the
// buffers' strides keep every batch at the same alignment, which FFTW's new-array execute requires.
// The grids are single precision (fftwf): the FFT's rounding (~1e-7 of the largest potential, times
// the cancellation of at most |y|^2 / (1 + d^2) in Z) stays far below the interpolation's own error
// (~1e-2 with boxes of width 1 and 3 nodes; tests/tl/test_tsne.cpp bounds both against the exact
// sums), and it halves the transforms' time and memory. Charges are summed, and potentials
// interpolated, in double.
class FftConvolution {
 public:
  FftConvolution(int64_t M, int64_t G)
      : M_(M), G_(G), Gr_(round_up(G, kFftRows)), Mr_(round_up(M, 8)), S_(M / 2 + 1), Sc_(round_up(S_, kFftCols)) {
    if (Gr_ > M_) fail("internal: tsne grid of ", G, " nodes does not fit the FFT of ", M);
    in_ = fftwf_alloc_real(static_cast<size_t>(kTerms * Gr_ * Mr_));
    out_ = fftwf_alloc_real(static_cast<size_t>(kTerms * Gr_ * Mr_));
    rows_ = fftwf_alloc_complex(static_cast<size_t>(kTerms * Gr_ * Sc_));
    tin_ = fftwf_alloc_complex(static_cast<size_t>(kTerms * Sc_ * M_));
    tout_ = fftwf_alloc_complex(static_cast<size_t>(kTerms * Sc_ * M_));
    kin_ = fftw_alloc_real(static_cast<size_t>(M_ * M_));
    kout_ = fftw_alloc_complex(static_cast<size_t>(M_ * S_));
    if (!in_ || !out_ || !rows_ || !tin_ || !tout_ || !kin_ || !kout_)
      fail("tsne: out of memory for the FFT grid (", M, " x ", M, ")");
    // Zero once: the padding (rows and columns past the charges) is never written again.
    std::fill(in_, in_ + kTerms * Gr_ * Mr_, 0.0f);
    std::fill(&tin_[0][0], &tin_[0][0] + 2 * kTerms * Sc_ * M_, 0.0f);
    const int n = static_cast<int>(M_), b = static_cast<int>(kFftRows), c = static_cast<int>(kFftCols);
    const int mr = static_cast<int>(Mr_), sc = static_cast<int>(Sc_);
    std::lock_guard<std::mutex> lock(fftw_planner_lock());
    row_fwd_ = fftwf_plan_many_dft_r2c(1, &n, b, in_, nullptr, 1, mr, rows_, nullptr, 1, sc, FFTW_ESTIMATE);
    col_fwd_ = fftwf_plan_many_dft(1, &n, c, tin_, nullptr, 1, n, tout_, nullptr, 1, n, FFTW_FORWARD, FFTW_ESTIMATE);
    col_inv_ = fftwf_plan_many_dft(1, &n, c, tout_, nullptr, 1, n, tout_, nullptr, 1, n, FFTW_BACKWARD, FFTW_ESTIMATE);
    row_inv_ = fftwf_plan_many_dft_c2r(1, &n, b, rows_, nullptr, 1, sc, out_, nullptr, 1, mr, FFTW_ESTIMATE);
    kernel_plan_ = fftw_plan_dft_r2c_2d(n, n, kin_, kout_, FFTW_ESTIMATE);
    if (!row_fwd_ || !col_fwd_ || !col_inv_ || !row_inv_ || !kernel_plan_)
      fail("internal: FFTW could not plan a grid of ", M);
  }
  ~FftConvolution() {
    {
      std::lock_guard<std::mutex> lock(fftw_planner_lock());
      for (fftwf_plan p : {row_fwd_, col_fwd_, col_inv_, row_inv_})
        if (p) fftwf_destroy_plan(p);
      if (kernel_plan_) fftw_destroy_plan(kernel_plan_);
    }
    for (void* p : {static_cast<void*>(in_), static_cast<void*>(out_), static_cast<void*>(rows_),
                    static_cast<void*>(tin_), static_cast<void*>(tout_)})
      fftwf_free(p);
    fftw_free(kin_);
    fftw_free(kout_);
  }
  FftConvolution(const FftConvolution&) = delete;
  FftConvolution& operator=(const FftConvolution&) = delete;

  int64_t M() const { return M_; }
  // Charge (term t, row r, column c), r, c < G: written by the caller before run().
  float* charges(int t) { return in_ + t * Gr_ * Mr_; }
  // Potential (term t, row r, column c) after run(): at potentials(t)[r * stride() + c].
  const float* potentials(int t) const { return out_ + t * Gr_ * Mr_; }
  int64_t stride() const { return Mr_; }

  // The kernel on the circulant M x M grid of node spacing delta and its spectrum: real, since the
  // kernel is real and even; stored column-major (as the column transforms read it) and scaled by
  // the inverse transforms' 1 / M^2. Recomputed only when delta changes.
  void set_kernel(double delta, int threads) {
    if (delta == delta_) return;
    const int64_t M = M_;
    auto wrap = [M](int64_t i) { return static_cast<double>(i <= M / 2 ? i : i - M); };
    parallel_for(threads, blocks_of(M, kFftRows), [&](int64_t b) {
      for (int64_t r = b * kFftRows; r < std::min(M, (b + 1) * kFftRows); ++r)
        for (int64_t c = 0; c < M; ++c) {
          const double dr = delta * wrap(r), dc = delta * wrap(c);
          const double w = 1.0 / (1.0 + dr * dr + dc * dc);
          kin_[r * M + c] = w * w;
        }
    });
    fftw_execute(kernel_plan_);
    kernel_.assign(static_cast<size_t>(Sc_ * M), 0.0f);
    const double scale = 1.0 / static_cast<double>(M * M);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < S_; ++c) kernel_[static_cast<size_t>(c * M + r)] = static_cast<float>(kout_[r * S_ + c][0] * scale);
    delta_ = delta;
  }

  void run(int threads) {
    const int64_t rb = Gr_ / kFftRows, cb = Sc_ / kFftCols;
    parallel_for(threads, kTerms * rb, [&](int64_t b) {
      const int64_t t = b / rb, r0 = (b % rb) * kFftRows;
      fftwf_execute_dft_r2c(row_fwd_, in_ + (t * Gr_ + r0) * Mr_, rows_ + (t * Gr_ + r0) * Sc_);
    });
    parallel_for(threads, kTerms * cb, [&](int64_t b) {
      const int64_t t = b / cb, c0 = (b % cb) * kFftCols;
      fftwf_complex* rows = rows_ + t * Gr_ * Sc_ + c0;  // rows[r * Sc + c]: column c0 + c of row r
      fftwf_complex* tin = tin_ + (t * Sc_ + c0) * M_;    // tin[c * M + r]: the same, transposed
      fftwf_complex* tout = tout_ + (t * Sc_ + c0) * M_;
      for (int64_t r = 0; r < G_; ++r)
        for (int64_t c = 0; c < kFftCols; ++c) {
          tin[c * M_ + r][0] = rows[r * Sc_ + c][0];
          tin[c * M_ + r][1] = rows[r * Sc_ + c][1];
        }
      fftwf_execute_dft(col_fwd_, tin, tout);
      const float* k = kernel_.data() + c0 * M_;
      for (int64_t i = 0; i < kFftCols * M_; ++i) {
        tout[i][0] *= k[i];
        tout[i][1] *= k[i];
      }
      fftwf_execute_dft(col_inv_, tout, tout);
      for (int64_t r = 0; r < G_; ++r)
        for (int64_t c = 0; c < kFftCols; ++c) {
          rows[r * Sc_ + c][0] = tout[c * M_ + r][0];
          rows[r * Sc_ + c][1] = tout[c * M_ + r][1];
        }
    });
    parallel_for(threads, kTerms * rb, [&](int64_t b) {
      const int64_t t = b / rb, r0 = (b % rb) * kFftRows;
      fftwf_execute_dft_c2r(row_inv_, rows_ + (t * Gr_ + r0) * Sc_, out_ + (t * Gr_ + r0) * Mr_);
    });
  }

 private:
  int64_t M_, G_, Gr_, Mr_, S_, Sc_;
  double delta_ = -1;
  float *in_ = nullptr, *out_ = nullptr;  // the grids: single precision (see above)
  fftwf_complex *rows_ = nullptr, *tin_ = nullptr, *tout_ = nullptr;
  fftwf_plan row_fwd_ = nullptr, col_fwd_ = nullptr, col_inv_ = nullptr, row_inv_ = nullptr;
  double* kin_ = nullptr;  // the kernel: transformed in double precision, then rounded
  fftw_complex* kout_ = nullptr;
  fftw_plan kernel_plan_ = nullptr;
  std::vector<float> kernel_;  // Sc x M (column-major spectrum)
};

// The convolution of the last grid size, kept while the layout keeps it.
struct TsneFftCache {
  std::unique_ptr<FftConvolution> conv;
};

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
  const GridShape shape = grid_shape(span, opt);
  const int64_t M = shape.M, boxes = shape.boxes;
  const int64_t G = boxes * p;  // grid nodes a side
  const double bw = shape.bw;
  const double delta = bw / static_cast<double>(p);  // node spacing
  // The grid starts at lo and covers boxes * bw >= span.
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
  if (!cache.conv || cache.conv->M() != M) {
    cache.conv.reset();  // free the old grid first
    cache.conv = std::make_unique<FftConvolution>(M, G);
  }
  FftConvolution& conv = *cache.conv;
  conv.set_kernel(delta, threads);
  const int64_t ld = conv.stride();
  parallel_for(threads, kTerms, [&](int64_t t) {
    float* dst = conv.charges(static_cast<int>(t));
    for (int64_t r = 0; r < G; ++r)
      for (int64_t c = 0; c < G; ++c) dst[r * ld + c] = static_cast<float>(grid[t * gsz + r * G + c]);
  });
  conv.run(threads);
  const float* pot[kTerms];
  for (int t = 0; t < kTerms; ++t) pot[t] = conv.potentials(t);
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
          const int64_t at = (r0 + a) * ld + c0 + e;
          for (int t = 0; t < kTerms; ++t) phi[t] += w * pot[t][at];
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

}  // namespace

namespace tsne_detail {

// sklearn's PCA init, in pieces the GPU path shares (it forms the covariance on the device): the
// column means, the covariance of the centred rows, then two leading principal components (Jacobi on
// the d x d covariance, d being small), svd_flip signs, scaled so that column 0 has std 1e-4. The
// means and the projections are per column / per row, so running them in parallel keeps the bits.
std::vector<double> column_means(const DenseF& X, int threads) {
  const int64_t n = X.n_rows, d = X.n_cols;
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  parallel_for(threads, d, [&](int64_t c) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m += X(i, c);
    mean[c] = m / static_cast<double>(n);
  });
  return mean;
}

std::vector<double> covariance(const DenseF& X, const std::vector<double>& mean) {
  const int64_t n = X.n_rows, d = X.n_cols;
  std::vector<double> C(static_cast<size_t>(d * d), 0.0);
  std::vector<double> row(static_cast<size_t>(d));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < d; ++c) row[c] = X(i, c) - mean[c];
    for (int64_t a = 0; a < d; ++a)
      for (int64_t b = 0; b <= a; ++b) C[a * d + b] += row[a] * row[b];
  }
  for (int64_t a = 0; a < d; ++a)
    for (int64_t b = 0; b < a; ++b) C[b * d + a] = C[a * d + b];
  return C;
}

std::vector<double> pca_layout(const DenseF& X, const std::vector<double>& mean, std::vector<double> C, int threads) {
  const int64_t n = X.n_rows, d = X.n_cols;
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
    parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
      for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += (X(i, c) - mean[c]) * V[c * d + v];
        y[2 * i + comp] = s;
      }
    });
    double best = 0;  // the first largest |score| (svd_flip)
    for (int64_t i = 0; i < n; ++i)
      if (std::abs(y[2 * i + comp]) > std::abs(best)) best = y[2 * i + comp];
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

std::vector<double> random_layout(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> y(static_cast<size_t>(2 * n));
  for (auto& v : y) v = 1e-4 * nd(rng);
  return y;
}

}  // namespace tsne_detail

namespace {

std::vector<double> pca_init(const DenseF& X, int threads) {
  const std::vector<double> mean = tsne_detail::column_means(X, threads);
  return tsne_detail::pca_layout(X, mean, tsne_detail::covariance(X, mean), threads);
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
  if (tsne_detail::exact_repulsion(opt, n)) return repulsion_exact(y, n, threads, rep);
  TsneFftCache cache;
  return repulsion_fft(y, n, opt, threads, rep, cache);
}

namespace tsne_detail {

void check_options(const TsneOptions& opt, int64_t n) {
  if (opt.method != "auto" && opt.method != "fft" && opt.method != "exact")
    fail_input(kWhere, "method '", opt.method, "' is not supported; use auto, fft or exact");
  if (opt.init != "pca" && opt.init != "random")
    fail_input(kWhere, "init '", opt.init, "' is not supported; use pca or random");
  if (opt.knn != "auto" && opt.knn != "exact" && opt.knn != "ivf")
    fail_input(kWhere, "knn '", opt.knn, "' is not supported; use auto, exact or ivf");
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
}

bool exact_repulsion(const TsneOptions& opt, int64_t n) {
  return opt.method == "exact" || (opt.method == "auto" && n < opt.exact_below);
}

int64_t n_neighbors(const TsneOptions& opt, int64_t n) {
  // sklearn: n_neighbors = min(n - 1, int(3 * perplexity + 1)), the cell itself excluded.
  return std::min<int64_t>(n - 1, static_cast<int64_t>(3.0 * opt.perplexity + 1.0));
}

void neighbours_without_self(const Knn& knn, int64_t k, KnnMetric metric, int threads, std::vector<int32_t>& nbr,
                             std::vector<double>& sq) {
  const int64_t n = knn.n;
  nbr.assign(static_cast<size_t>(n * k), 0);
  sq.assign(static_cast<size_t>(n * k), 0.0);
  std::vector<int64_t> missing(static_cast<size_t>(blocks_of(n, kRowBlock)), 0);
  parallel_for(threads, blocks_of(n, kRowBlock), [&](int64_t b) {
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      // Column 0 is the cell itself unless duplicates tie with it: drop the cell wherever it sits.
      int64_t o = 0;
      for (int64_t j = 0; j <= k && o < k; ++j) {
        const int32_t t = knn.index(i, j);
        if (t == i) continue;
        if (t < 0) break;  // an approximate search found fewer neighbours
        const double dist = knn.distance(i, j);
        nbr[static_cast<size_t>(i * k + o)] = t;
        sq[static_cast<size_t>(i * k + o)] = metric == KnnMetric::euclidean ? dist * dist : dist;
        ++o;
      }
      if (o < k) ++missing[static_cast<size_t>(b)];
    }
  });
  int64_t m = 0;
  for (int64_t v : missing) m += v;
  if (m > 0)
    fail_input(kWhere, m, " cells have fewer than ", k, " neighbours in the approximate (IVF) search; use knn = exact");
}

}  // namespace tsne_detail

TsneResult tsne(const Context& ctx, const DenseF& X, const TsneOptions& opt) {
  const int64_t n = X.n_rows;
  tsne_detail::check_options(opt, n);
  if (ctx.backend() == Backend::cuda) return tsne_gpu(ctx, X, opt);
  const int threads = opt.n_jobs > 0 ? opt.n_jobs : ctx.threads();
  const Context kctx = Context::cpu(threads);
  TsneResult res;
  auto t0 = std::chrono::steady_clock::now();
  const int64_t k = tsne_detail::n_neighbors(opt, n);
  const KnnMetric metric = parse_knn_metric(opt.metric, kWhere);
  // sklearn's search is exact, and so is ours on the CPU unless knn = ivf is asked for.
  const Knn knn = opt.knn == "ivf" ? knn_ivf(kctx, X, k + 1, metric) : knn_exact(kctx, X, k + 1, metric);
  std::vector<int32_t> nbr;
  std::vector<double> sq;
  tsne_detail::neighbours_without_self(knn, k, metric, threads, nbr, sq);
  const CsrD P = tsne_affinities(nbr, sq, n, k, opt.perplexity, threads);
  res.affinity_seconds = seconds_since(t0);
  res.p_nnz = static_cast<int64_t>(P.indices.size());
  res.knn_used = opt.knn == "ivf" ? "ivf" : "exact";
  t0 = std::chrono::steady_clock::now();

  std::vector<double> y = opt.init == "pca" ? pca_init(X, threads) : tsne_detail::random_layout(n, opt.random_state);
  std::vector<double> update(y.size(), 0.0), gains(y.size(), 1.0), att, rep;
  double z = 1;
  TsneFftCache cache;
  const bool exact = tsne_detail::exact_repulsion(opt, n);
  auto repulsion = [&]() {
    return exact ? repulsion_exact(y, n, threads, rep) : repulsion_fft(y, n, opt, threads, rep, cache);
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
  const bool gpu = ctx.backend() == Backend::cuda;
  log::info(detail::concat(gpu ? "tsne (gpu): " : "tsne: ", x.n_rows, " cells in ", used, " (", x.n_cols,
                           " dims): affinities ", res.affinity_seconds, " s, ", opt.n_iter, " iterations ",
                           res.optimize_seconds, " s, KL ", res.kl_divergence));
  if (gpu)
    log::info(detail::concat("tsne (gpu): kNN (", res.knn_used, ") ", res.knn_seconds, " s; device s: attraction ",
                             res.attraction_seconds, ", grid ", res.grid_seconds, ", fft ", res.fft_seconds,
                             ", interpolation ", res.interpolation_seconds, ", update ", res.update_seconds,
                             "; host setup ", res.host_seconds));
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
