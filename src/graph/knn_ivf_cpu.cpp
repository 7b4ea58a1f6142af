// scurry: IVF-Flat k-nearest-neighbour search on the CPU (knn.hpp's knn_ivf).
//
// The inverted-file stage of Jegou, Douze & Schmid 2011 ("Product quantization for nearest neighbor
// search", IEEE TPAMI 33(1)) without quantization, as FAISS's IndexIVFFlat, arranged for an all-kNN
// graph where every cell is a query:
//  1. k-means (Lloyd) on a seeded sample gives n_lists centroids; every cell joins the list of its
//     nearest centroid (its home list). The cells are ordered by list, so a list is a contiguous
//     block of positions.
//  2. Queries are taken in chunks of kQueryChunk cells in list order. A chunk finds each query's
//     n_probes nearest centroids (sgemm against the centroids) and scans, for each query, exactly
//     those lists: the probes are inverted (the chunk's queries of each list) and each list is
//     scored against its group of queries at once, so the FLOPs follow each query's own probes
//     while every list is read once per group. Every query first scans its own (home) list, then
//     the rest (bench/RESULTS.md section 66: the heaps fill with near candidates, so far fewer later
//     scores reach them; the kept candidates do not depend on the order). (Until section 65 a block of 256
//     queries of one home list scanned the union of its members' probes: ~74 lists a query at 1M
//     cells where its own are 32.) The chunks are cut from all cells and a query's result depends
//     only on its own probes, so a range of query rows gives those rows of the full search.
//  3. The scores ||y||^2 - 2 x.y in float32: where the CPU has AVX2 and FMA, six queries at a time
//     against tiles of 16 list rows held column-major (with AVX-512F four tiles at once, 24 registers,
//     the same FMA chain per score and so the same bits), the accumulators in registers and only the
//     scores at or below a query's current worst leaving them (scan_tiles: no score matrix is
//     written or read back); elsewhere (or with IvfCpuOptions::blas_scan) sgemm per group and a scan
//     of its output (knn_detail::scan_row). Per query, the best candidates are kept in a max-heap
//     and re-ranked by exact float64 distance (knn_detail::finish_row), as the exact search does.
// Every chunk is independent and writes only its own rows, the k-means sums are reduced in block
// order (reduce_blocks), BLAS runs single-threaded inside blocks, each score is one fixed chain of
// operations: the result is the same for any thread count.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.hpp"
#include "exec/parallel.hpp"
#include "graph/knn.hpp"
#include "graph/knn_detail.hpp"
#include "pp/linalg.hpp"

namespace scurry {
namespace {

using knn_detail::Cand;
using knn_detail::heap_worst;
using knn_detail::offer;
using knn_detail::scan_row;

constexpr int64_t kQueryChunk = 4096;    // queries (in list order) whose probes are inverted together
constexpr int64_t kQueryBlock = 256;     // queries scored by one sgemm (against centroids or a list)
constexpr int64_t kAssignBlock = 1024;   // points per task when assigning to centroids
constexpr int64_t kMinMargin = 8;        // extra float32 candidates re-ranked in float64 (at least)

// Auto n_probes: recall@15 >= 0.98 against the exact search on the embeddings of bench/RESULTS.md
// section 65 (sqrt(n_lists), at least 8).
int64_t auto_probes(int64_t n_lists) {
  return std::min<int64_t>(n_lists, std::max<int64_t>(8, static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(n_lists))))));
}

// The dot-product part of scores: out[i * nb + j] = -2 a_i.b_j (the list scans add bsq as they read).
void dots_m2(const float* a, int64_t na, const float* b, int64_t nb, int64_t d, float* out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(na), static_cast<int>(nb), static_cast<int>(d),
              -2.0f, a, static_cast<int>(d), b, static_cast<int>(d), 0.0f, out, static_cast<int>(nb));
}

// Scores of rows a[0..na) against rows b[0..nb) (both d floats): out[i * nb + j] = bsq[j] - 2 a_i.b_j.
void scores(const float* a, int64_t na, const float* b, int64_t nb, const float* bsq, int64_t d, float* out) {
  dots_m2(a, na, b, nb, d, out);
  for (int64_t i = 0; i < na; ++i) {
    float* o = out + i * nb;
    for (int64_t j = 0; j < nb; ++j) o[j] += bsq[j];
  }
}

// Squared norm of d floats, summed in float64 in column order, rounded to float32.
float squared_norm(const float* y, int64_t d) {
  double s = 0;
  for (int64_t j = 0; j < d; ++j) s += static_cast<double>(y[j]) * y[j];
  return static_cast<float>(s);
}

// Index of the smallest score of each row of a (na x nb) block (first one on ties).
// The row's minimum first (a vectorised reduction: min is exact in any order), then its first index.
void argmin_rows(const float* s, int64_t na, int64_t nb, int32_t* out) {
  for (int64_t i = 0; i < na; ++i) {
    const float* r = s + i * nb;
    float lo = r[0];
    for (int64_t j = 1; j < nb; ++j) lo = r[j] < lo ? r[j] : lo;
    int64_t best = 0;
    while (best < nb - 1 && r[best] != lo) ++best;  // (scores are finite: check_input refuses NaN and inf)
    out[i] = static_cast<int32_t>(best);
  }
}

// The lists' rows in tiles of 16 for the fused scan (scan_tiles): tile t holds 16 rows stored column-
// major (v[(t * d + j) * 16 + r] is row r's column j), their float32 squared norms (padding: +inf) and
// cell indices (padding: -1); list c's tiles are [off[c], off[c + 1]).
struct Tiles {
  std::vector<float> v, sq;
  std::vector<int32_t> id;
  std::vector<int64_t> off;
};

using Heap = std::vector<std::pair<float, int32_t>>;

// Whether this CPU runs scan_tiles (AVX2 and FMA), and scan_tiles_512 (AVX-512F as well).
bool fused_scan_available() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}
int g_scan_isa = -1;  // knn_ivf_scan_isa (tests): -1 the best the CPU has, 0 AVX2 and FMA only
bool scan_512_available() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool ok = fused_scan_available() && __builtin_cpu_supports("avx512f");
  return ok && g_scan_isa != 0;
#else
  return false;
#endif
}

#if defined(__x86_64__) || defined(__i386__)
// Offers the scores sc[r] of tile t's rows r in `mask` (those at or below `worst`, in row order) to
// query h's heap, but its own cell (self) and the padding; worst follows the heap.
inline void offer_masked(const float* sc, uint32_t mask, const Tiles& T, int64_t t, int32_t self, Heap& h,
                         int64_t n_cand, float& worst) {
  while (mask != 0) {
    const int r = __builtin_ctz(mask);
    mask &= mask - 1;
    const int32_t id = T.id[t * 16 + r];
    if (id < 0 || id == self || !(sc[r] <= worst)) continue;
    offer(h, n_cand, std::pair<float, int32_t>(sc[r], id), worst);
  }
}

// lo += x[0] * y0, hi += x[0] * y1 (one query's column against a tile's 16 rows), inlined into scan_tiles.
__attribute__((target("avx2,fma"), always_inline)) inline void fma_row(const float* x, __m256 y0, __m256 y1, __m256& lo,
                                                                      __m256& hi) {
  const __m256 b = _mm256_broadcast_ss(x);
  lo = _mm256_fmadd_ps(b, y0, lo);
  hi = _mm256_fmadd_ps(b, y1, hi);
}

// Scores of six queries (rows q[0..5], d floats each) against the tiles [t0, t1), ||y||^2 - 2 x.y, each
// dot product accumulated over the columns in order by one FMA chain per lane (the same bits for any
// thread count), kept in registers: a query's heap sees only the scores at or below its current worst,
// in row order, as scan_row offers them; its own cell (self[u]) and the padding are never offered.
__attribute__((target("avx2,fma"))) void scan_tiles(const float* const* q, int64_t d, const Tiles& T, int64_t t0, int64_t t1,
                                                    const int32_t* self, Heap* const* heaps, int64_t n_cand) {
  const __m256 m2 = _mm256_set1_ps(-2.0f);
  alignas(32) float sc[16];
  for (int64_t t = t0; t < t1; ++t) {
    const float* y = T.v.data() + t * d * 16;
    // Named accumulators (an array indexed in the loop below would live on the stack): 12 chains of
    // FMAs, enough to cover the FMA latency.
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00,
           a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    for (int64_t j = 0; j < d; ++j) {
      const __m256 y0 = _mm256_loadu_ps(y + j * 16), y1 = _mm256_loadu_ps(y + j * 16 + 8);
      fma_row(q[0] + j, y0, y1, a00, a01);
      fma_row(q[1] + j, y0, y1, a10, a11);
      fma_row(q[2] + j, y0, y1, a20, a21);
      fma_row(q[3] + j, y0, y1, a30, a31);
      fma_row(q[4] + j, y0, y1, a40, a41);
      fma_row(q[5] + j, y0, y1, a50, a51);
    }
    const __m256 a[6][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
    const __m256 s0 = _mm256_loadu_ps(T.sq.data() + t * 16), s1 = _mm256_loadu_ps(T.sq.data() + t * 16 + 8);
    for (int u = 0; u < 6; ++u) {
      Heap& h = *heaps[u];
      float worst = heap_worst(h, n_cand);
      const __m256 w = _mm256_set1_ps(worst);
      const __m256 c0 = _mm256_fmadd_ps(m2, a[u][0], s0), c1 = _mm256_fmadd_ps(m2, a[u][1], s1);
      uint32_t mask = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(c0, w, _CMP_LE_OQ))) |
                      static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(c1, w, _CMP_LE_OQ))) << 8;
      if (mask == 0) continue;
      _mm256_store_ps(sc, c0);
      _mm256_store_ps(sc + 8, c1);
      offer_masked(sc, mask, T, t, self[u], h, n_cand, worst);
    }
  }
}
#endif

#if defined(__x86_64__) || defined(__i386__)
// The AVX-512 form of scan_tiles: four tiles at once (each a 16-float register per column), the
// same six queries, 24 accumulators; every score the same FMA chain as scan_tiles' (so the same bits),
// and each query's offers in the same order (tile after tile, rows in order within a tile). The tiles
// left over (fewer than four) go to scan_tiles.
__attribute__((target("avx512f"), always_inline)) inline void fma4(const float* x, __m512 y0, __m512 y1, __m512 y2,
                                                                  __m512 y3, __m512& a0, __m512& a1, __m512& a2,
                                                                  __m512& a3) {
  const __m512 b = _mm512_set1_ps(*x);
  a0 = _mm512_fmadd_ps(b, y0, a0);
  a1 = _mm512_fmadd_ps(b, y1, a1);
  a2 = _mm512_fmadd_ps(b, y2, a2);
  a3 = _mm512_fmadd_ps(b, y3, a3);
}

__attribute__((target("avx512f"))) void offer_tile_512(__m512 acc, const Tiles& T, int64_t t, int32_t self, Heap& h,
                                                      int64_t n_cand) {
  alignas(64) float sc[16];
  float worst = heap_worst(h, n_cand);
  const __m512 c = _mm512_fmadd_ps(_mm512_set1_ps(-2.0f), acc, _mm512_loadu_ps(T.sq.data() + t * 16));
  uint32_t mask = _mm512_cmp_ps_mask(c, _mm512_set1_ps(worst), _CMP_LE_OQ);
  if (mask == 0) return;
  _mm512_store_ps(sc, c);
  offer_masked(sc, mask, T, t, self, h, n_cand, worst);
}

__attribute__((target("avx512f,avx2,fma"))) void scan_tiles_512(const float* const* q, int64_t d, const Tiles& T,
                                                               int64_t t0, int64_t t1, const int32_t* self,
                                                               Heap* const* heaps, int64_t n_cand) {
  int64_t t = t0;
  const int64_t stride = d * 16;
  for (; t + 4 <= t1; t += 4) {
    const float* y = T.v.data() + t * stride;
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00,
           a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00, a40 = a00,
           a41 = a00, a42 = a00, a43 = a00, a50 = a00, a51 = a00, a52 = a00, a53 = a00;
    for (int64_t j = 0; j < d; ++j) {
      const float* yj = y + j * 16;
      const __m512 y0 = _mm512_loadu_ps(yj), y1 = _mm512_loadu_ps(yj + stride), y2 = _mm512_loadu_ps(yj + 2 * stride),
                   y3 = _mm512_loadu_ps(yj + 3 * stride);
      fma4(q[0] + j, y0, y1, y2, y3, a00, a01, a02, a03);
      fma4(q[1] + j, y0, y1, y2, y3, a10, a11, a12, a13);
      fma4(q[2] + j, y0, y1, y2, y3, a20, a21, a22, a23);
      fma4(q[3] + j, y0, y1, y2, y3, a30, a31, a32, a33);
      fma4(q[4] + j, y0, y1, y2, y3, a40, a41, a42, a43);
      fma4(q[5] + j, y0, y1, y2, y3, a50, a51, a52, a53);
    }
    const __m512 a[6][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23},
                            {a30, a31, a32, a33}, {a40, a41, a42, a43}, {a50, a51, a52, a53}};
    for (int k = 0; k < 4; ++k)
      for (int u = 0; u < 6; ++u) offer_tile_512(a[u][k], T, t + k, self[u], *heaps[u], n_cand);
  }
  if (t < t1) scan_tiles(q, d, T, t, t1, self, heaps, n_cand);
}

#endif

Tiles make_tiles(const DenseF& Y, const std::vector<int32_t>& order, const std::vector<int64_t>& off, int64_t n_lists) {
  const int64_t d = Y.n_cols;
  Tiles T;
  T.off.assign(static_cast<size_t>(n_lists + 1), 0);
  for (int64_t c = 0; c < n_lists; ++c) T.off[c + 1] = T.off[c] + (off[c + 1] - off[c] + 15) / 16;
  const int64_t nt = T.off[n_lists];
  T.v.assign(static_cast<size_t>(nt * d * 16), 0.0f);
  T.sq.assign(static_cast<size_t>(nt * 16), std::numeric_limits<float>::infinity());
  T.id.assign(static_cast<size_t>(nt * 16), -1);
  for (int64_t c = 0; c < n_lists; ++c)
    for (int64_t p = off[c]; p < off[c + 1]; ++p) {
      const int64_t t = T.off[c] + (p - off[c]) / 16, r = (p - off[c]) % 16;
      const float* y = Y.row(order[p]);
      for (int64_t j = 0; j < d; ++j) T.v[(t * d + j) * 16 + r] = y[j];
      T.sq[t * 16 + r] = squared_norm(y, d);
      T.id[t * 16 + r] = order[p];
    }
  return T;
}

struct Centroids {
  int64_t m = 0, d = 0;
  std::vector<float> c;   // m x d
  std::vector<float> sq;  // m: squared norms
  void update_norms() {
    sq.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) sq[i] = squared_norm(c.data() + i * d, d);
  }
};

// Nearest centroid of each of the rows idx[0..n) of Y (idx empty: rows 0..n-1), in fixed blocks.
std::vector<int32_t> assign(const Context& ctx, const DenseF& Y, const std::vector<int64_t>& idx, int64_t n,
                            const Centroids& cent) {
  const int64_t d = Y.n_cols;
  std::vector<int32_t> out(static_cast<size_t>(n));
  const int64_t n_blocks = (n + kAssignBlock - 1) / kAssignBlock;
  parallel_for(ctx.threads(), n_blocks, [&](int64_t b) {
    const int64_t i0 = b * kAssignBlock, i1 = std::min(n, i0 + kAssignBlock), na = i1 - i0;
    std::vector<float> rows;
    const float* a = nullptr;
    if (idx.empty()) {
      a = Y.row(i0);
    } else {
      rows.resize(static_cast<size_t>(na * d));
      for (int64_t i = i0; i < i1; ++i) std::copy_n(Y.row(idx[i]), d, rows.data() + (i - i0) * d);
      a = rows.data();
    }
    std::vector<float> s(static_cast<size_t>(na * cent.m));
    scores(a, na, cent.c.data(), cent.m, cent.sq.data(), d, s.data());
    argmin_rows(s.data(), na, cent.m, out.data() + i0);
  });
  return out;
}

// Lloyd's k-means on a seeded sample of the rows of Y; small clusters re-seeded on a random sample
// point of a cluster larger than the mean (splitting it).
Centroids kmeans(const Context& ctx, const DenseF& Y, int64_t n_lists, const IvfCpuOptions& opt) {
  const int64_t n = Y.n_rows, d = Y.n_cols;
  std::mt19937_64 rng(opt.seed ^ 0x9e3779b97f4a7c15ULL);
  const int64_t m = std::min(n, std::max(n_lists, opt.kmeans_points_per_list * n_lists));
  // A seeded sample of m distinct rows (partial Fisher-Yates), sorted for locality.
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - i));
    std::swap(perm[i], perm[j]);
  }
  std::vector<int64_t> sample(perm.begin(), perm.begin() + m);
  Centroids cent;
  cent.m = n_lists;
  cent.d = d;
  cent.c.resize(static_cast<size_t>(n_lists * d));
  for (int64_t c = 0; c < n_lists; ++c) std::copy_n(Y.row(sample[c]), d, cent.c.data() + c * d);  // distinct rows
  std::sort(sample.begin(), sample.end());
  cent.update_norms();
  const int64_t width = n_lists * (d + 1);
  const int64_t n_blocks = (m + kAssignBlock - 1) / kAssignBlock;
  for (int it = 0; it < opt.kmeans_iterations; ++it) {
    const std::vector<int32_t> lab = assign(ctx, Y, sample, m, cent);
    std::vector<double> acc;
    reduce_blocks(ctx.threads(), n_blocks, static_cast<size_t>(width), acc, [&](int64_t b, double* part) {
      const int64_t i1 = std::min(m, (b + 1) * kAssignBlock);
      for (int64_t i = b * kAssignBlock; i < i1; ++i) {
        const int64_t c = lab[i];
        const float* y = Y.row(sample[i]);
        double* p = part + c * (d + 1);
        for (int64_t j = 0; j < d; ++j) p[j] += y[j];
        p[d] += 1.0;
      }
    });
    const double mean_size = static_cast<double>(m) / static_cast<double>(n_lists);
    for (int64_t c = 0; c < n_lists; ++c) {
      const double cnt = acc[c * (d + 1) + d];
      if (cnt > 0)
        for (int64_t j = 0; j < d; ++j) cent.c[c * d + j] = static_cast<float>(acc[c * (d + 1) + j] / cnt);
    }
    // Re-seed clusters below a quarter of the mean size on a sample point of a larger-than-mean one.
    for (int64_t c = 0; c < n_lists; ++c) {
      if (acc[c * (d + 1) + d] >= 0.25 * mean_size) continue;
      for (int tries = 0; tries < 64; ++tries) {
        const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(m));
        if (acc[lab[i] * (d + 1) + d] > mean_size) {
          std::copy_n(Y.row(sample[i]), d, cent.c.data() + c * d);
          break;
        }
      }
    }
    cent.update_norms();
  }
  return cent;
}

}  // namespace

void knn_ivf_scan_isa(int isa) { g_scan_isa = isa; }

Knn knn_ivf(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfCpuOptions& opt) {
  return knn_ivf(ctx, X, k, metric, opt, 0, X.n_rows);
}

Knn knn_ivf(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfCpuOptions& opt,
            int64_t row_begin, int64_t row_end) {
  using namespace knn_detail;
  check_input(X, k, "neighbors");
  const int64_t n = X.n_rows, d = X.n_cols;
  if (row_begin < 0 || row_end > n || row_begin > row_end)
    fail("internal: knn query rows [", row_begin, ", ", row_end, ") out of [0, ", n, ")");
  if (opt.n_lists < 0 || opt.n_lists > n || opt.n_probes < 0 || !(opt.lists_per_sqrt_n > 0) ||
      opt.kmeans_iterations < 0 || opt.kmeans_points_per_list < 1)
    fail_input("neighbors", "IVF parameters n_lists = ", opt.n_lists, ", n_probes = ", opt.n_probes,
               ", lists_per_sqrt_n = ", opt.lists_per_sqrt_n, ", kmeans_iterations = ", opt.kmeans_iterations,
               ", kmeans_points_per_list = ", opt.kmeans_points_per_list,
               " are invalid; use 0 <= n_lists <= n_cells, n_probes >= 0 (0: auto), lists_per_sqrt_n > 0, "
               "kmeans_iterations >= 0, kmeans_points_per_list >= 1");
  Knn out = empty_result(row_end - row_begin, k);
  const std::vector<double> nrm = row_norms(X);
  DenseF unit;
  if (metric == KnnMetric::cosine) unit = normalized_rows(X, nrm);
  const DenseF& Y = metric == KnnMetric::cosine ? unit : X;
  if (k == 1 || row_end == row_begin) return out;

  const int64_t n_lists =
      opt.n_lists > 0 ? opt.n_lists
                      : std::clamp<int64_t>(std::llround(std::sqrt(static_cast<double>(n)) * opt.lists_per_sqrt_n), 1, n);
  const int64_t n_probes = std::min(n_lists, opt.n_probes > 0 ? opt.n_probes : auto_probes(n_lists));

  linalg::SingleThreadedBlas blas_guard;
  const Centroids cent = kmeans(ctx, Y, n_lists, opt);
  const std::vector<int32_t> home = assign(ctx, Y, {}, n, cent);

  // Lists: cells by home list (counting sort; ascending cell index within a list); their rows copied
  // in that order with their squared norms, as tiles for the fused scan or as rows for sgemm.
  std::vector<int64_t> off(static_cast<size_t>(n_lists + 1), 0);
  for (int64_t i = 0; i < n; ++i) ++off[home[i] + 1];
  for (int64_t c = 0; c < n_lists; ++c) off[c + 1] += off[c];
  std::vector<int32_t> order(static_cast<size_t>(n));
  {
    std::vector<int64_t> pos(off.begin(), off.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[pos[home[i]]++] = static_cast<int32_t>(i);
  }
  const bool fused = !opt.blas_scan && fused_scan_available();
#if defined(__x86_64__) || defined(__i386__)
  const bool use512 = fused && scan_512_available();
#endif
  Tiles tiles;
  if (fused) tiles = make_tiles(Y, order, off, n_lists);
  DenseF Yp;
  std::vector<float> sqp;
  if (!fused) {
    Yp = DenseF(n, d);
    sqp.resize(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) {
      std::copy_n(Y.row(order[p]), d, Yp.row(p));
      sqp[p] = squared_norm(Yp.row(p), d);
    }
  }

  // Queries in chunks of kQueryChunk cells in list order (cut from all cells, so the same chunks for
  // any query range). A chunk finds each query's n_probes nearest centroids, then inverts them: for
  // every list some of its queries probe, groups of up to kQueryBlock of those queries against the
  // list's rows (scan_tiles, or one sgemm and scan_row). Lists are taken nearest first (by their best
  // rank among the chunk's queries), so the heaps hold close candidates early and later scores mostly
  // fail the pre-check.
  const int64_t want = k - 1;
  const int64_t n_cand = std::min(n - 1, want + std::max(kMinMargin, want));
  const int64_t P = n_probes;
  const int64_t n_chunks = (n + kQueryChunk - 1) / kQueryChunk;
  parallel_for(ctx.threads(), n_chunks, [&](int64_t ch) {
    const int64_t c0 = ch * kQueryChunk, c1 = std::min(n, c0 + kQueryChunk);
    std::vector<int64_t> qp;  // this call's queries in the chunk (positions into order)
    for (int64_t p = c0; p < c1; ++p)
      if (order[p] >= row_begin && order[p] < row_end) qp.push_back(p);
    if (qp.empty()) return;
    const int64_t nq = static_cast<int64_t>(qp.size());
    // probes[q * P + j]: query q's j-th nearest list
    std::vector<int32_t> probes(static_cast<size_t>(nq * P));
    std::vector<float> rows(static_cast<size_t>(kQueryBlock * d));
    std::vector<float> cs(static_cast<size_t>(kQueryBlock * n_lists));
    std::vector<std::pair<float, int32_t>> best;
    best.reserve(static_cast<size_t>(P));
    for (int64_t q0 = 0; q0 < nq; q0 += kQueryBlock) {
      const int64_t nb = std::min(kQueryBlock, nq - q0);
      for (int64_t i = 0; i < nb; ++i) std::copy_n(Y.row(order[qp[q0 + i]]), d, rows.data() + i * d);
      scores(rows.data(), nb, cent.c.data(), n_lists, cent.sq.data(), d, cs.data());
      for (int64_t i = 0; i < nb; ++i) {
        // the P smallest (score, list) pairs, the row of scores read once into a bounded heap
        best.clear();
        scan_row(cs.data() + i * n_lists, nullptr, n_lists, nullptr, best, P);
        std::sort_heap(best.begin(), best.end());
        for (int64_t j = 0; j < P; ++j) probes[(q0 + i) * P + j] = best[j].second;
      }
    }
    // The queries of each list (counting sort; ascending query within a list) in two passes: first
    // every query against its own (home) list, then the other probes, lists in order of their best rank
    // among the chunk's queries (then by list). A heap then fills from its query's own list, so fewer
    // later candidates get past its worst (the kept candidates do not depend on the order: a bounded
    // heap keeps the n_cand smallest of whatever it is offered). Bucket b < n_lists: list b's home
    // queries; n_lists + c: list c's other queries.
    const int64_t NB = 2 * n_lists;
    std::vector<int64_t> goff(static_cast<size_t>(NB + 1), 0);
    std::vector<int32_t> lrank(static_cast<size_t>(n_lists), static_cast<int32_t>(P));
    auto bucket_of = [&](int64_t e) { return (e % P == 0 ? 0 : n_lists) + probes[e]; };
    for (int64_t e = 0; e < nq * P; ++e) {
      ++goff[bucket_of(e) + 1];
      if (e % P != 0) lrank[probes[e]] = std::min(lrank[probes[e]], static_cast<int32_t>(e % P));
    }
    for (int64_t b = 0; b < NB; ++b) goff[b + 1] += goff[b];
    std::vector<int32_t> gq(static_cast<size_t>(nq * P));
    {
      std::vector<int64_t> pos(goff.begin(), goff.end() - 1);
      for (int64_t e = 0; e < nq * P; ++e) gq[pos[bucket_of(e)]++] = static_cast<int32_t>(e / P);
    }
    std::vector<int32_t> buckets, rest;
    for (int64_t c = 0; c < n_lists; ++c) {
      if (off[c + 1] == off[c]) continue;
      if (goff[c + 1] > goff[c]) buckets.push_back(static_cast<int32_t>(c));
      if (goff[n_lists + c + 1] > goff[n_lists + c]) rest.push_back(static_cast<int32_t>(n_lists + c));
    }
    std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return lrank[a - n_lists] < lrank[b - n_lists]; });
    buckets.insert(buckets.end(), rest.begin(), rest.end());
    std::vector<Heap> heaps(static_cast<size_t>(nq));
    for (auto& h : heaps) h.reserve(static_cast<size_t>(n_cand));
    std::vector<float> dots;
    std::vector<int32_t> self(static_cast<size_t>(kQueryBlock + 6));
    std::vector<Heap*> hp(static_cast<size_t>(kQueryBlock + 6));
    std::vector<const float*> qrow(static_cast<size_t>(kQueryBlock + 6));
    Heap scratch;
    for (const int32_t bucket : buckets) {
      const int32_t list = static_cast<int32_t>(bucket % n_lists);
      const int64_t p0 = off[list], nr = off[list + 1] - p0;
      for (int64_t g0 = goff[bucket]; g0 < goff[bucket + 1]; g0 += kQueryBlock) {
        const int64_t ng = std::min(kQueryBlock, goff[bucket + 1] - g0);
#if defined(__x86_64__) || defined(__i386__)
        if (fused) {
          // Six queries at a time against every tile of the list (the list stays in cache).
          // A group short of a multiple of six is padded with its first query, whose offers there go to
          // a scratch heap (a lone query would run one pair of FMA chains at a fraction of the rate).
          const int64_t ng6 = (ng + 5) / 6 * 6;
          scratch.clear();
          for (int64_t i = 0; i < ng6; ++i) {
            const int64_t q = gq[g0 + (i < ng ? i : 0)];
            qrow[i] = Y.row(order[qp[q]]);
            self[i] = order[qp[q]];
            hp[i] = i < ng ? &heaps[q] : &scratch;
          }
          for (int64_t i = 0; i < ng6; i += 6)
            (use512 ? scan_tiles_512 : scan_tiles)(qrow.data() + i, d, tiles, tiles.off[list], tiles.off[list + 1],
                                                   self.data() + i, hp.data() + i, n_cand);
          continue;
        }
#endif
        for (int64_t i = 0; i < ng; ++i) std::copy_n(Y.row(order[qp[gq[g0 + i]]]), d, rows.data() + i * d);
        dots.resize(static_cast<size_t>(ng * nr));
        dots_m2(rows.data(), ng, Yp.row(p0), nr, d, dots.data());
        for (int64_t i = 0; i < ng; ++i) {
          const int64_t q = gq[g0 + i];
          float* dq = dots.data() + i * nr;
          const int64_t self = qp[q] - p0;
          if (self >= 0 && self < nr) dq[self] = std::numeric_limits<float>::infinity();
          // Only scores at or below the heap's current worst touch the heap.
          scan_row(dq, sqp.data() + p0, nr, order.data() + p0, heaps[q], n_cand);
        }
      }
    }
    std::vector<Cand> cands;
    for (int64_t q = 0; q < nq; ++q) {
      cands.clear();
      for (const auto& c : heaps[q]) cands.emplace_back(0.0, c.second);
      finish_row(X, nrm, metric, order[qp[q]], cands, out, row_begin);
    }
  });
  return out;
}

}  // namespace scurry
