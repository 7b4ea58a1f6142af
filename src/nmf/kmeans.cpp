// scurry: k-means (k-means++ + Lloyd) and the silhouette score (see kmeans.hpp).
#include "nmf/kmeans.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "pp/linalg.hpp"

namespace scurry {

namespace {

constexpr int64_t kPointsPerBlock = 64;
constexpr int64_t kDistanceChunk = 256;
constexpr int64_t kColumnsPerBlock = 256;

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double sqdist(const double* a, const double* b, int64_t d) {
  double s = 0;
  for (int64_t q = 0; q < d; ++q) {
    const double t = a[q] - b[q];
    s += t * t;
  }
  return s;
}

std::vector<double> row_sqnorms(const DenseD& X) {
  std::vector<double> sq(X.n_rows);
  for (int64_t i = 0; i < X.n_rows; ++i) {
    double s = 0;
    for (int64_t q = 0; q < X.n_cols; ++q) s += X(i, q) * X(i, q);
    sq[i] = s;
  }
  return sq;
}

// Squared distances of every point to the rows of Y (|x|^2 - 2 x.y + |y|^2, clamped at 0, as
// sklearn's euclidean_distances(squared=True)) by one single-threaded GEMM per fixed block of
// points: body(b, i, row) gets point i's (of block b) distances to Y's rows; blocks run in parallel,
// one thread each. The values do not depend on the thread count.
template <class Body>
void block_sqdist(const Context& ctx, const DenseD& X, const std::vector<double>& xsq, const DenseD& Y,
                  const std::vector<double>& ysq, const Body& body) {
  const int64_t n = X.n_rows, d = X.n_cols, m = Y.n_rows;
  const RowBlocks rb = RowBlocks::uniform(n, kPointsPerBlock);
  linalg::SingleThreadedBlas st;
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    const int64_t r0 = rb.begin(b), r1 = rb.end(b);
    std::vector<double> G(static_cast<size_t>(r1 - r0) * m);
    linalg::dgemm(false, true, r1 - r0, m, d, -2.0, X.row(r0), d, Y.data.data(), d, 0.0, G.data(), m);
    for (int64_t i = r0; i < r1; ++i) {
      double* row = G.data() + (i - r0) * m;
      for (int64_t c = 0; c < m; ++c) row[c] = std::max(0.0, row[c] + xsq[i] + ysq[c]);
      body(b, i, row);
    }
  });
}

// Labels and squared distances to the nearest centre (the first on ties); returns the inertia
// (block-ordered sum).
double assign(const Context& ctx, const DenseD& X, const std::vector<double>& xsq, const DenseD& C,
              std::vector<int>& labels, std::vector<double>& dist) {
  const int64_t n = X.n_rows, k = C.n_rows;
  labels.resize(n);
  dist.resize(n);
  const std::vector<double> csq = row_sqnorms(C);
  const int64_t nb = RowBlocks::uniform(n, kPointsPerBlock).n_blocks();
  std::vector<double> part(nb, 0.0);
  block_sqdist(ctx, X, xsq, C, csq, [&](int64_t b, int64_t i, const double* row) {
    double best = row[0];
    int bl = 0;
    for (int64_t c = 1; c < k; ++c)
      if (row[c] < best) best = row[c], bl = static_cast<int>(c);
    labels[i] = bl;
    dist[i] = best;
    part[b] += best;
  });
  double tot = 0;
  for (const double v : part) tot += v;
  return tot;
}

// Greedy k-means++ as sklearn's _kmeans_plusplus: per new centre, 2 + log(k) candidates drawn in
// proportion to the current squared distances, the one leaving the least potential kept. The
// candidates' distances are one GEMM per block of points, their potentials block-ordered sums.
DenseD kmeans_pp(const Context& ctx, const DenseD& X, const std::vector<double>& xsq, int k, std::mt19937_64& rng) {
  const int64_t n = X.n_rows, d = X.n_cols;
  DenseD C(k, d);
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(k)));
  const int64_t nb = RowBlocks::uniform(n, kPointsPerBlock).n_blocks();
  const int64_t first = std::min<int64_t>(static_cast<int64_t>(uniform01(rng) * n), n - 1);
  std::copy(X.row(first), X.row(first) + d, C.row(0));
  std::vector<double> closest(n);
  double pot = 0;
  {
    DenseD Y(1, d);
    std::copy(X.row(first), X.row(first) + d, Y.row(0));
    std::vector<double> part(nb, 0.0);
    block_sqdist(ctx, X, xsq, Y, {xsq[first]}, [&](int64_t b, int64_t i, const double* row) {
      closest[i] = row[0];
      part[b] += row[0];
    });
    for (const double v : part) pot += v;
  }
  std::vector<double> cum(n), cand(static_cast<size_t>(trials) * n), part(static_cast<size_t>(nb) * trials);
  DenseD Y(trials, d);
  std::vector<double> ysq(trials);
  std::vector<int64_t> ids(trials);
  for (int c = 1; c < k; ++c) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) cum[i] = (s += closest[i]);
    for (int t = 0; t < trials; ++t) {
      const double v = uniform01(rng) * pot;
      const int64_t id = std::lower_bound(cum.begin(), cum.end(), v) - cum.begin();  // numpy searchsorted (left)
      ids[t] = std::min(id, n - 1);
      std::copy(X.row(ids[t]), X.row(ids[t]) + d, Y.row(t));
      ysq[t] = xsq[ids[t]];
    }
    std::fill(part.begin(), part.end(), 0.0);
    block_sqdist(ctx, X, xsq, Y, ysq, [&](int64_t b, int64_t i, const double* row) {
      for (int t = 0; t < trials; ++t) {
        const double v = std::min(closest[i], row[t]);
        cand[static_cast<size_t>(t) * n + i] = v;
        part[static_cast<size_t>(b) * trials + t] += v;
      }
    });
    double best_pot = std::numeric_limits<double>::infinity();
    int best = 0;
    for (int t = 0; t < trials; ++t) {
      double cp = 0;
      for (int64_t b = 0; b < nb; ++b) cp += part[static_cast<size_t>(b) * trials + t];
      if (cp < best_pot) best_pot = cp, best = t;
    }
    std::copy(X.row(ids[best]), X.row(ids[best]) + d, C.row(c));
    std::copy(cand.begin() + static_cast<size_t>(best) * n, cand.begin() + static_cast<size_t>(best + 1) * n, closest.begin());
    pot = best_pot;
  }
  return C;
}

}  // namespace

KMeansResult kmeans(const Context& ctx, const DenseD& X, int k, const KMeansOptions& opt) {
  const int64_t n = X.n_rows, d = X.n_cols;
  if (k < 1 || k > n) fail_input("k-means", "cannot make ", k, " clusters of ", n, " points");
  // sklearn's _tolerance: tol * mean of the per-column variances (each column summed in row order).
  std::vector<double> mean(d, 0.0), m2(d, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < d; ++q) mean[q] += X(i, q);
  for (int64_t q = 0; q < d; ++q) mean[q] /= n;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < d; ++q) m2[q] += (X(i, q) - mean[q]) * (X(i, q) - mean[q]);
  double tol = 0;
  for (int64_t q = 0; q < d; ++q) tol += m2[q] / n;
  tol = d > 0 ? tol / d * opt.tol : 0;
  const std::vector<double> xsq = row_sqnorms(X);
  const RowBlocks cb = RowBlocks::uniform(d, kColumnsPerBlock);
  std::mt19937_64 rng(opt.seed);
  KMeansResult best;
  bool have = false;
  for (int run = 0; run < std::max(1, opt.n_init); ++run) {
    DenseD C = kmeans_pp(ctx, X, xsq, k, rng);
    std::vector<int> labels, prev;
    std::vector<double> dist;
    for (int it = 0; it < opt.max_iter; ++it) {
      assign(ctx, X, xsq, C, labels, dist);
      DenseD nc(k, d);
      std::vector<int64_t> cnt(k, 0);
      for (int64_t i = 0; i < n; ++i) ++cnt[labels[i]];
      // Centre sums by column blocks, each column summed in point order.
      parallel_for(ctx.threads(), cb.n_blocks(), [&](int64_t b) {
        const int64_t q0 = cb.begin(b), q1 = cb.end(b);
        for (int64_t i = 0; i < n; ++i) {
          double* c = nc.row(labels[i]);
          const double* x = X.row(i);
          for (int64_t q = q0; q < q1; ++q) c[q] += x[q];
        }
      });
      // Empty clusters: the points farthest from their centres (sklearn's relocation).
      std::vector<int64_t> far;
      size_t next_far = 0;
      for (int c = 0; c < k; ++c) {
        if (cnt[c] > 0) {
          for (int64_t q = 0; q < d; ++q) nc(c, q) /= static_cast<double>(cnt[c]);
        } else {
          if (far.empty()) {
            far.resize(n);
            for (int64_t i = 0; i < n; ++i) far[i] = i;
            std::stable_sort(far.begin(), far.end(), [&](int64_t a, int64_t b) { return dist[a] > dist[b]; });
          }
          const int64_t p = far[std::min(next_far++, far.size() - 1)];
          std::copy(X.row(p), X.row(p) + d, nc.row(c));
        }
      }
      double shift = 0;
      for (int c = 0; c < k; ++c) shift += sqdist(C.row(c), nc.row(c), d);
      C = std::move(nc);
      if (labels == prev) break;  // strict convergence
      prev = labels;
      if (shift <= tol) break;
    }
    const double inertia = assign(ctx, X, xsq, C, labels, dist);
    if (!have || inertia < best.inertia) {
      best.labels = labels;
      best.centers = C;
      best.inertia = inertia;
      have = true;
    }
  }
  return best;
}

void euclidean_rows(const DenseD& X, const std::vector<double>& sqnorm, int64_t r0, int64_t r1, std::vector<double>& out) {
  const int64_t n = X.n_rows, d = X.n_cols, m = r1 - r0;
  out.assign(static_cast<size_t>(m) * n, 0.0);
  if (m == 0) return;
  linalg::dgemm(false, true, m, n, d, -2.0, X.row(r0), d, X.data.data(), d, 0.0, out.data(), n);
  for (int64_t a = 0; a < m; ++a)
    for (int64_t b = 0; b < n; ++b) {
      double& v = out[a * n + b];
      v = (r0 + a == b) ? 0.0 : std::sqrt(std::max(0.0, v + sqnorm[r0 + a] + sqnorm[b]));
    }
}

double silhouette_score(const Context& ctx, const DenseD& X, const std::vector<int>& labels) {
  const int64_t n = X.n_rows;
  int nl = 0;
  for (const int l : labels) nl = std::max(nl, l + 1);
  std::vector<int64_t> size(nl, 0);
  for (const int l : labels) ++size[l];
  int used = 0;
  for (const auto s : size) used += s > 0;
  if (used < 2 || used > n - 1)
    fail_input("silhouette", "needs between 2 and n_points - 1 clusters (got ", used, " of ", n, " points)");
  const std::vector<double> sq = row_sqnorms(X);
  const RowBlocks rb = RowBlocks::uniform(n, kDistanceChunk);
  std::vector<double> s_of(n, 0.0);
  linalg::SingleThreadedBlas st;
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    std::vector<double> D, sums(nl);
    euclidean_rows(X, sq, rb.begin(b), rb.end(b), D);
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
      std::fill(sums.begin(), sums.end(), 0.0);
      const double* row = D.data() + (i - rb.begin(b)) * n;
      for (int64_t j = 0; j < n; ++j) sums[labels[j]] += row[j];
      const int li = labels[i];
      if (size[li] <= 1) {
        s_of[i] = 0;
        continue;
      }
      const double a = sums[li] / static_cast<double>(size[li] - 1);
      double bmin = std::numeric_limits<double>::infinity();
      for (int c = 0; c < nl; ++c)
        if (c != li && size[c] > 0) bmin = std::min(bmin, sums[c] / static_cast<double>(size[c]));
      const double den = std::max(a, bmin);
      s_of[i] = den > 0 ? (bmin - a) / den : 0.0;
    }
  });
  double s = 0;
  for (const double v : s_of) s += v;
  return s / static_cast<double>(n);
}

}  // namespace scurry
