#include "graph/knn.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// hnswlib 0.6.2 (Debian's libhnswlib-dev), built with USE_SSE (on whenever __SSE__ is defined, so on
// every x86-64 build), prefetches the *next* entry of a link list while it walks one:
// `_mm_prefetch(visited_array + *(datal + j + 1))` in searchBaseLayer (hnswalg.h:214) and the same in
// searchBaseLayerST and in addPoint's greedy descent. After the last entry of a full list that reads
// one tableint past it; for a node's top layer, whose list ends its malloc'd block
// (`malloc(size_links_per_element_ * curlevel + 1)`), it is a heap-buffer-overflow read (AddressSanitizer
// in Knn.HnswRecallAtLeast95Percent; upstream hnswlib issue #107 and pull request #459, not merged).
// NO_MANUAL_VECTORIZATION compiles hnswlib without USE_SSE: none of those prefetches, and scalar
// distance functions, which the spaces below (HnswL2Space, HnswIpSpace) replace by SSE2 ones of our
// own that read only the d floats of each vector.
#define NO_MANUAL_VECTORIZATION
#include <hnswlib/hnswlib.h>

#include "core/error.hpp"
#include "exec/parallel.hpp"
#include "graph/knn_detail.hpp"
#include "graph/knn_gpu.hpp"
#include "pp/linalg.hpp"

namespace scurry {
namespace {

// Fixed work partition (independent of the thread count).
constexpr int64_t kQueryBlock = 256;   // query rows per task
constexpr int64_t kRefTile = 2048;     // reference rows per GEMM tile
constexpr int64_t kMinMargin = 8;      // extra float32 candidates re-ranked in float64 (at least)


// hnswlib's distance functions: fn(a, b, &d) for two vectors of d floats. The sums are float32 (the
// order of the search); finish_row recomputes every returned neighbour's distance in float64.
// Four 4-lane accumulators over blocks of 16, then blocks of 4, then a scalar tail: no load past d.
float hnsw_sum_sq_diff(const void* av, const void* bv, const void* dv) {
  const float* a = static_cast<const float*>(av);
  const float* b = static_cast<const float*>(bv);
  const size_t d = *static_cast<const size_t*>(dv);
  size_t i = 0;
  float s = 0.0f;
#if defined(__SSE2__)
  __m128 s0 = _mm_setzero_ps(), s1 = _mm_setzero_ps(), s2 = _mm_setzero_ps(), s3 = _mm_setzero_ps();
  for (; i + 16 <= d; i += 16) {
    const __m128 t0 = _mm_sub_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
    const __m128 t1 = _mm_sub_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(b + i + 4));
    const __m128 t2 = _mm_sub_ps(_mm_loadu_ps(a + i + 8), _mm_loadu_ps(b + i + 8));
    const __m128 t3 = _mm_sub_ps(_mm_loadu_ps(a + i + 12), _mm_loadu_ps(b + i + 12));
    s0 = _mm_add_ps(s0, _mm_mul_ps(t0, t0));
    s1 = _mm_add_ps(s1, _mm_mul_ps(t1, t1));
    s2 = _mm_add_ps(s2, _mm_mul_ps(t2, t2));
    s3 = _mm_add_ps(s3, _mm_mul_ps(t3, t3));
  }
  for (; i + 4 <= d; i += 4) {
    const __m128 t = _mm_sub_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
    s0 = _mm_add_ps(s0, _mm_mul_ps(t, t));
  }
  float lanes[4];
  _mm_storeu_ps(lanes, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
  s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < d; ++i) {
    const float t = a[i] - b[i];
    s += t * t;
  }
  return s;
}

// 1 - <a, b> (hnswlib's inner-product distance; the rows are unit vectors for the cosine metric).
float hnsw_one_minus_dot(const void* av, const void* bv, const void* dv) {
  const float* a = static_cast<const float*>(av);
  const float* b = static_cast<const float*>(bv);
  const size_t d = *static_cast<const size_t*>(dv);
  size_t i = 0;
  float s = 0.0f;
#if defined(__SSE2__)
  __m128 s0 = _mm_setzero_ps(), s1 = _mm_setzero_ps(), s2 = _mm_setzero_ps(), s3 = _mm_setzero_ps();
  for (; i + 16 <= d; i += 16) {
    s0 = _mm_add_ps(s0, _mm_mul_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
    s1 = _mm_add_ps(s1, _mm_mul_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(b + i + 4)));
    s2 = _mm_add_ps(s2, _mm_mul_ps(_mm_loadu_ps(a + i + 8), _mm_loadu_ps(b + i + 8)));
    s3 = _mm_add_ps(s3, _mm_mul_ps(_mm_loadu_ps(a + i + 12), _mm_loadu_ps(b + i + 12)));
  }
  for (; i + 4 <= d; i += 4) s0 = _mm_add_ps(s0, _mm_mul_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
  float lanes[4];
  _mm_storeu_ps(lanes, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
  s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < d; ++i) s += a[i] * b[i];
  return 1.0f - s;
}

// An hnswlib space over d floats with one of the functions above.
class HnswSpace final : public hnswlib::SpaceInterface<float> {
 public:
  HnswSpace(size_t d, hnswlib::DISTFUNC<float> fn) : d_(d), fn_(fn) {}
  size_t get_data_size() override { return d_ * sizeof(float); }
  hnswlib::DISTFUNC<float> get_dist_func() override { return fn_; }
  void* get_dist_func_param() override { return &d_; }

 private:
  size_t d_;
  hnswlib::DISTFUNC<float> fn_;
};

}  // namespace

namespace knn_detail {

void check_input(const DenseF& X, int64_t k, const char* where) {
  if (X.n_rows < 1) fail_input(where, "the embedding has no rows; nothing to search");
  if (k < 1 || k > X.n_rows)
    fail_input(where, "k = ", k, " neighbours (the cell itself included) is out of range for ", X.n_rows,
               " cells; use 1 <= k <= n_cells");
  if (X.n_cols < 1) fail_input(where, "the embedding has no columns; nothing to search");
  for (float v : X.data)
    if (!std::isfinite(v))
      fail_input(where, "the embedding contains NaN or infinite values; clean it before the neighbour search");
}

// Row norms in float64.
std::vector<double> row_norms(const DenseF& X) {
  std::vector<double> nrm(static_cast<size_t>(X.n_rows));
  for (int64_t i = 0; i < X.n_rows; ++i) {
    const float* r = X.row(i);
    double s = 0;
    for (int64_t c = 0; c < X.n_cols; ++c) s += static_cast<double>(r[c]) * r[c];
    nrm[i] = std::sqrt(s);
  }
  return nrm;
}

// Exact float64 distance between rows i and j (nrm: row norms, cosine only).
double exact_distance(const DenseF& X, const std::vector<double>& nrm, KnnMetric metric, int64_t i, int64_t j) {
  const float* a = X.row(i);
  const float* b = X.row(j);
  const int64_t d = X.n_cols;
  if (metric == KnnMetric::euclidean) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double t = static_cast<double>(a[c]) - b[c];
      s += t * t;
    }
    return std::sqrt(s);
  }
  if (nrm[i] == 0 || nrm[j] == 0) return 1.0;
  double s = 0;
  for (int64_t c = 0; c < d; ++c) s += static_cast<double>(a[c]) * b[c];
  return 1.0 - s / (nrm[i] * nrm[j]);
}

// Writes the result for cell i into row i - row0 of `out`: self first, then the best k - 1 of
// `cands` (self excluded), re-ranked by exact float64 distance.
void finish_row(const DenseF& X, const std::vector<double>& nrm, KnnMetric metric, int64_t i,
                std::vector<Cand>& cands, Knn& out, int64_t row0) {
  size_t c0 = 0;
#if defined(__SSE2__)
  if (metric == KnnMetric::euclidean) {
    // Two candidates at a time, one per float64 lane: each lane adds its (a - b)^2 over the columns in
    // order, as exact_distance does, so the same bits.
    const float* a = X.row(i);
    const int64_t d = X.n_cols;
    for (; c0 + 2 <= cands.size(); c0 += 2) {
      const float* b0 = X.row(cands[c0].second);
      const float* b1 = X.row(cands[c0 + 1].second);
      __m128d s = _mm_setzero_pd();
      for (int64_t c = 0; c < d; ++c) {
        const __m128d t = _mm_sub_pd(_mm_set1_pd(static_cast<double>(a[c])),
                                     _mm_set_pd(static_cast<double>(b1[c]), static_cast<double>(b0[c])));
        s = _mm_add_pd(s, _mm_mul_pd(t, t));
      }
      double r[2];
      _mm_storeu_pd(r, _mm_sqrt_pd(s));
      cands[c0].first = r[0];
      cands[c0 + 1].first = r[1];
    }
  }
#endif
  for (size_t c = c0; c < cands.size(); ++c) cands[c].first = exact_distance(X, nrm, metric, i, cands[c].second);
  const size_t want = static_cast<size_t>(out.k - 1);
  const size_t take = std::min(want, cands.size());
  std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(take), cands.end());
  int32_t* idx = out.indices.data() + static_cast<size_t>((i - row0) * out.k);
  float* dst = out.distances.data() + static_cast<size_t>((i - row0) * out.k);
  idx[0] = static_cast<int32_t>(i);
  dst[0] = 0.0f;
  for (size_t j = 0; j < want; ++j) {
    if (j < take) {
      idx[j + 1] = cands[j].second;
      dst[j + 1] = static_cast<float>(std::max(0.0, cands[j].first));
    } else {  // fewer candidates than asked (approximate search only): mark missing
      idx[j + 1] = -1;
      dst[j + 1] = std::numeric_limits<float>::infinity();
    }
  }
}

Knn empty_result(int64_t n, int64_t k) {
  Knn r;
  r.n = n;
  r.k = k;
  r.indices.assign(static_cast<size_t>(n * k), 0);
  r.distances.assign(static_cast<size_t>(n * k), 0.0f);
  return r;
}

// Rows scaled to unit norm (zero rows stay zero), float32.
DenseF normalized_rows(const DenseF& X, const std::vector<double>& nrm) {
  DenseF y(X.n_rows, X.n_cols);
  for (int64_t i = 0; i < X.n_rows; ++i) {
    const double s = nrm[i] > 0 ? 1.0 / nrm[i] : 0.0;
    for (int64_t c = 0; c < X.n_cols; ++c) y(i, c) = static_cast<float>(X(i, c) * s);
  }
  return y;
}

}  // namespace knn_detail

using namespace knn_detail;

Knn join_rows(int64_t n, int64_t k, const std::vector<std::vector<int32_t>>& cells, const std::vector<Knn>& parts) {
  if (cells.size() != parts.size()) fail("internal: join_rows: ", cells.size(), " cell lists for ", parts.size(), " parts");
  Knn out;
  out.n = n;
  out.k = k;
  out.indices.assign(static_cast<size_t>(n * k), 0);
  out.distances.assign(static_cast<size_t>(n * k), 0.f);
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::vector<int32_t>& c = cells[p];
    if (parts[p].indices.size() != c.size() * static_cast<size_t>(k) || parts[p].distances.size() != parts[p].indices.size())
      fail("internal: join_rows: part ", p, " has ", parts[p].indices.size(), " entries for ", c.size(), " cells");
    for (size_t t = 0; t < c.size(); ++t) {
      const int64_t i = c[t];
      if (i < 0 || i >= n || seen[static_cast<size_t>(i)]) fail("internal: join_rows: cell ", i, " is out of range or repeated");
      seen[static_cast<size_t>(i)] = 1;
      std::copy_n(parts[p].indices.begin() + static_cast<int64_t>(t) * k, k, out.indices.begin() + i * k);
      std::copy_n(parts[p].distances.begin() + static_cast<int64_t>(t) * k, k, out.distances.begin() + i * k);
    }
  }
  for (int64_t i = 0; i < n; ++i)
    if (!seen[static_cast<size_t>(i)]) fail("internal: join_rows: cell ", i, " is in no part");
  return out;
}

TopkLists merge_topk(const std::vector<TopkLists>& parts, int64_t w, int threads) {
  if (w < 0) fail("internal: merge_topk: width ", w);
  TopkLists out;
  out.n = parts.empty() ? 0 : parts[0].n;
  out.w = w;
  for (size_t p = 0; p < parts.size(); ++p) {
    const TopkLists& t = parts[p];
    if (t.n != out.n || t.w < 0 || t.indices.size() != static_cast<size_t>(t.n * t.w) || t.keys.size() != t.indices.size())
      fail("internal: merge_topk: part ", p, " has ", t.n, " rows of ", t.w, " (", t.indices.size(), " indices, ",
           t.keys.size(), " keys) where ", out.n, " rows are expected");
  }
  out.indices.assign(static_cast<size_t>(out.n * w), -1);
  out.keys.assign(static_cast<size_t>(out.n * w), std::numeric_limits<double>::infinity());
  constexpr int64_t kRowsPerTask = 4096;
  const int64_t n_tasks = (out.n + kRowsPerTask - 1) / kRowsPerTask;
  std::vector<char> unsorted(static_cast<size_t>(n_tasks), 0);
  parallel_for(threads, n_tasks, [&](int64_t task) {
    const size_t S = parts.size();
    std::vector<int64_t> head(S);
    const int64_t i1 = std::min(out.n, (task + 1) * kRowsPerTask);
    for (int64_t i = task * kRowsPerTask; i < i1; ++i) {
      // An S-way merge of the sorted rows (a part's row ends at its first empty slot).
      std::fill(head.begin(), head.end(), 0);
      auto at = [&](size_t p) {
        const TopkLists& t = parts[p];
        const size_t e = static_cast<size_t>(i * t.w + head[p]);
        return Cand(t.keys[e], t.indices[e]);
      };
      auto live = [&](size_t p) { return head[p] < parts[p].w && at(p).second >= 0; };
      int64_t o = 0;
      Cand last(0.0, -1);
      while (o < w) {
        size_t best = S;
        for (size_t p = 0; p < S; ++p)
          if (live(p) && (best == S || at(p) < at(best))) best = p;
        if (best == S) break;
        const Cand c = at(best);
        ++head[best];
        if (live(best) && at(best) < c) unsorted[static_cast<size_t>(task)] = 1;
        if (c == last) continue;  // the same pair from two parts
        out.indices[static_cast<size_t>(i * w + o)] = c.second;
        out.keys[static_cast<size_t>(i * w + o)] = c.first;
        last = c;
        ++o;
      }
    }
  });
  for (char u : unsorted)
    if (u) fail("internal: merge_topk: a part's row is not sorted by (key, index)");
  return out;
}

Knn knn_from_lists(const TopkLists& lists, int64_t k) {
  if (k < 1 || lists.w < k - 1) fail("internal: knn_from_lists: k = ", k, " from lists of width ", lists.w);
  Knn out = empty_result(lists.n, k);
  for (int64_t i = 0; i < lists.n; ++i) {
    int32_t* idx = out.indices.data() + static_cast<size_t>(i * k);
    float* dst = out.distances.data() + static_cast<size_t>(i * k);
    idx[0] = static_cast<int32_t>(i);
    dst[0] = 0.f;
    for (int64_t j = 0; j + 1 < k; ++j) {
      const int32_t id = lists.indices[static_cast<size_t>(i * lists.w + j)];
      idx[j + 1] = id;
      dst[j + 1] = id < 0 ? std::numeric_limits<float>::infinity()
                          : static_cast<float>(std::max(0.0, lists.keys[static_cast<size_t>(i * lists.w + j)]));
    }
  }
  return out;
}

KnnMetric parse_knn_metric(const std::string& s, const std::string& where) {
  if (s == "euclidean") return KnnMetric::euclidean;
  if (s == "cosine") return KnnMetric::cosine;
  fail_input(where, "metric '", s, "' is not supported; use euclidean or cosine");
}

const char* knn_metric_name(KnnMetric m) { return m == KnnMetric::euclidean ? "euclidean" : "cosine"; }

KnnShard parse_knn_shard(const std::string& s, const std::string& where) {
  if (s == "queries") return KnnShard::queries;
  if (s == "index") return KnnShard::index;
  fail_input(where, "kNN sharding '", s, "' is unknown; use queries (split the queries over the GPUs) or index "
             "(split the index, merge the top-k lists)");
}

const char* knn_shard_name(KnnShard s) { return s == KnnShard::index ? "index" : "queries"; }

Knn knn_exact(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric) {
  return knn_exact(ctx, X, k, metric, 0, X.n_rows);
}

Knn knn_exact(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, int64_t row_begin, int64_t row_end) {
  check_input(X, k, "neighbors");
  const int64_t n = X.n_rows, d = X.n_cols;
  if (row_begin < 0 || row_end > n || row_begin > row_end)
    fail("internal: knn query rows [", row_begin, ", ", row_end, ") out of [0, ", n, ")");
  Knn out = empty_result(row_end - row_begin, k);
  const std::vector<double> nrm = row_norms(X);
  // The matrix the GEMM sees: X (euclidean) or unit rows (cosine); candidate score per pair is
  // ||y||^2 - 2 x.y (euclidean, the query's own ||x||^2 is constant per row) or -x.y (cosine).
  DenseF unit;
  if (metric == KnnMetric::cosine) unit = normalized_rows(X, nrm);
  const DenseF& Y = metric == KnnMetric::cosine ? unit : X;
  std::vector<float> sq(static_cast<size_t>(n), 0.0f);
  if (metric == KnnMetric::euclidean)
    for (int64_t i = 0; i < n; ++i) sq[i] = static_cast<float>(nrm[i] * nrm[i]);
  const int64_t want = k - 1;
  if (want == 0) return out;
  const int64_t n_cand = std::min(n - 1, want + std::max(kMinMargin, want));
  const int64_t n_blocks = (row_end - row_begin + kQueryBlock - 1) / kQueryBlock;

  linalg::SingleThreadedBlas blas_guard;
  parallel_for(ctx.threads(), n_blocks, [&](int64_t b) {
    const int64_t q0 = row_begin + b * kQueryBlock, q1 = std::min(row_end, q0 + kQueryBlock), nq = q1 - q0;
    std::vector<float> dots(static_cast<size_t>(nq * kRefTile));
    // Per query: a max-heap of the n_cand best float32 scores seen so far.
    std::vector<std::vector<std::pair<float, int32_t>>> heaps(static_cast<size_t>(nq));
    for (auto& h : heaps) h.reserve(static_cast<size_t>(n_cand));
    for (int64_t r0 = 0; r0 < n; r0 += kRefTile) {
      const int64_t nr = std::min(n, r0 + kRefTile) - r0;
      // Scores straight from the GEMM: -2 x.y (euclidean; ||y||^2 is added by the scan) or -x.y.
      const float alpha = metric == KnnMetric::euclidean ? -2.0f : -1.0f;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nq), static_cast<int>(nr),
                  static_cast<int>(d), alpha, Y.row(q0), static_cast<int>(d), Y.row(r0), static_cast<int>(d), 0.0f,
                  dots.data(), static_cast<int>(nr));
      for (int64_t q = 0; q < nq; ++q) {
        float* dq = dots.data() + static_cast<size_t>(q * nr);
        const int64_t self = q0 + q - r0;
        if (self >= 0 && self < nr) dq[self] = std::numeric_limits<float>::infinity();
        // ||y||^2 added as the scores are read (euclidean); only those at or below the heap's
        // current worst touch the heap.
        scan_row(dq, metric == KnnMetric::euclidean ? sq.data() + r0 : nullptr, nr, nullptr, heaps[q], n_cand,
                 static_cast<int32_t>(r0));
      }
    }
    std::vector<Cand> cands;
    for (int64_t q = 0; q < nq; ++q) {
      cands.clear();
      for (const auto& c : heaps[q]) cands.emplace_back(0.0, c.second);
      finish_row(X, nrm, metric, q0 + q, cands, out, row_begin);
    }
  });
  return out;
}

Knn knn_hnsw(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const HnswOptions& opt) {
  return knn_hnsw(ctx, X, k, metric, opt, 0, X.n_rows);
}

Knn knn_hnsw(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const HnswOptions& opt,
             int64_t row_begin, int64_t row_end) {
  check_input(X, k, "neighbors");
  if (row_begin < 0 || row_end > X.n_rows || row_begin > row_end)
    fail("internal: knn query rows [", row_begin, ", ", row_end, ") out of [0, ", X.n_rows, ")");
  if (opt.M < 2 || opt.ef_construction < 1)
    fail_input("neighbors", "hnsw parameters M = ", opt.M, ", ef_construction = ", opt.ef_construction,
               " are invalid; use M >= 2 and ef_construction >= 1");
  const int64_t n = X.n_rows, d = X.n_cols;
  Knn out = empty_result(row_end - row_begin, k);
  const std::vector<double> nrm = row_norms(X);
  DenseF unit;
  if (metric == KnnMetric::cosine) unit = normalized_rows(X, nrm);
  const DenseF& Y = metric == KnnMetric::cosine ? unit : X;
  if (k == 1) return out;

  HnswSpace space(static_cast<size_t>(d), metric == KnnMetric::cosine ? hnsw_one_minus_dot : hnsw_sum_sq_diff);
  hnswlib::HierarchicalNSW<float> index(&space, static_cast<size_t>(n), static_cast<size_t>(opt.M),
                                        static_cast<size_t>(opt.ef_construction), static_cast<size_t>(opt.random_state));
  // Sequential insertion in cell order: the graph does not depend on the thread count.
  for (int64_t i = 0; i < n; ++i) index.addPoint(Y.row(i), static_cast<hnswlib::labeltype>(i));
  const int64_t ef = opt.ef > 0 ? opt.ef : std::max<int64_t>(4 * k, 64);
  index.setEf(static_cast<size_t>(ef));
  const int64_t kq = std::min(n, k + 1);  // one extra in case the cell itself is not returned first
  const int64_t n_blocks = (row_end - row_begin + kQueryBlock - 1) / kQueryBlock;
  parallel_for(ctx.threads(), n_blocks, [&](int64_t b) {
    const int64_t q0 = row_begin + b * kQueryBlock, q1 = std::min(row_end, q0 + kQueryBlock);
    std::vector<Cand> cands;
    for (int64_t q = q0; q < q1; ++q) {
      auto pq = index.searchKnn(Y.row(q), static_cast<size_t>(kq));
      cands.clear();
      while (!pq.empty()) {
        const int64_t j = static_cast<int64_t>(pq.top().second);
        pq.pop();
        if (j != q) cands.emplace_back(0.0, static_cast<int32_t>(j));
      }
      finish_row(X, nrm, metric, q, cands, out, row_begin);
    }
  });
  return out;
}

Knn knn_brute_force(const DenseF& X, int64_t k, KnnMetric metric) {
  check_input(X, k, "neighbors");
  const int64_t n = X.n_rows;
  Knn out = empty_result(n, k);
  const std::vector<double> nrm = row_norms(X);
  std::vector<Cand> cands;
  for (int64_t i = 0; i < n; ++i) {
    cands.clear();
    for (int64_t j = 0; j < n; ++j)
      if (j != i) cands.emplace_back(0.0, static_cast<int32_t>(j));
    finish_row(X, nrm, metric, i, cands, out);
  }
  return out;
}

}  // namespace scurry
