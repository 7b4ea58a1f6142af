#include "pp/harmony.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "pp/harmony_exp.hpp"
#include "pp/harmony_gpu.hpp"
#include "pp/linalg.hpp"
#include "pp/obs_groups.hpp"

namespace scurry {
namespace {

constexpr int64_t kCellsPerBlock = 1024;  // fixed partition of cells for products and sums
constexpr int64_t kKmeansCellsPerBlock = 4096;  // the initial k-means' blocks (wide partials)
constexpr int64_t kChunk = 256;           // cells per parallel chunk inside an R-update block
constexpr int kWindow = 3;                // harmonypy's window_size

// out[0..4) = exp(u[0..4) - mx) pen[0..4) for exponents <= 0 (the soft assignments): Cody-Waite
// reduction x = n ln2 + r and a degree-11 Taylor polynomial on |r| <= ln2/2 (relative error <
// 1e-14), branch-free; exact 0 below -700. GCC vector extensions: 2 SSE2 or 1 AVX2 register.
// (Pointers in and out: no vector passed by value, whose ABI differs with and without AVX.)
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));
__attribute__((always_inline)) inline void penalised_exp4(const double* u, double mx, const double* pen, double* out) {
  v4d x, pn;
  std::memcpy(&x, u, sizeof x);
  std::memcpy(&pn, pen, sizeof pn);
  x = x - mx;
  const v4l keep = x >= -700.0;
  x = keep ? x : v4d{} - 700.0;
  const double shifter = 0x1.8p52;
  const v4d t = x * 1.4426950408889634 + shifter;
  const v4d n = t - shifter;
  const v4d r = (x - n * 0.6931471805598903) - n * 5.497923018708371e-14;
  v4d p = v4d{} + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const v4l e = ((reinterpret_cast<v4l>(t) & 0xfffffffffffffLL) - 0x8000000000000LL + 1023) << 52;
  const v4d y = (keep ? p * reinterpret_cast<v4d>(e) : v4d{}) * pn;
  std::memcpy(out, &y, sizeof y);
}

// r[k] = exp(u[k] - mx) pen[k] for k < K; returns sum_k r[k], added in k order. 4 elements a step
// (on CPUs with AVX2, chosen at run time, one register; no FMA in the target, so nothing is
// contracted: the same bits either way), the sum serially.
__attribute__((always_inline)) inline double penalised_exp_body(const double* u, double mx, const double* pen, double* r,
                                                                int64_t K) {
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) penalised_exp4(u + k, mx, pen + k, r + k);
  if (k < K) {  // the tail, padded (the same operations per element: the same bits)
    double uu[4] = {0, 0, 0, 0}, pp[4] = {0, 0, 0, 0}, rr[4];
    std::copy(u + k, u + K, uu);
    std::copy(pen + k, pen + K, pp);
    penalised_exp4(uu, mx, pp, rr);
    std::copy(rr, rr + (K - k), r + k);
  }
  double tot = 0;
  for (k = 0; k < K; ++k) tot += r[k];
  return tot;
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"), flatten)) double penalised_exp_avx2(const double* u, double mx, const double* pen,
                                                                    double* r, int64_t K) {
  return penalised_exp_body(u, mx, pen, r, K);
}
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#endif
double penalised_exp(const double* u, double mx, const double* pen, double* r, int64_t K) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (kHaveAvx2) return penalised_exp_avx2(u, mx, pen, r, K);
#endif
  return penalised_exp_body(u, mx, pen, r, K);
}

// exp(x) for one x <= 0, by the same code.
double exp_neg(double x) {
  const double u[4] = {x, x, x, x}, one[4] = {1, 1, 1, 1};
  double r[4];
  penalised_exp4(u, 0.0, one, r);
  return r[0];
}

// Inverse of a small p x p matrix, as numpy.linalg.inv.
void invert_small(std::vector<double>& a, int64_t p, std::vector<double>& inv) {
  if (!linalg::invert_gauss_jordan(a, p, inv, 0.0))
    fail("harmony: singular ridge system (a cluster without weight and lamb = 0)");
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

void normalize_rows(double* x, int64_t rows, int64_t d) {
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0;
    for (int64_t q = 0; q < d; ++q) s += x[i * d + q] * x[i * d + q];
    const double inv = s > 0 ? 1.0 / std::sqrt(s) : 0.0;
    for (int64_t q = 0; q < d; ++q) x[i * d + q] *= inv;
  }
}

// ---- initial k-means (sklearn KMeans(init='k-means++', n_init, max_iter) on the cosine embedding)
// The n_init restarts run in lockstep, each with its own RNG stream (seeded from the main one in
// order), so every pass over the cells serves all of them: one float32 GEMM of the cells against
// the n_init * K centres (or n_init * trials k-means++ candidates) per row block. Distances are
// float32 (this only chooses the starting centroids); centroid sums and potentials are float64,
// added in block order.
struct KmData {
  const Context& ctx;
  DenseF X;  // N x d
  RowBlocks rb;
  std::vector<float> xsq;
};

// Squared distances of every cell to the m centres C (m x d, float32) into D (N x m); without
// with_x, |x|^2 is left out (and no clamping at 0): enough to rank the centres of a cell.
void sq_dists(const KmData& km, const std::vector<float>& C, int64_t m, std::vector<float>& D, bool with_x = true) {
  const int64_t n = km.X.n_rows, d = km.X.n_cols;
  D.resize(static_cast<size_t>(n * m));
  std::vector<float> csq(static_cast<size_t>(m));
  for (int64_t c = 0; c < m; ++c) {
    double s = 0;
    for (int64_t q = 0; q < d; ++q) s += static_cast<double>(C[c * d + q]) * C[c * d + q];
    csq[c] = static_cast<float>(s);
  }
  parallel_for(km.ctx.threads(), km.rb.n_blocks(), [&](int64_t b) {
    const int64_t r0 = km.rb.begin(b), rows = km.rb.end(b) - r0;
    float* o = D.data() + r0 * m;
    linalg::sgemm(false, true, rows, m, d, -2.0f, km.X.row(r0), d, C.data(), d, 0.0f, o, m);
    for (int64_t i = 0; i < rows; ++i) {
      if (!with_x) {
        for (int64_t c = 0; c < m; ++c) o[i * m + c] += csq[c];
        continue;
      }
      const float xs = km.xsq[r0 + i];
      for (int64_t c = 0; c < m; ++c) o[i * m + c] = std::max(0.0f, o[i * m + c] + xs + csq[c]);
    }
  });
}

double exact_dist_c(const float* a, const float* b, int64_t d) {
  double s = 0;
  for (int64_t q = 0; q < d; ++q) {
    const double t = static_cast<double>(a[q]) - b[q];
    s += t * t;
  }
  return std::sqrt(s);
}

// Greedy k-means++ (Arthur & Vassilvitskii 2007; sklearn's 2 + ln k local trials per centre), the
// restarts in lockstep.
std::vector<std::vector<float>> kmeans_pp(const KmData& km, int k, int n_init, std::vector<std::mt19937_64>& rngs) {
  const int64_t n = km.X.n_rows, d = km.X.n_cols;
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(k)));
  std::vector<std::vector<float>> C(static_cast<size_t>(n_init), std::vector<float>(static_cast<size_t>(k * d)));
  std::vector<float> cand(static_cast<size_t>(n_init * d)), D;
  for (int r = 0; r < n_init; ++r) {
    const int64_t first = std::min<int64_t>(static_cast<int64_t>(uniform01(rngs[r]) * n), n - 1);
    std::copy(km.X.row(first), km.X.row(first) + d, C[r].begin());
    std::copy(km.X.row(first), km.X.row(first) + d, cand.begin() + r * d);
  }
  sq_dists(km, cand, n_init, D);
  std::vector<std::vector<double>> closest(static_cast<size_t>(n_init), std::vector<double>(static_cast<size_t>(n)));
  std::vector<double> pot(static_cast<size_t>(n_init), 0.0);
  for (int r = 0; r < n_init; ++r)
    for (int64_t i = 0; i < n; ++i) pot[r] += (closest[r][i] = D[i * n_init + r]);
  const int64_t m = static_cast<int64_t>(n_init) * trials;
  cand.resize(static_cast<size_t>(m * d));
  std::vector<double> cum(static_cast<size_t>(n));
  for (int c = 1; c < k; ++c) {
    for (int r = 0; r < n_init; ++r) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) cum[i] = (s += closest[r][i]);
      for (int t = 0; t < trials; ++t) {
        const double v = uniform01(rngs[r]) * pot[r];
        const int64_t id = std::min<int64_t>(std::lower_bound(cum.begin(), cum.end(), v) - cum.begin(), n - 1);
        std::copy(km.X.row(id), km.X.row(id) + d, cand.begin() + (r * trials + t) * d);
      }
    }
    sq_dists(km, cand, m, D);
    std::vector<double> p;
    reduce_blocks(km.ctx.threads(), km.rb.n_blocks(), static_cast<size_t>(m), p, [&](int64_t b, double* part) {
      for (int64_t i = km.rb.begin(b); i < km.rb.end(b); ++i)
        for (int r = 0; r < n_init; ++r)
          for (int t = 0; t < trials; ++t)
            part[r * trials + t] += std::min(closest[r][i], static_cast<double>(D[i * m + r * trials + t]));
    });
    for (int r = 0; r < n_init; ++r) {
      int best = 0;
      for (int t = 1; t < trials; ++t)
        if (p[r * trials + t] < p[r * trials + best]) best = t;
      pot[r] = p[r * trials + best];
      const int64_t col = r * trials + best;
      for (int64_t i = 0; i < n; ++i) closest[r][i] = std::min(closest[r][i], static_cast<double>(D[i * m + col]));
      std::copy(cand.begin() + col * d, cand.begin() + (col + 1) * d, C[r].begin() + c * d);
    }
  }
  return C;
}

// Lloyd iterations of all restarts in lockstep (a restart stops moving once its centre shift is
// <= tol); returns the best restart's centres (least inertia). Exact Lloyd steps accelerated by
// Hamerly's bounds (G. Hamerly, "Making k-means even faster", SDM 2010): per cell and restart an
// upper bound u on the distance to its centre and a lower bound l on the distance to any other; a
// cell whose u <= max(l, s(a)/2) (s: the distance from its centre to the nearest other centre)
// keeps its centre without a distance computation; else u is made exact and, if still too large,
// the cell's distances to all K centres come from one float32 GEMM of the block's such cells. The
// bounds are moved by the centres' shifts after each update. Every decision is per cell, the sums
// per fixed block: the same result for any thread count.
std::vector<double> lloyd_best(const KmData& km, int k, std::vector<std::vector<float>>& C, int max_iter, double tol) {
  const int64_t n = km.X.n_rows, d = km.X.n_cols, K = k;
  const int n_init = static_cast<int>(C.size());
  std::vector<int32_t> lab(static_cast<size_t>(n * n_init), 0);
  std::vector<float> ub(static_cast<size_t>(n * n_init), std::numeric_limits<float>::infinity());
  std::vector<float> lb(static_cast<size_t>(n * n_init), 0.0f);
  std::vector<uint8_t> done(static_cast<size_t>(n_init), 0);
  auto exact_dist = [&](int64_t i, const float* c) { return exact_dist_c(km.X.row(i), c, d); };
  // s(c) / 2 per restart and centre; |c|^2.
  std::vector<double> half(static_cast<size_t>(n_init * K)), csq(static_cast<size_t>(n_init * K));
  auto centre_geometry = [&](int r) {
    const float* cr = C[r].data();
    for (int64_t a = 0; a < K; ++a) {
      double m = std::numeric_limits<double>::infinity(), sq = 0;
      for (int64_t q = 0; q < d; ++q) sq += static_cast<double>(cr[a * d + q]) * cr[a * d + q];
      csq[r * K + a] = sq;
      for (int64_t b = 0; b < K; ++b) {
        if (b == a) continue;
        double t2 = 0;
        for (int64_t q = 0; q < d; ++q) {
          const double t = static_cast<double>(cr[a * d + q]) - cr[b * d + q];
          t2 += t * t;
        }
        m = std::min(m, t2);
      }
      half[r * K + a] = K > 1 ? 0.5 * std::sqrt(m) : std::numeric_limits<double>::infinity();
    }
  };
  // Assignment with the bounds, for the restarts in `which` (all, or those not done).
  auto assign = [&](bool all) {
    for (int r = 0; r < n_init; ++r)
      if (all || !done[r]) centre_geometry(r);
    parallel_for(km.ctx.threads(), km.rb.n_blocks(), [&](int64_t b) {
      const int64_t r0 = km.rb.begin(b), r1 = km.rb.end(b);
      std::vector<int64_t> todo;
      std::vector<float> xg, D;
      for (int r = 0; r < n_init; ++r) {
        if (!all && done[r]) continue;
        todo.clear();
        for (int64_t i = r0; i < r1; ++i) {
          const size_t e = static_cast<size_t>(i * n_init + r);
          const double m = std::max(static_cast<double>(lb[e]), half[r * K + lab[e]]);
          if (ub[e] <= m) continue;
          if (std::isfinite(ub[e])) {
            ub[e] = static_cast<float>(exact_dist(i, C[r].data() + lab[e] * d));
            if (ub[e] <= m) continue;
          }
          todo.push_back(i);
        }
        const int64_t g = static_cast<int64_t>(todo.size());
        if (g == 0) continue;
        xg.resize(static_cast<size_t>(g * d));
        D.resize(static_cast<size_t>(g * K));
        for (int64_t t = 0; t < g; ++t) std::copy(km.X.row(todo[t]), km.X.row(todo[t]) + d, xg.begin() + t * d);
        linalg::sgemm(false, true, g, K, d, -2.0f, xg.data(), d, C[r].data(), d, 0.0f, D.data(), K);
        for (int64_t t = 0; t < g; ++t) {
          const float* row = D.data() + t * K;
          const double xs = km.xsq[todo[t]];
          double b1 = std::numeric_limits<double>::infinity(), b2 = b1;
          int32_t a1 = 0;
          for (int64_t c = 0; c < K; ++c) {
            const double v = row[c] + csq[r * K + c];
            if (v < b1) {
              b2 = b1;
              b1 = v;
              a1 = static_cast<int32_t>(c);
            } else if (v < b2) {
              b2 = v;
            }
          }
          const size_t e = static_cast<size_t>(todo[t] * n_init + r);
          lab[e] = a1;
          ub[e] = static_cast<float>(std::sqrt(std::max(0.0, b1 + xs)));
          lb[e] = K > 1 ? static_cast<float>(std::sqrt(std::max(0.0, b2 + xs))) : std::numeric_limits<float>::infinity();
        }
      }
    });
  };
  std::vector<std::vector<float>> old(static_cast<size_t>(n_init));
  for (int it = 0; it < max_iter; ++it) {
    assign(false);
    const int64_t m = static_cast<int64_t>(n_init) * K;
    std::vector<double> acc;
    reduce_blocks(km.ctx.threads(), km.rb.n_blocks(), static_cast<size_t>(m * (d + 1)), acc, [&](int64_t b, double* p) {
      for (int64_t i = km.rb.begin(b); i < km.rb.end(b); ++i) {
        const float* x = km.X.row(i);
        for (int r = 0; r < n_init; ++r) {
          if (done[r]) continue;
          double* c = p + (static_cast<int64_t>(r) * K + lab[i * n_init + r]) * (d + 1);
          for (int64_t q = 0; q < d; ++q) c[q] += x[q];
          c[d] += 1;
        }
      }
    });
    bool all_done = true;
    for (int r = 0; r < n_init; ++r) {
      if (done[r]) continue;
      std::vector<int64_t> far;  // empty clusters take the points farthest from their centres (sklearn)
      std::vector<double> dist_r;
      old[r] = C[r];
      double shift = 0;
      for (int64_t c = 0; c < K; ++c) {
        const double* a = acc.data() + (static_cast<int64_t>(r) * K + c) * (d + 1);
        float* cc = C[r].data() + c * d;
        std::vector<float> nc(static_cast<size_t>(d));
        if (a[d] > 0) {
          for (int64_t q = 0; q < d; ++q) nc[q] = static_cast<float>(a[q] / a[d]);
        } else {
          if (far.empty()) {
            dist_r.resize(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) dist_r[i] = exact_dist(i, old[r].data() + lab[i * n_init + r] * d);
            far.resize(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) far[i] = i;
            std::stable_sort(far.begin(), far.end(), [&](int64_t x, int64_t y) { return dist_r[x] < dist_r[y]; });
          }
          const int64_t p = far.back();
          far.pop_back();
          std::copy(km.X.row(p), km.X.row(p) + d, nc.begin());
        }
        for (int64_t q = 0; q < d; ++q) {
          shift += (static_cast<double>(nc[q]) - cc[q]) * (static_cast<double>(nc[q]) - cc[q]);
          cc[q] = nc[q];
        }
      }
      // Move the bounds by the shifts: u += p(a), l -= the largest shift of another centre.
      std::vector<double> ps(static_cast<size_t>(K));
      int64_t top = 0;
      for (int64_t c = 0; c < K; ++c) {
        ps[c] = exact_dist_c(old[r].data() + c * d, C[r].data() + c * d, d);
        if (ps[c] > ps[top]) top = c;
      }
      double second = 0;
      for (int64_t c = 0; c < K; ++c)
        if (c != top) second = std::max(second, ps[c]);
      parallel_for(km.ctx.threads(), km.rb.n_blocks(), [&](int64_t b) {
        for (int64_t i = km.rb.begin(b); i < km.rb.end(b); ++i) {
          const size_t e = static_cast<size_t>(i * n_init + r);
          const int32_t a = lab[e];
          // (rounded up / down by a float step so the float32 bounds stay bounds)
          ub[e] = std::nextafter(static_cast<float>(ub[e] + ps[a]), std::numeric_limits<float>::infinity());
          lb[e] = std::nextafter(static_cast<float>(lb[e] - (a == top ? second : ps[top])), -std::numeric_limits<float>::infinity());
        }
      });
      if (shift <= tol) done[r] = 1;
      all_done = all_done && done[r];
    }
    if (all_done) break;
  }
  assign(true);
  std::vector<double> inertia;
  reduce_blocks(km.ctx.threads(), km.rb.n_blocks(), static_cast<size_t>(n_init), inertia, [&](int64_t b, double* part) {
    for (int64_t i = km.rb.begin(b); i < km.rb.end(b); ++i)
      for (int r = 0; r < n_init; ++r) {
        const double t = exact_dist(i, C[r].data() + lab[i * n_init + r] * d);
        part[r] += t * t;
      }
  });
  int b = 0;
  for (int r = 1; r < n_init; ++r)
    if (inertia[r] < inertia[b]) b = r;
  return std::vector<double>(C[b].begin(), C[b].end());
}

std::vector<double> initial_centroids(const Context& ctx, const DenseD& X, int k, const HarmonyOptions& opt,
                                      std::mt19937_64& rng) {
  const int64_t n = X.n_rows, d = X.n_cols;
  KmData km{ctx, DenseF(n, d), RowBlocks::uniform(n, kKmeansCellsPerBlock), std::vector<float>(static_cast<size_t>(n))};
  for (size_t i = 0; i < X.data.size(); ++i) km.X.data[i] = static_cast<float>(X.data[i]);
  double tol = 0;  // sklearn: tol (1e-4) times the mean per-column variance
  for (int64_t q = 0; q < d; ++q) {
    double m = 0, m2 = 0;
    for (int64_t i = 0; i < n; ++i) m += X(i, q);
    m /= n;
    for (int64_t i = 0; i < n; ++i) m2 += (X(i, q) - m) * (X(i, q) - m);
    tol += m2 / n;
  }
  tol = tol / d * 1e-4;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t q = 0; q < d; ++q) s += static_cast<double>(km.X(i, q)) * km.X(i, q);
    km.xsq[i] = static_cast<float>(s);
  }
  const int n_init = std::max(1, opt.kmeans_n_init);
  std::vector<std::mt19937_64> rngs;
  for (int r = 0; r < n_init; ++r) rngs.emplace_back(rng());
  std::vector<std::vector<float>> C = kmeans_pp(km, k, n_init, rngs);
  return lloyd_best(km, k, C, opt.kmeans_max_iter, tol);
}

// ---- Harmony proper
struct State {
  const Context& ctx;
  int64_t N, d, K, B, V;             // cells, dims, clusters, one-hot columns, batch variables
  std::vector<int32_t> col;          // N x V: each cell's one-hot column per variable
  std::vector<double> Pr, theta, lamb, sigma;
  RowBlocks rb;
  DenseD Zorig, Zcorr, Zcos;         // N x d
  std::vector<double> Y;             // K x d centroids
  std::vector<double> R, dist;       // N x K
  std::vector<double> E, O;          // K x B
  std::vector<double> logc;          // per cell: log R = -dist/sigma + log P[blk] - logc (V == 1)
  std::vector<int32_t> cell_block;   // per cell: its R-update block in the last update
  std::vector<double> logP;          // per R-update block: K x B log penalties used
  std::vector<double> obj_kmeans, obj_harmony;
  std::mt19937_64 rng;
};

// Y = normalize(R^T Zcos), dist = 2 (1 - Zcos Y^T).
void update_centroids(State& s) {
  const int64_t K = s.K, d = s.d;
  reduce_blocks(s.ctx.threads(), s.rb.n_blocks(), static_cast<size_t>(K * d), s.Y, [&](int64_t b, double* p) {
    const int64_t r0 = s.rb.begin(b), m = s.rb.end(b) - r0;
    linalg::dgemm(true, false, K, d, m, 1.0, s.R.data() + r0 * K, K, s.Zcos.row(r0), d, 0.0, p, d);
  });
  normalize_rows(s.Y.data(), K, d);
}
void update_dist(State& s) {
  const int64_t K = s.K, d = s.d;
  parallel_for(s.ctx.threads(), s.rb.n_blocks(), [&](int64_t b) {
    const int64_t r0 = s.rb.begin(b), m = s.rb.end(b) - r0;
    double* o = s.dist.data() + r0 * K;
    linalg::dgemm(false, true, m, K, d, -2.0, s.Zcos.row(r0), d, s.Y.data(), d, 0.0, o, K);
    for (int64_t k = 0; k < m * K; ++k) o[k] += 2.0;
  });
}

// E = outer(sum_i R_i, Pr), O = R Phi^T (fresh, block-ordered sums).
void fresh_EO(State& s) {
  const int64_t K = s.K, B = s.B;
  std::vector<double> acc;
  reduce_blocks(s.ctx.threads(), s.rb.n_blocks(), static_cast<size_t>(K + K * B), acc, [&](int64_t b, double* p) {
    for (int64_t i = s.rb.begin(b); i < s.rb.end(b); ++i) {
      const double* r = s.R.data() + i * K;
      for (int64_t k = 0; k < K; ++k) p[k] += r[k];
      for (int64_t v = 0; v < s.V; ++v) {
        const int32_t c = s.col[i * s.V + v];
        for (int64_t k = 0; k < K; ++k) p[K + k * B + c] += r[k];
      }
    }
  });
  s.E.assign(static_cast<size_t>(K * B), 0.0);
  s.O.assign(acc.begin() + K, acc.end());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < B; ++c) s.E[k * B + c] = acc[k] * s.Pr[c];
}

// harmonypy's compute_objective: k-means error + sigma-weighted entropy + diversity cross entropy.
void compute_objective(State& s) {
  const int64_t K = s.K, B = s.B;
  std::vector<double> lq(static_cast<size_t>(K * B));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < B; ++c) lq[k * B + c] = s.theta[c] * std::log((s.O[k * B + c] + 1) / (s.E[k * B + c] + 1));
  std::vector<double> acc;
  reduce_blocks(s.ctx.threads(), s.rb.n_blocks(), 3, acc, [&](int64_t b, double* p) {
    for (int64_t i = s.rb.begin(b); i < s.rb.end(b); ++i) {
      const double* r = s.R.data() + i * K;
      const double* dd = s.dist.data() + i * K;
      double err = 0, ent = 0, cross = 0;
      if (s.V == 1 && !s.cell_block.empty()) {
        const int32_t c = s.col[i];
        const double* lp = s.logP.data() + static_cast<int64_t>(s.cell_block[i]) * K * B;
        for (int64_t k = 0; k < K; ++k) {
          err += r[k] * dd[k];
          const double logr = -dd[k] / s.sigma[k] + lp[k * B + c] - s.logc[i];
          if (r[k] > 0) ent += s.sigma[k] * r[k] * logr;
          cross += r[k] * s.sigma[k] * lq[k * B + c];
        }
      } else {
        for (int64_t k = 0; k < K; ++k) {
          err += r[k] * dd[k];
          if (r[k] > 0) ent += s.sigma[k] * r[k] * std::log(r[k]);
          double w = 0;
          for (int64_t v = 0; v < s.V; ++v) w += lq[k * B + s.col[i * s.V + v]];
          cross += r[k] * s.sigma[k] * w;
        }
      }
      p[0] += err;
      p[1] += ent;
      p[2] += cross;
    }
  });
  s.obj_kmeans.push_back(acc[0] + acc[1] + acc[2]);
}

// harmonypy's update_R: cells in ceil(1/block_size) blocks of a fresh random order; each block is
// taken out of E and O, its R recomputed with the diversity penalty ((E + 1) / (O + 1))^theta,
// and put back. Inside a block, chunks of cells run in parallel; their sums are added in order.
void update_R(State& s, double block_size) {
  const int64_t N = s.N, K = s.K, B = s.B, V = s.V;
  std::vector<int64_t> order(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) order[i] = i;
  for (int64_t i = N - 1; i > 0; --i) {  // Fisher-Yates, as numpy's shuffle
    const int64_t j = static_cast<int64_t>(uniform01(s.rng) * static_cast<double>(i + 1));
    std::swap(order[i], order[std::min(j, i)]);
  }
  const int64_t nb = static_cast<int64_t>(std::ceil(1.0 / block_size - 1e-12));
  const int64_t nblocks = std::min<int64_t>(std::max<int64_t>(nb, 1), N);
  s.logP.assign(static_cast<size_t>(nblocks * K * B), 0.0);
  s.cell_block.assign(static_cast<size_t>(N), 0);
  s.logc.assign(static_cast<size_t>(N), 0.0);
  const int64_t width = K + K * B;
  std::vector<double> P(static_cast<size_t>(K * B)), lp(static_cast<size_t>(K * B)), PT(static_cast<size_t>(K * B));
  std::vector<double> inv_sigma(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) inv_sigma[k] = 1.0 / s.sigma[k];
  int64_t start = 0;
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    // numpy.array_split: the first N % nblocks blocks hold one cell more.
    const int64_t len = N / nblocks + (blk < N % nblocks ? 1 : 0);
    const int64_t* cells = order.data() + start;
    start += len;
    const int64_t nch = (len + kChunk - 1) / kChunk;
    // (chunk partials: [sum of R (K)][R Phi^T by column, B x K: a cell's adds are contiguous])
    auto sums = [&](std::vector<double>& acc) {  // sum of R and R Phi^T over the block's cells
      acc.assign(static_cast<size_t>(width), 0.0);
      std::vector<double> part(static_cast<size_t>(nch * width), 0.0);
      parallel_for(s.ctx.threads(), nch, [&](int64_t ch) {
        double* p = part.data() + ch * width;
        for (int64_t t = ch * kChunk; t < std::min(len, (ch + 1) * kChunk); ++t) {
          const int64_t i = cells[t];
          const double* r = s.R.data() + i * K;
          for (int64_t k = 0; k < K; ++k) p[k] += r[k];
          for (int64_t v = 0; v < V; ++v) {
            const int32_t c = s.col[i * V + v];
            for (int64_t k = 0; k < K; ++k) p[K + c * K + k] += r[k];
          }
        }
      });
      for (int64_t ch = 0; ch < nch; ++ch)
        for (int64_t w = 0; w < width; ++w) acc[w] += part[ch * width + w];
    };
    std::vector<double> acc;
    sums(acc);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < B; ++c) {
        s.E[k * B + c] -= acc[k] * s.Pr[c];
        s.O[k * B + c] -= acc[K + c * K + k];
      }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < B; ++c) {
        P[k * B + c] = std::pow((s.E[k * B + c] + 1) / (s.O[k * B + c] + 1), s.theta[c]);
        lp[k * B + c] = std::log(P[k * B + c]);
      }
    std::copy(lp.begin(), lp.end(), s.logP.begin() + blk * K * B);
    // Penalties by column (B x K), so a cell's penalty row is contiguous.
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < B; ++c) PT[c * K + k] = P[k * B + c];
    std::vector<double> part(static_cast<size_t>(nch * width), 0.0);  // the new R's sums, per chunk
    parallel_for(s.ctx.threads(), nch, [&](int64_t ch) {
      std::vector<double> u(static_cast<size_t>(K)), pen(static_cast<size_t>(K));
      double* ps = part.data() + ch * width;
      for (int64_t t = ch * kChunk; t < std::min(len, (ch + 1) * kChunk); ++t) {
        const int64_t i = cells[t];
        double* r = s.R.data() + i * K;
        const double* dd = s.dist.data() + i * K;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < K; ++k) {
          u[k] = -dd[k] * inv_sigma[k];
          mx = std::max(mx, u[k]);
        }
        if (V == 1) {
          std::copy(PT.data() + s.col[i] * K, PT.data() + (s.col[i] + 1) * K, pen.begin());
        } else {
          std::fill(pen.begin(), pen.end(), 0.0);
          for (int64_t v = 0; v < V; ++v) {
            const double* pc = PT.data() + s.col[i * V + v] * K;
            for (int64_t k = 0; k < K; ++k) pen[k] += pc[k];
          }
        }
        const double tot = penalised_exp(u.data(), mx, pen.data(), r, K);
        const double inv = 1.0 / tot;
        for (int64_t k = 0; k < K; ++k) {
          r[k] *= inv;
          ps[k] += r[k];
        }
        for (int64_t v = 0; v < V; ++v) {
          const int32_t c = s.col[i * V + v];
          for (int64_t k = 0; k < K; ++k) ps[K + c * K + k] += r[k];
        }
        s.logc[i] = mx + std::log(tot);
        s.cell_block[i] = static_cast<int32_t>(blk);
      }
    });
    acc.assign(static_cast<size_t>(width), 0.0);
    for (int64_t ch = 0; ch < nch; ++ch)
      for (int64_t w = 0; w < width; ++w) acc[w] += part[ch * width + w];
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < B; ++c) {
        s.E[k * B + c] += acc[k] * s.Pr[c];
        s.O[k * B + c] += acc[K + c * K + k];
      }
  }
}

bool kmeans_converged(const State& s, double eps) {
  const size_t okl = s.obj_kmeans.size();
  double o = 0, n = 0;
  for (int i = 0; i < kWindow; ++i) {
    o += s.obj_kmeans[okl - 2 - i];
    n += s.obj_kmeans[okl - 1 - i];
  }
  return std::fabs(o - n) / std::fabs(o) < eps;
}

int cluster(State& s, const HarmonyOptions& opt) {
  // (harmonypy first recomputes dist for the new Zcos; the loop below overwrites it unread.)
  int i = 0;
  for (; i < opt.max_iter_kmeans; ++i) {
    update_centroids(s);
    update_dist(s);
    update_R(s, opt.block_size);
    compute_objective(s);
    if (i > kWindow && kmeans_converged(s, opt.epsilon_cluster)) break;
  }
  if (i == opt.max_iter_kmeans) i = opt.max_iter_kmeans - 1;  // python's loop variable
  s.obj_harmony.push_back(s.obj_kmeans.back());
  return i;
}

// harmonypy's moe_correct_ridge: per cluster k, W_k = (Phi_Rk Phi_moe^T + lamb)^-1 Phi_Rk Z_orig^T
// with Phi_Rk = Phi_moe diag(R_k), the intercept row of W_k zeroed, and Z_corr = Z_orig -
// sum_k W_k^T Phi_Rk. Phi_moe's columns are one-hot per variable plus the intercept, so the
// (B+1) x (B+1) systems and Phi_Rk Z^T come from per-batch sums.
void moe_correct_ridge(State& s) {
  const int64_t K = s.K, B = s.B, V = s.V, d = s.d, P1 = B + 1;
  // Per cluster: x_k (P1 x P1) and rhs_k (P1 x d), as block-ordered sums over cells. Inside a block
  // the cells are grouped by batch column (per variable) and each group's R^T Z is one GEMM.
  const size_t width = static_cast<size_t>(K * P1 * P1 + K * P1 * d);
  std::vector<double> acc;
  reduce_blocks(s.ctx.threads(), s.rb.n_blocks(), width, acc, [&](int64_t b, double* p) {
    double* X = p;
    double* rhs = p + K * P1 * P1;
    const int64_t r0 = s.rb.begin(b), m = s.rb.end(b) - r0;
    std::vector<int64_t> act(static_cast<size_t>(V + 1));
    for (int64_t i = r0; i < r0 + m; ++i) {
      const double* r = s.R.data() + i * K;
      act[0] = 0;
      for (int64_t v = 0; v < V; ++v) act[v + 1] = 1 + s.col[i * V + v];
      for (int64_t k = 0; k < K; ++k) {
        double* xk = X + k * P1 * P1;
        for (int64_t a = 0; a <= V; ++a)
          for (int64_t c = 0; c <= V; ++c) xk[act[a] * P1 + act[c]] += r[k];
      }
    }
    // Intercept row: R^T Z over the block; row 1 + c: over the block's cells of column c.
    linalg::dgemm(true, false, K, d, m, 1.0, s.R.data() + r0 * K, K, s.Zorig.row(r0), d, 1.0, rhs, P1 * d);
    std::vector<double> rg, zg;
    std::vector<int64_t> order(static_cast<size_t>(m));
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t t = 0; t < m; ++t) order[t] = r0 + t;
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s.col[x * V + v] < s.col[y * V + v]; });
      for (int64_t t0 = 0; t0 < m;) {
        const int32_t c = s.col[order[t0] * V + v];
        int64_t t1 = t0;
        while (t1 < m && s.col[order[t1] * V + v] == c) ++t1;
        const int64_t g = t1 - t0;
        rg.resize(static_cast<size_t>(g * K));
        zg.resize(static_cast<size_t>(g * d));
        for (int64_t t = 0; t < g; ++t) {
          std::copy(s.R.data() + order[t0 + t] * K, s.R.data() + (order[t0 + t] + 1) * K, rg.begin() + t * K);
          std::copy(s.Zorig.row(order[t0 + t]), s.Zorig.row(order[t0 + t]) + d, zg.begin() + t * d);
        }
        linalg::dgemm(true, false, K, d, g, 1.0, rg.data(), K, zg.data(), d, 1.0, rhs + (1 + c) * d, P1 * d);
        t0 = t1;
      }
    }
  });
  // W: K x B x d (the intercept row dropped), then per column c the K x d matrix Wc[k] = W[k, c].
  std::vector<double> W(static_cast<size_t>(K * B * d), 0.0), x, inv;
  for (int64_t k = 0; k < K; ++k) {
    x.assign(acc.begin() + k * P1 * P1, acc.begin() + (k + 1) * P1 * P1);
    for (int64_t c = 0; c < B; ++c) x[(c + 1) * P1 + (c + 1)] += s.lamb[c];
    invert_small(x, P1, inv);
    const double* rhs = acc.data() + K * P1 * P1 + k * P1 * d;
    for (int64_t a = 1; a < P1; ++a) {
      double* w = W.data() + (k * B + (a - 1)) * d;
      for (int64_t c = 0; c < P1; ++c) {
        const double f = inv[a * P1 + c];
        for (int64_t q = 0; q < d; ++q) w[q] += f * rhs[c * d + q];
      }
    }
  }
  // Z_corr_i = Z_orig_i - sum_v R_i W[:, col(i, v)]: per block and column, one GEMM of the
  // column's cells (variables in order, so the sum's order is fixed); Zcos = Z_corr / |Z_corr|.
  parallel_for(s.ctx.threads(), s.rb.n_blocks(), [&](int64_t b) {
    const int64_t r0 = s.rb.begin(b), m = s.rb.end(b) - r0;
    std::copy(s.Zorig.row(r0), s.Zorig.row(r0) + m * d, s.Zcorr.row(r0));
    std::vector<double> rg, out;
    std::vector<int64_t> order(static_cast<size_t>(m));
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t t = 0; t < m; ++t) order[t] = r0 + t;
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s.col[x * V + v] < s.col[y * V + v]; });
      for (int64_t t0 = 0; t0 < m;) {
        const int32_t c = s.col[order[t0] * V + v];
        int64_t t1 = t0;
        while (t1 < m && s.col[order[t1] * V + v] == c) ++t1;
        const int64_t g = t1 - t0;
        rg.resize(static_cast<size_t>(g * K));
        out.resize(static_cast<size_t>(g * d));
        for (int64_t t = 0; t < g; ++t)
          std::copy(s.R.data() + order[t0 + t] * K, s.R.data() + (order[t0 + t] + 1) * K, rg.begin() + t * K);
        linalg::dgemm(false, false, g, d, K, 1.0, rg.data(), K, W.data() + c * d, B * d, 0.0, out.data(), d);
        for (int64_t t = 0; t < g; ++t) {
          double* zc = s.Zcorr.row(order[t0 + t]);
          for (int64_t q = 0; q < d; ++q) zc[q] -= out[t * d + q];
        }
        t0 = t1;
      }
    }
    for (int64_t i = r0; i < r0 + m; ++i) {
      double* zs = s.Zcos.row(i);
      std::copy(s.Zcorr.row(i), s.Zcorr.row(i) + d, zs);
      normalize_rows(zs, 1, d);
    }
  });
}

}  // namespace

namespace detail {

double harmony_exp_neg(double x) { return exp_neg(x); }

bool all_finite(const float* x, int64_t n, int threads) {
  constexpr int64_t kPiece = int64_t{1} << 20;
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<uint8_t> bad(static_cast<size_t>(pieces), 0);
  parallel_for(threads, pieces, [&](int64_t b) {
    for (int64_t e = b * kPiece; e < std::min(n, (b + 1) * kPiece); ++e)
      if (!std::isfinite(x[e])) bad[b] = 1;
  });
  return std::find(bad.begin(), bad.end(), 1) == bad.end();
}

HarmonySetup harmony_setup(const DenseD& Z, const std::vector<std::vector<int32_t>>& codes,
                           const std::vector<int32_t>& n_levels, const HarmonyOptions& opt) {
  bool finite = true;
  for (double v : Z.data) finite = finite && std::isfinite(v);
  return harmony_setup(Z.n_rows, Z.n_cols, finite, codes, n_levels, opt);
}

HarmonySetup harmony_setup(int64_t N, int64_t d, bool finite, const std::vector<std::vector<int32_t>>& codes,
                           const std::vector<int32_t>& n_levels, const HarmonyOptions& opt) {
  const char* where = "harmony_integrate";
  const int64_t V = static_cast<int64_t>(codes.size());
  if (V == 0) fail_input(where, "no batch key given");
  if (N < 2 || d < 1) fail_input(where, "the embedding has ", N, " cells x ", d, " dims; Harmony needs at least 2 cells");
  if (!finite) fail_input(where, "the embedding has missing or infinite values");
  if (!(opt.block_size > 0 && opt.block_size <= 1)) fail_input(where, "block_size=", opt.block_size, " must be in (0, 1]");
  if (!(opt.sigma > 0)) fail_input(where, "sigma=", opt.sigma, " must be positive");
  if (opt.max_iter_kmeans < 1) fail_input(where, "max_iter_kmeans must be at least 1");
  if (static_cast<int64_t>(n_levels.size()) != V) fail("harmony: ", n_levels.size(), " level counts for ", V, " batch keys");
  auto per_key = [&](const std::vector<double>& v, const char* name) {
    if (v.size() != 1 && static_cast<int64_t>(v.size()) != V)
      fail_input(where, name, " has ", v.size(), " values for ", V, " batch keys (give one, or one per key)");
    std::vector<double> out;
    for (int64_t k = 0; k < V; ++k)
      for (int32_t l = 0; l < n_levels[k]; ++l) out.push_back(v.size() == 1 ? v[0] : v[k]);
    return out;
  };
  HarmonySetup st;
  st.N = N, st.d = d, st.V = V;
  int64_t K = opt.nclust > 0 ? opt.nclust : std::min<int64_t>(static_cast<int64_t>(std::nearbyint(N / 30.0)), 100);
  K = std::max<int64_t>(K, 1);
  if (K > N) fail_input(where, "nclust=", K, " exceeds the ", N, " cells");
  st.K = K;
  std::vector<int32_t> offset(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) {
    offset[v] = static_cast<int32_t>(st.B);
    st.B += n_levels[v];
  }
  st.col.resize(static_cast<size_t>(N * V));
  std::vector<double> nb(static_cast<size_t>(st.B), 0.0);
  for (int64_t v = 0; v < V; ++v) {
    if (static_cast<int64_t>(codes[v].size()) != N) fail("harmony: ", codes[v].size(), " batch codes for ", N, " cells");
    for (int64_t i = 0; i < N; ++i) {
      const int32_t c = codes[v][i];
      if (c < 0 || c >= n_levels[v]) fail("harmony: batch code out of range");
      st.col[i * V + v] = offset[v] + c;
      nb[offset[v] + c] += 1;
    }
  }
  st.theta = per_key(opt.theta, "theta");
  st.lamb = per_key(opt.lamb, "lamb");
  st.Pr.resize(nb.size());
  for (size_t c = 0; c < nb.size(); ++c) st.Pr[c] = nb[c] / static_cast<double>(N);
  if (opt.tau > 0)
    for (size_t c = 0; c < nb.size(); ++c) {
      const double q = nb[c] / (static_cast<double>(K) * opt.tau);
      st.theta[c] *= 1 - std::exp(-q * q);
    }
  return st;
}

}  // namespace detail

HarmonyResult harmony(const Context& ctx, const DenseD& Z, const std::vector<std::vector<int32_t>>& codes,
                      const std::vector<int32_t>& n_levels, const HarmonyOptions& opt) {
  detail::HarmonySetup st = detail::harmony_setup(Z, codes, n_levels, opt);
  const int64_t N = st.N, d = st.d, K = st.K, V = st.V;
  State s{ctx, N, d, K, st.B, V, std::move(st.col), std::move(st.Pr), std::move(st.theta), std::move(st.lamb), {}, RowBlocks::uniform(N, kCellsPerBlock), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, std::mt19937_64(opt.random_state)};
  s.sigma.assign(static_cast<size_t>(K), opt.sigma);
  s.Zorig = Z;
  s.Zcorr = Z;
  // Z_cos = Z / max over dims (per cell, as harmonypy's Z_orig.max(axis=0)), then unit length.
  s.Zcos = Z;
  for (int64_t i = 0; i < N; ++i) {
    double* z = s.Zcos.row(i);
    const double mx = *std::max_element(z, z + d);
    for (int64_t q = 0; q < d; ++q) z[q] /= mx;
    normalize_rows(z, 1, d);
  }
  linalg::SingleThreadedBlas single;
  s.Y = initial_centroids(ctx, s.Zcos, static_cast<int>(K), opt, s.rng);
  normalize_rows(s.Y.data(), K, d);
  s.dist.resize(static_cast<size_t>(N * K));
  s.R.resize(static_cast<size_t>(N * K));
  update_dist(s);
  parallel_for(ctx.threads(), s.rb.n_blocks(), [&](int64_t b) {
    for (int64_t i = s.rb.begin(b); i < s.rb.end(b); ++i) {
      double* r = s.R.data() + i * K;
      const double* dd = s.dist.data() + i * K;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < K; ++k) mx = std::max(mx, -dd[k] / s.sigma[k]);
      double tot = 0;
      for (int64_t k = 0; k < K; ++k) tot += (r[k] = exp_neg(-dd[k] / s.sigma[k] - mx));
      for (int64_t k = 0; k < K; ++k) r[k] /= tot;
    }
  });
  fresh_EO(s);
  compute_objective(s);
  s.obj_harmony.push_back(s.obj_kmeans.back());
  HarmonyResult res;
  for (int it = 1; it <= opt.max_iter_harmony; ++it) {
    res.kmeans_rounds.push_back(cluster(s, opt));
    moe_correct_ridge(s);
    res.iterations = it;
    const double o = s.obj_harmony[s.obj_harmony.size() - 2], n = s.obj_harmony.back();
    if ((o - n) / std::fabs(o) < opt.epsilon_harmony) {
      res.converged = true;
      break;
    }
  }
  res.Z_corr = std::move(s.Zcorr);
  res.objective_harmony = s.obj_harmony;
  return res;
}

// dst[e] = src[e] converted, for e < n, in pieces of 2^20 values on the threads.
template <class S, class T>
void convert_on_threads(int threads, const S* src, T* dst, int64_t n) {
  constexpr int64_t kPiece = int64_t{1} << 20;
  parallel_for(threads, (n + kPiece - 1) / kPiece, [&](int64_t b) {
    for (int64_t e = b * kPiece; e < std::min(n, (b + 1) * kPiece); ++e) dst[e] = static_cast<T>(src[e]);
  });
}

namespace {

// harmony_integrate on ctx, or over gpus when they are several (harmony_gpus).
HarmonyResult integrate_on(const Context& ctx, const std::vector<Context*>& gpus, Dataset& d, const HarmonyOptions& opt) {
  const char* where = "harmony_integrate";
  const bool multi = gpus.size() > 1;
  EnvLaps laps("SCURRY_HARMONY_TIMES", where);  // the input, Harmony and the output
  if (opt.keys.empty()) fail_input(where, "no batch key given (e.g. --key sample)");
  auto it = d.obsm.find(opt.basis);
  if (it == d.obsm.end()) fail_input(where, "obsm has no '", opt.basis, "' (run PCA first)");
  if (it->second.n_rows() != d.n_obs())
    fail_input(where, "obsm['", opt.basis, "'] has ", it->second.n_rows(), " rows for ", d.n_obs(), " cells");
  std::vector<std::vector<int32_t>> codes;
  std::vector<int32_t> levels;
  for (const auto& k : opt.keys) {
    ObsGroups g = obs_groups(d.obs, k, where);
    codes.push_back(std::move(g.codes));
    levels.push_back(g.n());
  }
  laps.lap("batches");
  const DenseF* zf = std::get_if<DenseF>(&it->second.m);
  DenseF out;
  HarmonyResult res;
  if (zf && (multi || ctx.backend() == Backend::cuda)) {  // float32 X_pca on the GPU: widened and narrowed on the device
    res = multi ? harmony_gpus(gpus, *zf, codes, levels, opt, out) : harmony_gpu(ctx, *zf, codes, levels, opt, out);
    laps.lap("harmony");
  } else {
    DenseD Z;
    if (zf) {  // X_pca as written: float32, widened on the threads
      Z = DenseD(zf->n_rows, zf->n_cols);
      convert_on_threads(ctx.threads(), zf->data.data(), Z.data.data(), static_cast<int64_t>(Z.data.size()));
    } else {
      Z = to_dense_d(it->second);
    }
    laps.lap("embedding");
    res = multi                             ? harmony_gpus(gpus, Z, codes, levels, opt)
          : ctx.backend() == Backend::cuda ? harmony_gpu(ctx, Z, codes, levels, opt)
                                           : harmony(ctx, Z, codes, levels, opt);
    laps.lap("harmony");
    out = DenseF(res.Z_corr.n_rows, res.Z_corr.n_cols);
    convert_on_threads(ctx.threads(), res.Z_corr.data.data(), out.data.data(), static_cast<int64_t>(out.data.size()));
  }
  d.obsm[opt.adjusted_basis] = Matrix(std::move(out), DType::f32);
  laps.lap("result");
  return res;
}

}  // namespace

HarmonyResult harmony_integrate(const Context& ctx, Dataset& d, const HarmonyOptions& opt) {
  return integrate_on(ctx, {}, d, opt);
}

HarmonyResult harmony_integrate(const std::vector<Context*>& ctxs, Dataset& d, const HarmonyOptions& opt) {
  if (ctxs.empty() || !ctxs[0]) fail_input("harmony_integrate (gpus)", "no GPU context given");
  return integrate_on(*ctxs[0], ctxs, d, opt);
}

}  // namespace scurry
