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
// The edge's key, hashed once per edge (edge_key), then one mix64 per sample (random_vertex_of).
SCURRY_UMAP_HD inline uint64_t edge_key(uint64_t seed, int32_t i, int32_t j) {
  const uint64_t edge = (static_cast<uint64_t>(static_cast<uint32_t>(i)) << 32) | static_cast<uint32_t>(j);
  return mix64(seed ^ edge);
}
SCURRY_UMAP_HD inline uint32_t random_vertex_of(uint64_t key, int epoch, int64_t s, uint32_t n) {
  const uint64_t h = mix64(key ^ ((static_cast<uint64_t>(epoch) << 32) + static_cast<uint64_t>(s)));
  return static_cast<uint32_t>(((h >> 32) * static_cast<uint64_t>(n)) >> 32);
}
SCURRY_UMAP_HD inline uint32_t random_vertex(uint64_t seed, int32_t i, int32_t j, int epoch, int64_t s, uint32_t n) {
  return random_vertex_of(edge_key(seed, i, j), epoch, s, n);
}

// Bit casts without memcpy or std:: (host and device).
SCURRY_UMAP_HD inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  union {
    float f;
    uint32_t u;
  } v;
  v.f = x;
  return v.u;
#endif
}
SCURRY_UMAP_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  union {
    uint32_t u;
    float f;
  } v;
  v.u = u;
  return v.f;
#endif
}

// The fast log2 and exp2 below are written once for any "lane type" T: T = Scalar (float, the GPU
// kernel and the scalar CPU code) or a SIMD vector of floats (umap.cpp's lanes, GCC/Clang vector
// extensions), with T's helpers for the bit casts, conversions and selects, so that every lane
// computes exactly the scalar function's operations.
struct Scalar {
  using F = float;
  using I = int32_t;
  using U = uint32_t;
  using M = bool;
  SCURRY_UMAP_HD static F f(float v) { return v; }
  SCURRY_UMAP_HD static I i(int32_t v) { return v; }
  SCURRY_UMAP_HD static U u(uint32_t v) { return v; }
  SCURRY_UMAP_HD static U bits(F x) { return float_bits(x); }
  SCURRY_UMAP_HD static F from_bits(U v) { return bits_float(v); }
  SCURRY_UMAP_HD static F to_f(I v) { return static_cast<float>(v); }
  SCURRY_UMAP_HD static I to_i(F v) { return static_cast<int32_t>(v); }  // truncates
  SCURRY_UMAP_HD static U as_u(I v) { return static_cast<uint32_t>(v); }
  SCURRY_UMAP_HD static I as_i(U v) { return static_cast<int32_t>(v); }
  // c ? a : b with both sides computed (a blend of the bits: the compiler cannot move one side's
  // work into a branch, which under -ftrapping-math keeps a loop from vectorising).
  SCURRY_UMAP_HD static F sel(M c, F a, F b) {
    const uint32_t m = c ? 0xffffffffu : 0u;
    return bits_float((float_bits(a) & m) | (float_bits(b) & ~m));
  }
  SCURRY_UMAP_HD static I seli(M c, I a, I b) { return c ? a : b; }
};

// Polynomial coefficients (fitted in float for minimal error, see fast_log2_t / fast_exp2_t).
constexpr float kLog2Q0 = 2.88539124f, kLog2Q1 = 0.961470783f, kLog2Q2 = 0.598975599f;
constexpr float kExp2P0 = 0.693147004f, kExp2P1 = 0.240222424f, kExp2P2 = 0.0555073358f, kExp2P3 = 0.00967151299f,
                kExp2P4 = 0.00132647238f;

// log2 x for finite x >= 0 (x = 0 gives -1e30, so that b log2 x is a large negative number for
// b > 0), no libm call: x = 2^e m with m in [sqrt(1/2), sqrt(2)) read from the bits (denormals
// scaled by 2^24 first), log2 m = s Q(s^2) with s = (m - 1) / (m + 1), |s| <= 0.1716, Q a degree-2
// polynomial fitted for minimal absolute error (3e-8) to the series 2/ln2 atanh(s) / s
// (Abramowitz & Stegun 4.1.27). Branch-free (selects only).
template <class T>
SCURRY_UMAP_HD inline typename T::F fast_log2_t(typename T::F x) {
  using F = typename T::F;
  using I = typename T::I;
  using U = typename T::U;
  const auto tiny = x < T::f(1.17549435e-38f);  // denormal or zero
  const F xs = x * T::sel(tiny, T::f(16777216.0f), T::f(1.0f));
  const U u = T::bits(xs);
  const I e0 = T::as_i((u >> T::u(23)) & T::u(255u)) - T::i(127) - T::seli(tiny, T::i(24), T::i(0));
  const F m0 = T::from_bits((u & T::u(0x007fffffu)) | T::u(0x3f800000u));  // [1, 2)
  const auto high = m0 > T::f(1.41421356f);
  const F m = m0 * T::sel(high, T::f(0.5f), T::f(1.0f));
  const F e = T::to_f(e0 + T::seli(high, T::i(1), T::i(0)));
  const F s = (m - T::f(1.0f)) / (m + T::f(1.0f)), z = s * s;
  const F l = e + s * (T::f(kLog2Q0) + z * (T::f(kLog2Q1) + z * T::f(kLog2Q2)));
  return T::sel(x > T::f(0.0f), l, T::f(-1e30f));
}

// 2^y, no libm call: y clamped to [-150, 128] (below: 0; 128: inf), y = k + f with k = round(y),
// |f| <= 1/2 (to the rounding of y + 256.5), 2^f = 1 + f P(f) with P of degree 4 fitted for minimal
// relative error (2e-7 in float), times 2^k built from the exponent bits in two factors (2^(k/2)
// 2^(k - k/2), so that the results between 2^-150 and 2^-126 come out as correctly scaled
// denormals and 2^128 as inf). Branch-free.
template <class T>
SCURRY_UMAP_HD inline typename T::F fast_exp2_t(typename T::F y) {
  using F = typename T::F;
  using I = typename T::I;
  const F lo = T::sel(y < T::f(-150.0f), T::f(-150.0f), y);
  const F yc = T::sel(lo > T::f(128.0f), T::f(128.0f), lo);
  const I k = T::to_i(yc + T::f(256.5f)) - T::i(256);  // round(yc): the cast truncates a positive number
  const F f = yc - T::to_f(k);                           // exact, |f| <= 1/2 + 2^-15
  const F p = T::f(1.0f) + f * (T::f(kExp2P0) + f * (T::f(kExp2P1) + f * (T::f(kExp2P2) + f * (T::f(kExp2P3) + f * T::f(kExp2P4)))));
  const I k1 = k >> T::i(1), k2 = k - k1;  // both in [-75, 64]
  const F s1 = T::from_bits(T::as_u(k1 + T::i(127)) << T::u(23)), s2 = T::from_bits(T::as_u(k2 + T::i(127)) << T::u(23));
  return p * s1 * s2;
}

template <class T>
SCURRY_UMAP_HD inline typename T::F pow_pos_t(typename T::F x, typename T::F b) {
  return fast_exp2_t<T>(b * fast_log2_t<T>(x));
}

SCURRY_UMAP_HD inline float fast_log2(float x) { return fast_log2_t<Scalar>(x); }
SCURRY_UMAP_HD inline float fast_exp2(float y) { return fast_exp2_t<Scalar>(y); }

// x^b for finite x >= 0 and b > 0 (pow_pos(0, b) = 0) without a libm call: 2^(b log2 x) with the
// two functions above. Relative error against std::pow (tests/graph/test_umap.cpp): below 2e-6 for
// results above 1e-30 and x up to 1e30 (mostly the float rounding of b log2 x), far below the
// layout's own noise; umap-learn computes the same expressions in double with pow.
SCURRY_UMAP_HD inline float pow_pos(float x, float b) { return pow_pos_t<Scalar>(x, b); }

// The attractive gradient coefficient -2ab d2^(b-1) / (1 + a d2^b) for d2 > 0, from pb = d2^b (one
// pow: d2^(b-1) = pb / d2).
template <class T>
SCURRY_UMAP_HD inline typename T::F attract_coef_pb_t(typename T::F d2, typename T::F pb, typename T::F a,
                                                      typename T::F b) {
  return T::f(-2.0f) * a * b * (pb / d2) / (a * pb + T::f(1.0f));
}
// The repulsive one, 2 gamma b / ((0.001 + d2)(1 + a d2^b)) for d2 > 0, from pb = d2^b.
template <class T>
SCURRY_UMAP_HD inline typename T::F repulse_coef_pb_t(typename T::F d2, typename T::F pb, typename T::F a,
                                                      typename T::F b, typename T::F gamma) {
  return T::f(2.0f) * gamma * b / ((T::f(0.001f) + d2) * (a * pb + T::f(1.0f)));
}
// Clip to [-4, 4] with plain comparisons, not fminf/fmaxf (a libm call on x86-64 without
// -ffinite-math-only); equal to them for every non-NaN v.
template <class T>
SCURRY_UMAP_HD inline typename T::F clip4_t(typename T::F v) {
  const typename T::F t = T::sel(v < T::f(-kClip), T::f(-kClip), v);
  return T::sel(t > T::f(kClip), T::f(kClip), t);
}
SCURRY_UMAP_HD inline float clip4(float v) { return clip4_t<Scalar>(v); }
SCURRY_UMAP_HD inline float attract_coef_pb(float d2, float pb, float a, float b) {
  return attract_coef_pb_t<Scalar>(d2, pb, a, b);
}
SCURRY_UMAP_HD inline float repulse_coef_pb(float d2, float pb, float a, float b, float gamma) {
  return repulse_coef_pb_t<Scalar>(d2, pb, a, b, gamma);
}
SCURRY_UMAP_HD inline float attract_coef(float d2, float a, float b) { return attract_coef_pb(d2, pow_pos(d2, b), a, b); }
SCURRY_UMAP_HD inline float repulse_coef(float d2, float a, float b, float gamma) {
  return repulse_coef_pb(d2, pow_pos(d2, b), a, b, gamma);
}

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

// floor and ceil of x in [0, 2^62] (the schedule's quotients) by an integer cast.
SCURRY_UMAP_HD inline double floor_pos(double x) { return static_cast<double>(static_cast<int64_t>(x)); }
SCURRY_UMAP_HD inline double ceil_pos(double x) {
  const double t = static_cast<double>(static_cast<int64_t>(x));
  return t < x ? t + 1.0 : t;
}

// The negative samples a due edge draws in epoch n, from jprev = floor((n - 1) / eps) (due_negatives
// below; the CPU's lanes keep jprev per edge from the schedule and skip its division).
SCURRY_UMAP_HD inline int64_t due_negatives_of(double eps, double n, double jprev, double neg_rate) {
  if (!(neg_rate > 0)) return 0;
  const double eps_neg = eps / neg_rate;
  const double prev_epoch = jprev > 0 ? ceil_pos(jprev * eps) : 0.0;  // epoch of the previous sample
  const double fb = floor_pos(prev_epoch / eps_neg) - 1, fn = floor_pos(n / eps_neg) - 1;
  const double before = jprev > 0 ? (fb > 0.0 ? fb : 0.0) : 0.0;
  const double now = fn > 0.0 ? fn : 0.0;
  return now > before ? static_cast<int64_t>(now - before) : 0;
}

// Negative samples edge eps draws in epoch n (>= 1), or -1 when the edge is not due (or pruned).
SCURRY_UMAP_HD inline int64_t due_negatives(float eps_f, int n_epoch, double neg_rate) {
  const double eps = eps_f;
  if (!(eps > 0)) return -1;
  const double n = n_epoch;
  // floor and ceil of the non-negative quotients by casts (the same values; no libm call).
  const double j = floor_pos(n / eps), jprev = floor_pos((n - 1) / eps);
  if (!(j > jprev)) return -1;
  return due_negatives_of(eps, n, jprev, neg_rate);
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
  const float gc = attract_coef(d2, p.a, p.b);
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
    const uint64_t key = edge_key(p.seed, i, j);
    for (int64_t s0 = 0; s0 < n_neg; s0 += kBatch) {
      float qv[kBatch][D];
      bool use[kBatch];
SCURRY_UMAP_UNROLL
      for (int t = 0; t < kBatch; ++t) {
        const int64_t s = s0 + t;
        use[t] = false;
        if (s < n_neg) {
          const uint32_t k = random_vertex_of(key, p.epoch, s, p.n_vertices);
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
        if (dn > 0.0f) gr = repulse_coef(dn, p.a, p.b, p.gamma);
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
