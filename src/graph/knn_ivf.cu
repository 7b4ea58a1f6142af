// IVF-Flat kNN on the GPU (knn_gpu.hpp): k-means lists, probe the nearest lists, TF32 candidate
// search through the fused tile kernel (knn_fused.cu), float64 re-rank (knn_gpu.cuh).
//
// Cells are put in list order (Xs, perm, offsets). Query blocks: each list's cells in chunks of
// kFusedQueries (64), so a block's queries are near each other and share most of their P probed
// lists. A block's probe set = the union of its queries' P nearest lists, capped at U = min(L, 2P)
// lists (those probed by the most of its queries; ties by list id), as sorted row ranges of the
// list-ordered operand (adjacent lists merged), walked from the block's own list. The fused kernel
// (WMMA TF32 tiles of 128 rows within each range, top-W fold; rows centred on the column means, also
// the unit rows of cosine, which are searched by their euclidean order) gives W candidates per cell by
// original index; the float64 re-rank orders them exactly (no certificate: IVF is approximate). Every query scans at least its own P lists unless the cap drops one that few of its
// block probe; the union usually adds more, so recall is at least plain P-probe IVF's in practice.
// W over 64 (k > 33; W = ivf_candidate_width(k): a quarter's margin, so k = 92 keeps 128) runs on the
// mma kernel with wide lists and a short buffer (up to W = 256, k <= 205); depths over 64 or wider W
// fall back to a warp-per-query scalar scan of the P lists.
// Several GPUs (knn_ivf_gpus): the query blocks split (every GPU holds every list), or the lists dealt
// to the GPUs (the index sharded: the list order puts each GPU's lists together; a GPU scans the part
// of every block's probe set it owns; the candidate lists are merged on the host, then re-ranked).
//
// Default probes P = min(L, max(16, L / 32)): at 1.3M cells 35 of 1143 lists (the former plain scan
// had 0.9999 recall@15 there with 71). A simulation of this block-union scheme (numpy, k-means as
// here) gave recall@15 1.0000 at P = 8 on the test's 40-blob data (20k cells, 141 lists) and on a
// 10-dim trajectory manifold in 50 dims (50k, 224 lists), but only 0.80 at P = 8 on isotropic 50-dim
// Gaussian blobs with ~22 lists per blob (200k cells, 20 blobs, 447 lists; 0.49 at P = 4, 1.0000 at
// P = 16 where plain per-query probing of 16 lists gets 0.94): k-means lists cut such blobs
// arbitrarily, so P is kept at 16+ for margin.
//
// Floor on one H200 for 1,306,127 cells x 50 dims (padded to 56), k = 15, L = 1143 lists (~1143
// cells each), P = 35, U = 70: blocks ~ n / 64 + L = 21.5k; rows scanned per block = the union of its
// queries' probe lists, ~50 lists ~ 57k rows (~4.4% of n; ~64 rows of partial tile per range): 21.5k
// x 64 x 57k x 2 x 56 = 8.8e12 TF32 FLOPs, 0.02 s at 452 TFLOP/s; operand reads 21.5k x 57k x 56 x 4
// = 275 GB, mostly from L2 (the blocks of one list read the same lists): 0.06 s even at HBM's 4.3
// TB/s; the fold ~1 compare per score (1.3M x 57k = 7.4e10 scores). At the exact search's measured
// rate (4.9 s for n^2 = 1.7e12 scores) that is ~0.22 s. k-means: 10 x 2 m L d with m = 256 L samples
// (3.3e10 each, < 1 ms); list assignment and probe scores 2 n L d = 1.5e11 each (3 ms fp32); re-rank
// n W d float64 (2e9). Expected total ~0.3 s.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <exception>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "graph/knn_fused.cuh"
#include "graph/knn_gpu.cuh"
#include "graph/knn_gpu.hpp"
#include "graph/topk.cuh"

namespace scurry {
namespace {

using namespace gpu;
using namespace gpu::knn;

constexpr int kThreads = 256;                      // threads per block of the elementwise kernels
constexpr int kUpdateThreads = 64;                 // threads per centroid in the k-means update
constexpr int kWarpsPerBlock = 8;                  // warps per block of the per-row kernels (at most)
constexpr int64_t kSmemBudget = 48 * 1024;         // dynamic shared memory per block (no opt-in)
constexpr int64_t kTileFloats = int64_t(1) << 23;  // points x centroids score tile: 32 MiB
constexpr int64_t kDefaultMinProbes = 16;          // default n_probes = min(L, max(16, n_lists / 32))
constexpr int64_t kDefaultProbeDivisor = 32;
constexpr int64_t kColumnPad = 8;                  // fused operand depth padded to a multiple of this
constexpr int kProbeUnion = 2;                     // a query block scans at most kProbeUnion x P lists
constexpr int kBalanceTries = 64;                  // random draws to find a large cluster to split
constexpr int kExactUnion = 8;                     // exact search, stage 2: at least kExactUnion x P lists per block
constexpr int64_t kExactRangeBytes = int64_t(1) << 30;  // exact search, stage 2: range table budget

unsigned grid_for(int64_t n, int t = kThreads) { return static_cast<unsigned>((n + t - 1) / t); }

__global__ void gather_rows_kernel(const float* Y, const int32_t* ids, int64_t m, int64_t d, float* out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= m * d) return;
  const int64_t i = e / d, c = e - i * d;
  out[e] = Y[static_cast<int64_t>(ids[i]) * d + c];
}

// The smallest row[l] + cn[l] over l < L (ties: the smaller l) into best/bl in every lane of the warp
// (bl = -1 when no score is finite).
__device__ __forceinline__ void warp_row_argmin(const float* row, int64_t L, const float* cn, int lane, float& best,
                                                int32_t& bl) {
  best = __int_as_float(0x7f800000);
  bl = -1;
  for (int64_t l = lane; l < L; l += kWarp) {
    const float s = row[l] + cn[l];
    if (cand_less(s, static_cast<int32_t>(l), best, bl)) best = s, bl = static_cast<int32_t>(l);
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(kFullMask, best, o);
    const int32_t ol = __shfl_xor_sync(kFullMask, bl, o);
    if (cand_less(ob, ol, best, bl)) best = ob, bl = ol;
  }
}

// labels[q] = argmin_l tile[q, l] + cn[l] (ties: smaller l); one warp per row.
__global__ void argmin_kernel(const float* tile, int64_t nq, int64_t L, const float* cn, int32_t* labels) {
  const int64_t q = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x & (kWarp - 1);
  if (q >= nq) return;  // warp-uniform
  float best;
  int32_t bl;
  warp_row_argmin(tile + q * L, L, cn, lane, best, bl);
  if (lane == 0) labels[q] = bl < 0 ? 0 : bl;  // bl < 0 only for non-finite scores
}

// C[l] = mean of the members of cluster l (float64 sums in member order); empty clusters unchanged.
__global__ void centroid_update_kernel(const float* S, const int32_t* perm, const int64_t* offsets, int64_t d,
                                       float* C) {
  const int64_t l = blockIdx.x;
  const int64_t b = offsets[l], e = offsets[l + 1];
  if (b == e) return;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    double s = 0;
    for (int64_t p = b; p < e; ++p) s += S[static_cast<int64_t>(perm[p]) * d + c];
    C[l * d + c] = static_cast<float>(s / static_cast<double>(e - b));
  }
}

// One warp per query (cells in list order, positions p0 .. p0 + nq): scans the members of its probed
// lists (list l: positions [lbeg[l], lend[l])) with float32 scores (squared euclidean, or -dot on unit
// rows) and writes its best w candidates (original ids) to row perm[p] of best_d/best_i.
__global__ void ivf_scan_kernel(const float* Xs, const int32_t* perm, const int64_t* lbeg, const int64_t* lend,
                                int64_t d, int64_t p0,
                                int64_t nq, const int32_t* probes, int wp, int n_probes, bool cosine, int w,
                                float* best_d, int32_t* best_i) {
  extern __shared__ float smem_f[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x & (kWarp - 1);
  const int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x / kWarp) + warp;
  if (q >= nq) return;  // warp-uniform
  const int64_t p = p0 + q;
  WarpTopK top(smem_f + static_cast<int64_t>(warp) * 4 * w, w);
  top.reset();
  const float* xq = Xs + p * d;
  const int32_t* pr = probes + q * wp;
  for (int j = 0; j < n_probes; ++j) {
    const int32_t l = pr[j];
    if (l < 0) continue;  // warp-uniform
    const int64_t b = lbeg[l], e = lend[l];
    for (int64_t s0 = b; s0 < e; s0 += kWarp) {
      const int64_t pos = s0 + lane;
      const bool in = pos < e && pos != p;
      float score = 0.f;
      int32_t id = -1;
      if (in) {
        const float* xp = Xs + pos * d;
        float acc = 0.f;
        if (cosine) {
          for (int64_t c = 0; c < d; ++c) acc = fmaf(-xq[c], xp[c], acc);
        } else {
          for (int64_t c = 0; c < d; ++c) {
            const float t = xq[c] - xp[c];
            acc = fmaf(t, t, acc);
          }
        }
        score = acc;
        id = perm[pos];
      }
      top.push(score, id, in);
    }
  }
  const int64_t row = perm[p];
  top.store(best_d + row * w, best_i + row * w);
}

// cnt[(blk_of[p0 + q] - b0) * L + l] += 1 for every probe l of query q (the first P of its wp slots):
// how many queries of each block of the tile probe list l (integer atomics: deterministic).
__global__ void probe_count_kernel(const int32_t* probes, int wp, int n_probes, int64_t nq, int64_t p0,
                                   const int32_t* blk_of, int64_t b0, int64_t L, int32_t* cnt) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= nq * n_probes) return;
  const int64_t q = e / n_probes, j = e - q * n_probes;
  const int32_t l = probes[q * wp + j];
  if (l < 0) return;
  const int64_t lb = blk_of[p0 + q] - b0;
  atomicAdd(cnt + lb * L + l, 1);
}

// One warp per query block lb of the tile (global block b0 + lb): from its list counts (cnt row, L
// entries, each <= kFusedQueries), keeps the cap lists probed by the most of its queries (ties: the
// smaller list id) and writes their row ranges [lbeg[l], lend[l]) in list id order, empty lists skipped
// and adjacent ones merged, to ranges (cap pairs per block) and their number to n_ranges. (The choice
// depends on the counts only: an index sharded over GPUs gives each GPU the ranges of its own lists,
// the others empty, and the GPUs' ranges together are one GPU's.)
// overflow (may be null): when more than cap lists are probed, the block gets no ranges and
// overflow[b0 + lb] = 1 instead (the exact search's second stage: its queries are searched whole).
__global__ void probe_ranges_kernel(const int32_t* cnt, int64_t L, int64_t nbt, int64_t b0, const int64_t* lbeg,
                                    const int64_t* lend, int cap, int64_t* ranges, int32_t* n_ranges,
                                    uint8_t* overflow) {
  __shared__ int hist_all[kWarpsPerBlock][kFusedQueries + 1];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x & (kWarp - 1);
  const int64_t lb = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + warp;
  if (lb >= nbt) return;  // warp-uniform; no block-wide barrier below
  int* hist = hist_all[warp];
  for (int v = lane; v <= kFusedQueries; v += kWarp) hist[v] = 0;
  __syncwarp();
  const int32_t* c = cnt + lb * L;
  for (int64_t l = lane; l < L; l += kWarp) {
    const int v = c[l];
    if (v > 0) atomicAdd(hist + v, 1);
  }
  __syncwarp();
  if (overflow) {
    int total = 0;
    for (int v = 1; v <= kFusedQueries; ++v) total += hist[v];
    if (total > cap) {
      if (lane == 0) n_ranges[b0 + lb] = 0, overflow[b0 + lb] = 1;
      return;
    }
  }
  // Threshold: every list with a count above cstar, and the first take_eq (by id) of those with count
  // cstar; all probed lists when there are at most cap.
  int cstar = 1, take_eq = hist[1], above = 0;
  for (int v = kFusedQueries; v >= 1; --v) {
    if (above + hist[v] >= cap) {
      cstar = v;
      take_eq = cap - above;
      break;
    }
    above += hist[v];
  }
  int64_t* out = ranges + (b0 + lb) * cap * 2;
  int eq_seen = 0, nr = 0;
  int64_t cb = 0, ce = 0;  // the open range (when nr > 0), identical in every lane
  const unsigned lower = (1u << lane) - 1u;
  for (int64_t base = 0; base < L; base += kWarp) {
    const int64_t l = base + lane;
    const int v = l < L ? c[l] : 0;
    const bool eq = v == cstar;  // cstar >= 1: unprobed lists never qualify
    const unsigned eq_mask = __ballot_sync(kFullMask, eq);
    bool sel = v > cstar || (eq && eq_seen + __popc(eq_mask & lower) < take_eq);
    eq_seen += __popc(eq_mask);
    int64_t rb = 0, re = 0;
    if (sel) {
      rb = lbeg[l];
      re = lend[l];
      sel = rb < re;
    }
    unsigned mask = __ballot_sync(kFullMask, sel);
    while (mask) {  // warp-uniform, in list order
      const int src = __ffs(mask) - 1;
      mask &= mask - 1;
      const int64_t bb = __shfl_sync(kFullMask, rb, src), ee = __shfl_sync(kFullMask, re, src);
      if (nr > 0 && bb == ce) {
        ce = ee;
      } else {
        if (nr > 0 && lane == 0) out[2 * (nr - 1)] = cb, out[2 * (nr - 1) + 1] = ce;
        cb = bb;
        ce = ee;
        ++nr;
      }
    }
  }
  if (lane == 0) {
    if (nr > 0) out[2 * (nr - 1)] = cb, out[2 * (nr - 1) + 1] = ce;
    n_ranges[b0 + lb] = nr;
  }
}

__device__ __forceinline__ float round_tf32(float v) {  // as knn_exact.cu's prepare_operands_kernel
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;
  u += 0x1000u;  // round to nearest (ties away) at 10 mantissa bits
  u &= 0xffffe000u;
  return __uint_as_float(u);
}

// The fused kernel's operand (n x kp): A[p, c] = tf32(Xs[p, c] - mean[c]) for c < d, zero padding.
__global__ void fused_operand_kernel(const float* Xs, int64_t n, int64_t d, int64_t kp, const float* mean, float* A) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * kp) return;
  const int64_t p = e / kp, c = e - p * kp;
  float v = 0.f;
  if (c < d) v = Xs[p * d + c] - mean[c];
  A[e] = round_tf32(v);
}

// Stable counting sort of labels (host): perm lists the points of cluster 0, then 1, ... in index
// order; offsets (L + 1) delimit the clusters.
void group_by_label(const std::vector<int32_t>& labels, int64_t L, std::vector<int32_t>& perm,
                    std::vector<int64_t>& offsets) {
  offsets.assign(static_cast<size_t>(L + 1), 0);
  for (int32_t l : labels) ++offsets[static_cast<size_t>(l) + 1];
  for (int64_t l = 0; l < L; ++l) offsets[l + 1] += offsets[l];
  std::vector<int64_t> pos(offsets.begin(), offsets.end() - 1);
  perm.resize(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) perm[static_cast<size_t>(pos[labels[i]]++)] = static_cast<int32_t>(i);
}

// Nearest centroid of every point (np x d), in tiles of points; labels copied to the host.
std::vector<int32_t> assign(CudaResources& r, const float* P, int64_t np, int64_t d, const float* C, int64_t L,
                            const float* cn, float* tile, int64_t tile_rows, int32_t* d_labels) {
  const float alpha = -2.f, beta = 0.f;
  for (int64_t p0 = 0; p0 < np; p0 += tile_rows) {
    const int64_t nq = std::min(tile_rows, np - p0);
    // Column-major tile (L x nq, ld L) = C^T-view x P: row q of the row-major nq x L tile.
    SCURRY_CUBLAS(cublasGemmEx(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L), static_cast<int>(nq),
                               static_cast<int>(d), &alpha, C, CUDA_R_32F, static_cast<int>(d), P + p0 * d, CUDA_R_32F,
                               static_cast<int>(d), &beta, tile, CUDA_R_32F, static_cast<int>(L), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
    argmin_kernel<<<grid_for(nq * kWarp), kThreads, 0, r.stream>>>(tile, nq, L, cn, d_labels + p0);
    SCURRY_CUDA_LAUNCH();
  }
  std::vector<int32_t> labels(static_cast<size_t>(np));
  SCURRY_CUDA(cudaMemcpyAsync(labels.data(), d_labels, static_cast<size_t>(np) * sizeof(int32_t),
                              cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return labels;
}


// ---- The exact search through the lists (knn_ivf_exact): a pruning certificate and a second stage.
//
// A cell x in list l is nearer (in the float32 assignment) to c_l than to any other centroid c_a, up
// to the assignment's rounding e: ||x - c_l||^2 - ||x - c_a||^2 <= e. So x lies in the half-space of
// points whose f(y) = ||y - c_l||^2 - ||y - c_a||^2 is at most e, and a query q with f(q) > e is at
// least (f(q) - e) / (2 ||c_l - c_a||) away from every member of l (the distance from q to that
// half-space; f is affine with gradient 2 (c_a - c_l)). With a = q's nearest centroid this is the
// classic Voronoi-cell bound of exact IVF search. A list whose bound exceeds the k-th exact distance
// found in the first stage cannot hold a nearer cell; every other list not yet scanned is scanned in a
// second stage.

// scanned[(lb) * L + l] = 1 for every list l inside one of block b0 + lb's ranges.
__global__ void scanned_lists_kernel(const int64_t* ranges, const int32_t* n_ranges, int cap, int64_t nbt, int64_t b0,
                                     const int32_t* list_of_pos, const int64_t* offsets, int64_t L, uint8_t* scanned) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= nbt * cap) return;
  const int64_t lb = e / cap;
  const int j = static_cast<int>(e - lb * cap);
  if (j >= n_ranges[b0 + lb]) return;
  const int64_t* rg = ranges + ((b0 + lb) * cap + j) * 2;
  const int64_t rb = rg[0], re = rg[1];
  if (rb >= re) return;
  for (int64_t l = list_of_pos[rb]; l < L && offsets[l] < re; ++l) scanned[lb * L + l] = 1;
}

// One warp per query (position p0 + q): need[(blk - b0) * L + l] += 1 for every list l its block has
// not scanned whose pruning bound does not clear the query's k-th distance after stage 1 (out_dist,
// original order); redo[i] = 1 when the query has no k-th distance (fewer candidates than k - 1).
// tile: -2 c_l . q (float32), so f(q) = (tile_l + cn_l) - (tile_a + cn_a). ccd: L x L, ||c_l - c_a||.
__global__ void prune_kernel(const float* tile, int64_t nq, int64_t L, const float* cn, int64_t p0,
                             const int32_t* perm, const int32_t* blk_of, int64_t b0, const float* out_dist, int64_t k,
                             const double* ccd, double e_abs, const uint8_t* scanned, int32_t* need, uint8_t* redo) {
  const int64_t q = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x & (kWarp - 1);
  if (q >= nq) return;  // warp-uniform
  const float* row = tile + q * L;
  float best;
  int32_t a;
  warp_row_argmin(row, L, cn, lane, best, a);
  const int64_t p = p0 + q, i = perm[p];
  const float delta = out_dist[i * k + k - 1];
  if (a < 0 || !isfinite(delta)) {
    if (lane == 0) redo[i] = 1;
    return;
  }
  // Margins: float32 distances are rounded from float64 (relative 2^-24); 1e-4 covers it with room.
  const double lim = static_cast<double>(delta) * (1.0 + 1e-4) + 1e-30;
  const double fa = static_cast<double>(row[a]) + static_cast<double>(cn[a]);
  const int64_t lb = blk_of[p] - b0;
  const double* cd = ccd + static_cast<int64_t>(a) * L;
  for (int64_t l = lane; l < L; l += kWarp) {
    if (scanned[lb * L + l]) continue;
    const double num = static_cast<double>(row[l]) + static_cast<double>(cn[l]) - fa - e_abs;
    if (num <= 0.0 || num <= 2.0 * cd[l] * lim) atomicAdd(need + lb * L + l, 1);
  }
}

// ccd[a * L + l] = ||c_a - c_l|| in float64.
__global__ void centroid_distances_kernel(const float* C, int64_t L, int64_t d, double* ccd) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= L * L) return;
  const int64_t a = e / L, l = e - a * L;
  double s = 0;
  for (int64_t c = 0; c < d; ++c) {
    const double t = static_cast<double>(C[a * d + c]) - C[l * d + c];
    s += t * t;
  }
  ccd[e] = sqrt(s);
}

// max_i v[i] (v >= 0) into out[0]; one block.
__global__ void max_kernel(const double* v, int64_t n, double* out) {
  __shared__ double part[kThreads];
  double m = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmax(m, v[i]);
  part[threadIdx.x] = m;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) part[threadIdx.x] = fmax(part[threadIdx.x], part[threadIdx.x + h]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

// Per position p: sqn_orig[perm[p]] = sqn[p]; redo[perm[p]] |= overflow[blk_of[p]].
__global__ void finish_exact_kernel(const float* sqn, const int32_t* perm, const int32_t* blk_of,
                                    const uint8_t* overflow, int64_t n, float* sqn_orig, uint8_t* redo) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= n) return;
  const int64_t i = perm[p];
  sqn_orig[i] = sqn[p];
  if (overflow[blk_of[p]]) redo[i] = 1;
}

template <class T>
void upload(CudaResources& r, DeviceArray<T>& dst, const std::vector<T>& src) {
  SCURRY_CUDA(cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}

}  // namespace

namespace {

// What the exact search (ivf_exact_candidates) adds to the IVF search: the first stage's re-rank goes
// to out_idx/out_dist, then the pruning certificate, the second stage and the merge; sqn_orig and redo
// are its outputs (original order).
struct ExactPart {
  const double* nrm = nullptr;  // ||x_i|| of dX
  int32_t* out_idx = nullptr;
  float* out_dist = nullptr;
  float* sqn_orig = nullptr;
  uint8_t* redo = nullptr;
  IvfExactStats* stats = nullptr;
};

// The greedy deal of the lists to the parts of an index sharded over GPUs: the largest list first
// (ties: the smaller id), each to the part with the fewest rows so far (ties: the smaller part). The
// rows a part holds are the work it scans per probe (every query block scans whole lists).
std::vector<int> deal_lists(const std::vector<int64_t>& offsets, int parts) {
  const int64_t L = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<int64_t> by_size(static_cast<size_t>(L));
  std::iota(by_size.begin(), by_size.end(), 0);
  auto size = [&](int64_t l) { return offsets[l + 1] - offsets[l]; };
  std::stable_sort(by_size.begin(), by_size.end(), [&](int64_t a, int64_t b) { return size(a) > size(b); });
  std::vector<int64_t> load(static_cast<size_t>(parts), 0);
  std::vector<int> owner(static_cast<size_t>(L), 0);
  for (int64_t l : by_size) {
    const int s = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[l] = s;
    load[s] += size(l);
  }
  return owner;
}

// The IVF search of the n rows of Y (device, n x d; unit rows for cosine) into best_d/best_i (n x w,
// original order): k-means lists, probes, the fused candidate search (or the scalar fallback).
// shard_cells (several shards): receives the cells this shard searched (its query blocks' cells).
// index_part of n_index_parts > 1 (the index sharded over GPUs): every query block is searched, but
// only against the lists dealt to this part (deal_lists); the candidate operand holds those lists'
// rows only. Every part's best_d/best_i then hold, per query, its best w candidates among the part's
// rows of the lists one GPU would scan (their union over the parts is one GPU's scan).
void ivf_search(CudaResources& r, const float* Y, const float* dX, int64_t n, int64_t d, bool cosine, int64_t k,
                const IvfOptions& opt, int w, float* best_d_out, int32_t* best_i_out, ExactPart* ex,
                std::vector<int32_t>* shard_cells = nullptr, int index_part = 0, int n_index_parts = 1) {
  const char* where = "neighbors";
  const int64_t L = opt.n_lists > 0 ? opt.n_lists : std::max<int64_t>(1, std::llround(std::sqrt(static_cast<double>(n))));
  if (opt.n_lists < 0 || L > n)
    fail_input(where, "n_lists = ", opt.n_lists, " is out of range for ", n, " cells; use 0 (sqrt(n)) or 1..n_cells");
  const int64_t P = opt.n_probes > 0 ? opt.n_probes
                                     : std::min(L, std::max(kDefaultMinProbes, L / kDefaultProbeDivisor));
  if (opt.n_probes < 0 || P > L || P > kMaxTopK)
    fail_input(where, "n_probes = ", opt.n_probes, " is out of range; use 0 (default) or 1..min(n_lists = ", L,
               ", ", kMaxTopK, ")");
  if (opt.kmeans_iterations < 0 || opt.kmeans_points_per_list < 1)
    fail_input(where, "k-means settings (", opt.kmeans_iterations, " iterations, ", opt.kmeans_points_per_list,
               " points per list) are invalid; use iterations >= 0 and points per list >= 1");
  PhaseClock clock(r, "knn_ivf");  // SCURRY_PROFILE=1: phase times on stderr
  auto prof = [&](const char* what) { clock.mark(what); };

  // k-means sample: a seeded partial Fisher-Yates shuffle; its first L points are the initial
  // centroids.
  std::mt19937_64 rng(opt.seed);
  const int64_t m = static_cast<int64_t>(std::min<double>(static_cast<double>(n),
                                                          static_cast<double>(opt.kmeans_points_per_list) * L));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t i = 0; i < m; ++i) std::swap(ids[i], ids[i + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - i))]);
  ids.resize(static_cast<size_t>(m));
  DeviceArray<int32_t> d_ids(r, static_cast<size_t>(m), "k-means sample ids");
  upload(r, d_ids, ids);
  DeviceArray<float> S(r, static_cast<size_t>(m * d), "k-means sample");
  gather_rows_kernel<<<grid_for(m * d), kThreads, 0, r.stream>>>(Y, d_ids.data(), m, d, S.data());
  SCURRY_CUDA_LAUNCH();
  DeviceArray<float> C(r, static_cast<size_t>(L * d), "k-means centroids");
  SCURRY_CUDA(cudaMemcpyAsync(C.data(), S.data(), static_cast<size_t>(L * d) * sizeof(float), cudaMemcpyDeviceToDevice,
                              r.stream));
  DeviceArray<float> cn(r, static_cast<size_t>(L), "centroid squared norms");
  DeviceArray<double> cnrm(r, static_cast<size_t>(L), "centroid norms");
  const int64_t tile_rows = std::max<int64_t>(1, kTileFloats / L);
  // Query tiles of the probe scores hold whole query blocks: at least kFusedQueries rows.
  const int64_t qt = std::min(n, std::max<int64_t>(kFusedQueries, tile_rows));
  DeviceArray<float> tile(r, static_cast<size_t>(qt * L), "kNN score tile");
  DeviceArray<int32_t> d_labels(r, static_cast<size_t>(n), "k-means labels");
  DeviceArray<int32_t> d_perm(r, static_cast<size_t>(n), "list order");
  DeviceArray<int64_t> d_off(r, static_cast<size_t>(L + 1), "list offsets");
  std::vector<int32_t> perm;
  std::vector<int64_t> offsets;
  prof("setup + sample");

  for (int it = 0; it < opt.kmeans_iterations; ++it) {
    row_stats(r, C.data(), L, d, nullptr, cnrm.data(), cn.data());
    const std::vector<int32_t> labels = assign(r, S.data(), m, d, C.data(), L, cn.data(), tile.data(), tile_rows,
                                               d_labels.data());
    group_by_label(labels, L, perm, offsets);
    upload(r, d_perm, perm);
    upload(r, d_off, offsets);
    centroid_update_kernel<<<static_cast<unsigned>(L), kUpdateThreads, 0, r.stream>>>(S.data(), d_perm.data(),
                                                                                      d_off.data(), d, C.data());
    SCURRY_CUDA_LAUNCH();
    // Balance: small clusters move onto a random point of a cluster larger than the mean.
    const double mean_size = static_cast<double>(m) / static_cast<double>(L);
    for (int64_t l = 0; l < L; ++l) {
      if (static_cast<double>(offsets[l + 1] - offsets[l]) >= opt.kmeans_min_cluster_fraction * mean_size) continue;
      for (int t = 0; t < kBalanceTries; ++t) {
        const int64_t p = static_cast<int64_t>(rng() % static_cast<uint64_t>(m));
        const int32_t owner = labels[static_cast<size_t>(p)];
        if (static_cast<double>(offsets[owner + 1] - offsets[owner]) > mean_size) {
          SCURRY_CUDA(cudaMemcpyAsync(C.data() + l * d, S.data() + p * d, static_cast<size_t>(d) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, r.stream));
          break;
        }
      }
    }
  }
  S.release();
  prof("k-means");

  // Inverted lists: every cell in the list of its nearest centroid; Xs holds the rows in list order.
  row_stats(r, C.data(), L, d, nullptr, cnrm.data(), cn.data());
  const std::vector<int32_t> labels = assign(r, Y, n, d, C.data(), L, cn.data(), tile.data(), tile_rows,
                                             d_labels.data());
  group_by_label(labels, L, perm, offsets);
  // List l holds positions [lbeg[l], lend[l]) of the list order; `order` lists the lists by position.
  // One index: the lists in id order (lbeg/lend = offsets). An index sharded over n_index_parts GPUs:
  // in (owner, id) order, so that this part's lists are the contiguous positions [db0, db1), and the
  // ranges of the search (rbeg/rend) hold its own lists only (the others empty).
  if (n_index_parts < 1 || index_part < 0 || index_part >= n_index_parts || (n_index_parts > 1 && (ex || opt.n_shards != 1)))
    fail("IVF: index part ", index_part, " of ", n_index_parts, " (with ", opt.n_shards, " query shards)");
  std::vector<int64_t> lbeg(static_cast<size_t>(L)), lend(static_cast<size_t>(L)), order;
  int64_t db0 = 0, db1 = n;
  if (n_index_parts == 1) {
    for (int64_t l = 0; l < L; ++l) lbeg[l] = offsets[l], lend[l] = offsets[l + 1], order.push_back(l);
  } else {
    const std::vector<int> owner = deal_lists(offsets, n_index_parts);
    std::vector<int32_t> list_perm;
    list_perm.reserve(perm.size());
    for (int s = 0; s < n_index_parts; ++s) {
      if (s == index_part) db0 = static_cast<int64_t>(list_perm.size());
      for (int64_t l = 0; l < L; ++l) {
        if (owner[l] != s) continue;
        lbeg[l] = static_cast<int64_t>(list_perm.size());
        list_perm.insert(list_perm.end(), perm.begin() + offsets[l], perm.begin() + offsets[l + 1]);
        lend[l] = static_cast<int64_t>(list_perm.size());
        order.push_back(l);
      }
      if (s == index_part) db1 = static_cast<int64_t>(list_perm.size());
    }
    perm.swap(list_perm);
  }
  std::vector<int64_t> rbeg = lbeg, rend = lend;
  if (n_index_parts > 1)
    for (int64_t l = 0; l < L; ++l)
      if (lbeg[l] < db0 || lbeg[l] >= db1) rbeg[l] = rend[l] = 0;
  DeviceArray<int64_t> d_rbeg(r, rbeg.size(), "IVF list begins"), d_rend(r, rend.size(), "IVF list ends");
  upload(r, d_rbeg, rbeg);
  upload(r, d_rend, rend);
  upload(r, d_perm, perm);
  upload(r, d_off, offsets);
  DeviceArray<float> Xs(r, static_cast<size_t>(n * d), "IVF lists");
  gather_rows_kernel<<<grid_for(n * d), kThreads, 0, r.stream>>>(Y, d_perm.data(), n, d, Xs.data());
  SCURRY_CUDA_LAUNCH();

  // Query blocks: every list's cells in chunks of kFusedQueries (blk_of: the block of each position);
  // query tiles for the probe scores: runs of whole blocks of at most qt cells (tile_begin).
  std::vector<int64_t> qrange;  // 2 per block: [first, end) positions
  std::vector<int32_t> blk_of(static_cast<size_t>(n));
  for (int64_t l : order)
    for (int64_t s0 = lbeg[l]; s0 < lend[l]; s0 += kFusedQueries) {
      const int64_t s1 = std::min(lend[l], s0 + kFusedQueries);
      for (int64_t p = s0; p < s1; ++p) blk_of[static_cast<size_t>(p)] = static_cast<int32_t>(qrange.size() / 2);
      qrange.push_back(s0);
      qrange.push_back(s1);
    }
  const int64_t nb = static_cast<int64_t>(qrange.size() / 2);
  // This call's query blocks [qb0, qb1): all, or part `shard` of `n_shards` (split by cells).
  if (opt.n_shards < 1 || opt.shard < 0 || opt.shard >= opt.n_shards)
    fail("IVF: shard ", opt.shard, " of ", opt.n_shards, " is out of range");
  auto first_block_at = [&](int64_t cell) {
    int64_t b = 0;
    while (b < nb && qrange[2 * b] < cell) ++b;
    return b;
  };
  const int64_t qb0 = opt.n_shards == 1 ? 0 : first_block_at(n * opt.shard / opt.n_shards);
  const int64_t qb1 = opt.n_shards == 1 ? nb : first_block_at(n * (opt.shard + 1) / opt.n_shards);
  if (opt.n_shards > 1) fill_empty(r, best_d_out, best_i_out, n * w);
  if (shard_cells) {
    const int64_t c0 = qb0 < nb ? qrange[2 * qb0] : n, c1 = qb1 < nb ? qrange[2 * qb1] : n;
    shard_cells->assign(perm.begin() + c0, perm.begin() + c1);
  }
  std::vector<int64_t> tile_begin{qb0};
  for (int64_t b = qb0; b < qb1; ++b)
    if (qrange[2 * b + 1] - qrange[2 * tile_begin.back()] > qt) tile_begin.push_back(b);
  if (tile_begin.back() != qb1) tile_begin.push_back(qb1);
  int64_t max_tile_blocks = 0;
  for (size_t t = 0; t + 1 < tile_begin.size(); ++t)
    max_tile_blocks = std::max(max_tile_blocks, tile_begin[t + 1] - tile_begin[t]);
  prof("lists");

  // Search, query tiles in list order: probe scores (GEMM), the P best lists of each query (select);
  // then per query block its probe set as row ranges (fused path) or the per-query scan (fallback).
  const int wp = pow2_width(P);
  const int64_t kp = (d + kColumnPad - 1) / kColumnPad * kColumnPad;
  // The block-union search takes W up to 64 on the WMMA kernel, and up to kShortMaxW on the mma kernel
  // (wide lists, e.g. t-SNE's k = 92); the warp-per-query scan is left for W past both.
  const bool wide_mma = mma_enabled() && w > 64 && mma_ivf_supported(mma_depth(d, true), w);
  const bool fused = k > 1 && (fused_supported(kp, w) || wide_mma);
  if (ex && !fused) fail("exact kNN through the lists: the fused kernel does not take depth ", kp, " and width ", w);
  const int cap = static_cast<int>(std::min<int64_t>(L, kProbeUnion * P));
  float* best_d = best_d_out;
  int32_t* best_i = best_i_out;
  if (k == 1) fill_empty(r, best_d, best_i, n * w);
  DeviceArray<float> probe_d(r, static_cast<size_t>(qt) * wp, "IVF probe scores");
  DeviceArray<int32_t> probe_i(r, static_cast<size_t>(qt) * wp, "IVF probes");
  DeviceArray<int64_t> d_qrange, d_ranges;
  DeviceArray<int32_t> d_nranges, d_blk, cnt;
  if (fused) {
    d_qrange = DeviceArray<int64_t>(r, qrange.size(), "IVF query blocks");
    upload(r, d_qrange, qrange);
    d_blk = DeviceArray<int32_t>(r, blk_of.size(), "IVF block of each cell");
    upload(r, d_blk, blk_of);
    d_ranges = DeviceArray<int64_t>(r, static_cast<size_t>(nb) * cap * 2, "IVF probe ranges");
    d_nranges = DeviceArray<int32_t>(r, static_cast<size_t>(nb), "IVF probe range counts");
    cnt = DeviceArray<int32_t>(r, static_cast<size_t>(max_tile_blocks * L), "IVF probe counts");
  }
  const int64_t scan_smem = warp_topk_smem_bytes(w);
  const int wpb = static_cast<int>(std::clamp<int64_t>(kSmemBudget / scan_smem, 1, kWarpsPerBlock));
  const float alpha = -2.f, beta = 0.f;
  auto probe_scores = [&](int64_t p0, int64_t nq) {
    SCURRY_CUBLAS(cublasGemmEx(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L), static_cast<int>(nq),
                               static_cast<int>(d), &alpha, C.data(), CUDA_R_32F, static_cast<int>(d),
                               Xs.data() + p0 * d, CUDA_R_32F, static_cast<int>(d), &beta, tile.data(), CUDA_R_32F,
                               static_cast<int>(L), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (size_t t = 0; k > 1 && t + 1 < tile_begin.size(); ++t) {
    const int64_t b0 = tile_begin[t], nbt = tile_begin[t + 1] - b0;
    const int64_t p0 = qrange[2 * b0], nq = qrange[2 * (b0 + nbt - 1) + 1] - p0;
    probe_scores(p0, nq);
    fill_empty(r, probe_d.data(), probe_i.data(), nq * wp);
    select_tile(r, tile.data(), nq, L, cn.data(), 0, -1, probe_d.data(), probe_i.data(), wp);
    if (fused) {
      SCURRY_CUDA(cudaMemsetAsync(cnt.data(), 0, static_cast<size_t>(nbt * L) * sizeof(int32_t), r.stream));
      probe_count_kernel<<<grid_for(nq * P), kThreads, 0, r.stream>>>(probe_i.data(), wp, static_cast<int>(P), nq, p0,
                                                                      d_blk.data(), b0, L, cnt.data());
      SCURRY_CUDA_LAUNCH();
      probe_ranges_kernel<<<static_cast<unsigned>((nbt + kWarpsPerBlock - 1) / kWarpsPerBlock),
                            kWarpsPerBlock * kWarp, 0, r.stream>>>(cnt.data(), L, nbt, b0, d_rbeg.data(),
                                                                   d_rend.data(), cap, d_ranges.data(),
                                                                   d_nranges.data(), nullptr);
      SCURRY_CUDA_LAUNCH();
    } else {
      ivf_scan_kernel<<<static_cast<unsigned>((nq + wpb - 1) / wpb), wpb * kWarp,
                        static_cast<size_t>(wpb * scan_smem), r.stream>>>(
          Xs.data(), d_perm.data(), d_rbeg.data(), d_rend.data(), d, p0, nq, probe_i.data(), wp, static_cast<int>(P),
          cosine, w, best_d, best_i);
      SCURRY_CUDA_LAUNCH();
    }
  }
  prof("probes");
  if (!fused) return;
  probe_d.release();
  probe_i.release();
  if (!ex) {
    cnt.release();
    tile.release();
  }
  // The fused operand: the list-ordered rows of Xs (raw, or unit for cosine) centred on their column
  // means, TF32-rounded, zero-padded to kp, scored as ||y||^2 - 2 x.y with sqn = ||row - mean||^2.
  // For cosine this is the euclidean order on unit rows (||x - y||^2 = 2 - 2 cos), and centring
  // matters: TF32's error scales with the norms, and unit rows of data far from the origin are
  // nearly parallel (no certificate catches a miss here). The means are taken over Y in cell order:
  // the same on every GPU whatever the list order.
  DeviceArray<float> mean(r, static_cast<size_t>(d), "kNN column means");
  DeviceArray<float> sqn(r, static_cast<size_t>(n), "kNN squared norms");
  column_means(r, Y, n, d, mean.data());
  {
    DeviceArray<double> list_nrm(r, static_cast<size_t>(n), "IVF row norms (list order)");
    row_stats(r, Xs.data(), n, d, mean.data(), list_nrm.data(), sqn.data());
  }
  DeviceArray<float> A(r, static_cast<size_t>(n * kp), "IVF fused operand");
  fused_operand_kernel<<<grid_for(n * kp), kThreads, 0, r.stream>>>(Xs.data(), n, d, kp, mean.data(), A.data());
  SCURRY_CUDA_LAUNCH();
  if (!ex) Xs.release();
  FusedBlocks fb;
  fb.n_blocks = qb1 - qb0;
  fb.query_range = d_qrange.data() + 2 * qb0;
  fb.ranges = d_ranges.data() + qb0 * cap * 2;
  fb.n_ranges = d_nranges.data() + qb0;
  fb.range_cap = cap;
  fb.ids = d_perm.data();
  // The mma kernel's operands (knn_mma.cu) unless SCURRY_KNN_KERNEL=wmma: Q for every position (the
  // queries), D for this part's positions [db0, db1) only (all of them with one index). (The WMMA
  // kernel keeps the whole operand A either way.)
  const int64_t kpm = mma_depth(d, true);
  const bool mma = mma_enabled() && mma_ivf_supported(kpm, w);
  DeviceArray<float> Qm, Dm;
  if (mma) {
    Qm = DeviceArray<float>(r, static_cast<size_t>(n * kpm), "IVF mma operand (queries)");
    Dm = DeviceArray<float>(r, static_cast<size_t>((db1 - db0) * kpm), "IVF mma operand (rows)");
    mma_operands(r, A.data(), sqn.data(), n, kp, d, kpm, Qm.data(), nullptr);
    mma_operands(r, A.data() + db0 * kp, sqn.data() + db0, db1 - db0, kp, d, kpm, nullptr, Dm.data());
    A.release();
  }
  auto scan = [&](const FusedBlocks& b) {
    if (mma)
      mma_candidates_ranges(r, Qm.data(), Dm.data(), n, kpm, d, w, b, best_d, best_i, db0);
    else
      fused_candidates_ranges(r, A.data(), sqn.data(), n, kp, w, b, best_d, best_i);
  };
  scan(fb);
  prof("fused candidates");
  if (!ex) return;
  if (opt.n_shards != 1) fail("exact kNN through the lists: one shard only");

  // ---- Exact: stage 1's k-th distances, the pruning certificate per query, stage 2, merge.
  rerank(r, dX, ex->nrm, n, d, KnnMetric::euclidean, best_i, w, k, ex->out_idx, ex->out_dist);
  SCURRY_CUDA(cudaMemsetAsync(ex->redo, 0, static_cast<size_t>(n), r.stream));
  DeviceArray<double> ccd(r, static_cast<size_t>(L * L), "centroid distances");
  centroid_distances_kernel<<<grid_for(L * L), kThreads, 0, r.stream>>>(C.data(), L, d, ccd.data());
  SCURRY_CUDA_LAUNCH();
  // e_abs: twice the float32 rounding of an assignment score difference (list members) plus that of
  // the query's (the probe tile), each score c^2 - 2 x.c off by at most gamma_d 2 |x||c| + 2^-23 (c^2
  // + 2 |x||c|) (gamma_d = d 2^-24 / (1 - d 2^-24)); a factor 2 on top for safety.
  DeviceArray<double> mx(r, 2, "norm maxima");
  {
    DeviceArray<double> ynrm(r, static_cast<size_t>(n), "row norms");
    row_stats(r, Xs.data(), n, d, nullptr, ynrm.data(), nullptr);
    max_kernel<<<1, kThreads, 0, r.stream>>>(ynrm.data(), n, mx.data());
    SCURRY_CUDA_LAUNCH();
    max_kernel<<<1, kThreads, 0, r.stream>>>(cnrm.data(), L, mx.data() + 1);
    SCURRY_CUDA_LAUNCH();
    double h[2];
    SCURRY_CUDA(cudaMemcpyAsync(h, mx.data(), sizeof h, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    const double u = 0x1p-24, gamma = d * u / (1 - d * u), xc = h[0] * h[1], c2 = h[1] * h[1];
    const double per_score = gamma * 2 * xc + 2 * u * (c2 + 2 * xc) + u * c2;
    ex->stats->e_abs = 2 * 4 * per_score;
  }
  const double e_abs = ex->stats->e_abs;
  std::vector<int32_t> lop(static_cast<size_t>(n));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t p = offsets[l]; p < offsets[l + 1]; ++p) lop[static_cast<size_t>(p)] = static_cast<int32_t>(l);
  DeviceArray<int32_t> d_lop(r, lop.size(), "list of each position");
  upload(r, d_lop, lop);
  // Stage 2's lists per block: all of them when their ranges fit in kExactRangeBytes (1.3M cells:
  // 21k blocks x 1143 lists x 16 B = 0.39 GB), else as many as fit, at least kExactUnion x P.
  const int cap2 = static_cast<int>(std::min<int64_t>(
      L, std::max<int64_t>(kExactUnion * P, kExactRangeBytes / (std::max<int64_t>(nb, 1) * 16))));
  DeviceArray<int64_t> d_ranges2(r, static_cast<size_t>(nb) * cap2 * 2, "exact kNN stage-2 ranges");
  DeviceArray<int32_t> d_nranges2(r, static_cast<size_t>(nb), "exact kNN stage-2 range counts");
  DeviceArray<uint8_t> overflow(r, static_cast<size_t>(nb), "exact kNN stage-2 overflow");
  SCURRY_CUDA(cudaMemsetAsync(overflow.data(), 0, static_cast<size_t>(nb), r.stream));
  DeviceArray<uint8_t> scanned(r, static_cast<size_t>(max_tile_blocks * L), "lists scanned");
  prof("exact: stage-1 rerank");
  for (size_t t = 0; t + 1 < tile_begin.size(); ++t) {
    const int64_t b0 = tile_begin[t], nbt = tile_begin[t + 1] - b0;
    const int64_t p0 = qrange[2 * b0], nq = qrange[2 * (b0 + nbt - 1) + 1] - p0;
    probe_scores(p0, nq);
    SCURRY_CUDA(cudaMemsetAsync(scanned.data(), 0, static_cast<size_t>(nbt * L), r.stream));
    SCURRY_CUDA(cudaMemsetAsync(cnt.data(), 0, static_cast<size_t>(nbt * L) * sizeof(int32_t), r.stream));
    scanned_lists_kernel<<<grid_for(nbt * cap), kThreads, 0, r.stream>>>(d_ranges.data(), d_nranges.data(), cap, nbt, b0,
                                                                         d_lop.data(), d_off.data(), L, scanned.data());
    SCURRY_CUDA_LAUNCH();
    prune_kernel<<<grid_for(nq * kWarp), kThreads, 0, r.stream>>>(tile.data(), nq, L, cn.data(), p0, d_perm.data(),
                                                                  d_blk.data(), b0, ex->out_dist, k, ccd.data(), e_abs,
                                                                  scanned.data(), cnt.data(), ex->redo);
    SCURRY_CUDA_LAUNCH();
    probe_ranges_kernel<<<static_cast<unsigned>((nbt + kWarpsPerBlock - 1) / kWarpsPerBlock), kWarpsPerBlock * kWarp, 0,
                          r.stream>>>(cnt.data(), L, nbt, b0, d_rbeg.data(), d_rend.data(), cap2, d_ranges2.data(),
                                      d_nranges2.data(), overflow.data());
    SCURRY_CUDA_LAUNCH();
  }
  Xs.release();
  tile.release();
  cnt.release();
  prof("exact: pruning certificate");
  {
    // Stage 2 starts from stage 1's lists (seeded: tight thresholds from the first tile on) and
    // leaves the best w of both in best_d/best_i (the two scans' rows are disjoint).
    FusedBlocks fb2 = fb;  // (one shard: every block)
    fb2.ranges = d_ranges2.data();
    fb2.n_ranges = d_nranges2.data();
    fb2.range_cap = cap2;
    fb2.seeded = true;
    scan(fb2);
  }
  finish_exact_kernel<<<grid_for(n), kThreads, 0, r.stream>>>(sqn.data(), d_perm.data(), d_blk.data(), overflow.data(),
                                                              n, ex->sqn_orig, ex->redo);
  SCURRY_CUDA_LAUNCH();
  {
    std::vector<int32_t> nr2(static_cast<size_t>(nb));
    std::vector<uint8_t> ov(static_cast<size_t>(nb));
    SCURRY_CUDA(cudaMemcpyAsync(nr2.data(), d_nranges2.data(), nr2.size() * 4, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaMemcpyAsync(ov.data(), overflow.data(), ov.size(), cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    IvfExactStats& st = *ex->stats;
    st.lists = L;
    st.probes = P;
    st.blocks = nb;
    for (int64_t b = 0; b < nb; ++b) {
      st.stage2_blocks += nr2[b] > 0;
      st.stage2_ranges += nr2[b];
      st.overflow_blocks += ov[b];
    }
  }
  prof("exact: stage 2 + merge");
}

}  // namespace

namespace gpu::knn {

void ivf_exact_candidates(CudaResources& r, const float* dX, const double* nrm, int64_t n, int64_t d, int64_t k,
                          const IvfOptions& opt, int w, float* best_d, int32_t* best_i, int32_t* out_idx,
                          float* out_dist, float* sqn_orig, uint8_t* redo, IvfExactStats* stats) {
  IvfExactStats local;
  ExactPart ex;
  ex.nrm = nrm;
  ex.out_idx = out_idx;
  ex.out_dist = out_dist;
  ex.sqn_orig = sqn_orig;
  ex.redo = redo;
  ex.stats = stats ? stats : &local;
  *ex.stats = IvfExactStats{};
  ivf_search(r, dX, dX, n, d, false, k, opt, w, best_d, best_i, &ex);
}

}  // namespace gpu::knn

namespace {

// One shard's search (opt.shard of opt.n_shards): with cells, only the rows it searched are re-ranked
// and downloaded (a Knn of cells->size() rows, row t = cell (*cells)[t]); without, the whole n-row
// result (rows of other shards: the cell itself and no neighbours). cand (the index sharded: part
// index_part of n_index_parts, k >= 2): receives every cell's w TF32 candidates from this part's lists
// (TopkLists, n x w, sorted by (score, index)), and the returned Knn is empty.
Knn ivf_part(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfOptions& opt,
             std::vector<int32_t>* cells, int index_part = 0, int n_index_parts = 1, TopkLists* cand = nullptr) {
  const char* where = "neighbors";
  CudaResources& r = require_cuda(ctx, where);
  check_input(ctx, X, k, where);
  const int64_t n = X.n_rows, d = X.n_cols;
  const bool cosine = metric == KnnMetric::cosine;

  // The searched vectors Y: rows as given (euclidean) or unit rows (cosine).
  DeviceArray<float> dX(r, static_cast<size_t>(n * d), "kNN embedding");
  SCURRY_CUDA(cudaMemcpyAsync(dX.data(), X.data.data(), static_cast<size_t>(n * d) * sizeof(float),
                              cudaMemcpyHostToDevice, r.stream));
  DeviceArray<double> nrm(r, static_cast<size_t>(n), "kNN row norms");
  row_stats(r, dX.data(), n, d, nullptr, nrm.data(), nullptr);
  DeviceArray<float> unit;
  if (cosine) {
    unit = DeviceArray<float>(r, static_cast<size_t>(n * d), "kNN unit rows");
    unit_rows(r, dX.data(), nrm.data(), n, d, unit.data());
  }
  const int w = ivf_candidate_width(k);
  DeviceArray<float> best_d(r, static_cast<size_t>(n) * w, "kNN candidate scores");
  DeviceArray<int32_t> best_i(r, static_cast<size_t>(n) * w, "kNN candidates");
  ivf_search(r, cosine ? unit.data() : dX.data(), dX.data(), n, d, cosine, k, opt, w, best_d.data(), best_i.data(),
             nullptr, cells, index_part, n_index_parts);
  unit.release();
  if (cand) {
    std::vector<float> h_d(static_cast<size_t>(n) * w);
    cand->n = n;
    cand->w = w;
    cand->indices.resize(h_d.size());
    SCURRY_CUDA(cudaMemcpyAsync(h_d.data(), best_d.data(), h_d.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                r.stream));
    SCURRY_CUDA(cudaMemcpyAsync(cand->indices.data(), best_i.data(), h_d.size() * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    cand->keys.assign(h_d.begin(), h_d.end());  // float -> double: exact
    return Knn{};
  }
  if (cells) {  // re-rank and download this shard's rows only
    const int64_t m = static_cast<int64_t>(cells->size());
    DeviceArray<int32_t> rows(r, cells->size(), "IVF shard rows");
    upload(r, rows, *cells);
    DeviceArray<int32_t> out_idx(r, static_cast<size_t>(m * k), "kNN indices");
    DeviceArray<float> out_dist(r, static_cast<size_t>(m * k), "kNN distances");
    if (m > 0)
      rerank(r, dX.data(), nrm.data(), m, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data(), rows.data(),
             0, /*compact=*/true, /*cand_at_cell=*/true);
    return download(r, out_idx.data(), out_dist.data(), m, k);
  }
  DeviceArray<int32_t> out_idx(r, static_cast<size_t>(n * k), "kNN indices");
  DeviceArray<float> out_dist(r, static_cast<size_t>(n * k), "kNN distances");
  rerank(r, dX.data(), nrm.data(), n, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data());
  return download(r, out_idx.data(), out_dist.data(), n, k);
}

}  // namespace

Knn knn_ivf_gpu(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfOptions& opt) {
  return ivf_part(ctx, X, k, metric, opt, nullptr);
}

Knn knn_ivf_gpu_shard(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfOptions& opt,
                      std::vector<int32_t>& cells) {
  return ivf_part(ctx, X, k, metric, opt, &cells);
}

namespace {

// The float64 re-rank of given candidates (n x w, ids; -1 = none) on one GPU: knn_ivf_gpu's last step.
Knn rerank_candidates(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const TopkLists& cand) {
  CudaResources& r = require_cuda(ctx, "neighbors");
  const int64_t n = X.n_rows, d = X.n_cols;
  const int w = static_cast<int>(cand.w);
  if (cand.n != n || w != ivf_candidate_width(k)) fail("IVF: ", cand.n, " x ", w, " candidates for ", n, " cells");
  DeviceArray<float> dX(r, static_cast<size_t>(n * d), "kNN embedding");
  SCURRY_CUDA(cudaMemcpyAsync(dX.data(), X.data.data(), static_cast<size_t>(n * d) * sizeof(float),
                              cudaMemcpyHostToDevice, r.stream));
  DeviceArray<double> nrm(r, static_cast<size_t>(n), "kNN row norms");
  row_stats(r, dX.data(), n, d, nullptr, nrm.data(), nullptr);
  DeviceArray<int32_t> best_i(r, cand.indices.size(), "kNN candidates");
  upload(r, best_i, cand.indices);
  DeviceArray<int32_t> out_idx(r, static_cast<size_t>(n * k), "kNN indices");
  DeviceArray<float> out_dist(r, static_cast<size_t>(n * k), "kNN distances");
  rerank(r, dX.data(), nrm.data(), n, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data());
  return download(r, out_idx.data(), out_dist.data(), n, k);
}

}  // namespace

Knn knn_ivf_gpus(const std::vector<Context*>& ctxs, const DenseF& X, int64_t k, KnnMetric metric,
                 const IvfOptions& opt) {
  if (ctxs.empty()) fail_input("neighbors", "no GPU contexts given");
  if (ctxs.size() == 1) return knn_ivf_gpu(*ctxs[0], X, k, metric, opt);
  const int S = static_cast<int>(ctxs.size());
  if (opt.sharding == KnnShard::index && k > 1) {
    // The index sharded by lists: every GPU's best w TF32 candidates per cell among its lists, merged
    // by (score, index) into one GPU's candidates, then one GPU's float64 re-rank (knn_gpu.hpp says
    // why the candidates and not the re-ranked lists are merged).
    if (opt.n_shards != 1) fail("IVF: the index sharded over GPUs and the query blocks over ", opt.n_shards, " shards");
    check_input(*ctxs[0], X, k, "neighbors");
    std::vector<TopkLists> cand(static_cast<size_t>(S));
    on_each_gpu(ctxs, [&](int s) { ivf_part(*ctxs[s], X, k, metric, opt, nullptr, s, S, &cand[s]); });
    const int64_t w = ivf_candidate_width(k);
    const TopkLists merged = merge_topk(cand, w, ctxs[0]->threads());
    cand.clear();
    Knn out;
    on_each_gpu({ctxs[0]}, [&](int) { out = rerank_candidates(*ctxs[0], X, k, metric, merged); });  // its device current
    return out;
  }
  std::vector<Knn> parts(static_cast<size_t>(S));
  std::vector<std::vector<int32_t>> cells(static_cast<size_t>(S));
  on_each_gpu(ctxs, [&](int s) {
    IvfOptions o = opt;
    o.shard = s;
    o.n_shards = S;
    parts[s] = ivf_part(*ctxs[s], X, k, metric, o, &cells[s]);
  });
  return join_rows(X.n_rows, k, cells, parts);  // each row from the shard that searched it
}

}  // namespace scurry
