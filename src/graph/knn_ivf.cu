// IVF-Flat kNN on the GPU (knn_gpu.hpp): k-means lists, probe the nearest lists, exact float32 scan,
// float64 re-rank (knn_gpu.cuh).
//
// Floor on one H200 for 1,306,127 cells x 50 dims, k = 15, L = 1143 lists (~1143 cells each), P = 71
// probes: scan FLOPs 2 n P (n / L) d = 1.2e13 (fp32 CUDA cores, 51 TFLOP/s: 0.24 s); bytes: every
// query reads P lists, P (n / L) d 4 = 16 MB; cells are processed in list order so that neighbouring
// warps probe the same lists and read them from L2 (the embedding is 261 MB, more than L2). k-means:
// 10 x 2 m L d with m = 256 L samples (3.3e10 each, < 1 ms); list assignment 2 n L d = 1.5e11 (3 ms
// in fp32); coarse probe scores the same.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.hpp"
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
constexpr int64_t kDefaultMinProbes = 32;          // default n_probes = max(32, n_lists / 16)
constexpr int64_t kDefaultProbeDivisor = 16;
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
  DeviceArray<float> tile(r, static_cast<size_t>(std::min(n, tile_rows) * L), "kNN score tile");
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

  // Search, query tiles in list order: probe scores (GEMM), the P best lists (select), the scan.
  const int w = candidate_width(k), wp = pow2_width(P);
  DeviceArray<float> best_d(r, static_cast<size_t>(n) * w, "kNN candidate scores");
  DeviceArray<int32_t> best_i(r, static_cast<size_t>(n) * w, "kNN candidates");
  if (k == 1) fill_empty(r, best_d.data(), best_i.data(), n * w);
  const int64_t qt = std::min(n, tile_rows);
  DeviceArray<float> probe_d(r, static_cast<size_t>(qt) * wp, "IVF probe scores");
  DeviceArray<int32_t> probe_i(r, static_cast<size_t>(qt) * wp, "IVF probes");
  const int64_t scan_smem = warp_topk_smem_bytes(w);
  const int wpb = static_cast<int>(std::clamp<int64_t>(kSmemBudget / scan_smem, 1, kWarpsPerBlock));
  const float alpha = -2.f, beta = 0.f;
  for (int64_t p0 = 0; k > 1 && p0 < n; p0 += qt) {
    const int64_t nq = std::min(qt, n - p0);
    SCURRY_CUBLAS(cublasGemmEx(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L), static_cast<int>(nq),
                               static_cast<int>(d), &alpha, C.data(), CUDA_R_32F, static_cast<int>(d),
                               Xs.data() + p0 * d, CUDA_R_32F, static_cast<int>(d), &beta, tile.data(), CUDA_R_32F,
                               static_cast<int>(L), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    fill_empty(r, probe_d.data(), probe_i.data(), nq * wp);
    select_tile(r, tile.data(), nq, L, cn.data(), 0, -1, probe_d.data(), probe_i.data(), wp);
    ivf_scan_kernel<<<static_cast<unsigned>((nq + wpb - 1) / wpb), wpb * kWarp, static_cast<size_t>(wpb * scan_smem),
                      r.stream>>>(Xs.data(), d_perm.data(), d_off.data(), d, p0, nq, probe_i.data(), wp,
                                  static_cast<int>(P), cosine, w, best_d.data(), best_i.data());
    SCURRY_CUDA_LAUNCH();
  }
  DeviceArray<int32_t> out_idx(r, static_cast<size_t>(n * k), "kNN indices");
  DeviceArray<float> out_dist(r, static_cast<size_t>(n * k), "kNN distances");
  rerank(r, dX.data(), nrm.data(), n, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data());
  return download(r, out_idx.data(), out_dist.data(), n, k);
}

}  // namespace scurry
