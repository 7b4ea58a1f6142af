// Leiden on the GPU (see leiden_gpu.hpp for the algorithm and its differences from the CPU path).
//
// Floor on one H200 (1.3M cells, k = 15: ~25M directed edges at level 0): one local-moving sweep
// writes and radix-sorts 25M (uint64 key, float64 weight) pairs (~7 passes x 2 x 16 B x 25M = 5.6 GB)
// and reduces them by key (~0.8 GB), ~1.5 ms at 4.3 TB/s; the node and run kernels add ~0.3 GB.
// With ~30 sweeps + ~10 refinement rounds at level 0 and the (much smaller) upper levels about
// half as much again: ~0.1 s floor per Leiden iteration; target 0.7 s until stable.
//
// At 10M cells (~200M edges): int64 edge counts and offsets; device memory ~60 B per edge (src,
// dst, weight, two key and two value buffers for the sort) + ~80 B per node.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
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
constexpr uint32_t kNoLabel = 0xFFFFFFFFu;   // key label of masked entries (self-loops, other communities)

int blocks_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks)));
}
int bits_for(int64_t n) {  // bits to hold 0..n-1 (at least 1)
  int b = 1;
  while (b < 63 && (int64_t(1) << b) < n) ++b;
  return b;
}

#define GRID_LOOP(i, n)                                                                   \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- kernels ----------------------------------------------------------------------------------

__device__ inline uint32_t orderable(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Candidate (gain, label) as one atomicMax-able word: larger gain wins, ties go to the smaller label.
// Never 0 for labels < 2^31, so 0 means "no candidate".
__device__ inline unsigned long long pack(double gain, uint32_t label) {
  return (static_cast<unsigned long long>(orderable(static_cast<float>(gain))) << 32) |
         static_cast<unsigned long long>(kNoLabel - label);
}
__device__ inline uint32_t unpack(unsigned long long key) { return kNoLabel - static_cast<uint32_t>(key & 0xFFFFFFFFull); }

// Sum of v over the block into *out (every thread of the block must call it).
__device__ void block_add(double v, double* out) {
  __shared__ double sh[kBlock];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, sh[0]);
}

__global__ void expand_rows_kernel(const int64_t* indptr, int64_t n, int32_t* src) {
  GRID_LOOP(i, n)
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) src[p] = static_cast<int32_t>(i);
}

// Level-0 weights (float -> float64; every nonzero entry weighs 1 without use_weights) and strengths.
__global__ void weights_kernel(const float* data, const int32_t* src, int64_t nnz, bool use_weights, double* w,
                               double* strength) {
  GRID_LOOP(e, nnz) {
    const double x = data[e] == 0.0f ? 0.0 : (use_weights ? static_cast<double>(data[e]) : 1.0);
    w[e] = x;
    if (x != 0.0) atomicAdd(&strength[src[e]], x);
  }
}

__global__ void iota_kernel(int32_t* a, int64_t n) {
  GRID_LOOP(i, n) a[i] = static_cast<int32_t>(i);
}

// tot[label[i]] += kw[i] (tot zeroed before).
__global__ void community_weights_kernel(const int32_t* label, const double* kw, int64_t n, double* tot) {
  GRID_LOOP(i, n) atomicAdd(&tot[label[i]], kw[i]);
}

// acc[0] += weight of the edges inside communities; acc[1] += sum of tot^2.
__global__ void inside_weight_kernel(const int32_t* src, const int32_t* dst, const double* w, int64_t nnz,
                                     const int32_t* label, double* acc) {
  double s = 0;
  GRID_LOOP(e, nnz) if (label[src[e]] == label[dst[e]]) s += w[e];
  block_add(s, acc);
}
__global__ void sum_squares_kernel(const double* tot, int64_t n, double* acc) {
  double s = 0;
  GRID_LOOP(i, n) s += tot[i] * tot[i];
  block_add(s, acc + 1);
}

// key = (src, label[dst]); masked (kNoLabel): self-loops and, with `same`, edges between different
// same[] groups.
__global__ void pair_keys_kernel(const int32_t* src, const int32_t* dst, const double* w, int64_t nnz,
                                 const int32_t* label, const int32_t* same, unsigned long long* keys, double* vals) {
  GRID_LOOP(e, nnz) {
    const int32_t i = src[e], j = dst[e];
    const bool masked = i == j || (same && same[i] != same[j]);
    const uint32_t lab = masked ? kNoLabel : static_cast<uint32_t>(label[j]);
    keys[e] = (static_cast<unsigned long long>(i) << 32) | lab;
    vals[e] = w[e];
  }
}

// Local moving, per (node, neighbouring community) run: the weight to the own community, and the
// best allowed other community (up: higher ids only, else lower ids only).
__global__ void move_candidates_kernel(const unsigned long long* keys, const double* sums, int64_t runs,
                                       const int32_t* comm, const double* kw, const double* tot, double gamma_2m,
                                       bool up, double* k_own, unsigned long long* best) {
  GRID_LOOP(r, runs) {
    const unsigned long long key = keys[r];
    const uint32_t c = static_cast<uint32_t>(key & 0xFFFFFFFFull);
    if (c == kNoLabel) continue;
    const int64_t i = static_cast<int64_t>(key >> 32);
    const uint32_t own = static_cast<uint32_t>(comm[i]);
    if (c == own) {
      k_own[i] = sums[r];
      continue;
    }
    if (up ? c < own : c > own) continue;
    const double gain = sums[r] - gamma_2m * kw[i] * tot[c];
    atomicMax(&best[i], pack(gain, c));
  }
}

// The exact weight from each node to its chosen community.
__global__ void best_weight_kernel(const unsigned long long* keys, const double* sums, int64_t runs,
                                   const unsigned long long* best, double* k_best) {
  GRID_LOOP(r, runs) {
    const unsigned long long key = keys[r];
    const uint32_t c = static_cast<uint32_t>(key & 0xFFFFFFFFull);
    if (c == kNoLabel) continue;
    const int64_t i = static_cast<int64_t>(key >> 32);
    const unsigned long long b = best[i];
    if (b != 0 && unpack(b) == c) k_best[i] = sums[r];
  }
}

// Moves every node whose best community beats staying (float64 gains).
__global__ void move_kernel(int64_t n, int32_t* comm, const double* kw, const double* tot, const double* k_own,
                            const double* k_best, const unsigned long long* best, double gamma_2m,
                            unsigned long long* moved, unsigned long long salt, unsigned subset_mask) {
  GRID_LOOP(i, n) {
    const unsigned long long b = best[i];
    if (b == 0) continue;
    // Only a pseudo-random share of the nodes may move in a sweep (1 / (subset_mask + 1)): fewer
    // simultaneous moves that undo each other.
    if (subset_mask && (gpu::mix64(static_cast<uint64_t>(i) ^ salt) & subset_mask) != 0) continue;
    const uint32_t c = unpack(b);
    const int32_t own = comm[i];
    const double stay = k_own[i] - gamma_2m * kw[i] * (tot[own] - kw[i]);
    const double go = k_best[i] - gamma_2m * kw[i] * tot[c];
    if (go - stay > kGainRounding * kw[i]) {
      comm[i] = static_cast<int32_t>(c);
      atomicAdd(moved, 1ull);
    }
  }
}

// Refinement: weight from each node to the rest of its community (kin), and from each refined
// community to the rest of its community (ext).
__global__ void inner_weights_kernel(const int32_t* src, const int32_t* dst, const double* w, int64_t nnz,
                                     const int32_t* comm, const int32_t* ref, double* kin, double* ext) {
  GRID_LOOP(e, nnz) {
    const int32_t i = src[e], j = dst[e];
    if (i == j || comm[i] != comm[j]) continue;
    if (kin) atomicAdd(&kin[i], w[e]);
    if (ext && ref[i] != ref[j]) atomicAdd(&ext[ref[i]], w[e]);
  }
}

__global__ void well_connected_kernel(int64_t n, const double* kin, const double* kw, const int32_t* comm,
                                      const double* tot, double gamma_2m, uint8_t* wc) {
  GRID_LOOP(i, n) wc[i] = kin[i] >= gamma_2m * kw[i] * (tot[comm[i]] - kw[i]) ? 1 : 0;
}

__global__ void refine_candidates_kernel(const unsigned long long* keys, const double* sums, int64_t runs,
                                         const int32_t* ref, const int32_t* comm, const double* kw, const double* tot,
                                         const double* rtot, const int32_t* rsize, const double* ext,
                                         const uint8_t* wc, double gamma_2m, unsigned long long* best) {
  GRID_LOOP(r, runs) {
    const unsigned long long key = keys[r];
    const uint32_t rc = static_cast<uint32_t>(key & 0xFFFFFFFFull);
    if (rc == kNoLabel) continue;
    const int64_t i = static_cast<int64_t>(key >> 32);
    const uint32_t own = static_cast<uint32_t>(ref[i]);
    if (rc >= own || rsize[own] != 1 || !wc[i]) continue;
    const double s_tot = tot[comm[i]];
    if (ext[rc] < gamma_2m * rtot[rc] * (s_tot - rtot[rc])) continue;  // R not well connected to S
    const double gain = sums[r] - gamma_2m * kw[i] * rtot[rc];
    if (gain >= 0) atomicMax(&best[i], pack(gain, rc));
  }
}

__global__ void refine_move_kernel(int64_t n, int32_t* ref, const unsigned long long* best, unsigned long long* moved) {
  GRID_LOOP(i, n) {
    const unsigned long long b = best[i];
    if (b == 0) continue;
    ref[i] = static_cast<int32_t>(unpack(b));
    atomicAdd(moved, 1ull);
  }
}

__global__ void refined_sizes_kernel(const int32_t* ref, const double* kw, int64_t n, double* rtot, int32_t* rsize) {
  GRID_LOOP(i, n) {
    atomicAdd(&rtot[ref[i]], kw[i]);
    atomicAdd(&rsize[ref[i]], 1);
  }
}

__global__ void flag_kernel(const int32_t* label, int64_t n, int32_t* flags) {
  GRID_LOOP(i, n) flags[label[i]] = 1;
}
__global__ void relabel_kernel(int32_t* label, int64_t n, const int32_t* pos) {
  GRID_LOOP(i, n) label[i] = pos[label[i]];
}

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
// Next level: node weights and starting communities (every member of an aggregate shares its community).
__global__ void aggregate_nodes_kernel(const int32_t* agg, const int32_t* comm, const double* kw, int64_t n,
                                       double* kw2, int32_t* comm2) {
  GRID_LOOP(i, n) {
    atomicAdd(&kw2[agg[i]], kw[i]);
    comm2[agg[i]] = comm[i];
  }
}
// out[i] = map[in[i]] (in place allowed).
__global__ void compose_kernel(const int32_t* in, const int32_t* map, int64_t n, int32_t* out) {
  GRID_LOOP(i, n) out[i] = map[in[i]];
}

struct AddD {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// ---- host side ----------------------------------------------------------------------------------

struct Level {
  int64_t n = 0, nnz = 0;
  DeviceArray<int32_t> src, dst;
  DeviceArray<double> w, kw;
};

struct Workspace {
  CudaResources& r;
  int64_t n0, nnz0;
  double two_m, gamma;
  DeviceArray<unsigned long long> keys0, keys1, best;
  DeviceArray<double> vals0, vals1, tot, k_own, k_best, rtot, acc;
  DeviceArray<int32_t> saved, rsize, flags, pos, ref, agg;
  DeviceArray<uint8_t> wc, temp;
  DeviceArray<int64_t> runs;
  DeviceArray<unsigned long long> counter;

  Workspace(CudaResources& res, int64_t n, int64_t nnz, double tm, double g)
      : r(res), n0(n), nnz0(nnz), two_m(tm), gamma(g),
        keys0(res, static_cast<size_t>(nnz), "leiden sort keys"),
        keys1(res, static_cast<size_t>(nnz), "leiden sort keys"),
        best(res, static_cast<size_t>(n), "leiden candidates"),
        vals0(res, static_cast<size_t>(nnz), "leiden sort values"),
        vals1(res, static_cast<size_t>(nnz), "leiden sort values"),
        tot(res, static_cast<size_t>(n), "leiden community weights"),
        k_own(res, static_cast<size_t>(n), "leiden node weights"),
        k_best(res, static_cast<size_t>(n), "leiden node weights"),
        rtot(res, static_cast<size_t>(n), "leiden refined weights"),
        acc(res, 2, "leiden sums"),
        saved(res, static_cast<size_t>(n), "leiden labels"),
        rsize(res, static_cast<size_t>(n), "leiden refined sizes"),
        flags(res, static_cast<size_t>(n) + 1, "leiden relabel flags"),
        pos(res, static_cast<size_t>(n) + 1, "leiden relabel positions"),
        ref(res, static_cast<size_t>(n), "leiden refined labels"),
        agg(res, static_cast<size_t>(n), "leiden aggregate labels"),
        wc(res, static_cast<size_t>(n), "leiden well-connected flags"),
        runs(res, 1, "leiden run count"),
        counter(res, 1, "leiden move count") {}

  double gamma_2m() const { return gamma / two_m; }

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

  // Sorts the (key, value) pairs in keys0/vals0 (the first nnz) on bits [0, end_bit) and sums the
  // values of equal keys: the unique keys and sums are returned (pointers into the workspace) with
  // their count.
  int64_t sort_reduce(int64_t nnz, int end_bit, const unsigned long long** ukeys, const double** usums) {
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
    return get(runs.data());
  }

  // Weights from every node to each label of its neighbours (see pair_keys_kernel).
  int64_t neighbour_weights(const Level& g, const int32_t* label, const int32_t* same, const unsigned long long** ukeys,
                            const double** usums) {
    pair_keys_kernel<<<blocks_for(g.nnz), kBlock, 0, r.stream>>>(g.src.data(), g.dst.data(), g.w.data(), g.nnz, label,
                                                                  same, keys0.data(), vals0.data());
    SCURRY_CUDA_LAUNCH();
    return sort_reduce(g.nnz, 32 + bits_for(g.n), ukeys, usums);
  }

  void community_weights(const Level& g, const int32_t* label) {
    zero(tot, g.n);
    community_weights_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(label, g.kw.data(), g.n, tot.data());
    SCURRY_CUDA_LAUNCH();
  }

  // Modularity of `label` on g (tot must hold its community weights).
  double quality(const Level& g, const int32_t* label) {
    zero(acc, 2);
    inside_weight_kernel<<<blocks_for(g.nnz), kBlock, 0, r.stream>>>(g.src.data(), g.dst.data(), g.w.data(), g.nnz,
                                                                      label, acc.data());
    SCURRY_CUDA_LAUNCH();
    sum_squares_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(tot.data(), g.n, acc.data());
    SCURRY_CUDA_LAUNCH();
    double h[2];
    SCURRY_CUDA(cudaMemcpyAsync(h, acc.data(), sizeof(h), cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    return h[0] / two_m - gamma * h[1] / (two_m * two_m);
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

  // Parallel local moving of g's nodes between the communities `comm`; returns the modularity.
  // SCURRY_LEIDEN_SUBSET=s: 1 / 2^s of the nodes (a different pseudo-random share each sweep) may
  // move per sweep. Default 1 (half): on the shared pbmc3k graph at resolution 2, all nodes moving
  // at once reach modularity 0.4813, half 0.4829, a quarter 0.4802 (CPU igraph: 0.4926).
  unsigned subset_mask = [] {
    const char* e = std::getenv("SCURRY_LEIDEN_SUBSET");
    const int s = e ? std::atoi(e) : 1;
    return s > 0 && s < 8 ? (1u << s) - 1u : 0u;
  }();

  double local_move(const Level& g, int32_t* comm) {
    community_weights(g, comm);
    double q = quality(g, comm), best_q = q, pair_start = q;
    SCURRY_CUDA(cudaMemcpyAsync(saved.data(), comm, static_cast<size_t>(g.n) * sizeof(int32_t),
                                cudaMemcpyDeviceToDevice, r.stream));
    bool saved_is_current = true;
    unsigned long long prev_moved = 1;
    for (int sweep = 0; sweep < kMaxMoveSweeps; ++sweep) {
      const unsigned long long* ukeys;
      const double* usums;
      const int64_t nr = neighbour_weights(g, comm, nullptr, &ukeys, &usums);
      zero(k_own, g.n);
      zero(best, g.n);
      zero(counter, 1);
      move_candidates_kernel<<<blocks_for(nr), kBlock, 0, r.stream>>>(ukeys, usums, nr, comm, g.kw.data(), tot.data(),
                                                                       gamma_2m(), sweep % 2 == 0, k_own.data(),
                                                                       best.data());
      SCURRY_CUDA_LAUNCH();
      best_weight_kernel<<<blocks_for(nr), kBlock, 0, r.stream>>>(ukeys, usums, nr, best.data(), k_best.data());
      SCURRY_CUDA_LAUNCH();
      move_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(g.n, comm, g.kw.data(), tot.data(), k_own.data(),
                                                            k_best.data(), best.data(), gamma_2m(), counter.data(),
                                                            0x9E3779B97F4A7C15ULL * static_cast<unsigned long long>(sweep + 1),
                                                            subset_mask);
      SCURRY_CUDA_LAUNCH();
      const unsigned long long moved = get(counter.data());
      if (moved > 0) {
        community_weights(g, comm);
        q = quality(g, comm);
        if (q > best_q) {
          best_q = q;
          SCURRY_CUDA(cudaMemcpyAsync(saved.data(), comm, static_cast<size_t>(g.n) * sizeof(int32_t),
                                      cudaMemcpyDeviceToDevice, r.stream));
          saved_is_current = true;
        } else {
          saved_is_current = false;
        }
      }
      if (moved == 0 && prev_moved == 0) break;  // neither direction moves anything
      prev_moved = moved;
      if (sweep % 2 == 1) {
        if (q - pair_start < kMoveTolerance) break;
        pair_start = q;
      }
    }
    if (!saved_is_current) {
      SCURRY_CUDA(cudaMemcpyAsync(comm, saved.data(), static_cast<size_t>(g.n) * sizeof(int32_t),
                                  cudaMemcpyDeviceToDevice, r.stream));
      community_weights(g, comm);
    }
    return best_q;
  }

  // Leiden's refinement of `comm` (tot must hold its weights) into `ref`.
  void refine(const Level& g, const int32_t* comm) {
    iota_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(ref.data(), g.n);
    SCURRY_CUDA_LAUNCH();
    zero(k_own, g.n);  // k_own: weight of each node to the rest of its community
    inner_weights_kernel<<<blocks_for(g.nnz), kBlock, 0, r.stream>>>(g.src.data(), g.dst.data(), g.w.data(), g.nnz,
                                                                      comm, ref.data(), k_own.data(), nullptr);
    SCURRY_CUDA_LAUNCH();
    well_connected_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(g.n, k_own.data(), g.kw.data(), comm, tot.data(),
                                                                    gamma_2m(), wc.data());
    SCURRY_CUDA_LAUNCH();
    for (int round = 0; round < kMaxRefineRounds; ++round) {
      zero(rtot, g.n);
      zero(rsize, g.n);
      refined_sizes_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(ref.data(), g.kw.data(), g.n, rtot.data(),
                                                                     rsize.data());
      SCURRY_CUDA_LAUNCH();
      zero(k_best, g.n);  // k_best: weight of each refined community to the rest of its community
      inner_weights_kernel<<<blocks_for(g.nnz), kBlock, 0, r.stream>>>(g.src.data(), g.dst.data(), g.w.data(), g.nnz,
                                                                        comm, ref.data(), nullptr, k_best.data());
      SCURRY_CUDA_LAUNCH();
      const unsigned long long* ukeys;
      const double* usums;
      const int64_t nr = neighbour_weights(g, ref.data(), comm, &ukeys, &usums);
      zero(best, g.n);
      zero(counter, 1);
      refine_candidates_kernel<<<blocks_for(nr), kBlock, 0, r.stream>>>(
          ukeys, usums, nr, ref.data(), comm, g.kw.data(), tot.data(), rtot.data(), rsize.data(), k_best.data(),
          wc.data(), gamma_2m(), best.data());
      SCURRY_CUDA_LAUNCH();
      refine_move_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(g.n, ref.data(), best.data(), counter.data());
      SCURRY_CUDA_LAUNCH();
      if (get(counter.data()) == 0) break;
    }
  }

  // The graph of g with nodes merged by agg (values 0..k-1).
  Level aggregate(const Level& g, const int32_t* agg_label, int64_t k, const int32_t* comm, int32_t* comm2) {
    aggregate_keys_kernel<<<blocks_for(g.nnz), kBlock, 0, r.stream>>>(g.src.data(), g.dst.data(), g.w.data(), g.nnz,
                                                                      agg_label, keys0.data(), vals0.data());
    SCURRY_CUDA_LAUNCH();
    const unsigned long long* ukeys;
    const double* usums;
    const int64_t m = sort_reduce(g.nnz, 32 + bits_for(k), &ukeys, &usums);
    Level h;
    h.n = k;
    h.nnz = m;
    h.src = DeviceArray<int32_t>(r, static_cast<size_t>(m), "leiden level edges");
    h.dst = DeviceArray<int32_t>(r, static_cast<size_t>(m), "leiden level edges");
    h.w = DeviceArray<double>(r, static_cast<size_t>(m), "leiden level weights");
    h.kw = DeviceArray<double>(r, static_cast<size_t>(k), "leiden level node weights");
    unpack_edges_kernel<<<blocks_for(m), kBlock, 0, r.stream>>>(ukeys, usums, m, h.src.data(), h.dst.data(),
                                                                h.w.data());
    SCURRY_CUDA_LAUNCH();
    zero(h.kw, k);
    aggregate_nodes_kernel<<<blocks_for(g.n), kBlock, 0, r.stream>>>(agg_label, comm, g.kw.data(), g.n, h.kw.data(),
                                                                     comm2);
    SCURRY_CUDA_LAUNCH();
    return h;
  }

  // One Leiden iteration on g0 from the partition `labels` (values < n0; overwritten with the
  // result, renumbered 0..K-1). Returns the modularity.
  double iteration(const Level& g0, DeviceArray<int32_t>& labels) {
    const int64_t n0v = g0.n;
    DeviceArray<int32_t> comm(r, static_cast<size_t>(n0v), "leiden communities");
    DeviceArray<int32_t> comm_next(r, static_cast<size_t>(n0v), "leiden communities");
    DeviceArray<int32_t> top(r, static_cast<size_t>(n0v), "leiden cell to node");  // cell -> node of the level
    SCURRY_CUDA(cudaMemcpyAsync(comm.data(), labels.data(), static_cast<size_t>(n0v) * sizeof(int32_t),
                                cudaMemcpyDeviceToDevice, r.stream));
    iota_kernel<<<blocks_for(n0v), kBlock, 0, r.stream>>>(top.data(), n0v);
    SCURRY_CUDA_LAUNCH();
    Level owned;
    const Level* g = &g0;
    double q = 0;
    for (int level = 0; level < kMaxLevels; ++level) {
      q = local_move(*g, comm.data());
      const int64_t kc = renumber(comm.data(), g->n);
      if (kc == g->n) break;  // every node alone: nothing to aggregate
      community_weights(*g, comm.data());
      refine(*g, comm.data());
      SCURRY_CUDA(cudaMemcpyAsync(agg.data(), ref.data(), static_cast<size_t>(g->n) * sizeof(int32_t),
                                  cudaMemcpyDeviceToDevice, r.stream));
      int64_t k = renumber(agg.data(), g->n);
      if (k == g->n) {  // refinement merged nothing: aggregate the communities themselves
        SCURRY_CUDA(cudaMemcpyAsync(agg.data(), comm.data(), static_cast<size_t>(g->n) * sizeof(int32_t),
                                    cudaMemcpyDeviceToDevice, r.stream));
        k = kc;
      }
      Level next = aggregate(*g, agg.data(), k, comm.data(), comm_next.data());
      compose_kernel<<<blocks_for(n0v), kBlock, 0, r.stream>>>(top.data(), agg.data(), n0v, top.data());
      SCURRY_CUDA_LAUNCH();
      SCURRY_CUDA(cudaMemcpyAsync(comm.data(), comm_next.data(), static_cast<size_t>(k) * sizeof(int32_t),
                                  cudaMemcpyDeviceToDevice, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // the old level is released below
      owned = std::move(next);
      g = &owned;
    }
    compose_kernel<<<blocks_for(n0v), kBlock, 0, r.stream>>>(top.data(), comm.data(), n0v, labels.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    return q;
  }
};

}  // namespace

LeidenResult leiden_gpu(const Context& ctx, const CsrF& graph, const LeidenOptions& opt) {
  CudaResources* rp = ctx.cuda();
  if (!rp) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU leiden");
  CudaResources& r = *rp;
  const int64_t n = graph.n_rows, nnz = graph.nnz();
  if (graph.n_cols != n) fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square");
  if (!(opt.resolution > 0)) fail_input(kWhere, "resolution = ", opt.resolution, " must be positive");
  if (!(opt.beta > 0)) fail_input(kWhere, "beta = ", opt.beta, " must be positive");
  if (n >= std::numeric_limits<int32_t>::max())
    fail_input(kWhere, "the graph has ", n, " nodes; at most 2^31 - 2 are supported");
  if (static_cast<int64_t>(graph.indptr.size()) != n + 1 || (n > 0 && graph.indptr.back() != nnz))
    fail_input(kWhere, "the graph's row pointers do not match its entries; recompute the neighbours");
  LeidenResult res;
  if (n == 0) return res;
  double two_m = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = graph.indptr[i]; p < graph.indptr[i + 1]; ++p) {
      const float w = graph.data[p];
      if (!std::isfinite(w) || w < 0) fail_input(kWhere, "the graph has a negative or non-finite weight at row ", i);
      if (w != 0) two_m += opt.use_weights ? static_cast<double>(w) : 1.0;
    }
  res.labels.assign(static_cast<size_t>(n), 0);
  double device_q = 0;  // modularity from the device sums (same weights as modularity() with use_weights)
  bool have_device_q = false;
  if (!(two_m > 0)) {
    std::iota(res.labels.begin(), res.labels.end(), 0);  // no edges: every cell alone
  } else {
    Level g0;
    g0.n = n;
    g0.nnz = nnz;
    g0.src = DeviceArray<int32_t>(r, static_cast<size_t>(nnz), "leiden edges");
    g0.dst = DeviceArray<int32_t>(r, static_cast<size_t>(nnz), "leiden edges");
    g0.w = DeviceArray<double>(r, static_cast<size_t>(nnz), "leiden weights");
    g0.kw = DeviceArray<double>(r, static_cast<size_t>(n), "leiden node weights");
    SCURRY_CUDA(cudaMemcpyAsync(g0.dst.data(), graph.indices.data(), static_cast<size_t>(nnz) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, r.stream));
    {
      DeviceArray<int64_t> indptr(r, static_cast<size_t>(n + 1), "leiden row pointers");
      DeviceArray<float> data(r, static_cast<size_t>(nnz), "leiden input weights");
      SCURRY_CUDA(cudaMemcpyAsync(indptr.data(), graph.indptr.data(), static_cast<size_t>(n + 1) * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(data.data(), graph.data.data(), static_cast<size_t>(nnz) * sizeof(float),
                                  cudaMemcpyHostToDevice, r.stream));
      expand_rows_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(indptr.data(), n, g0.src.data());
      SCURRY_CUDA_LAUNCH();
      SCURRY_CUDA(cudaMemsetAsync(g0.kw.data(), 0, static_cast<size_t>(n) * sizeof(double), r.stream));
      weights_kernel<<<blocks_for(nnz), kBlock, 0, r.stream>>>(data.data(), g0.src.data(), nnz, opt.use_weights,
                                                               g0.w.data(), g0.kw.data());
      SCURRY_CUDA_LAUNCH();
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // indptr and data are freed here
    }
    Workspace ws(r, n, nnz, two_m, opt.resolution);
    DeviceArray<int32_t> labels(r, static_cast<size_t>(n), "leiden labels");
    DeviceArray<int32_t> best(r, static_cast<size_t>(n), "leiden best labels");
    iota_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(labels.data(), n);  // singletons
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaMemcpyAsync(best.data(), labels.data(), static_cast<size_t>(n) * sizeof(int32_t),
                                cudaMemcpyDeviceToDevice, r.stream));
    const int64_t iterations = opt.n_iterations >= 0 ? opt.n_iterations : kMaxStableIterations;
    double best_q = -std::numeric_limits<double>::infinity();
    for (int64_t it = 0; it < iterations; ++it) {
      const double q = ws.iteration(g0, labels);
      const bool better = q > best_q + (opt.n_iterations < 0 ? kStableTolerance : 0.0);
      if (q > best_q) {
        best_q = q;
        SCURRY_CUDA(cudaMemcpyAsync(best.data(), labels.data(), static_cast<size_t>(n) * sizeof(int32_t),
                                    cudaMemcpyDeviceToDevice, r.stream));
      }
      if (opt.n_iterations < 0 && !better) break;
    }
    have_device_q = opt.use_weights && std::isfinite(best_q);
    device_q = best_q;
    SCURRY_CUDA(cudaMemcpyAsync(res.labels.data(), best.data(), static_cast<size_t>(n) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  }
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


}  // namespace scurry
