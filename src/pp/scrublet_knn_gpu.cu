// Scrublet's neighbour count on the GPU (scrublet_knn_gpu.hpp): IVF lists, per-chunk distance keys
// in a device buffer, a per-query radix select of the (k - 1)-th smallest, the simulated neighbours
// counted below it, float64 re-rank of the candidates at the threshold.
//
// Floor on one H200 at 1.3M cells (n = 3.9M points x 30 dims, k = 1,713, ~27k candidates a query):
// distances 3.9M x 27k x 32 (sub + FMA) = 3.4e12 pairs-dims, ~0.2 s at the FP32 issue rate; the key
// buffer (1.05e11 keys, 420 GB) written once and read once into shared memory (the three radix
// passes and the count run there): ~0.2 s at 4.3 TB/s. k-means, lists and probes: tens of ms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "graph/knn_gpu.cuh"
#include "pp/scrublet_knn_gpu.cuh"

namespace scurry {
namespace {

constexpr int kThreads = 256;          // elementwise kernels, distance tiles
constexpr int kWarpSize = 32;
constexpr unsigned kAllLanes = 0xffffffffu;
constexpr int kTile = 64;              // queries x candidates per distance tile (4 x 4 per thread)
constexpr int kSelectThreads = 512;    // threads of the per-query select
constexpr int kRadixBins = 2048;       // 11-bit digits: key bits [21, 32), [10, 21), [0, 10)
constexpr int kBoundaryCap = 1024;     // candidates at the threshold re-ranked in float64 (shared memory)
constexpr double kMargin = 1e-5;       // relative: the float32 keys' error is below ~2e-6
constexpr int64_t kAssignTileFloats = int64_t{1} << 25;  // points x centroids scores per GEMM (128 MiB)
constexpr uint32_t kSelfKey = 0xffffffffu;               // the query itself: after every distance

unsigned blocks_for(int64_t n, int t = kThreads) { return static_cast<unsigned>((n + t - 1) / t); }

// A run of queries of one list (all in one chunk), and where its keys go.
struct Unit {
  int64_t q0;       // first query: a position in list order
  int64_t nq;       // queries
  int64_t cand;     // candidates per query
  int64_t stride;   // keys per query row: cand rounded up to a multiple of 4 (16-byte rows)
  int64_t buf_off;  // first key in the chunk's buffer
  int64_t tile0;    // distance tiles of all earlier units
  int64_t query0;   // queries of all earlier units
  int64_t list;
};

// The unit u in [u0, u1) with field(u) <= g < field(u + 1) (field increasing).
template <class F>
__device__ int64_t find_unit(const Unit* units, int64_t u0, int64_t u1, int64_t g, F field) {
  int64_t lo = u0, hi = u1 - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (field(units[mid]) <= g) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Xs[p, c] = Y[perm[p], c] for c < d, 0 for d <= c < dp (list order, padded rows).
__global__ void gather_padded_kernel(const float* Y, const int32_t* perm, int64_t n, int64_t d, int64_t dp,
                                     float* Xs) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * dp) return;
  const int64_t p = e / dp, c = e - p * dp;
  Xs[e] = c < d ? Y[static_cast<int64_t>(perm[p]) * d + c] : 0.f;
}

__global__ void gather_kernel(const float* Y, const int32_t* ids, int64_t m, int64_t d, float* S) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= m * d) return;
  const int64_t i = e / d;
  S[e] = Y[static_cast<int64_t>(ids[i]) * d + (e - i * d)];
}

// cn[l] = ||C_l||^2 (float64 sum, rounded).
__global__ void squared_norms_kernel(const float* C, int64_t L, int64_t d, float* cn) {
  const int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (l >= L) return;
  double s = 0;
  for (int64_t c = 0; c < d; ++c) s += static_cast<double>(C[l * d + c]) * C[l * d + c];
  cn[l] = static_cast<float>(s);
}

// labels[q] = the l minimising cn[l] + tile[q, l] (tile = -2 x_q . c_l), ties to the smaller l; a
// warp per point.
__global__ void nearest_centroid_kernel(const float* tile, int64_t nq, int64_t L, const float* cn, int32_t* labels) {
  const int64_t q = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (q >= nq) return;
  float best = INFINITY;
  int32_t arg = INT32_MAX;
  for (int64_t l = lane; l < L; l += kWarpSize) {
    const float s = tile[q * L + l] + cn[l];
    if (s < best) best = s, arg = static_cast<int32_t>(l);  // l increases: the first minimum stays
  }
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(kAllLanes, best, o);
    const int32_t oa = __shfl_xor_sync(kAllLanes, arg, o);
    if (ob < best || (ob == best && oa < arg)) best = ob, arg = oa;
  }
  if (lane == 0) labels[q] = arg == INT32_MAX ? 0 : arg;
}

// C[l] = the mean of list l's members (float64, member order); empty lists keep their centroid.
__global__ void list_means_kernel(const float* S, const int32_t* members, const int64_t* offsets, int64_t d,
                                  float* C) {
  const int64_t l = blockIdx.x, b = offsets[l], e = offsets[l + 1];
  if (b == e) return;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    double s = 0;
    for (int64_t p = b; p < e; ++p) s += S[static_cast<int64_t>(members[p]) * d + c];
    C[l * d + c] = static_cast<float>(s / static_cast<double>(e - b));
  }
}

// Candidate j of list `list` (its probes' rows, in probe order): its position in list order.
__device__ __forceinline__ int64_t candidate_position(int64_t j, const int64_t* pstart, int64_t list,
                                                      const int64_t* probe_pre, const int32_t* probe_ids,
                                                      const int64_t* lbeg) {
  int64_t lo = pstart[list], hi = pstart[list + 1] - 1;  // the last probe i with probe_pre[i] <= j
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (probe_pre[mid] <= j) lo = mid;
    else hi = mid - 1;
  }
  return lbeg[probe_ids[lo]] + (j - probe_pre[lo]);
}

// One 64 x 64 tile of (query, candidate) keys: the float32 squared distance sum_c (q_c - x_c)^2, its
// lowest bit replaced by "the candidate is simulated"; the query itself gets kSelfKey. Non-negative
// floats order as their bits, so the keys sort as the distances (up to that last bit).
template <int DP>
__global__ void __launch_bounds__(kThreads) distance_keys_kernel(
    const float* Xs, const int32_t* perm, int64_t n_obs, const int64_t* lbeg, const int32_t* probe_ids,
    const int64_t* probe_pre, const int64_t* pstart, const Unit* units, int64_t u0, int64_t u1, int64_t tile_base,
    uint32_t* keys) {
  __shared__ float Qs[kTile][DP + 1], Cs[kTile][DP + 1];
  __shared__ int64_t qpos[kTile], cpos[kTile];
  __shared__ uint32_t csim[kTile];
  const int64_t t = tile_base + blockIdx.x;
  const Unit U = units[find_unit(units, u0, u1, t, [](const Unit& u) { return u.tile0; })];
  const int64_t nct = (U.cand + kTile - 1) / kTile, lt = t - U.tile0;
  const int64_t qa = (lt / nct) * kTile, ca = (lt % nct) * kTile;
  const int tid = threadIdx.x;
  if (tid < kTile) {
    qpos[tid] = qa + tid < U.nq ? U.q0 + qa + tid : -1;
  } else if (tid < 2 * kTile) {
    const int c = tid - kTile;
    const int64_t j = ca + c;
    if (j < U.cand) {
      const int64_t p = candidate_position(j, pstart, U.list, probe_pre, probe_ids, lbeg);
      cpos[c] = p;
      csim[c] = perm[p] >= n_obs ? 1u : 0u;
    } else {
      cpos[c] = -1;
      csim[c] = 0;
    }
  }
  __syncthreads();
  for (int e = tid; e < kTile * DP; e += kThreads) {
    const int row = e / DP, c = e % DP;
    Qs[row][c] = qpos[row] >= 0 ? Xs[qpos[row] * DP + c] : 0.f;
    Cs[row][c] = cpos[row] >= 0 ? Xs[cpos[row] * DP + c] : 0.f;
  }
  __syncthreads();
  const int tc = tid % 16, tq = tid / 16;
  float acc[4][4] = {};
#pragma unroll 8
  for (int c = 0; c < DP; ++c) {
    float a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = Qs[tq + 16 * i][c], b[i] = Cs[tc + 16 * i][c];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float dlt = a[i] - b[j];
        acc[i][j] = fmaf(dlt, dlt, acc[i][j]);
      }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = tq + 16 * i;
    if (qpos[q] < 0) continue;
    uint32_t* row = keys + U.buf_off + (qa + q) * U.stride + ca;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = tc + 16 * j;
      if (cpos[c] < 0) continue;
      row[c] = cpos[c] == qpos[q] ? kSelfKey : ((__float_as_uint(acc[i][j]) & ~1u) | csim[c]);
    }
  }
}

// Exclusive prefix sum of v over the block (kSelectThreads threads); total to *total. scratch: 32 ints.
__device__ int block_exclusive_scan(int v, int* scratch, int* total) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  int x = v;
  for (int o = 1; o < kWarpSize; o <<= 1) {
    const int y = __shfl_up_sync(kAllLanes, x, o);
    if (lane >= o) x += y;
  }
  if (lane == kWarpSize - 1) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    constexpr int nw = kSelectThreads / kWarpSize;
    int w = lane < nw ? scratch[lane] : 0;
    for (int o = 1; o < kWarpSize; o <<= 1) {
      const int y = __shfl_up_sync(kAllLanes, w, o);
      if (lane >= o) w += y;
    }
    if (lane < nw) scratch[lane] = w;  // inclusive per warp
    if (lane == nw - 1) *total = w;
  }
  __syncthreads();
  const int before = warp > 0 ? scratch[warp - 1] : 0;
  const int r = before + x - v;
  __syncthreads();  // scratch reused by the caller
  return r;
}

// Shared memory of the select: float64 distances, positions and indices of the boundary candidates,
// the radix histogram, a few counters; then (kSmemRow) the query's keys.
constexpr size_t kSelectFixedSmem = kBoundaryCap * (sizeof(double) + 2 * sizeof(int32_t)) +
                                    kRadixBins * sizeof(int) + 64 * sizeof(int);

// One block per query of units [u0, u1) (query_base + blockIdx.x among all units' queries): the
// (k - 1)-th smallest key of its row (three radix passes), then the count of simulated candidates
// among the k - 1 nearest: those clearly below the threshold by their key, those within kMargin of it
// by (float64 distance, index). counts[perm[query]] = the count, or -1 when more than kBoundaryCap
// candidates lie at the threshold (the host finishes those).
template <bool kSmemRow>
__global__ void __launch_bounds__(kSelectThreads) select_count_kernel(
    const uint32_t* keys, const Unit* units, int64_t u0, int64_t u1, int64_t query_base, int64_t k, int64_t n_obs,
    const float* Xs, int64_t dp, int64_t d, const int32_t* perm, const int64_t* lbeg, const int32_t* probe_ids,
    const int64_t* probe_pre, const int64_t* pstart, int32_t* counts) {
  extern __shared__ __align__(16) unsigned char smem[];
  double* bd = reinterpret_cast<double*>(smem);
  int32_t* bpos = reinterpret_cast<int32_t*>(bd + kBoundaryCap);
  int32_t* bidx = bpos + kBoundaryCap;
  int* hist = bidx + kBoundaryCap;
  int* misc = hist + kRadixBins;  // [0] bin, [1] rank, [2] boundary size, [3] in, [4] sim in, [5] sim at
  int* scan = misc + 16;          // 32 ints
  uint32_t* srow = reinterpret_cast<uint32_t*>(misc + 64);
  const int tid = threadIdx.x, lane = tid % kWarpSize;
  const int64_t g = query_base + blockIdx.x;
  const Unit U = units[find_unit(units, u0, u1, g, [](const Unit& u) { return u.query0; })];
  const int64_t qi = g - U.query0, qp = U.q0 + qi, C = U.cand;
  const uint32_t* grow = keys + U.buf_off + qi * U.stride;
  if (kSmemRow) {  // 16-byte loads, four in flight a thread
    const uint4* g4 = reinterpret_cast<const uint4*>(grow);
    uint4* s4 = reinterpret_cast<uint4*>(srow);
    const int64_t n4 = U.stride / 4;
    for (int64_t j = tid; j < n4; j += 4 * kSelectThreads) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (j + u * kSelectThreads < n4) v[u] = g4[j + u * kSelectThreads];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (j + u * kSelectThreads < n4) s4[j + u * kSelectThreads] = v[u];
    }
  }
  const uint32_t* row = kSmemRow ? srow : grow;
  if (tid < 16) misc[tid] = 0;
  // Radix select: the key of rank k - 2 (0-based) among all C keys (self last: C - 1 >= k - 1 others).
  uint32_t prefix = 0, pmask = 0;
  int rank = static_cast<int>(k - 2);
  const int shifts[3] = {21, 10, 0}, widths[3] = {11, 11, 10};
  for (int pass = 0; pass < 3; ++pass) {
    const int sh = shifts[pass], nb = 1 << widths[pass];
    for (int b = tid; b < nb; b += kSelectThreads) hist[b] = 0;
    __syncthreads();
    for (int64_t j0 = 0; j0 < C; j0 += kSelectThreads) {  // uniform trip count: whole warps below
      const int64_t j = j0 + tid;
      const uint32_t key = j < C ? row[j] : 0u;
      const bool in = j < C && (key & pmask) == prefix;
      const int bin = static_cast<int>((key >> sh) & static_cast<uint32_t>(nb - 1));
      if (pass == 0) {  // the top bits (exponent) fall in a few bins: one atomic per bin a warp
        const unsigned active = __ballot_sync(kAllLanes, in);
        if (in) {
          const unsigned peers = __match_any_sync(active, bin);
          if (lane == __ffs(peers) - 1) atomicAdd(hist + bin, __popc(peers));
        }
      } else if (in) {
        atomicAdd(hist + bin, 1);
      }
    }
    __syncthreads();
    const int per = nb / kSelectThreads;
    int local = 0;
    for (int b = 0; b < per; ++b) local += hist[tid * per + b];
    int total;
    const int before = block_exclusive_scan(local, scan, &total);
    if (rank >= before && rank < before + local) {
      int acc = before;
      for (int b = 0; b < per; ++b) {
        const int h = hist[tid * per + b];
        if (rank < acc + h) {
          misc[0] = tid * per + b;
          misc[1] = rank - acc;
          break;
        }
        acc += h;
      }
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(misc[0]) << sh;
    pmask |= static_cast<uint32_t>(nb - 1) << sh;
    rank = misc[1];
    __syncthreads();
  }
  const float tf = __uint_as_float(prefix & ~1u);
  const uint32_t klo = __float_as_uint(static_cast<float>(tf * (1.0 - kMargin)));
  const uint32_t khi = __float_as_uint(static_cast<float>(tf * (1.0 + kMargin)));
  // Count pass, probe by probe (a candidate's position is its probe's first row + its offset).
  int n_in = 0, s_in = 0;
  for (int64_t i = pstart[U.list]; i < pstart[U.list + 1]; ++i) {
    const int64_t base = probe_pre[i], size = (i + 1 < pstart[U.list + 1] ? probe_pre[i + 1] : C) - base;
    const int64_t p0 = lbeg[probe_ids[i]];
    for (int64_t t = tid; t < size; t += kSelectThreads) {
      const uint32_t key = row[base + t];
      if (key == kSelfKey) continue;
      const uint32_t kd = key & ~1u;
      if (kd < klo) {
        ++n_in;
        s_in += static_cast<int>(key & 1u);
      } else if (kd <= khi) {
        const int slot = atomicAdd(misc + 2, 1);
        if (slot < kBoundaryCap) bpos[slot] = static_cast<int32_t>(p0 + t);
      }
    }
  }
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    n_in += __shfl_xor_sync(kAllLanes, n_in, o);
    s_in += __shfl_xor_sync(kAllLanes, s_in, o);
  }
  if (lane == 0) atomicAdd(misc + 3, n_in), atomicAdd(misc + 4, s_in);
  __syncthreads();
  const int nbd = misc[2];
  const int64_t qid = perm[qp];
  if (nbd > kBoundaryCap) {
    if (tid == 0) counts[qid] = -1;
    return;
  }
  const float* xq = Xs + qp * dp;
  for (int e = tid; e < nbd; e += kSelectThreads) {
    const float* xp = Xs + static_cast<int64_t>(bpos[e]) * dp;
    double s = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double t = static_cast<double>(xq[c]) - static_cast<double>(xp[c]);
      s += t * t;
    }
    bd[e] = s;
    bidx[e] = perm[bpos[e]];
  }
  __syncthreads();
  const int slots = static_cast<int>(k - 1) - misc[3];
  for (int e = tid; e < nbd; e += kSelectThreads) {
    int before = 0;
    for (int f = 0; f < nbd; ++f) before += bd[f] < bd[e] || (bd[f] == bd[e] && bidx[f] < bidx[e]);
    if (before < slots && bidx[e] >= n_obs) atomicAdd(misc + 5, 1);
  }
  __syncthreads();
  if (tid == 0) counts[qid] = misc[4] + misc[5];
}

template <class T>
void to_device(CudaResources& r, DeviceArray<T>& dst, const std::vector<T>& src) {
  if (!src.empty())
    SCURRY_CUDA(cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}

template <class T>
std::vector<T> to_host(CudaResources& r, const T* src, size_t n) {
  std::vector<T> out(n);
  if (n) SCURRY_CUDA(cudaMemcpyAsync(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return out;
}

// Nearest centroid (fp32 scores, ties to the smaller id) of each of the np rows of P.
std::vector<int32_t> nearest_centroids(CudaResources& r, const float* P, int64_t np, int64_t d, const float* C,
                                       int64_t L, const float* cn, DeviceArray<float>& tile,
                                       DeviceArray<int32_t>& labels) {
  const int64_t rows = std::max<int64_t>(1, kAssignTileFloats / L);
  const float alpha = -2.f, beta = 0.f;
  for (int64_t p0 = 0; p0 < np; p0 += rows) {
    const int64_t nq = std::min(rows, np - p0);
    SCURRY_CUBLAS(cublasGemmEx(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L), static_cast<int>(nq),
                               static_cast<int>(d), &alpha, C, CUDA_R_32F, static_cast<int>(d), P + p0 * d,
                               CUDA_R_32F, static_cast<int>(d), &beta, tile.data(), CUDA_R_32F, static_cast<int>(L),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    nearest_centroid_kernel<<<blocks_for(nq * kWarpSize), kThreads, 0, r.stream>>>(tile.data(), nq, L, cn,
                                                                                   labels.data() + p0);
    SCURRY_CUDA_LAUNCH();
  }
  return to_host(r, labels.data(), static_cast<size_t>(np));
}

// Members of each label, in index order (a stable counting sort): members, offsets (L + 1).
void group(const std::vector<int32_t>& labels, int64_t L, std::vector<int32_t>& members, std::vector<int64_t>& offsets) {
  offsets.assign(static_cast<size_t>(L + 1), 0);
  for (int32_t l : labels) ++offsets[static_cast<size_t>(l) + 1];
  for (int64_t l = 0; l < L; ++l) offsets[l + 1] += offsets[l];
  std::vector<int64_t> at(offsets.begin(), offsets.end() - 1);
  members.resize(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) members[static_cast<size_t>(at[labels[i]]++)] = static_cast<int32_t>(i);
}

// The count of one query on the host (the rare query with over kBoundaryCap candidates at its
// threshold): float64 distances to its candidates, sorted by (distance, index).
int32_t host_count(const std::vector<float>& Y, int64_t d, int64_t qid, const std::vector<int64_t>& cand_ids,
                   int64_t k, int64_t n_obs) {
  std::vector<std::pair<double, int64_t>> dist;
  dist.reserve(cand_ids.size());
  for (int64_t id : cand_ids) {
    if (id == qid) continue;
    double s = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double t = static_cast<double>(Y[qid * d + c]) - Y[id * d + c];
      s += t * t;
    }
    dist.emplace_back(s, id);
  }
  const size_t m = std::min(dist.size(), static_cast<size_t>(k - 1));
  std::partial_sort(dist.begin(), dist.begin() + static_cast<std::ptrdiff_t>(m), dist.end());
  int32_t c = 0;
  for (size_t i = 0; i < m; ++i) c += dist[i].second >= n_obs;
  return c;
}

}  // namespace

namespace gpu {

std::vector<int32_t> scrublet_sim_neighbor_counts(CudaResources& r, const float* dY, int64_t n, int64_t d,
                                                  int64_t n_obs, int64_t k, const ScrubletKnnOptions& opt,
                                                  ScrubletKnnStats* stats) {
  const char* where = "scrublet";
  if (n < 3 || n > INT32_MAX) fail_input(where, "the neighbour count takes 3 to 2^31 - 1 points, not ", n);
  if (d < 1 || d > kScrubletKnnMaxDims) fail_input(where, "the GPU neighbour count takes 1 to 64 dimensions, not ", d);
  if (k < 2 || k >= n) fail_input(where, "k = ", k, " (the cell itself included) is out of range for ", n, " points");
  if (n_obs < 0 || n_obs > n) fail_input(where, "n_obs = ", n_obs, " is out of range for ", n, " points");
  if (opt.kmeans_iterations < 0 || opt.kmeans_points_per_list < 1 || !(opt.candidates_per_k > 0) ||
      opt.buffer_entries < n + 3 || opt.n_lists < 0 || opt.n_lists > n)
    fail_input(where, "invalid neighbour count settings (lists ", opt.n_lists, ", k-means ", opt.kmeans_iterations,
               " iterations x ", opt.kmeans_points_per_list, " points a list, ", opt.candidates_per_k,
               " candidates per k, buffer ", opt.buffer_entries, " keys)");
  const int64_t L = opt.n_lists > 0 ? opt.n_lists : std::clamp<int64_t>(std::llround(std::sqrt(double(n))), 1, n);
  EnvLaps laps("SCURRY_SCRUBLET_TIMES", "scrublet count");  // the stream synchronised at each lap
  auto lap = [&](const char* what) {
    if (!laps.on()) return;
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    laps.lap(what);
  };

  // k-means on a seeded sample (partial Fisher-Yates; its first L points start the centroids).
  std::mt19937_64 rng(opt.seed);
  const int64_t m = std::min<int64_t>(n, std::max<int64_t>(L, opt.kmeans_points_per_list * L));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t i = 0; i < m; ++i) std::swap(ids[i], ids[i + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - i))]);
  ids.resize(static_cast<size_t>(m));
  DeviceArray<int32_t> d_ids(r, ids.size(), "scrublet k-means sample ids");
  to_device(r, d_ids, ids);
  DeviceArray<float> S(r, static_cast<size_t>(m * d), "scrublet k-means sample");
  gather_kernel<<<blocks_for(m * d), kThreads, 0, r.stream>>>(dY, d_ids.data(), m, d, S.data());
  SCURRY_CUDA_LAUNCH();
  DeviceArray<float> C(r, static_cast<size_t>(L * d), "scrublet centroids");
  SCURRY_CUDA(cudaMemcpyAsync(C.data(), S.data(), static_cast<size_t>(L * d) * sizeof(float), cudaMemcpyDeviceToDevice,
                              r.stream));
  DeviceArray<float> cn(r, static_cast<size_t>(L), "scrublet centroid norms");
  DeviceArray<float> tile(r, static_cast<size_t>(std::min(n, std::max<int64_t>(1, kAssignTileFloats / L)) * L),
                          "scrublet assignment scores");
  DeviceArray<int32_t> d_labels(r, static_cast<size_t>(n), "scrublet list labels");
  DeviceArray<int32_t> d_members(r, static_cast<size_t>(n), "scrublet list members");
  DeviceArray<int64_t> d_off(r, static_cast<size_t>(L + 1), "scrublet list offsets");
  std::vector<int32_t> members;
  std::vector<int64_t> offsets;
  for (int it = 0; it < opt.kmeans_iterations; ++it) {
    squared_norms_kernel<<<blocks_for(L), kThreads, 0, r.stream>>>(C.data(), L, d, cn.data());
    SCURRY_CUDA_LAUNCH();
    const std::vector<int32_t> lab = nearest_centroids(r, S.data(), m, d, C.data(), L, cn.data(), tile, d_labels);
    group(lab, L, members, offsets);
    to_device(r, d_members, members);
    to_device(r, d_off, offsets);
    list_means_kernel<<<static_cast<unsigned>(L), 64, 0, r.stream>>>(S.data(), d_members.data(), d_off.data(), d,
                                                                      C.data());
    SCURRY_CUDA_LAUNCH();
    for (int64_t l = 0; l < L; ++l)  // an empty list restarts on a random sample point
      if (offsets[l] == offsets[l + 1]) {
        const int64_t p = static_cast<int64_t>(rng() % static_cast<uint64_t>(m));
        SCURRY_CUDA(cudaMemcpyAsync(C.data() + l * d, S.data() + p * d, static_cast<size_t>(d) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, r.stream));
      }
  }
  S.release();
  lap("k-means");
  squared_norms_kernel<<<blocks_for(L), kThreads, 0, r.stream>>>(C.data(), L, d, cn.data());
  SCURRY_CUDA_LAUNCH();
  std::vector<int32_t> perm;  // position in list order -> point
  group(nearest_centroids(r, dY, n, d, C.data(), L, cn.data(), tile, d_labels), L, perm, offsets);

  // Candidate lists of each list: its own, then the others by centroid distance (ties: smaller id),
  // until they hold `target` points; all of them when exact.
  std::vector<float> cc(static_cast<size_t>(L * L));
  {
    DeviceArray<float> ccd(r, cc.size(), "scrublet centroid scores");
    const float alpha = -2.f, beta = 0.f;
    SCURRY_CUBLAS(cublasGemmEx(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L), static_cast<int>(L),
                               static_cast<int>(d), &alpha, C.data(), CUDA_R_32F, static_cast<int>(d), C.data(),
                               CUDA_R_32F, static_cast<int>(d), &beta, ccd.data(), CUDA_R_32F, static_cast<int>(L),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cc = to_host(r, ccd.data(), cc.size());
  }
  const std::vector<float> cnh = to_host(r, cn.data(), static_cast<size_t>(L));
  const int64_t target = std::max<int64_t>(k + 1, static_cast<int64_t>(std::ceil(opt.candidates_per_k * double(k))));
  std::vector<int32_t> probe_ids;
  std::vector<int64_t> probe_pre, pstart{0}, cand(static_cast<size_t>(L));
  const int64_t guess = std::min<int64_t>(L, 2 * ((target * L + n - 1) / n) + 8);  // lists ~ target
  std::vector<std::pair<float, int32_t>> order(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t a = 0; a < L; ++a)
      order[a] = {a == l ? -INFINITY : cc[static_cast<size_t>(l * L + a)] + cnh[a], static_cast<int32_t>(a)};
    int64_t sorted = opt.exact ? L : guess;  // exact: every list, in id order
    if (!opt.exact) std::partial_sort(order.begin(), order.begin() + sorted, order.end());
    int64_t have = 0;
    for (int64_t i = 0; i < L && (opt.exact || have < target); ++i) {
      if (i == sorted) {  // more lists than guessed
        std::sort(order.begin() + sorted, order.end());
        sorted = L;
      }
      const int32_t a = order[i].second;
      if (offsets[a] == offsets[a + 1]) continue;
      probe_ids.push_back(a);
      probe_pre.push_back(have);
      have += offsets[a + 1] - offsets[a];
    }
    cand[l] = have;
    pstart.push_back(static_cast<int64_t>(probe_ids.size()));
  }
  lap("lists + probes");
  // Units: runs of a list's queries whose keys fit the buffer; chunks: runs of units that do.
  const int64_t cap = opt.buffer_entries;
  std::vector<Unit> units;
  std::vector<int64_t> chunk_begin{0}, chunk_keys;
  int64_t tiles = 0, queries = 0, used = 0;
  double cand_sum = 0;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t nl = offsets[l + 1] - offsets[l], c = cand[l];
    if (nl == 0) continue;
    if (c < k) fail("scrublet: list ", l, " has ", c, " candidates for k = ", k);  // target >= k + 1, or all n
    cand_sum += double(nl) * double(c);
    const int64_t stride = (c + 3) / 4 * 4;
    const int64_t per = std::max<int64_t>(1, cap / stride);  // queries a unit
    for (int64_t q = 0; q < nl; q += per) {
      const int64_t nq = std::min(per, nl - q);
      if (used + nq * stride > cap) {
        chunk_keys.push_back(used);
        chunk_begin.push_back(static_cast<int64_t>(units.size()));
        used = 0;
      }
      units.push_back(Unit{offsets[l] + q, nq, c, stride, used, tiles, queries, l});
      used += nq * stride;
      tiles += ((nq + kTile - 1) / kTile) * ((c + kTile - 1) / kTile);
      queries += nq;
    }
  }
  chunk_keys.push_back(used);
  chunk_begin.push_back(static_cast<int64_t>(units.size()));
  units.push_back(Unit{n, 0, 0, 0, 0, tiles, queries, 0});  // sentinel
  const int64_t n_chunks = static_cast<int64_t>(chunk_keys.size());

  const int64_t dp = d <= 32 ? 32 : 64;
  DeviceArray<int32_t> d_perm(r, perm.size(), "scrublet list order");
  to_device(r, d_perm, perm);
  std::vector<int64_t> lbeg(offsets.begin(), offsets.end());
  DeviceArray<int64_t> d_lbeg(r, lbeg.size(), "scrublet list begins");
  to_device(r, d_lbeg, lbeg);
  DeviceArray<int32_t> d_probe(r, probe_ids.size(), "scrublet probes");
  to_device(r, d_probe, probe_ids);
  DeviceArray<int64_t> d_ppre(r, probe_pre.size(), "scrublet probe offsets");
  to_device(r, d_ppre, probe_pre);
  DeviceArray<int64_t> d_pstart(r, pstart.size(), "scrublet probe starts");
  to_device(r, d_pstart, pstart);
  DeviceArray<Unit> d_units(r, units.size(), "scrublet query units");
  to_device(r, d_units, units);
  tile.release();
  d_labels.release();
  DeviceArray<float> Xs(r, static_cast<size_t>(n * dp), "scrublet points in list order");
  gather_padded_kernel<<<blocks_for(n * dp), kThreads, 0, r.stream>>>(dY, d_perm.data(), n, d, dp, Xs.data());
  SCURRY_CUDA_LAUNCH();
  const int64_t max_keys = *std::max_element(chunk_keys.begin(), chunk_keys.end());
  DeviceArray<uint32_t> keys(r, static_cast<size_t>(max_keys), "scrublet distance keys");
  DeviceArray<int32_t> d_counts(r, static_cast<size_t>(n), "scrublet counts");

  int dev_smem = 0;
  SCURRY_CUDA(cudaDeviceGetAttribute(&dev_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, r.device));
  const int64_t row_cap = (static_cast<int64_t>(dev_smem) - static_cast<int64_t>(kSelectFixedSmem)) / 4;
  static_assert(kSelectFixedSmem <= 48 * 1024, "the select's fixed shared memory fits without opt-in");
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    const int64_t u0 = chunk_begin[ch], u1 = chunk_begin[ch + 1];
    if (u0 == u1) continue;
    const int64_t t0 = units[u0].tile0, t1 = units[u1].tile0, g0 = units[u0].query0, g1 = units[u1].query0;
    if (dp == 32)
      distance_keys_kernel<32><<<static_cast<unsigned>(t1 - t0), kThreads, 0, r.stream>>>(
          Xs.data(), d_perm.data(), n_obs, d_lbeg.data(), d_probe.data(), d_ppre.data(), d_pstart.data(),
          d_units.data(), u0, u1, t0, keys.data());
    else
      distance_keys_kernel<64><<<static_cast<unsigned>(t1 - t0), kThreads, 0, r.stream>>>(
          Xs.data(), d_perm.data(), n_obs, d_lbeg.data(), d_probe.data(), d_ppre.data(), d_pstart.data(),
          d_units.data(), u0, u1, t0, keys.data());
    SCURRY_CUDA_LAUNCH();
    int64_t cmax = 0;
    for (int64_t u = u0; u < u1; ++u) cmax = std::max(cmax, units[u].stride);
    if (cmax <= row_cap) {
      const size_t smem = kSelectFixedSmem + static_cast<size_t>(cmax) * sizeof(uint32_t);
      SCURRY_CUDA(cudaFuncSetAttribute(select_count_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
      select_count_kernel<true><<<static_cast<unsigned>(g1 - g0), kSelectThreads, smem, r.stream>>>(
          keys.data(), d_units.data(), u0, u1, g0, k, n_obs, Xs.data(), dp, d, d_perm.data(), d_lbeg.data(),
          d_probe.data(), d_ppre.data(), d_pstart.data(), d_counts.data());
    } else {
      select_count_kernel<false><<<static_cast<unsigned>(g1 - g0), kSelectThreads, kSelectFixedSmem, r.stream>>>(
          keys.data(), d_units.data(), u0, u1, g0, k, n_obs, Xs.data(), dp, d, d_perm.data(), d_lbeg.data(),
          d_probe.data(), d_ppre.data(), d_pstart.data(), d_counts.data());
    }
    SCURRY_CUDA_LAUNCH();
  }
  lap("distances + select");
  std::vector<int32_t> counts = to_host(r, d_counts.data(), static_cast<size_t>(n));
  int64_t overflow = 0;
  std::vector<float> Yh;
  std::vector<int32_t> list_of(static_cast<size_t>(n));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t p = offsets[l]; p < offsets[l + 1]; ++p) list_of[static_cast<size_t>(perm[p])] = static_cast<int32_t>(l);
  for (int64_t i = 0; i < n; ++i) {
    if (counts[i] >= 0) continue;
    if (Yh.empty()) Yh = to_host(r, dY, static_cast<size_t>(n * d));
    const int64_t l = list_of[i];
    std::vector<int64_t> cids;
    for (int64_t j = pstart[l]; j < pstart[l + 1]; ++j)
      for (int64_t p = offsets[probe_ids[j]]; p < offsets[probe_ids[j] + 1]; ++p) cids.push_back(perm[p]);
    counts[i] = host_count(Yh, d, i, cids, k, n_obs);
    ++overflow;
  }
  lap("download + host re-rank");
  if (laps.on())
    std::fprintf(stderr, "[scrublet count] %lld points, k %lld, %lld lists, %lld chunks, %.0f candidates a point, %lld on the host\n",
                 static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(L),
                 static_cast<long long>(n_chunks), cand_sum / double(n), static_cast<long long>(overflow));
  if (stats) {
    stats->lists = L;
    stats->chunks = n_chunks;
    stats->boundary_overflow = overflow;
    stats->mean_candidates = cand_sum / double(n);
  }
  return counts;
}

}  // namespace gpu

std::vector<int32_t> scrublet_sim_neighbor_counts_gpu(const Context& ctx, const DenseF& X, int64_t n_obs, int64_t k,
                                                      const ScrubletKnnOptions& opt, ScrubletKnnStats* stats) {
  CudaResources& r = gpu::knn::require_cuda(ctx, "scrublet");
  if (X.n_rows * X.n_cols != static_cast<int64_t>(X.data.size())) fail_input("scrublet", "the points are malformed");
  DeviceArray<float> dX(r, X.data.size(), "scrublet points");
  SCURRY_CUDA(cudaMemcpyAsync(dX.data(), X.data.data(), X.data.size() * sizeof(float), cudaMemcpyHostToDevice,
                              r.stream));
  return gpu::scrublet_sim_neighbor_counts(r, dX.data(), X.n_rows, X.n_cols, n_obs, k, opt, stats);
}

}  // namespace scurry
