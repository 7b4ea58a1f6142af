// scurry: one epoch of UMAP's layout optimisation for one vertex, the "batched" form shared by the
// threaded CPU path (umap.cpp) and the GPU kernel (umap_gpu.cu), so that both run the same
// arithmetic in the same order.
//
// umap-learn's optimize_layout_euclidean visits the edges one after the other and moves both ends
// after every sample. The batched form gives every vertex the moves umap would make to it in the
// epoch, made by the vertex's own thread: for every edge (i, j) of i's row due in this epoch, the
// attractive move as the head of (i, j), the repulsive moves of the edge's negative samples, and
// the attractive move as the tail of (j, i) (the graph is symmetric, so both edges have the same
// weight and schedule). The vertex's position is updated after each move, as in umap. The vertices
// move in kSubRounds interleaved groups, one group after the other; within a group the others are
// read as the group found them (the group's results go to a second buffer and are copied back after
// it). Each vertex walks its row in CSR order, so the result is the same bits for any number of
// threads and, on the GPU, run after run (no races, no atomics).
//
// The schedule is umap's epochs_per_sample one in closed form: an edge with eps = w_max / w epochs
// per sample is sampled at the epochs n >= 1 where floor(n / eps) grows, and has drawn
// floor(n / eps_neg) - 1 negative samples in all by epoch n (eps_neg = eps / negative_sample_rate;
// umap's epoch_of_next_negative_sample bookkeeping). Negative sample s of edge e in epoch n is
// vertex hash(seed, (i, j), n, s) mod n_vertices (splitmix64's finaliser, counter-based).
#pragma once
#include <cmath>
#include <cstdint>

#include "graph/mix64.cuh"

#if defined(__CUDACC__)
#define SCURRY_UMAP_HD __host__ __device__
#else
#define SCURRY_UMAP_HD
#endif
#if defined(__CUDA_ARCH__)
#define SCURRY_UMAP_UNROLL _Pragma("unroll")
#else
#define SCURRY_UMAP_UNROLL
#endif

namespace scurry::umap_sgd {

constexpr float kClip = 4.0f;  // umap's gradient clip
constexpr int kMaxDim = 16;    // n_components the batched epoch takes
// The vertices move in this many interleaved groups (vertex i in group i mod kSubRounds), one group
// after the other: a group reads the positions the earlier groups reached in this epoch, so for
// 7 edges in 8 the two ends move one after the other, as in umap, not both from stale positions.
constexpr int kSubRounds = 8;
// A vertex's row is moved in chunks of at most this many edges (vertex_epoch).
constexpr int64_t kChunk = 32;

struct EpochParams {
  uint32_t n_vertices;
  int dim;
  int epoch;  // >= 1 (nothing is sampled in epoch 0, as in umap)
  float alpha, a, b, gamma;
  double neg_rate;
  uint64_t seed;
};

using gpu::mix64;

// Vertex for negative sample s of edge (i, j) in epoch `epoch`, uniform in [0, n). Keyed by the
// edge's ends, not its position, so that pruning the graph or not draws the same samples.
SCURRY_UMAP_HD inline uint32_t random_vertex(uint64_t seed, int32_t i, int32_t j, int epoch, int64_t s, uint32_t n) {
  const uint64_t edge = (static_cast<uint64_t>(static_cast<uint32_t>(i)) << 32) | static_cast<uint32_t>(j);
  const uint64_t h = mix64(mix64(seed ^ edge) ^ ((static_cast<uint64_t>(epoch) << 32) + static_cast<uint64_t>(s)));
  return static_cast<uint32_t>(((h >> 32) * static_cast<uint64_t>(n)) >> 32);
}

SCURRY_UMAP_HD inline float clip4(float v) { return fminf(fmaxf(v, -kClip), kClip); }

// x^b for x > 0 without a pow call: 2^(b log2 x).
SCURRY_UMAP_HD inline float pow_pos(float x, float b) { return exp2f(b * log2f(x)); }

// The epochs-per-sample of an edge of weight w: w_max / w as float, 0 below threshold or for an
// explicit zero (never sampled). The CPU path (on the pruned graph, threshold 0) and the GPU kernel
// (on the whole graph) compute it with this one expression.
SCURRY_UMAP_HD inline float epochs_per_sample(float w, float threshold, float wmax) {
  return (w >= threshold && w != 0.0f) ? static_cast<float>(1.0 / static_cast<double>(w / wmax)) : 0.0f;
}

// The rate of epoch ep (>= 1): alpha (1 - (ep - 1) / n_epochs), as umap updates it after each epoch.
inline void set_epoch(EpochParams& p, int64_t ep, double alpha, int64_t n_epochs) {
  p.epoch = static_cast<int>(ep);
  p.alpha = static_cast<float>(alpha * (1.0 - static_cast<double>(ep - 1) / static_cast<double>(n_epochs)));
}

// Negative samples edge eps draws in epoch n (>= 1), or -1 when the edge is not due (or pruned).
SCURRY_UMAP_HD inline int64_t due_negatives(float eps_f, int n_epoch, double neg_rate) {
  const double eps = eps_f;
  if (!(eps > 0)) return -1;
  const double n = n_epoch;
  const double j = floor(n / eps), jprev = floor((n - 1) / eps);
  if (!(j > jprev)) return -1;
  if (!(neg_rate > 0)) return 0;
  const double eps_neg = eps / neg_rate;
  const double prev_epoch = jprev > 0 ? ceil(jprev * eps) : 0.0;  // epoch of the previous sample
  const double before = jprev > 0 ? fmax(0.0, floor(prev_epoch / eps_neg) - 1) : 0.0;
  const double now = fmax(0.0, floor(n / eps_neg) - 1);
  return now > before ? static_cast<int64_t>(now - before) : 0;
}

// The attractive move of c towards o (umap: clip each component of gc (c - o) to [-4, 4]).
template <int D>
SCURRY_UMAP_HD inline void attract(float* c, const float* o, const EpochParams& p) {
  float diff[D];
  float d2 = 0.0f;
SCURRY_UMAP_UNROLL
  for (int d = 0; d < D; ++d) {
    diff[d] = d < p.dim ? c[d] - o[d] : 0.0f;
    d2 += diff[d] * diff[d];
  }
  if (!(d2 > 0.0f)) return;
  const float pb = pow_pos(d2, p.b);
  const float gc = -2.0f * p.a * p.b * (pb / d2) / (p.a * pb + 1.0f);
SCURRY_UMAP_UNROLL
  for (int d = 0; d < D; ++d)
    if (d < p.dim) c[d] += p.alpha * clip4(gc * diff[d]);
}

// The moves of vertex i for the edges [begin, end) of its row (at most kChunk of them), from its
// position in `in`: the displacement goes to delta. `in` holds every vertex's position as the
// group found it (n x dim, row-major); the vertex's own position moves after every sample, as in
// umap. D: compile-time bound on p.dim.
template <int D>
SCURRY_UMAP_HD inline void chunk_moves(const float* in, const int32_t* tail, const float* eps, int64_t begin,
                                       int64_t end, int32_t i, const EpochParams& p, float* delta) {
  float c[D];
  const float* ci = in + static_cast<int64_t>(i) * p.dim;
SCURRY_UMAP_UNROLL
  for (int d = 0; d < D; ++d) c[d] = d < p.dim ? ci[d] : 0.0f;
  // Every position read comes from `in`, which nothing writes during the group: the tail's and a
  // batch of negative samples' positions are loaded into registers before the moves that use them,
  // so the loads overlap instead of waiting one after the other (same arithmetic, same order).
  constexpr int kBatch = D <= 3 ? 8 : 1;
  for (int64_t e = begin; e < end; ++e) {
    const int64_t n_neg = due_negatives(eps[e], p.epoch, p.neg_rate);
    if (n_neg < 0) continue;
    const int32_t j = tail[e];
    float o[D];
    const float* op = in + static_cast<int64_t>(j) * p.dim;
SCURRY_UMAP_UNROLL
    for (int d = 0; d < D; ++d) o[d] = d < p.dim ? op[d] : 0.0f;
    attract<D>(c, o, p);  // as the head of (i, j)
    for (int64_t s0 = 0; s0 < n_neg; s0 += kBatch) {
      float qv[kBatch][D];
      bool use[kBatch];
SCURRY_UMAP_UNROLL
      for (int t = 0; t < kBatch; ++t) {
        const int64_t s = s0 + t;
        use[t] = false;
        if (s < n_neg) {
          const uint32_t k = random_vertex(p.seed, i, j, p.epoch, s, p.n_vertices);
          use[t] = static_cast<int32_t>(k) != i;
          const float* q = in + static_cast<int64_t>(k) * p.dim;
SCURRY_UMAP_UNROLL
          for (int d = 0; d < D; ++d) qv[t][d] = d < p.dim ? q[d] : 0.0f;
        }
      }
SCURRY_UMAP_UNROLL
      for (int t = 0; t < kBatch; ++t) {
        if (!use[t]) continue;
        float diff[D];
        float dn = 0.0f;
SCURRY_UMAP_UNROLL
        for (int d = 0; d < D; ++d) {
          diff[d] = d < p.dim ? c[d] - qv[t][d] : 0.0f;
          dn += diff[d] * diff[d];
        }
        float gr = 0.0f;
        if (dn > 0.0f) gr = 2.0f * p.gamma * p.b / ((0.001f + dn) * (p.a * pow_pos(dn, p.b) + 1.0f));
SCURRY_UMAP_UNROLL
        for (int d = 0; d < D; ++d)
          if (d < p.dim) c[d] += p.alpha * (gr > 0.0f ? clip4(gr * diff[d]) : kClip);
      }
    }
    attract<D>(c, o, p);  // as the tail of (j, i)
  }
SCURRY_UMAP_UNROLL
  for (int d = 0; d < D; ++d)
    delta[d] = d < p.dim ? c[d] - ci[d] : 0.0f;
}

// Vertex i's position after the epoch (its row's edges are [begin, end)): the row in chunks of
// kChunk edges, each chunk's moves from the position the group found (chunk_moves), the
// displacements added in chunk order to that position; out_i gets the result. A row of at most
// kChunk edges is one chunk, the moves one after the other as in umap; a hub's long row is split so
// that no vertex's chain of moves is longer than kChunk edges (on the GPU, a group waits for its
// longest chain).
template <int D>
SCURRY_UMAP_HD inline void vertex_epoch(const float* in, const int32_t* tail, const float* eps, int64_t begin,
                                        int64_t end, int32_t i, const EpochParams& p, float* out_i) {
  float acc[D], delta[D];
SCURRY_UMAP_UNROLL
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  for (int64_t b = begin; b < end; b += kChunk) {
    chunk_moves<D>(in, tail, eps, b, end - b < kChunk ? end : b + kChunk, i, p, delta);
SCURRY_UMAP_UNROLL
    for (int d = 0; d < D; ++d) acc[d] += delta[d];
  }
  const float* ci = in + static_cast<int64_t>(i) * p.dim;
SCURRY_UMAP_UNROLL
  for (int d = 0; d < D; ++d)
    if (d < p.dim) out_i[d] = ci[d] + acc[d];
}

}  // namespace scurry::umap_sgd
