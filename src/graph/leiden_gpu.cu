// Leiden on the GPU (see leiden_gpu.hpp for the algorithm and its differences from the CPU path).
//
// Candidates per node over the CSR rows: a group of lanes (8 for degree <= 64, 16 for <= 128, a
// warp for <= 256) holds the node's edges in registers, gathers the neighbours' communities and those
// communities' weights, and walks the distinct allowed communities one at a time (the first pending
// edge's community; its weight summed over the group by a shuffle butterfly). Nodes of higher
// degree (upper levels' hubs) take the sort path: the (node, community) keys of those that look
// for a community (this sweep's share; refinement's well-connected singletons) are radix-sorted
// and reduced by key. Every sum is in a fixed order and the community weights are 64-bit fixed-point
// integers (exact, order-free atomics), so results do not depend on timing.
//
// Floor on one H200 (1.3M cells, k = 15: 34.5M directed edges at level 0): a local-moving sweep
// reads each edge once (4 B target + 8 B weight, 0.4 GB) and gathers communities and their weights
// from L2 (5 + 10 MB arrays, a 32 B sector per gather): ~0.1 ms at 4.3 TB/s, ~0.3 ms of L2 sectors.
// Measured (SCURRY_PROFILE=1): level-0 candidates ~0.45 ms a sweep once communities have formed,
// 1.2 ms a sweep on average over the first iteration (early on, every neighbour is its own
// community); the sort path for every node took ~4.8 ms a sweep. Leiden until stable on that graph: 0.49 s (setup 32 ms; iteration 0
// 200 ms, 65 + 60 sweeps at levels 0 and 1; four more iterations of ~60 ms, two thirds of it
// refinement and aggregation), against 1.23 s with the sort path for every node.
//
// At 10M cells (~200M edges): int64 edge counts and offsets; device memory ~60 B per edge (src,
// dst, weight, two key and two value buffers for the sort of the aggregation) + ~150 B per node.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_resources.cuh"
#include "graph/leiden_gpu.hpp"
#include "graph/mix64.cuh"
#include "graph/umap.hpp"

namespace scurry {
namespace {

const char* kWhere = "leiden (gpu)";
constexpr int kBlock = 256;                  // threads per block of every kernel here
constexpr int64_t kMaxBlocks = 1 << 16;      // grid-stride loops above this many blocks
constexpr int kMaxMoveSweeps = 64;           // local moving: most sweeps per level
constexpr double kMoveTolerance = 1e-6;      // local moving: least modularity gain of a sweep pair
constexpr double kGainRounding = 1e-10;      // a move must beat staying by this times the node weight
constexpr int kMaxRefineRounds = 16;         // refinement: most rounds per level
constexpr int kMaxLevels = 64;               // aggregation levels per iteration
constexpr int64_t kMaxStableIterations = 20; // "until stable": most Leiden iterations
constexpr double kStableTolerance = 1e-7;    // "until stable": least modularity gain of an iteration
constexpr uint32_t kNoLabel = 0xFFFFFFFFu;   // label complement base of the packed candidates
// Candidate kernels (lanes per node x edges per lane): 8 x 4 up to kSmallDegree, 8 x 8 up to
// 2 kSmallDegree, 16 x 8 up to 4 kSmallDegree, 32 x 8 up to kMidDegree; nodes above kMidDegree (or
// above SCURRY_LEIDEN_SORT_ABOVE, a test knob) take the sort path.
constexpr int kSmallLanes = 8;
constexpr int kSmallDegree = 32;
constexpr int kMidDegree = 256;
constexpr int kClasses = 5;  // candidate classes: the four kernels, then the sort path
// Row-sum kernels: 8 lanes per node up to kSmallDegree, a warp up to kRowWarpDegree, a block above.
constexpr int kRowWarpDegree = 1024;
constexpr int kFixedBits = 61;               // community weights: fixed point, 2m scaled to <= 2^61
// Several GPUs: levels of fewer nodes search every degree class on every GPU (an exchange costs more
// than their kernels); only the sort path's results are exchanged there.
constexpr int64_t kSpreadMinNodes = 100000;

int blocks_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks)));
}
int blocks_for_groups(int64_t count, int group) {  // `count` items, `group` lanes each
  const int64_t per_block = kBlock / group;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((count + per_block - 1) / per_block, kMaxBlocks)));
}
int bits_for(int64_t n) {  // bits to hold 0..n-1 (at least 1)
  int b = 1;
  while (b < 63 && (int64_t(1) << b) < n) ++b;
  return b;
}

#define GRID_LOOP(i, n)                                                                   \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- device helpers ---------------------------------------------------------------------------

constexpr unsigned kFullMask = 0xFFFFFFFFu;

__device__ inline uint32_t orderable(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Candidate (gain, label) as one max-able word: larger gain (as float) wins, ties go to the smaller
// label. Never 0 for labels < 2^31, so 0 means "no candidate".
__device__ inline unsigned long long pack(double gain, uint32_t label) {
  return (static_cast<unsigned long long>(orderable(static_cast<float>(gain))) << 32) |
         static_cast<unsigned long long>(kNoLabel - label);
}
__device__ inline uint32_t unpack(unsigned long long key) { return kNoLabel - static_cast<uint32_t>(key & 0xFFFFFFFFull); }

// Fixed-point weights (exact integer sums: the same whatever the order of the atomics).
__device__ inline unsigned long long to_fixed(double x, double scale) { return __double2ull_rn(x * scale); }
__device__ inline double from_fixed(unsigned long long t, double inv) {
  return static_cast<double>(static_cast<long long>(t)) * inv;
}

// Sum over aligned groups of G lanes (every lane of the warp must call it; every lane of a group
// gets the same value: each butterfly step adds a + b on one lane and b + a on its partner).
template <int G>
__device__ inline double group_sum(double v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Deterministic sum over the block (every thread must call it); the result on every thread.
__device__ double block_sum(double v) {
  __shared__ double sh[kBlock];
  __syncthreads();  // sh may still be read from a previous call
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

// ---- setup kernels ----------------------------------------------------------------------------

__global__ void expand_rows_kernel(const int64_t* indptr, int64_t n, int32_t* src) {
  GRID_LOOP(i, n)
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) src[p] = static_cast<int32_t>(i);
}

// Level-0 weights (float -> float64; every nonzero entry weighs 1 without use_weights); the
// smallest row holding a negative or non-finite weight into *bad_row.
__global__ void input_weights_kernel(const float* data, const int32_t* src, int64_t nnz, bool use_weights, double* w,
                                     int32_t* bad_row) {
  GRID_LOOP(e, nnz) {
    const float x = data[e];
    if (!isfinite(x) || x < 0) atomicMin(bad_row, src[e]);
    w[e] = x == 0.0f ? 0.0 : (use_weights ? static_cast<double>(x) : 1.0);
  }
}

__global__ void iota_kernel(int32_t* a, int64_t n) {
  GRID_LOOP(i, n) a[i] = static_cast<int32_t>(i);
}

// flags[i] = lo < degree(i) <= hi.
__global__ void degree_flags_kernel(const int64_t* off, int64_t n, int64_t lo, int64_t hi, int32_t* flags) {
  GRID_LOOP(i, n) {
    const int64_t d = off[i + 1] - off[i];
    flags[i] = d > lo && d <= hi ? 1 : 0;
  }
}
__global__ void scatter_flagged_kernel(const int32_t* flags, const int32_t* pos, int64_t n, int32_t* list) {
  GRID_LOOP(i, n) if (flags[i]) list[pos[i]] = static_cast<int32_t>(i);
}
__global__ void list_degrees_kernel(const int32_t* list, int64_t count, const int64_t* off, int64_t* deg) {
  GRID_LOOP(h, count) deg[h] = off[list[h] + 1] - off[list[h]];
}

__global__ void to_fixed_kernel(const double* x, int64_t n, double scale, unsigned long long* out) {
  GRID_LOOP(i, n) out[i] = to_fixed(x[i], scale);
}

// tot[label[i]] += kwfx[i] (tot zeroed before; fixed point).
__global__ void community_weights_kernel(const int32_t* label, const unsigned long long* kwfx, int64_t n,
                                         unsigned long long* tot) {
  GRID_LOOP(i, n) atomicAdd(&tot[label[i]], kwfx[i]);
}

// ---- row sums (per node, fixed order) ---------------------------------------------------------

enum class RowMode {
  strength,  // kw[i] = sum of the row, self[i] = its self-loop
  inner,     // kin[i] = weight to the rest of its community; wc[i]: well connected to it
  outer,     // weight to the rest of its community outside its refined community -> ext[ref[i]];
             // rtot[ref[i]] += kw[i]; rsize[ref[i]] += 1
  own,       // kin[i] = weight to the rest of its community
};

struct RowArgs {
  const int64_t* off = nullptr;
  const int32_t* dst = nullptr;
  const double* w = nullptr;
  const int32_t* comm = nullptr;
  const int32_t* ref = nullptr;
  const unsigned long long* kwfx = nullptr;
  const double* kw = nullptr;
  const unsigned long long* tot = nullptr;  // inner: fixed-point community weights
  double gamma_2m = 0, scale = 0, inv = 0;
  double* out0 = nullptr;  // strength: kw; inner: kin
  double* out1 = nullptr;  // strength: self
  uint8_t* wc = nullptr;
  unsigned long long* ext = nullptr;
  unsigned long long* rtot = nullptr;
  int32_t* rsize = nullptr;
};

template <RowMode M>
__device__ inline void row_edge(const RowArgs& a, int32_t i, int32_t ci, int32_t ri, int64_t p, double& s0,
                                double& s1) {
  const int32_t j = a.dst[p];
  const double x = a.w[p];
  if constexpr (M == RowMode::strength) {
    s0 += x;
    if (j == i) s1 += x;
  } else if constexpr (M == RowMode::inner || M == RowMode::own) {
    if (j != i && a.comm[j] == ci) s0 += x;
  } else {
    if (j != i && a.comm[j] == ci && a.ref[j] != ri) s0 += x;
  }
}

template <RowMode M>
__device__ inline void row_finish(const RowArgs& a, int32_t i, int32_t ci, int32_t ri, double s0, double s1) {
  if constexpr (M == RowMode::strength) {
    a.out0[i] = s0;
    a.out1[i] = s1;
  } else if constexpr (M == RowMode::inner) {
    a.out0[i] = s0;
    const double kwi = a.kw[i];
    a.wc[i] = s0 >= a.gamma_2m * kwi * from_fixed(a.tot[ci] - a.kwfx[i], a.inv) ? 1 : 0;
  } else if constexpr (M == RowMode::own) {
    a.out0[i] = s0;
  } else {
    atomicAdd(&a.ext[ri], to_fixed(s0, a.scale));
    atomicAdd(&a.rtot[ri], a.kwfx[i]);
    atomicAdd(&a.rsize[ri], 1);
  }
}

// G lanes per node (G <= 32), any degree: each lane sums every G-th edge in order, then the group.
template <int G, RowMode M>
__global__ void __launch_bounds__(kBlock) row_sums_kernel(const int32_t* nodes, int64_t count, RowArgs a) {
  constexpr int kGroups = kBlock / G;
  const int lane = threadIdx.x & 31, sub = lane & (G - 1);
  for (int64_t base = blockIdx.x * int64_t(kGroups) + (threadIdx.x & ~31) / G; base < count;
       base += int64_t(gridDim.x) * kGroups) {  // warp-uniform
    const int64_t idx = base + lane / G;
    double s0 = 0, s1 = 0;
    int32_t i = 0, ci = 0, ri = 0;
    if (idx < count) {
      i = nodes[idx];
      if constexpr (M != RowMode::strength) ci = a.comm[i];
      if constexpr (M == RowMode::outer) ri = a.ref[i];
      const int64_t e = a.off[i + 1];
      for (int64_t p = a.off[i] + sub; p < e; p += G) row_edge<M>(a, i, ci, ri, p, s0, s1);
    }
    s0 = group_sum<G>(s0);
    s1 = group_sum<G>(s1);
    if (idx < count && sub == 0) row_finish<M>(a, i, ci, ri, s0, s1);
  }
}

// A block per node (high degree).
template <RowMode M>
__global__ void __launch_bounds__(kBlock) row_sums_block_kernel(const int32_t* nodes, int64_t count, RowArgs a) {
  for (int64_t h = blockIdx.x; h < count; h += gridDim.x) {
    const int32_t i = nodes[h];
    const int32_t ci = M != RowMode::strength ? a.comm[i] : 0;
    const int32_t ri = M == RowMode::outer ? a.ref[i] : 0;
    double s0 = 0, s1 = 0;
    const int64_t e = a.off[i + 1];
    for (int64_t p = a.off[i] + threadIdx.x; p < e; p += kBlock) row_edge<M>(a, i, ci, ri, p, s0, s1);
    s0 = block_sum(s0);
    s1 = block_sum(s1);
    if (threadIdx.x == 0) row_finish<M>(a, i, ci, ri, s0, s1);
  }
}

// ---- candidates per node ----------------------------------------------------------------------

struct CandArgs {
  const int64_t* off = nullptr;
  const int32_t* dst = nullptr;
  const double* w = nullptr;
  const int32_t* label = nullptr;            // local moving: communities; refinement: refined communities
  const int32_t* same = nullptr;             // refinement: communities (edges to others masked)
  const double* kw = nullptr;
  const unsigned long long* tot = nullptr;   // fixed-point weights of `label`'s communities
  const unsigned long long* stot = nullptr;  // refinement: fixed-point weights of `same`'s communities
  const unsigned long long* ext = nullptr;   // refinement: weight of each refined community to the rest of its community
  const int32_t* rsize = nullptr;            // refinement: refined community sizes
  const uint8_t* wc = nullptr;               // refinement: node well connected to its community
  double gamma_2m = 0, inv = 0;
  bool up = true;                            // local moving: moves to higher labels (else lower)
  bool allow_moves = true;                   // local moving: false: k_own only
  unsigned long long salt = 0;
  unsigned subset_mask = 0;
  double* k_own = nullptr;                   // local moving: weight to the own community
  double* k_best = nullptr;                  // local moving: weight to the best community
  unsigned long long* best = nullptr;        // packed best candidate (0: none)
};

// G lanes per node, R edges per lane (degree <= G * R). Local moving: every node of the list gets
// k_own; nodes of this sweep's share also the best allowed community (higher labels when up, else
// lower) by gain k_c - gamma/2m k_i K_c. Refinement: singletons well connected to their community
// get the best refined community R of lower label inside it, R well connected, gain >= 0.
template <int G, int R, bool kRefine>
__global__ void __launch_bounds__(kBlock) candidates_kernel(const int32_t* nodes, int64_t count, CandArgs a) {
  constexpr int kGroups = kBlock / G;
  const int lane = threadIdx.x & 31, sub = lane & (G - 1);
  const unsigned gmask = G == 32 ? kFullMask : (((1u << G) - 1u) << (lane & ~(G - 1)));
  for (int64_t base = blockIdx.x * int64_t(kGroups) + (threadIdx.x & ~31) / G; base < count;
       base += int64_t(gridDim.x) * kGroups) {  // warp-uniform
    const int64_t idx = base + lane / G;
    int32_t i = -1, own = -1, own_same = -1;
    int64_t b = 0, e = 0;
    bool cand = false;
    double kwi = 0, s_tot = 0;
    if (idx < count) {
      i = nodes[idx];
      b = a.off[i];
      e = a.off[i + 1];
      own = a.label[i];
      kwi = a.kw[i];
      if constexpr (kRefine) {
        own_same = a.same[i];
        cand = a.wc[i] && a.rsize[own] == 1;
        if (!cand) e = b;  // nothing to read
        else s_tot = from_fixed(a.stot[own_same], a.inv);
      } else {
        cand = a.allow_moves &&
               (a.subset_mask == 0 || (gpu::mix64(static_cast<uint64_t>(i) ^ a.salt) & a.subset_mask) == 0);
      }
    }
    int32_t nb[R], lab[R];
    double wt[R];
    unsigned long long tt[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t p = b + r * G + sub;
      nb[r] = p < e ? a.dst[p] : -1;
      wt[r] = p < e ? a.w[p] : 0.0;
    }
    unsigned pend = 0;  // bit r: edge r's community still to be summed
    double own_sum = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      lab[r] = -1;
      const int32_t j = nb[r];
      if (j >= 0 && j != i) {
        const bool inside = !kRefine || a.same[j] == own_same;
        const int32_t c = a.label[j];
        if (inside) {
          if (c == own) {
            own_sum += wt[r];
          } else if (cand && (kRefine ? c < own : (a.up ? c > own : c < own))) {
            lab[r] = c;
            pend |= 1u << r;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) tt[r] = (pend >> r) & 1u ? a.tot[lab[r]] : 0ull;
    unsigned long long best_key = 0;
    double best_w = 0;
    for (;;) {  // one distinct community per group per turn
      const unsigned bal = __ballot_sync(kFullMask, pend != 0);
      if (bal == 0) break;
      const unsigned gb = bal & gmask;
      const int leader = gb ? __ffs(gb) - 1 : lane;
      int32_t my_c = -1;
      unsigned long long my_t = 0;
#pragma unroll
      for (int r = R - 1; r >= 0; --r)
        if ((pend >> r) & 1u) my_c = lab[r], my_t = tt[r];
      const int32_t c = __shfl_sync(kFullMask, my_c, leader);
      const unsigned long long tc = __shfl_sync(kFullMask, my_t, leader);
      double s = 0;
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (((pend >> r) & 1u) && lab[r] == c) s += wt[r], pend &= ~(1u << r);
      s = group_sum<G>(s);
      if (gb) {
        const double kc = from_fixed(tc, a.inv);
        bool ok = true;
        if constexpr (kRefine) ok = from_fixed(a.ext[c], a.inv) >= a.gamma_2m * kc * (s_tot - kc);
        const double gain = s - a.gamma_2m * kwi * kc;
        if (kRefine && gain < 0) ok = false;
        if (ok) {
          const unsigned long long key = pack(gain, static_cast<uint32_t>(c));
          if (key > best_key) best_key = key, best_w = s;
        }
      }
    }
    own_sum = group_sum<G>(own_sum);
    if (idx < count && sub == 0) {
      a.best[i] = best_key;
      if constexpr (!kRefine) {
        a.k_own[i] = own_sum;
        a.k_best[i] = best_w;
      }
    }
  }
}

// ---- sort path (nodes of high degree) ---------------------------------------------------------

// key = (h << lab_bits) | label of the neighbour; `masked` (= n) for self-loops and, with `same`,
// edges between different same[] groups. h indexes `hubs`; its keys are hub_off[h] ..
// hub_off[h + 1] - 1 (none for a node that looks for no community).
__global__ void hub_keys_kernel(const int32_t* hubs, int64_t nh, const int64_t* hub_off, const int64_t* off,
                                const int32_t* dst, const double* w, const int32_t* label, const int32_t* same,
                                int lab_bits, uint32_t masked, unsigned long long* keys, double* vals) {
  for (int64_t h = blockIdx.x; h < nh; h += gridDim.x) {
    const int32_t i = hubs[h];
    const int64_t b = off[i], o = hub_off[h], d = hub_off[h + 1] - o;
    const int32_t si = same ? same[i] : 0;
    for (int64_t t = threadIdx.x; t < d; t += blockDim.x) {
      const int32_t j = dst[b + t];
      const bool m = j == i || (same && same[j] != si);
      const uint32_t lab = m ? masked : static_cast<uint32_t>(label[j]);
      keys[o + t] = (static_cast<unsigned long long>(h) << lab_bits) | lab;
      vals[o + t] = w[b + t];
    }
  }
}

// deg[h] = degree of hubs[h] when it looks for a community this turn (refinement: a well-connected
// singleton; local moving: in the sweep's share), else 0.
__global__ void hub_degrees_kernel(const int32_t* hubs, int64_t nh, const int64_t* off, const uint8_t* wc,
                                   const int32_t* label, const int32_t* rsize, bool refine, bool allow_moves,
                                   unsigned long long salt, unsigned subset_mask, int64_t* deg) {
  GRID_LOOP(h, nh) {
    const int32_t i = hubs[h];
    const bool take =
        refine ? wc[i] && rsize[label[i]] == 1
               : allow_moves &&
                     (subset_mask == 0 || (gpu::mix64(static_cast<uint64_t>(i) ^ salt) & subset_mask) == 0);
    deg[h] = take ? off[i + 1] - off[i] : 0;
  }
}

__global__ void zero_hubs_kernel(const int32_t* hubs, int64_t nh, unsigned long long* best) {
  GRID_LOOP(h, nh) best[hubs[h]] = 0;
}

struct HubRuns {
  const unsigned long long* keys;
  const double* sums;
  const int64_t* count;  // device
  int64_t max_runs;
  const int32_t* hubs;
  int lab_bits;
  uint32_t masked;
  __device__ bool get(int64_t r, int32_t& i, uint32_t& c) const {
    const unsigned long long key = keys[r];
    c = static_cast<uint32_t>(key & ((1ull << lab_bits) - 1ull));
    if (c == masked) return false;
    i = hubs[key >> lab_bits];
    return true;
  }
};

__global__ void hub_move_candidates_kernel(HubRuns runs, CandArgs a) {
  const int64_t nr = *runs.count;
  GRID_LOOP(r, runs.max_runs) {
    if (r >= nr) break;
    int32_t i;
    uint32_t c;
    if (!runs.get(r, i, c)) continue;
    const uint32_t own = static_cast<uint32_t>(a.label[i]);
    if (c == own || (a.up ? c < own : c > own)) continue;
    const double gain = runs.sums[r] - a.gamma_2m * a.kw[i] * from_fixed(a.tot[c], a.inv);
    atomicMax(&a.best[i], pack(gain, c));
  }
}

// The exact weight from each hub to its chosen community.
__global__ void hub_best_weight_kernel(HubRuns runs, CandArgs a) {
  const int64_t nr = *runs.count;
  GRID_LOOP(r, runs.max_runs) {
    if (r >= nr) break;
    int32_t i;
    uint32_t c;
    if (!runs.get(r, i, c)) continue;
    const unsigned long long b = a.best[i];
    if (b != 0 && unpack(b) == c) a.k_best[i] = runs.sums[r];
  }
}

__global__ void hub_refine_candidates_kernel(HubRuns runs, CandArgs a) {
  const int64_t nr = *runs.count;
  GRID_LOOP(r, runs.max_runs) {
    if (r >= nr) break;
    int32_t i;
    uint32_t rc;
    if (!runs.get(r, i, rc)) continue;
    const uint32_t own = static_cast<uint32_t>(a.label[i]);
    if (rc >= own || a.rsize[own] != 1 || !a.wc[i]) continue;
    const double s_tot = from_fixed(a.stot[a.same[i]], a.inv), kc = from_fixed(a.tot[rc], a.inv);
    if (from_fixed(a.ext[rc], a.inv) < a.gamma_2m * kc * (s_tot - kc)) continue;  // R not well connected to S
    const double gain = runs.sums[r] - a.gamma_2m * a.kw[i] * kc;
    if (gain >= 0) atomicMax(&a.best[i], pack(gain, rc));
  }
}

// ---- moves ------------------------------------------------------------------------------------

// Moves every node of this sweep's share whose best community beats staying (float64 gains) into
// next[]; the block's sums of (weight inside the own community) and (community weight)^2 of the
// partition before the moves into partial[2 * block]; moves counted into *moved.
__global__ void move_kernel(int64_t n, const int32_t* cur, int32_t* next, const double* kw,
                            const unsigned long long* kwfx, const double* self_w, const unsigned long long* tot,
                            double inv, const double* k_own, const double* k_best, const unsigned long long* best,
                            double gamma_2m, bool allow_moves, unsigned long long salt, unsigned subset_mask,
                            double* partial, unsigned long long* moved) {
  double inside = 0, sq = 0, count = 0;
  GRID_LOOP(i, n) {
    const int32_t own = cur[i];
    int32_t to = own;
    inside += k_own[i] + self_w[i];
    const double t = from_fixed(tot[i], inv);  // community i's weight
    sq += t * t;
    const unsigned long long b = best[i];
    // Only a pseudo-random share of the nodes may move in a sweep (1 / (subset_mask + 1)): fewer
    // simultaneous moves that undo each other.
    if (allow_moves && b != 0 &&
        (subset_mask == 0 || (gpu::mix64(static_cast<uint64_t>(i) ^ salt) & subset_mask) == 0)) {
      const uint32_t c = unpack(b);
      const double kwi = kw[i];
      const double stay = k_own[i] - gamma_2m * kwi * from_fixed(tot[own] - kwfx[i], inv);
      const double go = k_best[i] - gamma_2m * kwi * from_fixed(tot[c], inv);
      if (go - stay > kGainRounding * kwi) {
        to = static_cast<int32_t>(c);
        count += 1;
      }
    }
    next[i] = to;
  }
  inside = block_sum(inside);
  sq = block_sum(sq);
  count = block_sum(count);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = inside;
    partial[2 * blockIdx.x + 1] = sq;
    if (count > 0) atomicAdd(moved, static_cast<unsigned long long>(count));
  }
}

// The community weights follow the moves (fixed point: exact).
__global__ void move_weights_kernel(int64_t n, const int32_t* cur, const int32_t* next,
                                    const unsigned long long* kwfx, unsigned long long* tot) {
  GRID_LOOP(i, n) {
    const int32_t from = cur[i], to = next[i];
    if (from != to) {
      atomicAdd(&tot[from], 0ull - kwfx[i]);
      atomicAdd(&tot[to], kwfx[i]);
    }
  }
}

// out[0..1] = sums of partial's pairs over `blocks` blocks (one block; fixed order).
__global__ void finish_sums_kernel(const double* partial, int blocks, double* out) {
  double a = 0, b = 0;
  for (int k = threadIdx.x; k < blocks; k += blockDim.x) a += partial[2 * k], b += partial[2 * k + 1];
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) out[0] = a, out[1] = b;
}

__global__ void refine_move_kernel(int64_t n, int32_t* ref, const unsigned long long* best, unsigned long long* moved) {
  GRID_LOOP(i, n) {
    const unsigned long long b = best[i];
    if (b == 0) continue;
    ref[i] = static_cast<int32_t>(unpack(b));
    atomicAdd(moved, 1ull);
  }
}

__global__ void flag_kernel(const int32_t* label, int64_t n, int32_t* flags) {
  GRID_LOOP(i, n) flags[label[i]] = 1;
}
__global__ void relabel_kernel(int32_t* label, int64_t n, const int32_t* pos) {
  GRID_LOOP(i, n) label[i] = pos[label[i]];
}

// ---- aggregation ------------------------------------------------------------------------------

__global__ void aggregate_keys_kernel(const int32_t* src, const int32_t* dst, const double* w, int64_t nnz,
                                      const int32_t* agg, unsigned long long* keys, double* vals) {
  GRID_LOOP(e, nnz) {
    keys[e] = (static_cast<unsigned long long>(agg[src[e]]) << 32) | static_cast<uint32_t>(agg[dst[e]]);
    vals[e] = w[e];
  }
}
__global__ void unpack_edges_kernel(const unsigned long long* keys, const double* sums, int64_t m, int32_t* src,
                                    int32_t* dst, double* w) {
  GRID_LOOP(e, m) {
    src[e] = static_cast<int32_t>(keys[e] >> 32);
    dst[e] = static_cast<int32_t>(keys[e] & 0xFFFFFFFFull);
    w[e] = sums[e];
  }
}
// CSR offsets of edges sorted by source (rows without edges included): off[a] = first edge of a.
__global__ void row_offsets_kernel(const int32_t* src, int64_t m, int64_t k, int64_t* off) {
  GRID_LOOP(e, m + 1) {
    const int64_t prev = e == 0 ? -1 : src[e - 1];
    const int64_t cur = e == m ? k : src[e];
    for (int64_t a = prev + 1; a <= cur; ++a) off[a] = e;
  }
}
// Next level: starting communities (every member of an aggregate shares its community).
__global__ void aggregate_comm_kernel(const int32_t* agg, const int32_t* comm, int64_t n, int32_t* comm2) {
  GRID_LOOP(i, n) comm2[agg[i]] = comm[i];
}
// out[i] = map[in[i]] (in place allowed).
__global__ void compose_kernel(const int32_t* in, const int32_t* map, int64_t n, int32_t* out) {
  GRID_LOOP(i, n) out[i] = map[in[i]];
}

struct AddD {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Several GPUs: the candidates of the nodes ids[0..count) into a stage indexed by list position
// (best; with_k also k_own and k_best), and back.
__global__ void stage_gather_kernel(const int32_t* ids, int64_t count, const unsigned long long* best,
                                    const double* k_own, const double* k_best, bool with_k, unsigned long long* s_best,
                                    double* s_own, double* s_kbest) {
  GRID_LOOP(p, count) {
    const int32_t i = ids[p];
    s_best[p] = best[i];
    if (with_k) s_own[p] = k_own[i], s_kbest[p] = k_best[i];
  }
}
__global__ void stage_scatter_kernel(const int32_t* ids, int64_t count, const unsigned long long* s_best,
                                     const double* s_own, const double* s_kbest, bool with_k, unsigned long long* best,
                                     double* k_own, double* k_best) {
  GRID_LOOP(p, count) {
    const int32_t i = ids[p];
    best[i] = s_best[p];
    if (with_k) k_own[i] = s_own[p], k_best[i] = s_kbest[p];
  }
}

// ---- host side ----------------------------------------------------------------------------------

// Knobs read from the environment (see leiden_gpu.hpp).
struct Knobs {
  int sort_above = kMidDegree;  // nodes above this degree take the sort path
  int64_t spread_below = kSpreadMinNodes;  // several GPUs: levels of fewer nodes are not split
  unsigned subset_mask = 1;     // 1 / (mask + 1) of the nodes may move per sweep
  static Knobs from_env() {
    Knobs k;
    const char* e = std::getenv("SCURRY_LEIDEN_SUBSET");
    const int s = e && *e ? std::atoi(e) : 1;
    k.subset_mask = s > 0 && s < 8 ? (1u << s) - 1u : 0u;
    if (const char* t = std::getenv("SCURRY_LEIDEN_SORT_ABOVE"); t && *t)
      k.sort_above = std::clamp(std::atoi(t), 0, kMidDegree);
    if (const char* t = std::getenv("SCURRY_LEIDEN_SPREAD_BELOW"); t && *t)
      k.spread_below = std::max<int64_t>(0, std::atoll(t));
    return k;
  }
};

struct NodeList {
  DeviceArray<int32_t> ids;
  int64_t count = 0;
};

struct Level {
  int64_t n = 0, nnz = 0;
  DeviceArray<int32_t> src, dst;
  DeviceArray<double> w, kw, self_w;
  DeviceArray<int64_t> off;
  DeviceArray<unsigned long long> kwfx;
  NodeList rows[3];   // row sums: degree <= kSmallDegree, <= kRowWarpDegree, above
  NodeList cands[kClasses];  // candidates: the four kernels' degree classes (capped by sort_above), the sort path
  int64_t hub_edges = 0;     // edges of the sort path's nodes
};

// SCURRY_PROFILE=1: per level, sweeps, refinement rounds and the device time of each phase, on stderr.
struct Profile {
  bool on = false;
  cudaStream_t stream = nullptr;
  std::vector<std::string> names;
  std::vector<double> ms;
  std::vector<cudaEvent_t> ev;
  std::vector<int> slot;  // phase of each event after the first
  explicit Profile(cudaStream_t s) : stream(s) {
    const char* e = std::getenv("SCURRY_PROFILE");
    on = e && *e && std::atoi(e) > 0;
  }
  ~Profile() {
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
  }
  void record(size_t q) {
    while (ev.size() <= q) {
      cudaEvent_t e;
      SCURRY_CUDA(cudaEventCreate(&e));
      ev.push_back(e);
    }
    SCURRY_CUDA(cudaEventRecord(ev[q], stream));
  }
  void begin() {
    if (!on) return;
    collect();
    record(0);
  }
  // Closes phase `name`, begun at the previous mark or begin().
  void mark(const char* name) {
    if (!on) return;
    size_t idx = 0;
    while (idx < names.size() && names[idx] != name) ++idx;
    if (idx == names.size()) names.emplace_back(name), ms.push_back(0.0);
    slot.push_back(static_cast<int>(idx));
    record(slot.size());
  }
  void collect() {
    if (!on || slot.empty()) return;
    SCURRY_CUDA(cudaEventSynchronize(ev[slot.size()]));
    for (size_t q = 0; q < slot.size(); ++q) {
      float t = 0;
      SCURRY_CUDA(cudaEventElapsedTime(&t, ev[q], ev[q + 1]));
      ms[slot[q]] += t;
    }
    slot.clear();
  }
  std::string take() {  // the phases' totals since the last take, as " name ms"
    collect();
    std::string s;
    char buf[64];
    for (size_t q = 0; q < names.size(); ++q) {
      std::snprintf(buf, sizeof buf, " %s %.2f", names[q].c_str(), ms[q]);
      s += buf;
      ms[q] = 0;
    }
    return s;
  }
};

// Several GPUs (leiden_gpus): one host thread per GPU (rank) runs the whole algorithm on its own
// copy of everything, except the candidate kernels of the four degree classes, where rank q takes
// the q-th slice of each class's node list, and the sort path (rank 0 only: its float sums depend
// on where the keys lie in the sorted array, so only one GPU's layout gives one GPU's sums). Each
// rank's per-node outputs (best; local moving also k_own, k_best) go through a stage indexed by
// list position to every other rank (peer copies); then every rank holds every node's outputs and
// runs the same moves. The aggregation (sort + reduce-by-key, float sums) is made by rank 0 and
// copied to the others, and 2m is rank 0's, so the ranks hold the same bits and take the same
// branches; the result is one GPU's. A rank that fails aborts the others (TeamAborted).
struct TeamAborted {};

class Team {
 public:
  explicit Team(int size)
      : dev(size), stage_best(size), stage_own(size), stage_kbest(size), ptr(size), size_(size) {}
  int size() const { return size_; }
  // Returns once every rank has called it (what a rank wrote before is then seen by all);
  // throws TeamAborted once a rank has failed. Spins (yielding): a few microseconds per exchange.
  void wait() {
    if (aborted_.load(std::memory_order_acquire)) throw TeamAborted{};
    const uint64_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);  // after the reset: no rank leaves before it
      return;
    }
    while (generation_.load(std::memory_order_acquire) == gen) {
      if (aborted_.load(std::memory_order_acquire)) throw TeamAborted{};
      std::this_thread::yield();
    }
  }
  void abort() { aborted_.store(true, std::memory_order_release); }
  // Per rank (each writes its own entry before its first wait): device, stage buffers, and the
  // destination of the current broadcast.
  std::vector<int> dev;
  std::vector<unsigned long long*> stage_best;
  std::vector<double*> stage_own, stage_kbest;
  std::vector<void*> ptr;
  int64_t value = 0;  // a host value of rank 0's (share())

 private:
  int size_;
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
};

struct Workspace {
  CudaResources& r;
  Knobs knobs;
  int64_t n0, nnz0;
  double two_m = 0, gamma, scale = 0, inv = 0;
  DeviceArray<unsigned long long> keys0, keys1, best, tot, rtot, ext;
  DeviceArray<double> vals0, vals1, k_own, k_best, acc, partial;
  DeviceArray<int32_t> rsize, flags, pos, ref, agg, lm0, lm1, lm2;
  DeviceArray<uint8_t> wc, temp;
  DeviceArray<int64_t> runs, hub_off;
  DeviceArray<unsigned long long> counter;
  Profile prof;
  int sweeps = 0, rounds = 0;  // of the current level (profile)
  Team* team = nullptr;        // several GPUs (null: one)
  int rank = 0;
  DeviceArray<unsigned long long> stage_best;  // several GPUs: candidates by list position
  DeviceArray<double> stage_own, stage_kbest;

  Workspace(CudaResources& res, int64_t n, int64_t nnz, double g, Knobs k, Team* tm = nullptr, int rk = 0)
      : r(res), knobs(k), n0(n), nnz0(nnz), gamma(g),
        keys0(res, static_cast<size_t>(nnz), "leiden sort keys"),
        keys1(res, static_cast<size_t>(nnz), "leiden sort keys"),
        best(res, static_cast<size_t>(n), "leiden candidates"),
        tot(res, static_cast<size_t>(n), "leiden community weights"),
        rtot(res, static_cast<size_t>(n), "leiden refined weights"),
        ext(res, static_cast<size_t>(n), "leiden refined outer weights"),
        vals0(res, static_cast<size_t>(nnz), "leiden sort values"),
        vals1(res, static_cast<size_t>(nnz), "leiden sort values"),
        k_own(res, static_cast<size_t>(n), "leiden node weights"),
        k_best(res, static_cast<size_t>(n), "leiden node weights"),
        acc(res, 2, "leiden sums"),
        partial(res, 2 * static_cast<size_t>(blocks_for(n)), "leiden block sums"),
        rsize(res, static_cast<size_t>(n), "leiden refined sizes"),
        flags(res, static_cast<size_t>(n) + 1, "leiden flags"),
        pos(res, static_cast<size_t>(n) + 1, "leiden positions"),
        ref(res, static_cast<size_t>(n), "leiden refined labels"),
        agg(res, static_cast<size_t>(n), "leiden aggregate labels"),
        lm0(res, static_cast<size_t>(n), "leiden local-moving labels"),
        lm1(res, static_cast<size_t>(n), "leiden local-moving labels"),
        lm2(res, static_cast<size_t>(n), "leiden local-moving labels"),
        wc(res, static_cast<size_t>(n), "leiden well-connected flags"),
        runs(res, 1, "leiden run count"),
        hub_off(res, static_cast<size_t>(n) + 1, "leiden sort-path offsets"),
        counter(res, 1, "leiden move count"),
        prof(res.stream),
        team(tm),
        rank(rk) {
    if (split()) {
      if (rank > 0) prof.on = false;  // SCURRY_PROFILE: the first GPU's times
      stage_best = DeviceArray<unsigned long long>(res, static_cast<size_t>(n), "leiden candidate stage");
      stage_own = DeviceArray<double>(res, static_cast<size_t>(n), "leiden candidate stage");
      stage_kbest = DeviceArray<double>(res, static_cast<size_t>(n), "leiden candidate stage");
      team->dev[rank] = res.device;
      team->stage_best[rank] = stage_best.data();
      team->stage_own[rank] = stage_own.data();
      team->stage_kbest[rank] = stage_kbest.data();
    }
  }

  bool split() const { return team != nullptr && team->size() > 1; }
  // Several GPUs: whether class c's candidates are searched by one rank each and exchanged (the
  // sort path always: rank 0's; the four kernels' classes on levels of spread_below nodes or more).
  bool exchanged(const Level& g, int c) const {
    return split() && (c == kClasses - 1 || g.n >= knobs.spread_below);
  }
  // The positions [lo, hi) of class c's list that this rank searches.
  std::pair<int64_t, int64_t> owned(const Level& g, int c) const {
    const int64_t count = g.cands[c].count;
    if (!exchanged(g, c)) return {0, count};
    if (c == kClasses - 1) return rank == 0 ? std::pair<int64_t, int64_t>{0, count} : std::pair<int64_t, int64_t>{0, 0};
    const int64_t q = team->size();
    return {count * rank / q, count * (rank + 1) / q};
  }
  // Rank 0's v on every rank.
  int64_t share(int64_t v) {
    if (rank == 0) team->value = v;
    team->wait();
    const int64_t out = team->value;
    team->wait();  // every rank has read it before rank 0 may write the next
    return out;
  }
  // Rank 0's `bytes` at p into every rank's p (device memory; p allocated on every rank).
  void broadcast(void* p, size_t bytes) {
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // rank 0: the data; the others: p free of earlier work
    team->ptr[rank] = p;
    team->wait();
    if (rank == 0 && bytes > 0) {
      for (int t = 1; t < team->size(); ++t)
        SCURRY_CUDA(cudaMemcpyPeerAsync(team->ptr[t], team->dev[t], p, team->dev[0], bytes, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    }
    team->wait();  // every copy done
  }
  // After the candidate kernels: every rank's searched nodes' outputs (best; with_k also k_own and
  // k_best) on every rank. The stage holds the class lists one after the other.
  void exchange(const Level& g, bool with_k) {
    int64_t base[kClasses];
    int64_t at = 0, total = 0;
    for (int c = 0; c < kClasses; ++c) {
      base[c] = at, at += g.cands[c].count;
      if (exchanged(g, c)) total += g.cands[c].count;
    }
    if (total == 0) return;  // the same on every rank
    std::vector<std::pair<int64_t, int64_t>> mine;  // stage ranges written here
    for (int c = 0; c < kClasses; ++c) {
      const NodeList& l = g.cands[c];
      if (!exchanged(g, c)) continue;
      const auto [lo, hi] = owned(g, c);
      if (hi <= lo) continue;
      const int64_t o = base[c] + lo;
      stage_gather_kernel<<<blocks_for(hi - lo), kBlock, 0, r.stream>>>(
          l.ids.data() + lo, hi - lo, best.data(), k_own.data(), k_best.data(), with_k, stage_best.data() + o,
          stage_own.data() + o, stage_kbest.data() + o);
      SCURRY_CUDA_LAUNCH();
      mine.emplace_back(o, base[c] + hi);
    }
    // Every rank's share staged, and every rank's stage read by its previous scatter.
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    team->wait();
    for (int t = 0; t < team->size(); ++t) {
      if (t == rank) continue;
      for (const auto& [lo, hi] : mine) {
        const size_t m = static_cast<size_t>(hi - lo);
        SCURRY_CUDA(cudaMemcpyPeerAsync(team->stage_best[t] + lo, team->dev[t], stage_best.data() + lo, r.device,
                                        m * sizeof(unsigned long long), r.stream));
        if (with_k) {
          SCURRY_CUDA(cudaMemcpyPeerAsync(team->stage_own[t] + lo, team->dev[t], stage_own.data() + lo, r.device,
                                          m * sizeof(double), r.stream));
          SCURRY_CUDA(cudaMemcpyPeerAsync(team->stage_kbest[t] + lo, team->dev[t], stage_kbest.data() + lo, r.device,
                                          m * sizeof(double), r.stream));
        }
      }
    }
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    team->wait();  // every share in every stage
    for (int c = 0; c < kClasses; ++c) {
      const NodeList& l = g.cands[c];
      if (l.count == 0 || !exchanged(g, c)) continue;
      stage_scatter_kernel<<<blocks_for(l.count), kBlock, 0, r.stream>>>(
          l.ids.data(), l.count, stage_best.data() + base[c], stage_own.data() + base[c],
          stage_kbest.data() + base[c], with_k, best.data(), k_own.data(), k_best.data());
      SCURRY_CUDA_LAUNCH();
    }
    prof.mark("exchange");
  }

  double gamma_2m() const { return gamma / two_m; }
  void set_two_m(double tm) {
    two_m = tm;
    // Fixed point: every community weight (<= 2m, with room for rounding) below 2^kFixedBits.
    const int e = std::ilogb(tm) + 1;  // tm < 2^e
    scale = std::ldexp(1.0, kFixedBits - e);
    inv = std::ldexp(1.0, e - kFixedBits);
  }

  void* scratch(size_t bytes) {
    bytes = std::max<size_t>(bytes, 16);  // never null: cub treats a null buffer as a size query
    if (bytes > temp.size()) temp = DeviceArray<uint8_t>(r, bytes, "leiden cub scratch");
    return temp.data();
  }
  template <class T>
  void zero(DeviceArray<T>& a, int64_t n) {
    if (n > 0) SCURRY_CUDA(cudaMemsetAsync(a.data(), 0, static_cast<size_t>(n) * sizeof(T), r.stream));
  }
  template <class T>
  T get(const T* d) {
    T h{};
    SCURRY_CUDA(cudaMemcpyAsync(&h, d, sizeof(T), cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    return h;
  }
  void copy(int32_t* to, const int32_t* from, int64_t n) {
    SCURRY_CUDA(cudaMemcpyAsync(to, from, static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                r.stream));
  }

  // Sorts the (key, value) pairs in keys0/vals0 (the first nnz) on bits [0, end_bit) and sums the
  // values of equal keys: the unique keys and sums (pointers into the workspace); their count in runs.
  void sort_reduce(int64_t nnz, int end_bit, const unsigned long long** ukeys, const double** usums) {
    cub::DoubleBuffer<unsigned long long> kb(keys0.data(), keys1.data());
    cub::DoubleBuffer<double> vb(vals0.data(), vals1.data());
    size_t bytes = 0;
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, bytes, kb, vb, nnz, 0, end_bit, r.stream));
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(scratch(bytes), bytes, kb, vb, nnz, 0, end_bit, r.stream));
    unsigned long long* out_keys = kb.Alternate();
    double* out_sums = vb.Alternate();
    bytes = 0;
    SCURRY_CUDA(cub::DeviceReduce::ReduceByKey(nullptr, bytes, kb.Current(), out_keys, vb.Current(), out_sums,
                                               runs.data(), AddD(), nnz, r.stream));
    SCURRY_CUDA(cub::DeviceReduce::ReduceByKey(scratch(bytes), bytes, kb.Current(), out_keys, vb.Current(), out_sums,
                                               runs.data(), AddD(), nnz, r.stream));
    *ukeys = out_keys;
    *usums = out_sums;
  }

  // The nodes of g with lo < degree <= hi, in order.
  NodeList select(const Level& g, int64_t lo, int64_t hi) {
    NodeList l;
    if (hi <= lo) return l;
    degree_flags_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(g.off.data(), g.n, lo, hi, flags.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaMemsetAsync(flags.data() + g.n, 0, sizeof(int32_t), r.stream));
    size_t bytes = 0;
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, bytes, flags.data(), pos.data(), g.n + 1, r.stream));
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(scratch(bytes), bytes, flags.data(), pos.data(), g.n + 1, r.stream));
    l.count = get(pos.data() + g.n);
    if (l.count == 0) return l;
    l.ids = DeviceArray<int32_t>(r, static_cast<size_t>(l.count), "leiden node lists");
    scatter_flagged_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(flags.data(), pos.data(), g.n, l.ids.data());
    SCURRY_CUDA_LAUNCH();
    return l;
  }

  template <RowMode M>
  void row_sums(const Level& g, const RowArgs& a) {
    const NodeList& s = g.rows[0];
    const NodeList& m = g.rows[1];
    const NodeList& h = g.rows[2];
    if (s.count) {
      row_sums_kernel<kSmallLanes, M><<<blocks_for_groups(s.count, kSmallLanes), kBlock, 0, r.stream>>>(
          s.ids.data(), s.count, a);
      SCURRY_CUDA_LAUNCH();
    }
    if (m.count) {
      row_sums_kernel<32, M><<<blocks_for_groups(m.count, 32), kBlock, 0, r.stream>>>(m.ids.data(), m.count, a);
      SCURRY_CUDA_LAUNCH();
    }
    if (h.count) {
      row_sums_block_kernel<M><<<static_cast<int>(std::min<int64_t>(h.count, kMaxBlocks)), kBlock, 0, r.stream>>>(
          h.ids.data(), h.count, a);
      SCURRY_CUDA_LAUNCH();
    }
  }

  // hub_off[0..nh - 1] (degrees) -> exclusive prefix sums, hub_off[nh] = their total (returned).
  int64_t scan_hub_degrees(int64_t nh) {
    SCURRY_CUDA(cudaMemsetAsync(hub_off.data() + nh, 0, sizeof(int64_t), r.stream));
    size_t bytes = 0;
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, bytes, hub_off.data(), hub_off.data(), nh + 1, r.stream));
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(scratch(bytes), bytes, hub_off.data(), hub_off.data(), nh + 1, r.stream));
    return get(hub_off.data() + nh);
  }

  // Node lists, offsets known: the level's node weights and self-loops (and fixed-point weights
  // once the scale is set).
  void prepare(Level& g) {
    g.rows[0] = select(g, -1, kSmallDegree);
    g.rows[1] = select(g, kSmallDegree, kRowWarpDegree);
    g.rows[2] = select(g, kRowWarpDegree, std::numeric_limits<int64_t>::max());
    const int64_t t = knobs.sort_above;
    int64_t hi[kClasses] = {std::min<int64_t>(kSmallDegree, t), std::min<int64_t>(2 * kSmallDegree, t),
                            std::min<int64_t>(4 * kSmallDegree, t), t, std::numeric_limits<int64_t>::max()};
    for (int c = 0; c < kClasses; ++c) g.cands[c] = select(g, c == 0 ? -1 : hi[c - 1], hi[c]);
    const NodeList& h = g.cands[kClasses - 1];
    if (h.count > 0) {
      list_degrees_kernel<<<blocks_for(h.count), kBlock, 0, r.stream>>>(h.ids.data(), h.count, g.off.data(),
                                                                        hub_off.data());
      SCURRY_CUDA_LAUNCH();
      g.hub_edges = scan_hub_degrees(h.count);
    }
    g.kw = DeviceArray<double>(r, static_cast<size_t>(g.n), "leiden node weights");
    g.self_w = DeviceArray<double>(r, static_cast<size_t>(g.n), "leiden self-loops");
    RowArgs a;
    a.off = g.off.data();
    a.dst = g.dst.data();
    a.w = g.w.data();
    a.out0 = g.kw.data();
    a.out1 = g.self_w.data();
    row_sums<RowMode::strength>(g, a);
    if (scale > 0) set_fixed(g);
  }
  void set_fixed(Level& g) {
    g.kwfx = DeviceArray<unsigned long long>(r, static_cast<size_t>(g.n), "leiden node weights");
    to_fixed_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(g.kw.data(), g.n, scale, g.kwfx.data());
    SCURRY_CUDA_LAUNCH();
  }

  CandArgs cand_args(const Level& g, const int32_t* label) {
    CandArgs a;
    a.off = g.off.data();
    a.dst = g.dst.data();
    a.w = g.w.data();
    a.label = label;
    a.kw = g.kw.data();
    a.gamma_2m = gamma_2m();
    a.inv = inv;
    a.k_own = k_own.data();
    a.k_best = k_best.data();
    a.best = best.data();
    return a;
  }

  // Candidates of every node of g into best (and k_own, k_best when local moving).
  template <bool kRefine>
  void candidates(const Level& g, const CandArgs& a) {
    const NodeList& h = g.cands[kClasses - 1];
    if (h.count && owned(g, kClasses - 1).second > 0) {  // sort path
      zero_hubs_kernel<<<blocks_for(h.count), kBlock, 0, r.stream>>>(h.ids.data(), h.count, best.data());
      SCURRY_CUDA_LAUNCH();
      if (!kRefine) {  // k_own of every hub by its row; the runs only for those that may move
        RowArgs ra;
        ra.off = g.off.data();
        ra.dst = g.dst.data();
        ra.w = g.w.data();
        ra.comm = a.label;
        ra.out0 = k_own.data();
        row_sums_block_kernel<RowMode::own>
            <<<static_cast<int>(std::min<int64_t>(h.count, kMaxBlocks)), kBlock, 0, r.stream>>>(h.ids.data(), h.count,
                                                                                                ra);
        SCURRY_CUDA_LAUNCH();
      }
      hub_degrees_kernel<<<blocks_for(h.count), kBlock, 0, r.stream>>>(h.ids.data(), h.count, g.off.data(), a.wc,
                                                                       a.label, a.rsize, kRefine, a.allow_moves,
                                                                       a.salt, a.subset_mask, hub_off.data());
      SCURRY_CUDA_LAUNCH();
      const int64_t edges = scan_hub_degrees(h.count);
      if (edges > 0) {
        const int lab_bits = bits_for(g.n + 1);
        hub_keys_kernel<<<static_cast<int>(std::min<int64_t>(h.count, kMaxBlocks)), kBlock, 0, r.stream>>>(
            h.ids.data(), h.count, hub_off.data(), g.off.data(), g.dst.data(), g.w.data(), a.label, a.same, lab_bits,
            static_cast<uint32_t>(g.n), keys0.data(), vals0.data());
        SCURRY_CUDA_LAUNCH();
        HubRuns hr;
        sort_reduce(edges, lab_bits + bits_for(h.count), &hr.keys, &hr.sums);
        hr.count = runs.data();
        hr.max_runs = edges;
        hr.hubs = h.ids.data();
        hr.lab_bits = lab_bits;
        hr.masked = static_cast<uint32_t>(g.n);
        if (kRefine) {
          hub_refine_candidates_kernel<<<blocks_for(edges), kBlock, 0, r.stream>>>(hr, a);
          SCURRY_CUDA_LAUNCH();
        } else {
          hub_move_candidates_kernel<<<blocks_for(edges), kBlock, 0, r.stream>>>(hr, a);
          SCURRY_CUDA_LAUNCH();
          hub_best_weight_kernel<<<blocks_for(edges), kBlock, 0, r.stream>>>(hr, a);
          SCURRY_CUDA_LAUNCH();
        }
      }
      prof.mark(kRefine ? "refine-sort" : "move-sort");
    }
    static_assert(kClasses == 5, "four candidate kernels, then the sort path");
    launch_candidates<kSmallLanes, 4, kRefine>(g, 0, a, kRefine ? "refine-8x4" : "move-8x4");
    launch_candidates<kSmallLanes, 8, kRefine>(g, 1, a, kRefine ? "refine-8x8" : "move-8x8");
    launch_candidates<16, 8, kRefine>(g, 2, a, kRefine ? "refine-16x8" : "move-16x8");
    launch_candidates<32, kMidDegree / 32, kRefine>(g, 3, a, kRefine ? "refine-32x8" : "move-32x8");
    if (split()) exchange(g, !kRefine);
  }
  // Class c's list (this rank's slice of it with several GPUs).
  template <int G, int R, bool kRefine>
  void launch_candidates(const Level& g, int c, const CandArgs& a, const char* phase) {
    const NodeList& l = g.cands[c];
    const auto [lo, hi] = owned(g, c);
    if (hi <= lo) return;
    candidates_kernel<G, R, kRefine><<<blocks_for_groups(hi - lo, G), kBlock, 0, r.stream>>>(l.ids.data() + lo,
                                                                                          hi - lo, a);
    SCURRY_CUDA_LAUNCH();
    prof.mark(phase);
  }

  void community_weights(const Level& g, const int32_t* label) {
    zero(tot, g.n);
    community_weights_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(label, g.kwfx.data(), g.n, tot.data());
    SCURRY_CUDA_LAUNCH();
  }

  // Renumbers labels (values in [0, n)) to 0..K-1 keeping their order; returns K.
  int64_t renumber(int32_t* label, int64_t n) {
    zero(flags, n + 1);
    flag_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(label, n, flags.data());
    SCURRY_CUDA_LAUNCH();
    size_t bytes = 0;
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, bytes, flags.data(), pos.data(), n + 1, r.stream));
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(scratch(bytes), bytes, flags.data(), pos.data(), n + 1, r.stream));
    relabel_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(label, n, pos.data());
    SCURRY_CUDA_LAUNCH();
    return get(pos.data() + n);
  }

  // One sweep on the partition `cur` (tot holds its weights): the moves into `next` (tot updated
  // to them) and the modularity of `cur`. Returns the number of moves.
  unsigned long long sweep(const Level& g, const int32_t* cur, int32_t* next, int index, bool allow_moves,
                           double* q_cur) {
    const unsigned long long salt = 0x9E3779B97F4A7C15ULL * static_cast<unsigned long long>(index + 1);
    CandArgs a = cand_args(g, cur);
    a.tot = tot.data();
    a.up = index % 2 == 0;
    a.allow_moves = allow_moves;
    a.salt = salt;
    a.subset_mask = knobs.subset_mask;
    candidates<false>(g, a);
    zero(counter, 1);
    const int nb = blocks_for(g.n);
    move_kernel<<<nb, kBlock, 0, r.stream>>>(g.n, cur, next, g.kw.data(), g.kwfx.data(), g.self_w.data(), tot.data(),
                                             inv, k_own.data(), k_best.data(), best.data(), gamma_2m(), allow_moves,
                                             salt, knobs.subset_mask, partial.data(), counter.data());
    SCURRY_CUDA_LAUNCH();
    finish_sums_kernel<<<1, kBlock, 0, r.stream>>>(partial.data(), nb, acc.data());
    SCURRY_CUDA_LAUNCH();
    move_weights_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(g.n, cur, next, g.kwfx.data(), tot.data());
    SCURRY_CUDA_LAUNCH();
    prof.mark("move-apply");
    double h[2];
    unsigned long long moved = 0;
    SCURRY_CUDA(cudaMemcpyAsync(h, acc.data(), sizeof(h), cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaMemcpyAsync(&moved, counter.data(), sizeof(moved), cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    *q_cur = h[0] / two_m - gamma * h[1] / (two_m * two_m);
    ++sweeps;
    return moved;
  }

  // Parallel local moving of g's nodes between the communities `comm` (in and out; tot holds the
  // weights of the result); returns its modularity, the best of the partitions seen.
  //
  // Sweep t computes the modularity of its starting partition P_t along with the moves to P_{t+1},
  // so the stopping rules (a pair of sweeps gaining less than kMoveTolerance; two sweeps without
  // moves; kMaxMoveSweeps) are applied one sweep later, with the same outcome.
  double local_move(const Level& g, int32_t* comm) {
    int32_t* buf[3] = {lm0.data(), lm1.data(), lm2.data()};
    int cur = 0, next = 1, saved = -1;
    copy(buf[cur], comm, g.n);
    community_weights(g, buf[cur]);
    double best_q = -std::numeric_limits<double>::infinity(), pair_start = 0;
    unsigned long long moved_before = 1;  // moves of sweep t - 1 (1 before the first)
    prof.begin();
    for (int t = 0;; ++t) {
      double q;
      const unsigned long long moved = sweep(g, buf[cur], buf[next], t, t < kMaxMoveSweeps, &q);
      if (q > best_q || saved < 0) {
        best_q = q;
        saved = cur;
      }
      if (t == 0) pair_start = q;
      if (t >= 1 && (t - 1) % 2 == 1) {  // the pair of sweeps t - 2, t - 1 led to P_t
        if (q - pair_start < kMoveTolerance) break;
        pair_start = q;
      }
      if (t == kMaxMoveSweeps) break;
      if (moved == 0 && moved_before == 0) break;  // P_{t+1} = P_t = P_{t-1}
      moved_before = moved;
      int free = 0;
      while (free == next || free == saved) ++free;
      cur = next;
      next = free;
    }
    copy(comm, buf[saved], g.n);
    community_weights(g, comm);
    return best_q;
  }

  // Leiden's refinement of `comm` (tot must hold its weights) into `ref`.
  void refine(const Level& g, const int32_t* comm) {
    iota_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(ref.data(), g.n);
    SCURRY_CUDA_LAUNCH();
    RowArgs ra;
    ra.off = g.off.data();
    ra.dst = g.dst.data();
    ra.w = g.w.data();
    ra.comm = comm;
    ra.ref = ref.data();
    ra.kwfx = g.kwfx.data();
    ra.kw = g.kw.data();
    ra.tot = tot.data();
    ra.gamma_2m = gamma_2m();
    ra.scale = scale;
    ra.inv = inv;
    ra.out0 = k_own.data();  // kin: weight of each node to the rest of its community
    ra.wc = wc.data();
    ra.ext = ext.data();
    ra.rtot = rtot.data();
    ra.rsize = rsize.data();
    prof.begin();
    row_sums<RowMode::inner>(g, ra);
    CandArgs a = cand_args(g, ref.data());
    a.same = comm;
    a.tot = rtot.data();
    a.stot = tot.data();
    a.ext = ext.data();
    a.rsize = rsize.data();
    a.wc = wc.data();
    prof.mark("refine-rows");
    for (int round = 0; round < kMaxRefineRounds; ++round) {
      zero(rtot, g.n);
      zero(rsize, g.n);
      zero(ext, g.n);
      row_sums<RowMode::outer>(g, ra);
      prof.mark("refine-rows");
      candidates<true>(g, a);
      zero(counter, 1);
      refine_move_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(g.n, ref.data(), best.data(), counter.data());
      SCURRY_CUDA_LAUNCH();
      prof.mark("refine-move");
      ++rounds;
      if (get(counter.data()) == 0) break;
    }
  }

  // The graph of g with nodes merged by agg (values 0..k-1).
  // Several GPUs: made by rank 0 and copied to the others (the reduce-by-key's float sums).
  Level aggregate(const Level& g, const int32_t* agg_label, int64_t k, const int32_t* comm, int32_t* comm2) {
    const bool here = !split() || rank == 0;
    const unsigned long long* ukeys = nullptr;
    const double* usums = nullptr;
    int64_t m = 0;
    if (here) {
      aggregate_keys_kernel<<<blocks_for(g.nnz), kBlock, 0, r.stream>>>(g.src.data(), g.dst.data(), g.w.data(),
                                                                        g.nnz, agg_label, keys0.data(), vals0.data());
      SCURRY_CUDA_LAUNCH();
      sort_reduce(g.nnz, 32 + bits_for(k), &ukeys, &usums);
      m = get(runs.data());
    }
    if (split()) m = share(m);
    Level h;
    h.n = k;
    h.nnz = m;
    h.src = DeviceArray<int32_t>(r, static_cast<size_t>(m), "leiden level edges");
    h.dst = DeviceArray<int32_t>(r, static_cast<size_t>(m), "leiden level edges");
    h.w = DeviceArray<double>(r, static_cast<size_t>(m), "leiden level weights");
    h.off = DeviceArray<int64_t>(r, static_cast<size_t>(k) + 1, "leiden level offsets");
    if (here) {
      unpack_edges_kernel<<<blocks_for(m), kBlock, 0, r.stream>>>(ukeys, usums, m, h.src.data(), h.dst.data(),
                                                                  h.w.data());
      SCURRY_CUDA_LAUNCH();
      row_offsets_kernel<<<blocks_for(m + 1), kBlock, 0, r.stream>>>(h.src.data(), m, k, h.off.data());
      SCURRY_CUDA_LAUNCH();
    }
    if (split()) {
      broadcast(h.src.data(), static_cast<size_t>(m) * sizeof(int32_t));
      broadcast(h.dst.data(), static_cast<size_t>(m) * sizeof(int32_t));
      broadcast(h.w.data(), static_cast<size_t>(m) * sizeof(double));
      broadcast(h.off.data(), static_cast<size_t>(k + 1) * sizeof(int64_t));
    }
    aggregate_comm_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(agg_label, comm, g.n, comm2);
    SCURRY_CUDA_LAUNCH();
    prepare(h);  // node weights = the aggregated rows' sums
    return h;
  }

  // One Leiden iteration on g0 from the partition `labels` (values < n0; overwritten with the
  // result, renumbered 0..K-1). Returns the modularity.
  double iteration(const Level& g0, DeviceArray<int32_t>& labels) {
    const int64_t n0v = g0.n;
    DeviceArray<int32_t> comm(r, static_cast<size_t>(n0v), "leiden communities");
    DeviceArray<int32_t> comm_next(r, static_cast<size_t>(n0v), "leiden communities");
    DeviceArray<int32_t> top(r, static_cast<size_t>(n0v), "leiden cell to node");  // cell -> node of the level
    copy(comm.data(), labels.data(), n0v);
    iota_kernel<<<blocks_for(n0v), kBlock, 0, r.stream>>>(top.data(), n0v);
    SCURRY_CUDA_LAUNCH();
    Level owned;
    const Level* g = &g0;
    double q = 0;
    for (int level = 0; level < kMaxLevels; ++level) {
      const auto t0 = std::chrono::steady_clock::now();
      sweeps = rounds = 0;
      q = local_move(*g, comm.data());
      const std::string move_ms = prof.on ? prof.take() : std::string();
      const auto t1 = std::chrono::steady_clock::now();
      const int64_t kc = renumber(comm.data(), g->n);
      if (prof.on)
        std::fprintf(stderr, "  leiden level %d: %lld nodes, %lld edges (sort path %lld nodes, %lld edges); %d sweeps, q %.6f, %.2f ms [%s ]\n",
                     level, static_cast<long long>(g->n), static_cast<long long>(g->nnz),
                     static_cast<long long>(g->cands[kClasses - 1].count), static_cast<long long>(g->hub_edges), sweeps, q,
                     std::chrono::duration<double, std::milli>(t1 - t0).count(), move_ms.c_str());
      if (kc == g->n) break;  // every node alone: nothing to aggregate
      community_weights(*g, comm.data());
      refine(*g, comm.data());
      copy(agg.data(), ref.data(), g->n);
      int64_t k = renumber(agg.data(), g->n);
      const std::string refine_ms = prof.on ? prof.take() : std::string();
      const auto t2 = std::chrono::steady_clock::now();
      if (k == g->n) {  // refinement merged nothing: aggregate the communities themselves
        copy(agg.data(), comm.data(), g->n);
        k = kc;
      }
      Level next = aggregate(*g, agg.data(), k, comm.data(), comm_next.data());
      compose_kernel<<<blocks_for(n0v), kBlock, 0, r.stream>>>(top.data(), agg.data(), n0v, top.data());
      SCURRY_CUDA_LAUNCH();
      copy(comm.data(), comm_next.data(), k);
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // the old level is released below
      if (prof.on)
        std::fprintf(stderr, "  leiden level %d: %lld communities; refine %d rounds, %lld parts, %.2f ms [%s ]; aggregate %.2f ms\n",
                     level, static_cast<long long>(kc), rounds, static_cast<long long>(k),
                     std::chrono::duration<double, std::milli>(t2 - t1).count(), refine_ms.c_str(),
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t2).count());
      owned = std::move(next);
      g = &owned;
    }
    compose_kernel<<<blocks_for(n0v), kBlock, 0, r.stream>>>(top.data(), comm.data(), n0v, labels.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    return q;
  }
};

// team: several GPUs (this thread is rank `rank`; only rank 0's result is complete).
LeidenResult leiden_gpu_impl(const Context& ctx, const CsrF& graph, const LeidenOptions& opt, const Knobs& knobs,
                             Team* team = nullptr, int rank = 0) {
  CudaResources* rp = ctx.cuda();
  if (!rp) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU leiden");
  CudaResources& r = *rp;
  const int64_t n = graph.n_rows, nnz = graph.nnz();
  if (graph.n_cols != n) fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square");
  if (!(opt.resolution > 0)) fail_input(kWhere, "resolution = ", opt.resolution, " must be positive");
  if (!(opt.beta > 0)) fail_input(kWhere, "beta = ", opt.beta, " must be positive");
  if (n >= std::numeric_limits<int32_t>::max())
    fail_input(kWhere, "the graph has ", n, " nodes; at most 2^31 - 2 are supported");
  if (static_cast<int64_t>(graph.indptr.size()) != n + 1 || (n > 0 && graph.indptr.back() != nnz) ||
      static_cast<int64_t>(graph.indices.size()) != nnz || static_cast<int64_t>(graph.data.size()) != nnz)
    fail_input(kWhere, "the graph's row pointers do not match its entries; recompute the neighbours");
  LeidenResult res;
  if (n == 0) return res;
  const auto t_start = std::chrono::steady_clock::now();
  res.labels.assign(static_cast<size_t>(n), 0);
  double device_q = 0;  // modularity from the device sums (same weights as modularity() with use_weights)
  bool have_device_q = false;
  {
    Workspace ws(r, n, nnz, opt.resolution, knobs, team, rank);
    Level g0;
    g0.n = n;
    g0.nnz = nnz;
    g0.src = DeviceArray<int32_t>(r, static_cast<size_t>(nnz), "leiden edges");
    g0.dst = DeviceArray<int32_t>(r, static_cast<size_t>(nnz), "leiden edges");
    g0.w = DeviceArray<double>(r, static_cast<size_t>(nnz), "leiden weights");
    g0.off = DeviceArray<int64_t>(r, static_cast<size_t>(n) + 1, "leiden row pointers");
    SCURRY_CUDA(cudaMemcpyAsync(g0.dst.data(), graph.indices.data(), static_cast<size_t>(nnz) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, r.stream));
    SCURRY_CUDA(cudaMemcpyAsync(g0.off.data(), graph.indptr.data(), static_cast<size_t>(n + 1) * sizeof(int64_t),
                                cudaMemcpyHostToDevice, r.stream));
    {
      DeviceArray<float> data(r, static_cast<size_t>(nnz), "leiden input weights");
      DeviceArray<int32_t> bad(r, 1, "leiden input check");
      const int32_t none = std::numeric_limits<int32_t>::max();
      SCURRY_CUDA(cudaMemcpyAsync(data.data(), graph.data.data(), static_cast<size_t>(nnz) * sizeof(float),
                                  cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(bad.data(), &none, sizeof(int32_t), cudaMemcpyHostToDevice, r.stream));
      expand_rows_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(g0.off.data(), n, g0.src.data());
      SCURRY_CUDA_LAUNCH();
      input_weights_kernel<<<blocks_for(nnz), kBlock, 0, r.stream>>>(data.data(), g0.src.data(), nnz, opt.use_weights,
                                                                     g0.w.data(), bad.data());
      SCURRY_CUDA_LAUNCH();
      const int32_t bad_row = ws.get(bad.data());  // synchronises: data is freed here
      if (bad_row != none) fail_input(kWhere, "the graph has a negative or non-finite weight at row ", bad_row);
    }
    ws.prepare(g0);
    double two_m = 0;
    {
      DeviceArray<double> sum(r, 1, "leiden total weight");
      size_t bytes = 0;
      SCURRY_CUDA(cub::DeviceReduce::Sum(nullptr, bytes, g0.kw.data(), sum.data(), n, r.stream));
      SCURRY_CUDA(cub::DeviceReduce::Sum(ws.scratch(bytes), bytes, g0.kw.data(), sum.data(), n, r.stream));
      two_m = ws.get(sum.data());
    }
    if (ws.split()) {  // rank 0's bits
      int64_t bits = 0;
      std::memcpy(&bits, &two_m, sizeof bits);
      bits = ws.share(bits);
      std::memcpy(&two_m, &bits, sizeof bits);
    }
    if (ws.prof.on)
      std::fprintf(stderr, "  leiden setup: %lld nodes, %lld edges, 2m %.6g, %.2f ms\n", static_cast<long long>(n),
                   static_cast<long long>(nnz), two_m,
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count());
    if (!(two_m > 0)) {
      std::iota(res.labels.begin(), res.labels.end(), 0);  // no edges: every cell alone
    } else {
      ws.set_two_m(two_m);
      ws.set_fixed(g0);
      DeviceArray<int32_t> labels(r, static_cast<size_t>(n), "leiden labels");
      DeviceArray<int32_t> best(r, static_cast<size_t>(n), "leiden best labels");
      iota_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(labels.data(), n);  // singletons
      SCURRY_CUDA_LAUNCH();
      ws.copy(best.data(), labels.data(), n);
      const int64_t iterations = opt.n_iterations >= 0 ? opt.n_iterations : kMaxStableIterations;
      double best_q = -std::numeric_limits<double>::infinity();
      for (int64_t it = 0; it < iterations; ++it) {
        const auto t0 = std::chrono::steady_clock::now();
        const double q = ws.iteration(g0, labels);
        if (ws.prof.on)
          std::fprintf(stderr, "  leiden iteration %lld: q %.6f, %.2f ms\n", static_cast<long long>(it), q,
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        const bool better = q > best_q + (opt.n_iterations < 0 ? kStableTolerance : 0.0);
        if (q > best_q) {
          best_q = q;
          ws.copy(best.data(), labels.data(), n);
        }
        if (opt.n_iterations < 0 && !better) break;
      }
      have_device_q = opt.use_weights && std::isfinite(best_q);
      device_q = best_q;
      SCURRY_CUDA(cudaMemcpyAsync(res.labels.data(), best.data(), static_cast<size_t>(n) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    }
  }
  if (rank > 0) return res;  // the same labels as rank 0's
  // Renumber by decreasing size, ties by first cell (as the CPU path).
  std::vector<int64_t> size(static_cast<size_t>(n), 0), first(static_cast<size_t>(n), n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t l = res.labels[i];
    if (l < 0 || l >= n) fail("leiden (gpu): label ", l, " out of range at cell ", i);
    ++size[l];
    first[l] = std::min(first[l], i);
  }
  std::vector<int32_t> order;
  for (int64_t c = 0; c < n; ++c)
    if (size[c] > 0) order.push_back(static_cast<int32_t>(c));
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return size[x] != size[y] ? size[x] > size[y] : first[x] < first[y];
  });
  std::vector<int32_t> newid(static_cast<size_t>(n), -1);
  for (size_t k = 0; k < order.size(); ++k) newid[order[k]] = static_cast<int32_t>(k);
  for (int32_t& l : res.labels) l = newid[l];
  res.n_clusters = static_cast<int64_t>(order.size());
  res.modularity = have_device_q ? device_q : modularity(graph, res.labels, opt.resolution);
  return res;
}

}  // namespace

LeidenResult leiden_gpu(const Context& ctx, const CsrF& graph, const LeidenOptions& opt) {
  return leiden_gpu_impl(ctx, graph, opt, Knobs::from_env());
}

namespace {
// Lets `dev` (the current device) read and write the memory of `other` (plain and pool allocations)
// for the peer copies; without it they are staged by the driver (slower, the same bytes).
void enable_peer_access(int dev, int other) {
  int can = 0;
  if (other == dev || cudaDeviceCanAccessPeer(&can, dev, other) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    return;
  }
  if (cudaDeviceEnablePeerAccess(other, 0) != cudaSuccess) (void)cudaGetLastError();  // already enabled
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, other) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  cudaMemAccessDesc desc{};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = dev;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  if (cudaMemPoolSetAccess(pool, &desc, 1) != cudaSuccess) (void)cudaGetLastError();
}
}  // namespace

LeidenResult leiden_gpus(const std::vector<Context*>& ctxs, const CsrF& graph, const LeidenOptions& opt) {
  if (ctxs.empty()) fail_input(kWhere, "no GPU context given");
  for (const Context* c : ctxs)
    if (!c || !c->cuda()) fail_input(kWhere, "needs GPU contexts; use --device gpu, or the CPU leiden");
  const Knobs knobs = Knobs::from_env();
  if (ctxs.size() == 1) return leiden_gpu_impl(*ctxs[0], graph, opt, knobs);
  const int q = static_cast<int>(ctxs.size());
  Team team(q);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(q));
  LeidenResult res;
  auto rank_main = [&](int s) {
    try {
      const int dev = ctxs[s]->cuda()->device;
      SCURRY_CUDA(cudaSetDevice(dev));  // the resources were made on another thread
      for (const Context* c : ctxs) enable_peer_access(dev, c->cuda()->device);
      LeidenResult out = leiden_gpu_impl(*ctxs[s], graph, opt, knobs, &team, s);
      if (s == 0) res = std::move(out);
    } catch (...) {
      errors[static_cast<size_t>(s)] = std::current_exception();
      team.abort();
    }
  };
  {
    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(q));
    try {
      for (int s = 0; s < q; ++s) workers.emplace_back(rank_main, s);
    } catch (...) {  // a thread could not start: the others must not wait for it
      team.abort();
      for (std::thread& t : workers) t.join();
      throw;
    }
    for (std::thread& t : workers) t.join();
  }
  // The first error of a rank that failed by itself (the others stopped with TeamAborted).
  bool failed = false;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    failed = true;
    try {
      std::rethrow_exception(e);
    } catch (const TeamAborted&) {
    }
  }
  if (failed) fail(kWhere, ": a GPU stopped without an error");
  return res;
}

}  // namespace scurry
