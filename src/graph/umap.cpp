// (GCC's ABI note for 32- and 64-byte vectors in functions compiled without AVX does not apply: the
// AVX2 and AVX-512 instances of the 2-D lanes are inlined into run_lanes_avx2 / _avx512 only.)
#if defined(__GNUC__)  // (GCC and Clang)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include "graph/umap.hpp"

#include "graph/umap_gpu.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "graph/neighbors.hpp"
#include "graph/spectral.hpp"
#include "graph/spectral_rng.hpp"
#include "graph/umap_sgd.hpp"

namespace scurry {
namespace {

const char* kWhere = "umap";
constexpr int kAbPoints = 300;      // find_ab_params: points of the target curve
constexpr double kClip = 4.0;       // umap's gradient clip
constexpr double kInitNoise = kUmapInitNoise;  // sd of the noise added to the spectral layout
constexpr double kInitScale = kUmapInitScale;  // layouts are scaled to [0, 10] (spectral: max |x| = 10 first)

// umap's tau_rand_int: three-component Tausworthe generator, 32-bit states.
struct Tau {
  uint32_t s0, s1, s2;
  uint32_t next() {
    s0 = ((s0 & 4294967294u) << 12) ^ (((s0 << 13) ^ s0) >> 19);
    s1 = ((s1 & 4294967288u) << 4) ^ (((s1 << 2) ^ s1) >> 25);
    s2 = ((s2 & 4294967280u) << 17) ^ (((s2 << 3) ^ s2) >> 11);
    return s0 ^ s1 ^ s2;
  }
};

// Seeded uniforms (53 bits: the same sequence on every platform).
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double uniform() { return (static_cast<double>(g() >> 11) + 0.5) * 0x1.0p-53; }
};

double clip(double v) { return std::clamp(v, -kClip, kClip); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

constexpr int64_t kRowsPerBlock = 2048;  // prune_graph: rows per parallel block
constexpr int64_t kEpochBlock = 512;     // batched epochs: vertices of a group per parallel block
constexpr int64_t kNoisePiece = 65536;   // start layout: entries (rows) per parallel piece

// ---- The batched epoch for 2-D layouts in lanes (the CPU's form of umap_sgd::vertex_epoch<2>) ----
//
// A vertex's moves in an epoch are a chain: each move starts from the position the previous one
// reached, and one move (a fast pow, three divisions) takes ~100 cycles of latency, so walking one
// vertex after the other leaves the core idle. Here the vertices of a block are dealt to L lanes
// (each vertex to the shortest lane so far) and written straight into a step-major layout as
// operations: for step t and lane l, cell t L + l holds the kind of the move and the vertex whose
// position it reads (the other end, a negative sample, the vertex itself at its start: the reads
// vertex_epoch makes). One pass then gathers the positions those cells name (independent loads,
// prefetched, not interleaved with the bookkeeping), and the lanes are stepped together, one
// operation per lane per step, with selects instead of branches: L independent chains, V vectors
// of W floats a step, so that several vectors' chains overlap in the core. Each operation is
// umap_sgd's arithmetic in vertex_epoch's order (attract_coef_pb, repulse_coef_pb, clip4, the chunk
// sums), the attractive and repulsive coefficients taken from one division of the selected
// numerator and denominator (the same operations on the same values as either expression), so the
// result is the same bits as vertex_epoch<2> for any L, W, V (tests: Umap.LanesEqualVertexEpoch)
// and independent of the thread count. The lane a vertex goes to changes no bits, only the
// balance. No FMA: this file is compiled with -ffp-contract=off (CMakeLists.txt), so that the
// AVX-512 instance does not contract a * b + c where the scalar code rounds twice.
enum : int32_t { kNop = 0, kAttract = 1, kRepulse = 2, kStart = 3, kEnd = 4 };
constexpr int kMaxLanes = 64;  // the most lanes an instruction set runs (lanes_of)
// An operation in the layout: the vertex it reads << kKindBits | its kind (the gather splits them),
// so vertices below 2^28 (batched_epoch takes the vertex-by-vertex path above).
constexpr int kKindBits = 3;
constexpr int64_t kLaneMaxVertices = int64_t(1) << (31 - kKindBits);

// Each edge's place in the schedule (next_due): its next due epoch m, F(m) and F(m - 1).
struct EdgeDue {
  std::vector<int32_t> next, f_next, f_before;
};

struct LaneScratch {
  int lanes = 0;
  int64_t rows = 0;              // rows allocated; every cell of them is kNop/0 between blocks
  std::vector<int32_t> li, lk;   // the lanes' operations (vertex << kKindBits | kind), kinds (step-major)
  std::vector<float> lx, ly, rx, ry;  // the positions read, the results
  std::vector<int64_t> due;      // the block's due edges
  std::vector<int32_t> nneg;     // their negative samples now
  std::vector<int32_t> unit_v, unit_n, unit_lane, by_size, count;  // units: vertex (in the block), size, lane
  std::vector<int64_t> unit_d, unit_row;  // units: first due edge; first row, then the kEnd row
  void reset(int l) {
    lanes = l, rows = 0;
    li.clear(), lk.clear();
  }
  void grow(int64_t need) {
    const int64_t r = std::max<int64_t>({need, 2 * rows, 256});
    const size_t cells = static_cast<size_t>(r * lanes);
    li.resize(cells, kNop), lk.resize(cells);
    lx.resize(cells), ly.resize(cells), rx.resize(cells), ry.resize(cells);
    rows = r;
  }
};

// The first epoch after n at which an edge of eps epochs per sample is due in umap_sgd's schedule
// (due_negatives: due at m when F(m) > F(m - 1), F(m) = floor(m / eps) in double), exactly: F is
// non-decreasing (a correctly rounded quotient is monotone in m), so the next due epoch is the
// smallest m > n with F(m) >= F(n) + 1: a guess from ceil((F(n) + 1) eps), corrected by a step or
// two with the same expression. INT32_MAX when never (eps <= 0, or beyond 2^31 epochs). The lanes
// keep it per edge, so an epoch tests each edge with one comparison instead of the quotients.
// Here with fn = F(n) given, and F at the result and one before it returned in f_at, f_before: the
// lanes keep both per edge, so that the edge's next visit takes F(n) and F(n - 1) (due_negatives'
// two quotients) from them instead of dividing again (the schedule was a third of a 2-D layout's
// time).
__attribute__((always_inline)) inline int32_t next_due(float eps_f, int64_t n, double fn, int32_t& f_at,
                                                       int32_t& f_before) {
  const double eps = eps_f;
  if (!(eps > 0)) return std::numeric_limits<int32_t>::max();
  auto F = [&](int64_t m) { return umap_sgd::floor_pos(static_cast<double>(m) / eps); };
  const double target = fn + 1.0, guess = target * eps;
  if (!(guess < 2e9)) return std::numeric_limits<int32_t>::max();
  const int64_t m0 = std::max<int64_t>(n + 1, static_cast<int64_t>(umap_sgd::ceil_pos(guess)));
  // The guess is right or one short but for rounding at the edges: F at m0 - 1, m0 and m0 + 1 as
  // three independent quotients and the answer picked by selects (a search with data-dependent
  // branches mispredicts about once an edge, which serialised the divisions: ~100 cycles an edge).
  // Anything else (never seen) takes the search, with the same quotients.
  const double a = F(m0 - 1), b = F(m0), c = F(m0 + 1);
  const bool lower_ok = !(m0 - 1 > n) || !(a >= target);  // the search would not step below m0
  int64_t m;
  double fm, fm1;
  if (lower_ok && (b >= target || c >= target)) [[likely]] {
    const bool at0 = b >= target;
    m = at0 ? m0 : m0 + 1;
    fm = at0 ? b : c;
    fm1 = at0 ? (m0 - 1 > n ? a : fn) : b;
  } else {
    m = m0;
    while (m - 1 > n && F(m - 1) >= target) --m;
    while (F(m) < target) ++m;
    fm = F(m), fm1 = m - 1 > n ? F(m - 1) : fn;
  }
  if (m > std::numeric_limits<int32_t>::max() || !(fm < 2147483647.0)) return std::numeric_limits<int32_t>::max();
  f_at = static_cast<int32_t>(fm), f_before = static_cast<int32_t>(fm1);
  return static_cast<int32_t>(m);
}

// GCC/Clang vector extensions as lane types of umap_sgd's templates: N floats, comparisons giving
// all ones or zero per lane. Every helper is always_inline, so that the AVX2 and AVX-512 instances
// are inlined into their target functions only.
#define SCURRY_LANE_INLINE __attribute__((always_inline)) inline
template <int N>
struct VecN;
#define SCURRY_LANE_VEC(N)                                                                              \
  template <>                                                                                          \
  struct VecN<N> {                                                                                     \
    typedef float F __attribute__((vector_size(4 * N)));                                               \
    typedef int32_t I __attribute__((vector_size(4 * N)));                                             \
    typedef uint32_t U __attribute__((vector_size(4 * N)));                                            \
    using M = I;                                                                                       \
    SCURRY_LANE_INLINE static F f(float v) { return F{} + v; }                                         \
    SCURRY_LANE_INLINE static I i(int32_t v) { return I{} + v; }                                       \
    SCURRY_LANE_INLINE static U u(uint32_t v) { return U{} + v; }                                      \
    SCURRY_LANE_INLINE static U bits(F x) { return reinterpret_cast<U>(x); }                           \
    SCURRY_LANE_INLINE static F from_bits(U v) { return reinterpret_cast<F>(v); }                      \
    SCURRY_LANE_INLINE static F to_f(I v) { return __builtin_convertvector(v, F); }                    \
    SCURRY_LANE_INLINE static I to_i(F v) { return __builtin_convertvector(v, I); } /* truncates */    \
    SCURRY_LANE_INLINE static U as_u(I v) { return reinterpret_cast<U>(v); }                           \
    SCURRY_LANE_INLINE static I as_i(U v) { return reinterpret_cast<I>(v); }                           \
    SCURRY_LANE_INLINE static F sel(M c, F a, F b) {                                                   \
      const U m = reinterpret_cast<U>(c);                                                              \
      return reinterpret_cast<F>((reinterpret_cast<U>(a) & m) | (reinterpret_cast<U>(b) & ~m));        \
    }                                                                                                  \
    SCURRY_LANE_INLINE static I seli(M c, I a, I b) { return (a & c) | (b & ~c); }                     \
  };
SCURRY_LANE_VEC(4)
SCURRY_LANE_VEC(8)
SCURRY_LANE_VEC(16)
#undef SCURRY_LANE_VEC

template <class V, class E>
SCURRY_LANE_INLINE V load_v(const E* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
SCURRY_LANE_INLINE void store_v(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// The L = W V lanes for `steps` steps: lane l's operations at [t L + l], W lanes to a vector,
// every operation's arithmetic computed for every lane and the result selected by its kind. A lane
// runs units (one chunk of one vertex, umap_sgd::chunk_moves) one after the other: kStart loads the
// vertex's position, the moves follow, and at kEnd (and every other step: only kEnd's is read)
// rx, ry get the displacement c - start, chunk_moves' delta.
template <int W, int V>
SCURRY_LANE_INLINE void run_lanes_body(const float* __restrict ox, const float* __restrict oy,
                                       const int32_t* __restrict kind, int64_t steps, const umap_sgd::EpochParams& p,
                                       float* __restrict rx, float* __restrict ry) {
  using T = VecN<W>;
  using F = typename T::F;
  using I = typename T::I;
  constexpr int L = W * V;
  F cx[V], cy[V], ix[V], iy[V];
  for (int v = 0; v < V; ++v) cx[v] = cy[v] = ix[v] = iy[v] = T::f(0.0f);
  // attract_coef_pb_t = ((-2 a) b (pb / d2)) / (a pb + 1); repulse_coef_pb_t = (2 gamma b) /
  // ((0.001 + d2)(a pb + 1)): the constant factors are the same float products either way.
  const F a = T::f(p.a), b = T::f(p.b), alpha = T::f(p.alpha), zero = T::f(0.0f), one = T::f(1.0f),
          clip = T::f(umap_sgd::kClip), natt = T::f(-2.0f * p.a * p.b), nrep = T::f(2.0f * p.gamma * p.b),
          eps3 = T::f(0.001f);
  for (int64_t t = 0; t < steps; ++t) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const int64_t o = t * L + W * v;
      const F qx = load_v<F>(ox + o), qy = load_v<F>(oy + o);
      const I k = load_v<I>(kind + o);
      const F dx = cx[v] - qx, dy = cy[v] - qy;
      const F d2 = dx * dx + dy * dy;
      const F pb = umap_sgd::pow_pos_t<T>(d2, b);
      const I att = k == T::i(kAttract), rep = k == T::i(kRepulse), pos = d2 > zero, start = k == T::i(kStart);
      const F apb = a * pb + one;
      const F num = T::sel(att, natt * (pb / d2), nrep), den = T::sel(att, apb, (eps3 + d2) * apb);
      const F coef = num / den;
      // attraction: moved by clip4(coef d) where d2 > 0, else not at all; repulsion: by
      // clip4(coef d) where d2 > 0 and coef > 0, else by kClip (umap_sgd::chunk_moves).
      const I full = att | (pos & (coef > zero)), moving = (att & pos) | rep;
      const F ux = T::sel(full, umap_sgd::clip4_t<T>(coef * dx), clip), uy = T::sel(full, umap_sgd::clip4_t<T>(coef * dy), clip);
      const F mx = cx[v] + alpha * ux, my = cy[v] + alpha * uy;
      ix[v] = T::sel(start, qx, ix[v]), iy[v] = T::sel(start, qy, iy[v]);
      cx[v] = T::sel(start, qx, T::sel(moving, mx, cx[v]));
      cy[v] = T::sel(start, qy, T::sel(moving, my, cy[v]));
      store_v<F>(rx + o, cx[v] - ix[v]);
      store_v<F>(ry + o, cy[v] - iy[v]);
    }
  }
}

// The instruction sets of the lanes, chosen at run time (tests ask for each: the same bits).
enum class LaneIsa { sse2 = 0, avx2 = 1, avx512 = 2 };
constexpr int kLaneVecs = 4;  // vectors a step (independent chains per lane group)
constexpr int lanes_of(LaneIsa isa) { return kLaneVecs * (isa == LaneIsa::sse2 ? 4 : isa == LaneIsa::avx2 ? 8 : 16); }
static_assert(lanes_of(LaneIsa::avx512) <= kMaxLanes);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"), flatten)) void run_lanes_avx2(const float* ox, const float* oy, const int32_t* kind,
                                                             int64_t steps, const umap_sgd::EpochParams& p, float* rx,
                                                             float* ry) {
  run_lanes_body<8, kLaneVecs>(ox, oy, kind, steps, p, rx, ry);
}
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), flatten)) void run_lanes_avx512(
    const float* ox, const float* oy, const int32_t* kind, int64_t steps, const umap_sgd::EpochParams& p, float* rx,
    float* ry) {
  run_lanes_body<16, kLaneVecs>(ox, oy, kind, steps, p, rx, ry);
}
const LaneIsa kBestIsa = (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
                             ? LaneIsa::avx512
                             : __builtin_cpu_supports("avx2") ? LaneIsa::avx2 : LaneIsa::sse2;
#else
const LaneIsa kBestIsa = LaneIsa::sse2;
#endif

int g_lanes_isa = -1;  // umap_lanes_isa (tests): -1 the best the CPU has, else a LaneIsa up to it

LaneIsa lane_isa() {
  return g_lanes_isa < 0 ? kBestIsa : static_cast<LaneIsa>(std::min(g_lanes_isa, static_cast<int>(kBestIsa)));
}

void run_lanes(LaneIsa isa, const float* ox, const float* oy, const int32_t* kind, int64_t steps,
               const umap_sgd::EpochParams& p, float* rx, float* ry) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (isa == LaneIsa::avx512) return run_lanes_avx512(ox, oy, kind, steps, p, rx, ry);
  if (isa == LaneIsa::avx2) return run_lanes_avx2(ox, oy, kind, steps, p, rx, ry);
#endif
  run_lanes_body<4, kLaneVecs>(ox, oy, kind, steps, p, rx, ry);
}

// Vertices s + t kSubRounds, t in [t0, t1), of a group: their positions after the epoch into out;
// next: each edge's next due epoch (next_due), advanced here for the edges due now.
//  1. The schedule: the block's due edges, their negative samples now, next advanced (a loop of
//     independent iterations: the divisions overlap).
//  2. Units, one per chunk of kChunk edges of a row (umap_sgd::vertex_epoch: each chunk's moves
//     start from the group's position, its displacement added in chunk order), sized from step 1
//     (an upper bound: a negative sample that hits the vertex itself is skipped), dealt longest
//     first to the shortest lane (LPT: the lanes end close together; which lane a unit runs in
//     changes no bits), their operations written at their lane's rows.
//  3. The positions the operations read, gathered; 4. the lanes run; 5. each vertex's chunk
//     displacements summed in chunk order onto its position, as vertex_epoch does.
void lanes_block(const float* in, const CsrF& g, const float* eps, EdgeDue& sched, int64_t s, int64_t t0, int64_t t1,
                 int64_t row0, const umap_sgd::EpochParams& p, float* out) {
  int32_t* next = sched.next.data();
  int32_t* f_next = sched.f_next.data();
  int32_t* f_before = sched.f_before.data();
  thread_local LaneScratch sc;
  const LaneIsa isa = lane_isa();
  const int L = lanes_of(isa);
  if (sc.lanes != L) sc.reset(L);
  const int64_t nv = t1 - t0;
  const int32_t* tail = g.indices.data();
  auto vertex = [&](int64_t v) { return s + (t0 + v) * umap_sgd::kSubRounds; };
  // 1. The schedule: the due edges listed without a branch (whether an edge is due is close to a
  // coin toss: a branch would be mispredicted every few edges), then their negative samples and
  // next due epochs; units (vertex v, its due edges [unit_d, next unit's)) with their sizes.
  sc.unit_v.clear(), sc.unit_d.clear(), sc.unit_n.clear();
  int64_t n_edges = 0;
  // (g is group major: vertex(v)'s edges are row row0 + v, the block's rows one run of memory)
  n_edges = g.indptr[row0 + nv] - g.indptr[row0];
  sc.due.resize(static_cast<size_t>(n_edges));
  sc.nneg.resize(static_cast<size_t>(n_edges));
  int64_t n_due = 0;
  int64_t* due = sc.due.data();
  for (int64_t v = 0; v < nv; ++v) {
    const int64_t begin = g.indptr[row0 + v], end = g.indptr[row0 + v + 1];
    for (int64_t b = begin; b < end || b == begin; b += umap_sgd::kChunk) {
      sc.unit_v.push_back(static_cast<int32_t>(v)), sc.unit_d.push_back(n_due);
      for (int64_t e = b, e1 = std::min(end, b + umap_sgd::kChunk); e < e1; ++e) {
        due[n_due] = e;
        n_due += next[e] == p.epoch;
      }
      if (end == begin) break;
    }
  }
  sc.unit_d.push_back(n_due);
  int32_t* nneg = sc.nneg.data();
  for (int64_t q = 0; q < n_due; ++q) {
    const int64_t e = due[q];
    // due_negatives(eps[e], p.epoch, p.neg_rate) with its quotients F(n), F(n - 1) kept from the
    // edge's last visit (an edge is due here, so eps > 0 and F(n) > F(n - 1))
    const int64_t n_neg = umap_sgd::due_negatives_of(eps[e], p.epoch, f_before[e], p.neg_rate);
    next[e] = next_due(eps[e], p.epoch, f_next[e], f_next[e], f_before[e]);
    nneg[q] = static_cast<int32_t>(n_neg);  // (never -1: due by construction; skipped if it were)
  }
  for (size_t u = 0; u + 1 < sc.unit_d.size(); ++u) {
    int64_t size = 2;  // kStart, kEnd
    for (int64_t q = sc.unit_d[u]; q < sc.unit_d[u + 1]; ++q) size += nneg[q] >= 0 ? 2 + nneg[q] : 0;
    sc.unit_n.push_back(static_cast<int32_t>(size));
  }
  const int64_t nu = static_cast<int64_t>(sc.unit_v.size());
  // 2. LPT: units by size, longest first (ties: in unit order), each to the shortest lane.
  sc.by_size.resize(static_cast<size_t>(nu));
  // (a counting sort by size, descending, stable: sizes are at most 2 + kChunk (2 + negatives))
  int32_t max_size = 0;
  for (int32_t z : sc.unit_n) max_size = std::max(max_size, z);
  sc.count.assign(static_cast<size_t>(max_size) + 2, 0);
  for (int32_t z : sc.unit_n) ++sc.count[max_size - z + 1];
  for (size_t c = 1; c < sc.count.size(); ++c) sc.count[c] += sc.count[c - 1];
  for (int64_t u = 0; u < nu; ++u) sc.by_size[sc.count[max_size - sc.unit_n[u]]++] = static_cast<int32_t>(u);
  // a min-heap of (length, lane)
  std::pair<int64_t, int32_t> heap[kMaxLanes];
  for (int c = 0; c < L; ++c) heap[c] = {0, c};
  sc.unit_lane.resize(static_cast<size_t>(nu)), sc.unit_row.resize(static_cast<size_t>(nu));
  int64_t steps = 0;
  for (int64_t q = 0; q < nu; ++q) {
    const int32_t u = sc.by_size[q];
    auto [len, l] = heap[0];
    sc.unit_lane[u] = l, sc.unit_row[u] = len;
    len += sc.unit_n[u];
    steps = std::max(steps, len);
    // sift down the new root
    int h = 0;
    for (;;) {
      int c = 2 * h + 1;
      if (c >= L) break;
      if (c + 1 < L && heap[c + 1] < heap[c]) ++c;
      if (!(heap[c] < std::pair<int64_t, int32_t>(len, l))) break;
      heap[h] = heap[c], h = c;
    }
    heap[h] = {len, l};
  }
  if (steps > sc.rows) sc.grow(steps);
  for (int64_t u = 0; u < nu; ++u) {
    const int32_t i = static_cast<int32_t>(vertex(sc.unit_v[u]));
    const int l = sc.unit_lane[u];
    int32_t* li = sc.li.data() + sc.unit_row[u] * L + l;
    int64_t t = 0;
    auto push = [&](int32_t who, int32_t kind) { li[t * L] = (who << kKindBits) | kind, ++t; };
    push(i, kStart);
    for (int64_t q = sc.unit_d[u]; q < sc.unit_d[u + 1]; ++q) {
      const int32_t n_neg = nneg[q];
      if (n_neg < 0) continue;
      const int32_t j = tail[due[q]];
      push(j, kAttract);
      const uint64_t key = umap_sgd::edge_key(p.seed, i, j);
      for (int32_t r = 0; r < n_neg; ++r) {
        const uint32_t k = umap_sgd::random_vertex_of(key, p.epoch, r, p.n_vertices);
        if (static_cast<int32_t>(k) != i) push(static_cast<int32_t>(k), kRepulse);
      }
      push(j, kAttract);
    }
    push(0, kEnd);
    sc.unit_row[u] += t - 1;  // the unit's kEnd row
  }
  // 3. The positions the cells read, in one pass of independent loads (prefetched ahead).
  const int64_t cells = steps * L;
  constexpr int64_t kAhead = 64;
  const int32_t* li = sc.li.data();
  float* lx = sc.lx.data();
  float* ly = sc.ly.data();
  int32_t* lk = sc.lk.data();
  for (int64_t c = 0; c < cells; ++c) {
    if (c + kAhead < cells) __builtin_prefetch(in + 2 * static_cast<int64_t>(li[c + kAhead] >> kKindBits));
    const float* q = in + 2 * static_cast<int64_t>(li[c] >> kKindBits);
    lx[c] = q[0], ly[c] = q[1], lk[c] = li[c] & ((1 << kKindBits) - 1);
  }
  // 4. The lanes.
  run_lanes(isa, lx, ly, lk, steps, p, sc.rx.data(), sc.ry.data());
  // 5. vertex_epoch's sums: acc = 0 + delta_0 + delta_1 + ... in chunk order, out = position + acc.
  for (int64_t u = 0; u < nu;) {
    const int32_t v = sc.unit_v[u];
    const int64_t i = vertex(v);
    float accx = 0.0f, accy = 0.0f;
    for (; u < nu && sc.unit_v[u] == v; ++u) {
      const size_t c = static_cast<size_t>(sc.unit_row[u] * L + sc.unit_lane[u]);
      accx += sc.rx[c], accy += sc.ry[c];
    }
    out[2 * i] = in[2 * i] + accx;
    out[2 * i + 1] = in[2 * i + 1] + accy;
  }
  // Back to kNop (vertex 0) for the next block (the rows beyond `steps` were never written).
  std::fill_n(sc.li.begin(), cells, static_cast<int32_t>(kNop));
}

// One batched epoch (umap_sgd.hpp): the groups one after the other, each computed into `tmp` from
// `pos` and copied back. 2-D layouts in lanes (lanes_block, on the group-major graph, `lanes`)
// unless `reference`; others vertex by vertex (umap_sgd::vertex_epoch, the GPU kernel's code) on g.
template <int D>
void batched_epoch(const Context& ctx, const CsrF& g, bool lanes, const std::vector<float>& eps, EdgeDue& next,
                   const umap_sgd::EpochParams& p, float* pos, float* tmp) {
  const int64_t n = g.n_rows, dim = p.dim;
  int64_t row0 = 0;  // the group's first row in the group-major graph
  for (int64_t s = 0; s < umap_sgd::kSubRounds; ++s) {
    const int64_t m = (n - s + umap_sgd::kSubRounds - 1) / umap_sgd::kSubRounds;  // the group's vertices
    parallel_for(ctx.threads(), (m + kEpochBlock - 1) / kEpochBlock, [&](int64_t blk) {
      const int64_t t0 = blk * kEpochBlock, t1 = std::min(m, (blk + 1) * kEpochBlock);
      if (D == 2 && lanes) {
        lanes_block(pos, g, eps.data(), next, s, t0, t1, row0 + t0, p, tmp);
        return;
      }
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i = s + t * umap_sgd::kSubRounds;
        umap_sgd::vertex_epoch<D>(pos, g.indices.data(), eps.data(), g.indptr[i], g.indptr[i + 1],
                                  static_cast<int32_t>(i), p, tmp + i * dim);
      }
    });
    row0 += m;
    // (serial: n / 8 positions, microseconds; a second parallel region per group would cost a
    // barrier more)
    for (int64_t i = s; i < n; i += umap_sgd::kSubRounds)
      for (int64_t c = 0; c < dim; ++c) pos[i * dim + c] = tmp[i * dim + c];
  }
}

}  // namespace

// Tests only (declared in tests/graph/test_umap.cpp): the 2-D lanes on SSE2 (0), AVX2 (1) or AVX-512
// (2), at most what the CPU has; -1: the best it has.
void umap_lanes_isa(int isa) { g_lanes_isa = isa; }

void validate_umap_options(const UmapOptions& opt) {
  check_sgd(opt);
  if (opt.n_components < 1) fail_input(kWhere, "n_components = ", opt.n_components, " must be at least 1");
  if (opt.maxiter && *opt.maxiter < 0) fail_input(kWhere, "maxiter = ", *opt.maxiter, " must not be negative");
  if (!(opt.negative_sample_rate >= 0)) fail_input(kWhere, "negative_sample_rate must not be negative");
  if (!(opt.spread > 0) || !(opt.min_dist >= 0) || opt.min_dist > 3 * opt.spread)
    fail_input(kWhere, "spread = ", opt.spread, ", min_dist = ", opt.min_dist,
               " are invalid; use spread > 0 and 0 <= min_dist <= 3 spread (typically min_dist < spread)");
}

void check_sgd(const UmapOptions& opt) {
  if (opt.sgd != "batched" && opt.sgd != "sequential")
    fail_input(kWhere, "sgd '", opt.sgd, "' is unknown; use batched or sequential");
  if (opt.sgd == "batched" && opt.n_components > umap_sgd::kMaxDim)
    fail_input(kWhere, "n_components = ", opt.n_components, " is more than the batched layout supports (",
               umap_sgd::kMaxDim, "); use sgd sequential");
}

umap_sgd::EpochParams epoch_params(const UmapOptions& opt, const UmapResult& res, int64_t n) {
  umap_sgd::EpochParams p{};
  p.n_vertices = static_cast<uint32_t>(n);
  p.dim = static_cast<int>(opt.n_components);
  p.a = static_cast<float>(res.a);
  p.b = static_cast<float>(res.b);
  p.gamma = static_cast<float>(opt.gamma);
  p.neg_rate = opt.negative_sample_rate;
  p.seed = umap_sgd::mix64(opt.random_state + 0x9E3779B97F4A7C15ULL);
  return p;
}

// g's rows in group-major order (batched_epoch's groups: vertex i = s + t kSubRounds at row
// offset(s) + t), each row's edges in their order.
CsrF group_major(const Context& ctx, const CsrF& g) {
  const int64_t n = g.n_rows;
  CsrF out;
  out.n_rows = n, out.n_cols = g.n_cols;
  out.indptr.assign(static_cast<size_t>(n) + 1, 0);
  std::vector<int64_t> from(static_cast<size_t>(n));  // row r of out is g's row from[r]
  int64_t r = 0;
  for (int64_t s = 0; s < umap_sgd::kSubRounds; ++s)
    for (int64_t i = s; i < n; i += umap_sgd::kSubRounds, ++r) {
      from[r] = i;
      out.indptr[r + 1] = out.indptr[r] + (g.indptr[i + 1] - g.indptr[i]);
    }
  resize_large(out.indices, static_cast<size_t>(out.indptr[n]));
  resize_large(out.data, static_cast<size_t>(out.indptr[n]));
  parallel_for(ctx.threads(), (n + kRowsPerBlock - 1) / kRowsPerBlock, [&](int64_t b) {
    for (int64_t q = b * kRowsPerBlock; q < std::min(n, (b + 1) * kRowsPerBlock); ++q) {
      const int64_t i = from[q], len = g.indptr[i + 1] - g.indptr[i];
      std::copy_n(g.indices.begin() + g.indptr[i], len, out.indices.begin() + out.indptr[q]);
      std::copy_n(g.data.begin() + g.indptr[i], len, out.data.begin() + out.indptr[q]);
    }
  });
  return out;
}

void umap_batched_epochs(const Context& ctx, const CsrF& g, const UmapOptions& opt, UmapResult& res, bool reference) {
  const int64_t n = g.n_rows, dim = opt.n_components, n_edges = g.nnz();
  constexpr int64_t kPiece = int64_t(1) << 18;  // edges per parallel piece
  const int64_t pieces = (n_edges + kPiece - 1) / kPiece;
  std::vector<float> piece_max(static_cast<size_t>(pieces), 0.0f);
  parallel_for(ctx.threads(), pieces, [&](int64_t b) {
    float m = 0;
    for (int64_t q = b * kPiece; q < std::min(n_edges, (b + 1) * kPiece); ++q) m = std::max(m, g.data[q]);
    piece_max[b] = m;
  });
  float wmax = 0;
  for (float m : piece_max) wmax = std::max(wmax, m);
  if (n_edges == 0 || !(wmax > 0) || res.n_epochs <= 1) return;
  // The lanes read each block's edges as one run of memory: the graph's rows in group-major order
  // (group s's vertices s, s + kSubRounds, ... one after the other; each row's edges in their order,
  // so the same arithmetic). Strided rows left the schedule's loads of the edges' eps, due epochs and
  // tails waiting on cache misses (half of a 2-D layout's time at 20k cells).
  const bool lanes = dim == 2 && !reference && n < kLaneMaxVertices;
  CsrF gm;
  if (lanes) gm = group_major(ctx, g);
  const CsrF& ge = lanes ? gm : g;
  std::vector<float> eps(static_cast<size_t>(n_edges));
  EdgeDue next;
  next.next.resize(static_cast<size_t>(n_edges));
  next.f_next.resize(static_cast<size_t>(n_edges));
  next.f_before.resize(static_cast<size_t>(n_edges));
  parallel_for(ctx.threads(), pieces, [&](int64_t b) {
    for (int64_t q = b * kPiece; q < std::min(n_edges, (b + 1) * kPiece); ++q) {
      eps[q] = umap_sgd::epochs_per_sample(ge.data[q], 0.0f, wmax);
      next.next[q] = next_due(eps[q], 0, 0.0, next.f_next[q], next.f_before[q]);  // (F(0) = 0)
    }
  });
  umap_sgd::EpochParams p = epoch_params(opt, res, n);
  std::vector<float> tmp(res.embedding.data.size());
  float* pos = res.embedding.data.data();
  for (int64_t ep = 1; ep < res.n_epochs; ++ep) {
    umap_sgd::set_epoch(p, ep, opt.alpha, res.n_epochs);
    if (dim == 2) batched_epoch<2>(ctx, ge, lanes, eps, next, p, pos, tmp.data());
    else if (dim == 3) batched_epoch<3>(ctx, ge, lanes, eps, next, p, pos, tmp.data());
    else batched_epoch<umap_sgd::kMaxDim>(ctx, ge, lanes, eps, next, p, pos, tmp.data());
  }
}

std::pair<double, double> find_ab_params(double spread, double min_dist) {
  if (!(spread > 0) || !(min_dist >= 0) || min_dist > 3 * spread)
    fail_input(kWhere, "spread = ", spread, ", min_dist = ", min_dist,
               " are invalid; use spread > 0 and 0 <= min_dist <= 3 spread (typically min_dist < spread)");
  std::vector<double> xv(kAbPoints), yv(kAbPoints);
  for (int i = 0; i < kAbPoints; ++i) {
    xv[i] = spread * 3.0 * i / (kAbPoints - 1);
    yv[i] = xv[i] < min_dist ? 1.0 : std::exp(-(xv[i] - min_dist) / spread);
  }
  auto cost = [&](double a, double b) {
    double c = 0;
    for (int i = 0; i < kAbPoints; ++i) {
      const double r = 1.0 / (1.0 + a * std::pow(xv[i], 2 * b)) - yv[i];
      c += r * r;
    }
    return c;
  };
  double a = 1.0, b = 1.0, lambda = 1e-3, c = cost(a, b);
  for (int it = 0; it < 1000; ++it) {
    double jtj[3] = {0, 0, 0}, jtr[2] = {0, 0};  // jtj: aa, ab, bb
    for (int i = 0; i < kAbPoints; ++i) {
      const double x = xv[i];
      const double t = x > 0 ? std::pow(x, 2 * b) : 0.0;
      const double f = 1.0 / (1.0 + a * t);
      const double r = f - yv[i];
      const double da = -t * f * f;
      const double db = x > 0 ? -a * t * 2.0 * std::log(x) * f * f : 0.0;
      jtj[0] += da * da;
      jtj[1] += da * db;
      jtj[2] += db * db;
      jtr[0] += da * r;
      jtr[1] += db * r;
    }
    bool accepted = false;
    for (int tries = 0; tries < 60 && !accepted; ++tries) {
      const double m00 = jtj[0] * (1 + lambda), m11 = jtj[2] * (1 + lambda), m01 = jtj[1];
      const double det = m00 * m11 - m01 * m01;
      if (!(std::fabs(det) > 0)) {
        lambda *= 10;
        continue;
      }
      const double da = -(m11 * jtr[0] - m01 * jtr[1]) / det;
      const double db = -(m00 * jtr[1] - m01 * jtr[0]) / det;
      const double na = a + da, nb = b + db;
      const double nc = na > 0 && nb > 0 ? cost(na, nb) : std::numeric_limits<double>::infinity();
      if (nc <= c) {
        const bool done = std::fabs(da) <= 1e-15 * (std::fabs(a) + 1e-15) && std::fabs(db) <= 1e-15 * (std::fabs(b) + 1e-15);
        const double prev = c;
        a = na, b = nb, c = nc;
        lambda = std::max(lambda / 10, 1e-12);
        accepted = true;
        if (done || prev - nc <= 1e-18 * prev) return {a, b};
      } else {
        lambda *= 10;
      }
    }
    if (!accepted) break;  // no step lowers the cost: at the minimum to rounding
  }
  return {a, b};
}

float checked_max_weight(const Context& ctx, const CsrF& graph) {
  const int64_t n = graph.nnz();
  constexpr int64_t kPiece = int64_t(1) << 20;
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<float> mx(static_cast<size_t>(pieces), 0.0f);
  std::vector<uint8_t> bad(static_cast<size_t>(pieces), 0);
  parallel_for(ctx.threads(), pieces, [&](int64_t b) {
    const int64_t p1 = std::min(n, (b + 1) * kPiece);
    float m = 0;
    bool any_bad = false;
    for (int64_t p = b * kPiece; p < p1; ++p) {
      const float w = graph.data[p];
      any_bad |= !(std::isfinite(w) && w >= 0);
      m = std::max(m, w);
    }
    mx[b] = m;
    bad[b] = any_bad;
  });
  float m = 0;
  for (int64_t b = 0; b < pieces; ++b) {
    if (bad[b]) fail_input(kWhere, "the graph has a negative or non-finite weight; recompute the neighbours");
    m = std::max(m, mx[b]);
  }
  return m;
}

void umap_mark(const char* what) {
  static const bool on = std::getenv("SCURRY_UMAP_TIMES") != nullptr;
  if (!on) return;
  static auto last = std::chrono::steady_clock::now();
  const auto t = std::chrono::steady_clock::now();
  std::fprintf(stderr, "[umap] %s %.4f s\n", what, std::chrono::duration<double>(t - last).count());
  last = t;
}

CsrF prune_graph(const Context& ctx, const CsrF& graph, float threshold) {
  const int64_t n = graph.n_rows;
  const int64_t n_blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  auto kept = [&](int64_t p) { return graph.data[p] >= threshold && graph.data[p] != 0.0f; };
  CsrF g = CsrF::zeros(n, graph.n_cols);
  parallel_for(ctx.threads(), n_blocks, [&](int64_t blk) {
    const int64_t r1 = std::min(n, (blk + 1) * kRowsPerBlock);
    for (int64_t i = blk * kRowsPerBlock; i < r1; ++i) {
      int64_t c = 0;
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) c += kept(p);
      g.indptr[i + 1] = c;
    }
  });
  for (int64_t i = 0; i < n; ++i) g.indptr[i + 1] += g.indptr[i];
  resize_large(g.indices, static_cast<size_t>(g.indptr[n]));  // (pages faulted in on several threads)
  resize_large(g.data, static_cast<size_t>(g.indptr[n]));
  parallel_for(ctx.threads(), n_blocks, [&](int64_t blk) {
    const int64_t r1 = std::min(n, (blk + 1) * kRowsPerBlock);
    for (int64_t i = blk * kRowsPerBlock; i < r1; ++i) {
      int64_t q = g.indptr[i];
      for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p)
        if (kept(p)) g.indices[q] = graph.indices[p], g.data[q++] = graph.data[p];
    }
  });
  return g;
}

UmapResult umap(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init,
                const RepresentationFn& rep) {
  const auto t_start = std::chrono::steady_clock::now();
  const int64_t n = graph.n_rows, dim = opt.n_components;
  if (graph.n_cols != n)
    fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square (cells x cells)");
  if (n < 2) fail_input(kWhere, "the graph has ", n, " nodes; UMAP needs at least 2 cells");
  if (dim < 1 || dim >= n)
    fail_input(kWhere, "n_components = ", dim, " is out of range for ", n, " cells; use 1 <= n_components < n_cells");
  if (opt.maxiter && *opt.maxiter < 0) fail_input(kWhere, "maxiter = ", *opt.maxiter, " must not be negative");
  if (!(opt.negative_sample_rate >= 0)) fail_input(kWhere, "negative_sample_rate must not be negative");
  check_sgd(opt);
  umap_mark("start");
  const float wmax_all = checked_max_weight(ctx, graph);
  umap_mark("weights checked");

  UmapResult res;
  res.max_weight = wmax_all;
  if (opt.a && opt.b) {
    res.a = *opt.a;
    res.b = *opt.b;
  } else {
    std::tie(res.a, res.b) = find_ab_params(opt.spread, opt.min_dist);
  }
  const int64_t default_epochs = n <= 10000 ? 500 : 200;
  const int64_t n_epochs = opt.maxiter ? *opt.maxiter : default_epochs;
  res.n_epochs = n_epochs;
  umap_mark("a and b");

  // Prune weak edges: below max / n_epochs (max / default_epochs when n_epochs <= 10). Not needed
  // without epochs (the GPU path asks for the start layout only) unless the spectral layout uses it.
  const bool need_graph = n_epochs > 0 || opt.init_pos == "spectral";
  const float wmax = need_graph ? wmax_all : 0.0f;
  const float threshold = wmax / static_cast<float>(n_epochs > 10 ? n_epochs : default_epochs);
  const CsrF g = need_graph ? prune_graph(ctx, graph, threshold) : CsrF::zeros(0, 0);
  umap_mark("the pruned graph");

  // Initial layout.
  Rng rng(opt.random_state);
  DenseD emb(n, dim);
  if (opt.init_pos != "spectral" && opt.init_pos != "random") {
    if (!init)
      fail_input(kWhere, "init_pos '", opt.init_pos, "' needs initial coordinates; use spectral, random or an obsm key");
    if (init->n_rows != n || init->n_cols < dim)
      fail_input(kWhere, "the initial coordinates are ", init->n_rows, " x ", init->n_cols, "; need ", n, " x ", dim);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) emb(i, c) = (*init)(i, c);
    res.init = opt.init_pos;
  } else {
    std::optional<DenseD> spec;
    if (opt.init_pos == "spectral") {
      SpectralOptions so;
      so.dim = dim;
      so.random_state = opt.random_state;
      spec = spectral_layout(ctx, g, so);
      umap_mark("spectral layout");
      if (!spec) {
        // Several components: each laid out on its own around a point of a meta layout (umap-learn's
        // spectral_layout then does the same).
        std::vector<int32_t> labels;
        const int64_t nc = connected_components(g, &labels, ctx.threads());
        if (nc > 1) {
          log::info(detail::concat("umap: the graph has ", nc, " components; each laid out on its own (umap's multi-component layout)"));
          spec = multi_component_layout(ctx, g, labels, nc, so, rep);
          umap_mark("multi-component layout");
        } else {
          log::info("umap: no spectral layout for this graph; random initialisation instead");
        }
      }
    }
    if (spec) {
      // On the threads, in fixed pieces: the largest |x| (a maximum: exact in any order), then the
      // scaled layout plus noise, the noise counter-based (spectral::gaussian_at(seed, entry),
      // Box-Muller of splitmix64 uniforms) so that every piece draws its own entries' values.
      const int64_t total = static_cast<int64_t>(emb.data.size()), pieces = (total + kNoisePiece - 1) / kNoisePiece;
      std::vector<double> piece_max(static_cast<size_t>(pieces), 0.0);
      parallel_for(ctx.threads(), pieces, [&](int64_t b) {
        double m = 0;
        for (int64_t q = b * kNoisePiece; q < std::min(total, (b + 1) * kNoisePiece); ++q) m = std::max(m, std::fabs(spec->data[q]));
        piece_max[b] = m;
      });
      double m = 0;
      for (double v : piece_max) m = std::max(m, v);
      const double expansion = m > 0 ? kInitScale / m : 1.0;
      const uint64_t noise_seed = umap_noise_seed(opt.random_state);
      parallel_for(ctx.threads(), pieces, [&](int64_t b) {
        for (int64_t q = b * kNoisePiece; q < std::min(total, (b + 1) * kNoisePiece); ++q)
          emb.data[q] = static_cast<float>(spec->data[q] * expansion) +
                        static_cast<float>(kInitNoise * spectral::gaussian_at(noise_seed, static_cast<uint64_t>(q)));
      });
      res.init = "spectral";
    } else {
      for (double& v : emb.data) v = static_cast<float>(-10.0 + 20.0 * rng.uniform());
      res.init = "random";
    }
  }
  // Each column to [0, 10]: the columns' minima and maxima over fixed row pieces on the threads
  // (exact in any order), then the rows.
  DenseF e(n, dim);
  {
    const int64_t pieces = (n + kNoisePiece - 1) / kNoisePiece;
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> lo_p(static_cast<size_t>(pieces * dim), inf), hi_p(static_cast<size_t>(pieces * dim), -inf);
    parallel_for(ctx.threads(), pieces, [&](int64_t b) {
      for (int64_t i = b * kNoisePiece; i < std::min(n, (b + 1) * kNoisePiece); ++i)
        for (int64_t c = 0; c < dim; ++c)
          lo_p[b * dim + c] = std::min(lo_p[b * dim + c], emb(i, c)), hi_p[b * dim + c] = std::max(hi_p[b * dim + c], emb(i, c));
    });
    std::vector<double> lo(static_cast<size_t>(dim), inf), span(static_cast<size_t>(dim));
    for (int64_t c = 0; c < dim; ++c) {
      double hi = -inf;
      for (int64_t b = 0; b < pieces; ++b) lo[c] = std::min(lo[c], lo_p[b * dim + c]), hi = std::max(hi, hi_p[b * dim + c]);
      span[c] = hi - lo[c] > 0 ? hi - lo[c] : 1.0;
    }
    parallel_for(ctx.threads(), pieces, [&](int64_t b) {
      for (int64_t i = b * kNoisePiece; i < std::min(n, (b + 1) * kNoisePiece); ++i)
        for (int64_t c = 0; c < dim; ++c) e(i, c) = static_cast<float>(kInitScale * (emb(i, c) - lo[c]) / span[c]);
    });
  }

  res.init_seconds = seconds_since(t_start);
  umap_mark("noise and scaling");
  if (n_epochs == 0) {  // the start layout only
    res.embedding = std::move(e);
    return res;
  }
  const auto t_epochs = std::chrono::steady_clock::now();
  if (opt.sgd == "batched") {
    res.embedding = std::move(e);
    umap_batched_epochs(ctx, g, opt, res);
    res.epochs_seconds = seconds_since(t_epochs);
    return res;
  }

  // SGD with umap's schedule, edge after edge (umap-learn's order).
  const int64_t n_edges = g.nnz();
  std::vector<int32_t> head(static_cast<size_t>(n_edges));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = g.indptr[i]; p < g.indptr[i + 1]; ++p) head[p] = static_cast<int32_t>(i);
  const std::vector<int32_t>& tail = g.indices;
  float gmax = 0;
  for (float w : g.data) gmax = std::max(gmax, w);
  std::vector<double> eps(static_cast<size_t>(n_edges), -1.0);
  for (int64_t p = 0; p < n_edges; ++p) {
    const double samples = static_cast<double>(n_epochs) * (g.data[p] / gmax);
    if (samples > 0) eps[p] = static_cast<double>(n_epochs) / samples;
  }
  std::vector<double> next_sample = eps, eps_neg(eps.size()), next_neg(eps.size());
  for (size_t p = 0; p < eps.size(); ++p) next_neg[p] = eps_neg[p] = eps[p] / opt.negative_sample_rate;
  Tau tau{static_cast<uint32_t>(rng.g()) | 2u, static_cast<uint32_t>(rng.g()) | 8u, static_cast<uint32_t>(rng.g()) | 16u};
  const double a = res.a, b = res.b, gamma = opt.gamma;
  const uint32_t nv = static_cast<uint32_t>(n);
  double alpha = opt.alpha;
  for (int64_t ep = 0; ep < n_epochs; ++ep) {
    const double epd = static_cast<double>(ep);
    for (int64_t p = 0; p < n_edges; ++p) {
      if (eps[p] <= 0 || next_sample[p] > epd) continue;
      float* cur = e.row(head[p]);
      float* oth = e.row(tail[p]);
      double d2 = 0;
      for (int64_t c = 0; c < dim; ++c) {
        const double t = static_cast<double>(cur[c]) - oth[c];
        d2 += t * t;
      }
      double gc = 0;
      if (d2 > 0) gc = -2.0 * a * b * std::pow(d2, b - 1.0) / (a * std::pow(d2, b) + 1.0);
      for (int64_t c = 0; c < dim; ++c) {
        const double gd = clip(gc * (static_cast<double>(cur[c]) - oth[c]));
        cur[c] = static_cast<float>(cur[c] + gd * alpha);
        oth[c] = static_cast<float>(oth[c] - gd * alpha);
      }
      next_sample[p] += eps[p];
      const int64_t n_neg = static_cast<int64_t>((epd - next_neg[p]) / eps_neg[p]);
      for (int64_t s = 0; s < n_neg; ++s) {
        const uint32_t k = tau.next() % nv;
        const float* o = e.row(k);
        double dn = 0;
        for (int64_t c = 0; c < dim; ++c) {
          const double t = static_cast<double>(cur[c]) - o[c];
          dn += t * t;
        }
        double gr;
        if (dn > 0)
          gr = 2.0 * gamma * b / ((0.001 + dn) * (a * std::pow(dn, b) + 1.0));
        else if (static_cast<int32_t>(k) == head[p])
          continue;
        else
          gr = 0.0;
        for (int64_t c = 0; c < dim; ++c) {
          const double gd = gr > 0 ? clip(gr * (static_cast<double>(cur[c]) - o[c])) : kClip;
          cur[c] = static_cast<float>(cur[c] + gd * alpha);
        }
      }
      if (n_neg > 0) next_neg[p] += static_cast<double>(n_neg) * eps_neg[p];
    }
    alpha = opt.alpha * (1.0 - epd / static_cast<double>(n_epochs));
  }
  res.embedding = std::move(e);
  res.epochs_seconds = seconds_since(t_epochs);
  return res;
}

const CsrF& neighbors_graph(const Dataset& d, const std::string& neighbors_key,
                            const std::string& step, CsrF& storage) {
  std::string key = neighbors_key == "neighbors" ? "connectivities" : neighbors_key + "_connectivities";
  auto u = d.uns.find(neighbors_key);
  if (u != d.uns.end() && u->second.is_dict()) {
    const Dict& nd = u->second.dict();
    auto ck = nd.find("connectivities_key");
    if (ck != nd.end() && std::holds_alternative<std::string>(ck->second.v)) key = std::get<std::string>(ck->second.v);
  }
  auto it = d.obsp.find(key);
  if (it == d.obsp.end())
    fail_input(step, "obsp['", key, "'] is missing (neighbors_key '", neighbors_key,
               "'); run neighbors first");
  const CsrF* in_place = std::get_if<CsrF>(&it->second.m);
  if (!in_place) storage = to_csr_f(it->second);
  const CsrF& g = in_place ? *in_place : storage;
  validate_csr(g, step + ": obsp['" + key + "']");  // (on the threads)
  if (g.n_rows != g.n_cols || (d.n_obs() > 0 && g.n_rows != d.n_obs()))
    fail_input(step, "obsp['", key, "'] is ", g.n_rows, " x ", g.n_cols, " but the dataset has ", d.n_obs(),
               " cells; recompute the neighbours");
  return g;
}

CsrF neighbors_graph(const Dataset& d, const std::string& neighbors_key, const std::string& step) {
  CsrF storage;
  const CsrF& g = neighbors_graph(d, neighbors_key, step, storage);
  return &g == &storage ? std::move(storage) : g;
}

UmapResult umap(const Context& ctx, Dataset& d, const UmapOptions& opt) {
  umap_mark("umap called");
  CsrF storage;
  const CsrF& g = neighbors_graph(d, opt.neighbors_key, kWhere, storage);
  umap_mark("graph validated (in place)");
  DenseF init;
  const DenseF* init_ptr = nullptr;
  if (opt.init_pos != "spectral" && opt.init_pos != "random") {
    auto it = d.obsm.find(opt.init_pos);
    if (it == d.obsm.end())
      fail_input(kWhere, "init_pos '", opt.init_pos, "' is neither spectral, random nor an obsm key");
    init = to_dense_f(it->second);
    init_ptr = &init;
  }
  const bool gpu = ctx.backend() == Backend::cuda;  // the layout's epochs on the GPU
  const RepresentationFn rep = umap_representation(d, opt.neighbors_key);
  UmapResult res = gpu ? umap_gpu(ctx, g, opt, init_ptr, rep) : umap(ctx, g, opt, init_ptr, rep);
  write_umap(d, res, opt);
  log::info(detail::concat(gpu ? "umap (gpu): " : "umap: ", g.n_rows, " cells, ", res.n_epochs, " epochs, a = ", res.a, ", b = ", res.b,
                           ", ", res.init, " initialisation (", res.init_seconds, " s), epochs ", res.epochs_seconds, " s"));
  return res;
}

RepresentationFn umap_representation(const Dataset& d, const std::string& neighbors_key) {
  std::string use_rep;
  std::optional<int64_t> n_pcs;
  auto u = d.uns.find(neighbors_key);
  if (u != d.uns.end() && u->second.is_dict()) {
    auto p = u->second.dict().find("params");
    if (p != u->second.dict().end() && p->second.is_dict()) {
      const Dict& params = p->second.dict();
      if (auto r = params.find("use_rep"); r != params.end() && std::holds_alternative<std::string>(r->second.v))
        use_rep = std::get<std::string>(r->second.v);
      if (auto c = params.find("n_pcs"); c != params.end()) {
        if (std::holds_alternative<int64_t>(c->second.v)) n_pcs = std::get<int64_t>(c->second.v);
        else if (std::holds_alternative<double>(c->second.v)) n_pcs = static_cast<int64_t>(std::get<double>(c->second.v));
      }
    }
  }
  return [&d, use_rep, n_pcs] { return choose_representation(d, use_rep, n_pcs); };
}

void write_umap(Dataset& d, const UmapResult& res, const UmapOptions&) {
  d.obsm["X_umap"] = Matrix(res.embedding, DType::f32);
  Dict params;
  params["a"] = Value(res.a);
  params["b"] = Value(res.b);
  Dict u;
  u["params"] = Value(std::move(params));
  d.uns["umap"] = Value(std::move(u));
}

}  // namespace scurry
