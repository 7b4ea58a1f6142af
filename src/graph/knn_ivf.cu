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
// Depths over 64 or W over 64 (k > 33) fall back to a warp-per-query scalar scan of the P lists.
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
#include <random>
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

unsigned grid_for(int64_t n, int t = kThreads) { return static_cast<unsigned>((n + t - 1) / t); }

__global__ void gather_rows_kernel(const float* Y, const int32_t* ids, int64_t m, int64_t d, float* out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= m * d) return;
  const int64_t i = e / d, c = e - i * d;
  out[e] = Y[static_cast<int64_t>(ids[i]) * d + c];
}

// labels[q] = argmin_l tile[q, l] + cn[l] (ties: smaller l); one warp per row.
__global__ void argmin_kernel(const float* tile, int64_t nq, int64_t L, const float* cn, int32_t* labels) {
  const int64_t q = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x & (kWarp - 1);
  if (q >= nq) return;  // warp-uniform
  const float* row = tile + q * L;
  float best = __int_as_float(0x7f800000);
  int32_t bl = -1;
  for (int64_t l = lane; l < L; l += kWarp) {
    const float s = row[l] + cn[l];
    if (cand_less(s, static_cast<int32_t>(l), best, bl)) best = s, bl = static_cast<int32_t>(l);
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(kFullMask, best, o);
    const int32_t ol = __shfl_xor_sync(kFullMask, bl, o);
    if (cand_less(ob, ol, best, bl)) best = ob, bl = ol;
  }
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
// lists with float32 scores (squared euclidean, or -dot on unit rows) and writes its best w
// candidates (original ids) to row perm[p] of best_d/best_i.
__global__ void ivf_scan_kernel(const float* Xs, const int32_t* perm, const int64_t* offsets, int64_t d, int64_t p0,
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
    const int64_t b = offsets[l], e = offsets[l + 1];
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
// smaller list id) and writes their row ranges [offsets[l], offsets[l + 1]) in list order, empty lists
// skipped and adjacent ones merged, to ranges (cap pairs per block) and their number to n_ranges.
__global__ void probe_ranges_kernel(const int32_t* cnt, int64_t L, int64_t nbt, int64_t b0, const int64_t* offsets,
                                    int cap, int64_t* ranges, int32_t* n_ranges) {
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
      rb = offsets[l];
      re = offsets[l + 1];
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

template <class T>
void upload(CudaResources& r, DeviceArray<T>& dst, const std::vector<T>& src) {
  SCURRY_CUDA(cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}

}  // namespace

Knn knn_ivf_gpu(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfOptions& opt) {
  const char* where = "neighbors";
  CudaResources& r = require_cuda(ctx, where);
  check_input(ctx, X, k, where);
  const int64_t n = X.n_rows, d = X.n_cols;
  const bool cosine = metric == KnnMetric::cosine;
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
  const float* Y = cosine ? unit.data() : dX.data();

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

  // Inverted lists: every cell in the list of its nearest centroid; Xs holds the rows in list order.
  row_stats(r, C.data(), L, d, nullptr, cnrm.data(), cn.data());
  const std::vector<int32_t> labels = assign(r, Y, n, d, C.data(), L, cn.data(), tile.data(), tile_rows,
                                             d_labels.data());
  group_by_label(labels, L, perm, offsets);
  upload(r, d_perm, perm);
  upload(r, d_off, offsets);
  DeviceArray<float> Xs(r, static_cast<size_t>(n * d), "IVF lists");
  gather_rows_kernel<<<grid_for(n * d), kThreads, 0, r.stream>>>(Y, d_perm.data(), n, d, Xs.data());
  SCURRY_CUDA_LAUNCH();
  unit.release();

  // Query blocks: every list's cells in chunks of kFusedQueries (blk_of: the block of each position);
  // query tiles for the probe scores: runs of whole blocks of at most qt cells (tile_begin).
  std::vector<int64_t> qrange;  // 2 per block: [first, end) positions
  std::vector<int32_t> blk_of(static_cast<size_t>(n));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t s0 = offsets[l]; s0 < offsets[l + 1]; s0 += kFusedQueries) {
      const int64_t s1 = std::min(offsets[l + 1], s0 + kFusedQueries);
      for (int64_t p = s0; p < s1; ++p) blk_of[static_cast<size_t>(p)] = static_cast<int32_t>(qrange.size() / 2);
      qrange.push_back(s0);
      qrange.push_back(s1);
    }
  const int64_t nb = static_cast<int64_t>(qrange.size() / 2);
  std::vector<int64_t> tile_begin{0};
  for (int64_t b = 0; b < nb; ++b)
    if (qrange[2 * b + 1] - qrange[2 * tile_begin.back()] > qt) tile_begin.push_back(b);
  tile_begin.push_back(nb);
  int64_t max_tile_blocks = 0;
  for (size_t t = 0; t + 1 < tile_begin.size(); ++t)
    max_tile_blocks = std::max(max_tile_blocks, tile_begin[t + 1] - tile_begin[t]);

  // Search, query tiles in list order: probe scores (GEMM), the P best lists of each query (select);
  // then per query block its probe set as row ranges (fused path) or the per-query scan (fallback).
  const int w = candidate_width(k), wp = pow2_width(P);
  const int64_t kp = (d + kColumnPad - 1) / kColumnPad * kColumnPad;
  const bool fused = k > 1 && fused_supported(kp, w);
  const int cap = static_cast<int>(std::min<int64_t>(L, kProbeUnion * P));
  DeviceArray<float> best_d(r, static_cast<size_t>(n) * w, "kNN candidate scores");
  DeviceArray<int32_t> best_i(r, static_cast<size_t>(n) * w, "kNN candidates");
  if (k == 1) fill_empty(r, best_d.data(), best_i.data(), n * w);
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
  for (size_t t = 0; k > 1 && t + 1 < tile_begin.size(); ++t) {
    const int64_t b0 = tile_begin[t], nbt = tile_begin[t + 1] - b0;
    const int64_t p0 = qrange[2 * b0], nq = qrange[2 * (b0 + nbt - 1) + 1] - p0;
    SCURRY_CUBLAS(cublasGemmEx(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L), static_cast<int>(nq),
                               static_cast<int>(d), &alpha, C.data(), CUDA_R_32F, static_cast<int>(d),
                               Xs.data() + p0 * d, CUDA_R_32F, static_cast<int>(d), &beta, tile.data(), CUDA_R_32F,
                               static_cast<int>(L), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    fill_empty(r, probe_d.data(), probe_i.data(), nq * wp);
    select_tile(r, tile.data(), nq, L, cn.data(), 0, -1, probe_d.data(), probe_i.data(), wp);
    if (fused) {
      SCURRY_CUDA(cudaMemsetAsync(cnt.data(), 0, static_cast<size_t>(nbt * L) * sizeof(int32_t), r.stream));
      probe_count_kernel<<<grid_for(nq * P), kThreads, 0, r.stream>>>(probe_i.data(), wp, static_cast<int>(P), nq, p0,
                                                                      d_blk.data(), b0, L, cnt.data());
      SCURRY_CUDA_LAUNCH();
      probe_ranges_kernel<<<static_cast<unsigned>((nbt + kWarpsPerBlock - 1) / kWarpsPerBlock),
                            kWarpsPerBlock * kWarp, 0, r.stream>>>(cnt.data(), L, nbt, b0, d_off.data(), cap,
                                                                   d_ranges.data(), d_nranges.data());
      SCURRY_CUDA_LAUNCH();
    } else {
      ivf_scan_kernel<<<static_cast<unsigned>((nq + wpb - 1) / wpb), wpb * kWarp,
                        static_cast<size_t>(wpb * scan_smem), r.stream>>>(
          Xs.data(), d_perm.data(), d_off.data(), d, p0, nq, probe_i.data(), wp, static_cast<int>(P), cosine, w,
          best_d.data(), best_i.data());
      SCURRY_CUDA_LAUNCH();
    }
  }
  if (fused) {
    probe_d.release();
    probe_i.release();
    cnt.release();
    tile.release();
    // The fused operand: the list-ordered rows of Xs (raw, or unit for cosine) centred on their column
    // means, TF32-rounded, zero-padded to kp, scored as ||y||^2 - 2 x.y with sqn = ||row - mean||^2.
    // For cosine this is the euclidean order on unit rows (||x - y||^2 = 2 - 2 cos), and centring
    // matters: TF32's error scales with the norms, and unit rows of data far from the origin are
    // nearly parallel (no certificate catches a miss here).
    DeviceArray<float> mean(r, static_cast<size_t>(d), "kNN column means");
    DeviceArray<float> sqn(r, static_cast<size_t>(n), "kNN squared norms");
    column_means(r, Xs.data(), n, d, mean.data());
    {
      DeviceArray<double> list_nrm(r, static_cast<size_t>(n), "IVF row norms (list order)");
      row_stats(r, Xs.data(), n, d, mean.data(), list_nrm.data(), sqn.data());
    }
    DeviceArray<float> A(r, static_cast<size_t>(n * kp), "IVF fused operand");
    fused_operand_kernel<<<grid_for(n * kp), kThreads, 0, r.stream>>>(Xs.data(), n, d, kp, mean.data(), A.data());
    SCURRY_CUDA_LAUNCH();
    Xs.release();
    FusedBlocks fb;
    fb.n_blocks = nb;
    fb.query_range = d_qrange.data();
    fb.ranges = d_ranges.data();
    fb.n_ranges = d_nranges.data();
    fb.range_cap = cap;
    fb.ids = d_perm.data();
    fused_candidates_ranges(r, A.data(), sqn.data(), n, kp, w, fb, best_d.data(), best_i.data());
  }
  DeviceArray<int32_t> out_idx(r, static_cast<size_t>(n * k), "kNN indices");
  DeviceArray<float> out_dist(r, static_cast<size_t>(n * k), "kNN distances");
  rerank(r, dX.data(), nrm.data(), n, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data());
  return download(r, out_idx.data(), out_dist.data(), n, k);
}

}  // namespace scurry
