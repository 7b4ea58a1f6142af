// UMAP SGD epochs on the GPU (see umap_gpu.hpp for the semantics).
//
// Floor on one H200 (1.3M cells, k = 15: about 25M directed edges after the fuzzy union, 200
// epochs, 2 dims): per epoch every edge reads its eps (4 B), and the sampled ones (mean w / w_max
// about 0.4, so ~2G samples over the run) read their tail (4 B) and touch 1 + 5 rows of the
// embedding (a thread walks a chunk of one vertex's row, so the heads are implicit). DRAM: 200 x 25M x 4 B + 2G x 8 B ~ 36 GB -> 8 ms at 4.3 TB/s; the embedding itself
// (1.3M x 8 B = 10 MB) stays in the 50 MB L2, whose random 32-B sector traffic (~12G accesses,
// ~400 GB) is the real bound, ~40-80 ms. FLOPs: ~12G point updates x ~30 = 0.4 TFLOP -> 8 ms fp32.
// So ~0.1 s is the floor; target 0.7 s.
//
// At 10M cells (~200M edges): int64 edge counters and offsets throughout; device memory is
// 8 B per edge (tail, eps), 8 B per cell of indptr, 4 B x dim per cell for the layout, and per
// work item (a row cut into chains of kGpuChunk edges: ~deg/8 items a cell) 12 B plus 4 B x dim of displacement.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <optional>
#include <vector>

#include <cub/device/device_scan.cuh>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "graph/spectral.hpp"
#include "graph/spectral_gpu.cuh"
#include "graph/spectral_rng.hpp"
#include "graph/umap_sgd.hpp"
#include "graph/umap_gpu.hpp"

namespace scurry {
namespace {

const char* kWhere = "umap (gpu)";
constexpr int kBlock = 256;               // threads per block of every kernel here
constexpr int64_t kMaxBlocks = 1 << 16;   // grid-stride loops above this many blocks
constexpr int kMaxGenericDim = umap_sgd::kMaxDim;  // n_components handled by the generic kernel

int blocks_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks))); }

// In place: weight -> epochs per sample (umap_sgd::epochs_per_sample; 0 for pruned edges).
__global__ void epochs_per_sample_kernel(float* w, int64_t n_edges, float threshold, float wmax) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n_edges;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    w[e] = umap_sgd::epochs_per_sample(w[e], threshold, wmax);
}

// Edges per item on the GPU: kGpuChunk, or SCURRY_UMAP_GPU_CHUNK. Each item is one thread's chain
// of dependent moves, so shorter chains on more threads hide more of the L2 latency that bounds the
// epochs: at 1.3M cells (session 13, one H200, `scurry --device gpu umap`) the 199 epochs took
// 0.52 s in chunks of 32 edges (umap_sgd::kChunk, the CPU's), 0.45 s in 16, 0.43 s in 8. The CPU
// keeps 32 (its threads are few); the GPU's layout is its own (deterministic, tested on quality).
constexpr int64_t kGpuChunk = 8;
int64_t gpu_chunk() {
  static const int64_t c = [] {
    const char* e = std::getenv("SCURRY_UMAP_GPU_CHUNK");
    const long long v = e ? std::atoll(e) : 0;
    return v > 0 ? static_cast<int64_t>(v) : kGpuChunk;
  }();
  return c;
}

// The work items of the batched epochs (umap_sgd.hpp): every vertex's row cut into chunks of at
// most gpu_chunk() edges (a row without edges: one empty item), the items ordered by group (vertex i
// in group i mod kSubRounds), then vertex, then chunk. Built on the device from the graph's row
// pointers: per vertex its item count at its place in the group order, an exclusive scan, the items.
constexpr int kK = umap_sgd::kSubRounds;

// The place of vertex i in the group order: the vertices of the groups before i's, then i's rank in its group.
__device__ __forceinline__ int64_t group_order_place(int64_t i, int64_t n) {
  const int64_t s = i % kK;
  int64_t before = 0;
  for (int64_t t = 0; t < s; ++t) before += (n - t + kK - 1) / kK;
  return before + i / kK;
}

__device__ __forceinline__ int64_t items_of_row(const int64_t* indptr, int64_t i, int64_t chunk) {
  const int64_t deg = indptr[i + 1] - indptr[i];
  return deg == 0 ? 1 : (deg + chunk - 1) / chunk;
}

__global__ void item_counts_kernel(const int64_t* __restrict__ indptr, int64_t n, int64_t chunk,
                                   int64_t* __restrict__ counts) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    counts[group_order_place(i, n)] = items_of_row(indptr, i, chunk);
}

// group_begin[s]: the first item of group s; group_begin[kK]: the number of items.
__global__ void group_begin_kernel(const int64_t* __restrict__ first_at, const int64_t* __restrict__ counts, int64_t n,
                                   int64_t* __restrict__ group_begin) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const int64_t total = first_at[n - 1] + counts[n - 1];
  int64_t before = 0;
  for (int s = 0; s < kK; ++s) {
    group_begin[s] = before < n ? first_at[before] : total;
    before += (n - s + kK - 1) / kK;
  }
  group_begin[kK] = total;
}

__global__ void item_fill_kernel(const int64_t* __restrict__ indptr, const int64_t* __restrict__ first_at, int64_t n,
                                 int64_t chunk, int32_t* __restrict__ vertex, int64_t* __restrict__ begin,
                                 int64_t* __restrict__ first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t q0 = first_at[group_order_place(i, n)], m = items_of_row(indptr, i, chunk);
    first[i] = q0;
    for (int64_t k = 0; k < m; ++k) {
      vertex[q0 + k] = static_cast<int32_t>(i);
      begin[q0 + k] = indptr[i] + k * chunk;
    }
  }
}

// One thread per item of a group: the chunk's displacement (umap_sgd::chunk_moves) into delta.
template <int D>
__global__ void __launch_bounds__(kBlock) chunk_kernel(const float* __restrict__ pos, float* __restrict__ delta,
                                                       const int64_t* __restrict__ indptr,
                                                       const int32_t* __restrict__ tail, const float* __restrict__ eps,
                                                       const int32_t* __restrict__ item_vertex,
                                                       const int64_t* __restrict__ item_begin, int64_t i0, int64_t i1,
                                                       int64_t chunk, umap_sgd::EpochParams p) {
  const int64_t q = i0 + blockIdx.x * static_cast<int64_t>(kBlock) + threadIdx.x;
  if (q >= i1) return;
  const int32_t v = item_vertex[q];
  const int64_t b = item_begin[q], row_end = indptr[v + 1];
  const int64_t e = row_end - b < chunk ? row_end : b + chunk;
  umap_sgd::chunk_moves<D>(pos, tail, eps, b, e, v, p, delta + q * p.dim);
}

// umap_sgd::chunk_moves with the next due edge's tail position loaded before the current edge's
// moves (its index, tail and position do not depend on them), so that the loads of one edge overlap
// the arithmetic of the one before: the same arithmetic in the same order, so the same bits (keep
// the two in step; the device call of session 9 compared them: identical X_umap).
template <int D>
__device__ __forceinline__ int64_t next_due(const float* __restrict__ eps, int64_t e, int64_t end,
                                            const umap_sgd::EpochParams& p, int64_t& n_neg) {
  for (; e < end; ++e) {
    n_neg = umap_sgd::due_negatives(eps[e], p.epoch, p.neg_rate);
    if (n_neg >= 0) return e;
  }
  return end;
}

template <int D>
__device__ __forceinline__ void chunk_moves_prefetch(const float* __restrict__ in, const int32_t* __restrict__ tail,
                                                     const float* __restrict__ eps, int64_t begin, int64_t end,
                                                     int32_t i, const umap_sgd::EpochParams& p,
                                                     float* __restrict__ delta) {
  float c[D];
  const float* ci = in + static_cast<int64_t>(i) * p.dim;
#pragma unroll
  for (int d = 0; d < D; ++d) c[d] = d < p.dim ? ci[d] : 0.0f;
  constexpr int kBatch = D <= 3 ? 8 : 1;
  int64_t n_neg = -1;
  int64_t e = next_due<D>(eps, begin, end, p, n_neg);
  int32_t j = e < end ? tail[e] : 0;
  float o[D];
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = (e < end && d < p.dim) ? in[static_cast<int64_t>(j) * p.dim + d] : 0.0f;
  while (e < end) {
    // the next due edge and its tail's position, ahead of this edge's moves
    int64_t n_neg2 = -1;
    const int64_t e2 = next_due<D>(eps, e + 1, end, p, n_neg2);
    const int32_t j2 = e2 < end ? tail[e2] : 0;
    float o2[D];
#pragma unroll
    for (int d = 0; d < D; ++d) o2[d] = (e2 < end && d < p.dim) ? in[static_cast<int64_t>(j2) * p.dim + d] : 0.0f;
    umap_sgd::attract<D>(c, o, p);  // as the head of (i, j)
    const uint64_t key = umap_sgd::edge_key(p.seed, i, j);
    for (int64_t s0 = 0; s0 < n_neg; s0 += kBatch) {
      float qv[kBatch][D];
      bool use[kBatch];
#pragma unroll
      for (int t = 0; t < kBatch; ++t) {
        const int64_t s2 = s0 + t;
        use[t] = false;
        if (s2 < n_neg) {
          const uint32_t k = umap_sgd::random_vertex_of(key, p.epoch, s2, p.n_vertices);
          use[t] = static_cast<int32_t>(k) != i;
          const float* q = in + static_cast<int64_t>(k) * p.dim;
#pragma unroll
          for (int d = 0; d < D; ++d) qv[t][d] = d < p.dim ? q[d] : 0.0f;
        }
      }
#pragma unroll
      for (int t = 0; t < kBatch; ++t) {
        if (!use[t]) continue;
        float diff[D];
        float dn = 0.0f;
#pragma unroll
        for (int d = 0; d < D; ++d) {
          diff[d] = d < p.dim ? c[d] - qv[t][d] : 0.0f;
          dn += diff[d] * diff[d];
        }
        float gr = 0.0f;
        if (dn > 0.0f) gr = umap_sgd::repulse_coef(dn, p.a, p.b, p.gamma);
#pragma unroll
        for (int d = 0; d < D; ++d)
          if (d < p.dim) c[d] += p.alpha * (gr > 0.0f ? umap_sgd::clip4(gr * diff[d]) : umap_sgd::kClip);
      }
    }
    umap_sgd::attract<D>(c, o, p);  // as the tail of (j, i)
    e = e2, j = j2, n_neg = n_neg2;
#pragma unroll
    for (int d = 0; d < D; ++d) o[d] = o2[d];
  }
#pragma unroll
  for (int d = 0; d < D; ++d) delta[d] = d < p.dim ? c[d] - ci[d] : 0.0f;
}

template <int D>
__global__ void __launch_bounds__(kBlock) chunk_kernel_prefetch(const float* __restrict__ pos, float* __restrict__ delta,
                                                                const int64_t* __restrict__ indptr,
                                                                const int32_t* __restrict__ tail,
                                                                const float* __restrict__ eps,
                                                                const int32_t* __restrict__ item_vertex,
                                                                const int64_t* __restrict__ item_begin, int64_t i0,
                                                                int64_t i1, int64_t chunk, umap_sgd::EpochParams p) {
  const int64_t q = i0 + blockIdx.x * static_cast<int64_t>(kBlock) + threadIdx.x;
  if (q >= i1) return;
  const int32_t v = item_vertex[q];
  const int64_t b = item_begin[q], row_end = indptr[v + 1];
  const int64_t e = row_end - b < chunk ? row_end : b + chunk;
  chunk_moves_prefetch<D>(pos, tail, eps, b, e, v, p, delta + q * p.dim);
}

// SCURRY_UMAP_GPU_KERNEL=plain: umap_sgd::chunk_moves as it is (the A/B of the prefetching loop).
bool plain_kernel() {
  static const bool plain = [] {
    const char* e = std::getenv("SCURRY_UMAP_GPU_KERNEL");
    return e && std::strcmp(e, "plain") == 0;
  }();
  return plain;
}

// One thread per vertex of group s: its items' displacements added in order to its position
// (vertex_epoch's arithmetic), written back into pos (the group's chunk kernel has finished reading).
template <int D>
__global__ void combine_kernel(float* __restrict__ pos, const float* __restrict__ delta,
                               const int64_t* __restrict__ first, int64_t n, int s, int64_t items_end, int dim) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(kBlock) + threadIdx.x;
  const int64_t i = s + t * umap_sgd::kSubRounds;
  if (i >= n) return;
  const int64_t q0 = first[i];
  const int64_t q1 = i + umap_sgd::kSubRounds < n ? first[i + umap_sgd::kSubRounds] : items_end;
  float acc[D];
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  for (int64_t q = q0; q < q1; ++q)
    for (int d = 0; d < D && d < dim; ++d) acc[d] += delta[q * dim + d];
  for (int d = 0; d < D && d < dim; ++d) pos[i * dim + d] = pos[i * dim + d] + acc[d];
}

struct DeviceItems {
  DeviceArray<int32_t> vertex;
  DeviceArray<int64_t> begin, first;
  DeviceArray<float> delta;
  int64_t group_begin[kK + 1] = {};  // (host) items of group s: [group_begin[s], group_begin[s + 1])
};

// The items of the device graph (n >= 1 rows), dim floats of displacement each.
DeviceItems device_items(CudaResources& r, const int64_t* indptr, int64_t n, int64_t dim) {
  const int64_t chunk = gpu_chunk();
  DeviceItems it;
  DeviceArray<int64_t> counts(r, static_cast<size_t>(n), "umap item counts");
  DeviceArray<int64_t> first_at(r, static_cast<size_t>(n), "umap item offsets");
  DeviceArray<int64_t> gb(r, kK + 1, "umap item groups");
  item_counts_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(indptr, n, chunk, counts.data());
  SCURRY_CUDA_LAUNCH();
  size_t scratch_bytes = 0;
  SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, scratch_bytes, counts.data(), first_at.data(), n, r.stream));
  {
    DeviceArray<unsigned char> scratch(r, std::max<size_t>(1, scratch_bytes), "umap item scan scratch");
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(scratch.data(), scratch_bytes, counts.data(), first_at.data(), n, r.stream));
    group_begin_kernel<<<1, 1, 0, r.stream>>>(first_at.data(), counts.data(), n, gb.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaMemcpyAsync(it.group_begin, gb.data(), sizeof(it.group_begin), cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  }
  const int64_t total = it.group_begin[kK];
  it.vertex = DeviceArray<int32_t>(r, static_cast<size_t>(total), "umap items (vertices)");
  it.begin = DeviceArray<int64_t>(r, static_cast<size_t>(total), "umap items (first edges)");
  it.first = DeviceArray<int64_t>(r, static_cast<size_t>(n), "umap items (per vertex)");
  it.delta = DeviceArray<float>(r, static_cast<size_t>(total * dim), "umap item displacements");
  item_fill_kernel<<<blocks_for(n), kBlock, 0, r.stream>>>(indptr, first_at.data(), n, chunk, it.vertex.data(),
                                                           it.begin.data(), it.first.data());
  SCURRY_CUDA_LAUNCH();
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // (counts and first_at are released on return)
  return it;
}

// The spectral start's finish on the device (umap.cpp's, entry for entry): max |x| of the layout's
// leading dim columns of `spec` (n x ld doubles), emb = float(x * 10 / max) + float(1e-4 normal)
// (held in double, as the host holds it), then every column of emb to [0, 10] as float.
// Maxima and minima are exact in any order, so the blocks' partials need no fixed order.
constexpr int kStatBlocks = 1024;

__global__ void column_extremes_kernel(const double* __restrict__ x, int64_t n, int ld, int dim, bool absolute,
                                       double* __restrict__ lo_part, double* __restrict__ hi_part) {
  __shared__ double slo[kBlock], shi[kBlock];
  for (int c = 0; c < dim; ++c) {
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const double v = absolute ? fabs(x[i * ld + c]) : x[i * ld + c];
      lo = fmin(lo, v), hi = fmax(hi, v);
    }
    slo[threadIdx.x] = lo, shi[threadIdx.x] = hi;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
      if (threadIdx.x < h)
        slo[threadIdx.x] = fmin(slo[threadIdx.x], slo[threadIdx.x + h]),
        shi[threadIdx.x] = fmax(shi[threadIdx.x], shi[threadIdx.x + h]);
      __syncthreads();
    }
    if (threadIdx.x == 0) lo_part[blockIdx.x * dim + c] = slo[0], hi_part[blockIdx.x * dim + c] = shi[0];
    __syncthreads();
  }
}

// lo[c], hi[c] over the partials of kStatBlocks blocks.
__global__ void column_extremes_final_kernel(const double* lo_part, const double* hi_part, int blocks, int dim,
                                             double* lo, double* hi) {
  const int c = threadIdx.x;
  if (c >= dim) return;
  double l = INFINITY, h = -INFINITY;
  for (int b = 0; b < blocks; ++b) l = fmin(l, lo_part[b * dim + c]), h = fmax(h, hi_part[b * dim + c]);
  lo[c] = l, hi[c] = h;
}

__global__ void spectral_noise_kernel(const double* __restrict__ spec, int64_t n, int ld, int dim,
                                      const double* __restrict__ abs_hi, uint64_t noise_seed, double* __restrict__ emb) {
  double m = 0;
  for (int c = 0; c < dim; ++c) m = fmax(m, abs_hi[c]);
  const double expansion = m > 0 ? kUmapInitScale / m : 1.0;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < n * dim;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = q / dim, c = q - i * dim;
    emb[q] = static_cast<float>(__dmul_rn(spec[i * ld + c], expansion)) +
             static_cast<float>(__dmul_rn(kUmapInitNoise, spectral::gaussian_at(noise_seed, static_cast<uint64_t>(q))));
  }
}

__global__ void scale_columns_kernel(const double* __restrict__ emb, int64_t n, int dim, const double* __restrict__ lo,
                                     const double* __restrict__ hi, float* __restrict__ out) {
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < n * dim;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = q % dim;
    const double span = hi[c] - lo[c] > 0 ? hi[c] - lo[c] : 1.0;
    out[q] = static_cast<float>(__ddiv_rn(__dmul_rn(kUmapInitScale, emb[q] - lo[c]), span));
  }
}

// The start layout from the spectral block into out (n x dim floats).
void finish_spectral_start(CudaResources& r, const double* spec, int64_t n, int64_t ld, int64_t dim,
                           uint64_t random_state, float* out) {
  DeviceArray<double> lo_part(r, static_cast<size_t>(kStatBlocks * dim), "umap start minima");
  DeviceArray<double> hi_part(r, static_cast<size_t>(kStatBlocks * dim), "umap start maxima");
  DeviceArray<double> lo(r, static_cast<size_t>(dim), "umap start minimum"), hi(r, static_cast<size_t>(dim), "umap start maximum");
  DeviceArray<double> emb(r, static_cast<size_t>(n * dim), "umap start layout (double)");
  const int d = static_cast<int>(dim);
  column_extremes_kernel<<<kStatBlocks, kBlock, 0, r.stream>>>(spec, n, static_cast<int>(ld), d, true, lo_part.data(),
                                                               hi_part.data());
  SCURRY_CUDA_LAUNCH();
  column_extremes_final_kernel<<<1, umap_sgd::kMaxDim, 0, r.stream>>>(lo_part.data(), hi_part.data(), kStatBlocks, d,
                                                                      lo.data(), hi.data());
  SCURRY_CUDA_LAUNCH();
  spectral_noise_kernel<<<blocks_for(n * dim), kBlock, 0, r.stream>>>(spec, n, static_cast<int>(ld), d, hi.data(),
                                                                      umap_noise_seed(random_state), emb.data());
  SCURRY_CUDA_LAUNCH();
  column_extremes_kernel<<<kStatBlocks, kBlock, 0, r.stream>>>(emb.data(), n, d, d, false, lo_part.data(),
                                                               hi_part.data());
  SCURRY_CUDA_LAUNCH();
  column_extremes_final_kernel<<<1, umap_sgd::kMaxDim, 0, r.stream>>>(lo_part.data(), hi_part.data(), kStatBlocks, d,
                                                                      lo.data(), hi.data());
  SCURRY_CUDA_LAUNCH();
  scale_columns_kernel<<<blocks_for(n * dim), kBlock, 0, r.stream>>>(emb.data(), n, d, lo.data(), hi.data(), out);
  SCURRY_CUDA_LAUNCH();
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // (the scratch is released on return)
}

// SCURRY_UMAP_TIMES: the kernels of one epoch timed with events (`ev`: 2 x kSubRounds + 1 events).
template <int D>
void launch_epoch_d(CudaResources& r, float* pos, const DeviceItems& it, const int64_t* indptr, const int32_t* tail,
                    const float* eps, int64_t n, const umap_sgd::EpochParams& p, cudaEvent_t* ev) {
  if (ev) SCURRY_CUDA(cudaEventRecord(ev[0], r.stream));
  for (int s = 0; s < umap_sgd::kSubRounds; ++s) {
    const int64_t q0 = it.group_begin[s], q1 = it.group_begin[s + 1];
    const int64_t m = (n - s + umap_sgd::kSubRounds - 1) / umap_sgd::kSubRounds;
    if (m > 0) {
      const int grid = static_cast<int>((q1 - q0 + kBlock - 1) / kBlock);
      if (plain_kernel())
        chunk_kernel<D><<<grid, kBlock, 0, r.stream>>>(pos, it.delta.data(), indptr, tail, eps, it.vertex.data(),
                                                       it.begin.data(), q0, q1, gpu_chunk(), p);
      else
        chunk_kernel_prefetch<D><<<grid, kBlock, 0, r.stream>>>(pos, it.delta.data(), indptr, tail, eps,
                                                                it.vertex.data(), it.begin.data(), q0, q1,
                                                                gpu_chunk(), p);
      SCURRY_CUDA_LAUNCH();
    }
    if (ev) SCURRY_CUDA(cudaEventRecord(ev[2 * s + 1], r.stream));
    if (m > 0) {
      combine_kernel<D><<<static_cast<int>((m + kBlock - 1) / kBlock), kBlock, 0, r.stream>>>(
          pos, it.delta.data(), it.first.data(), n, s, q1, p.dim);
      SCURRY_CUDA_LAUNCH();
    }
    if (ev) SCURRY_CUDA(cudaEventRecord(ev[2 * s + 2], r.stream));
  }
}

void launch_epoch(CudaResources& r, float* pos, const DeviceItems& it, const int64_t* indptr, const int32_t* tail,
                  const float* eps, int64_t n, const umap_sgd::EpochParams& p, cudaEvent_t* ev = nullptr) {
  if (p.dim == 2) launch_epoch_d<2>(r, pos, it, indptr, tail, eps, n, p, ev);
  else if (p.dim == 3) launch_epoch_d<3>(r, pos, it, indptr, tail, eps, n, p, ev);
  else launch_epoch_d<kMaxGenericDim>(r, pos, it, indptr, tail, eps, n, p, ev);
}

template <class T>
void to_device(CudaResources& r, DeviceArray<T>& d, const T* h, size_t n) {
  if (n) SCURRY_CUDA(cudaMemcpyAsync(d.data(), h, n * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}

// SCURRY_UMAP_HOST_START=1: the spectral start on the host as before session 18 (the A/B of the
// device start): the CPU path's start layout, then the epochs here.
bool host_start_forced() {
  static const bool on = [] {
    const char* e = std::getenv("SCURRY_UMAP_HOST_START");
    return e && std::strcmp(e, "1") == 0;
  }();
  return on;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The layout on the GPU. host_init: the start layout (n x dim, used as is: the CPU path's, or the
// caller's); null: the spectral start made here on the device (umap.cpp's steps on the graph as it
// prunes it: spectral::device_spectral_start, the noise and the scaling), or, when the pruned graph
// is not connected, the CPU path's start (its multi-component layout, with rep). known_wmax: the
// graph's largest weight when already checked (negative: checked here).
UmapResult umap_gpu_layout(const Context& ctx, const CsrF& graph, const DenseF* host_init, const UmapOptions& opt,
                           float known_wmax, const RepresentationFn& rep) {
  CudaResources* rp = ctx.cuda();
  if (!rp) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU umap");
  CudaResources& r = *rp;
  const auto t0 = std::chrono::steady_clock::now();
  SCURRY_CUDA(cudaSetDevice(r.device));  // (another context's device may be the current one)
  const int64_t n = graph.n_rows, dim = opt.n_components;
  if (graph.n_cols != n)
    fail_input(kWhere, "the graph is ", n, " x ", graph.n_cols, "; it must be square (cells x cells)");
  if (n < 2) fail_input(kWhere, "the graph has ", n, " nodes; UMAP needs at least 2 cells");
  if (n > std::numeric_limits<int32_t>::max())
    fail_input(kWhere, "the graph has ", n, " nodes; at most 2^31 - 1 are supported");
  if (dim < 1 || dim >= n)
    fail_input(kWhere, "n_components = ", dim, " is out of range for ", n, " cells; use 1 <= n_components < n_cells");
  if (dim > kMaxGenericDim)
    fail_input(kWhere, "n_components = ", dim, " is more than the GPU layout supports (", kMaxGenericDim,
               "); use the CPU umap");
  if (opt.maxiter && *opt.maxiter < 0) fail_input(kWhere, "maxiter = ", *opt.maxiter, " must not be negative");
  check_sgd(opt);
  if (opt.sgd != "batched")
    fail_input(kWhere, "sgd '", opt.sgd, "' runs on the CPU only; use batched on the GPU, or --device cpu");
  if (!(opt.negative_sample_rate >= 0)) fail_input(kWhere, "negative_sample_rate must not be negative");
  if (host_init && (host_init->n_rows != n || host_init->n_cols < dim))
    fail_input(kWhere, "the initial coordinates are ", host_init->n_rows, " x ", host_init->n_cols, "; need ", n,
               " x ", dim);
  if (static_cast<int64_t>(graph.indptr.size()) != n + 1 || graph.indptr.back() != graph.nnz())
    fail_input(kWhere, "the graph's row pointers do not match its entries; recompute the neighbours");
  umap_mark("gpu: start");
  const float wmax = known_wmax >= 0 ? known_wmax : checked_max_weight(ctx, graph);
  umap_mark("gpu: weights checked");

  UmapResult res;
  res.max_weight = wmax;
  if (opt.a && opt.b) {
    res.a = *opt.a;
    res.b = *opt.b;
  } else {
    std::tie(res.a, res.b) = find_ab_params(opt.spread, opt.min_dist);
  }
  // The CPU path's rules (umap.cpp): 500 epochs up to 10,000 cells, 200 above; prune below
  // max / n_epochs (max / default when n_epochs <= 10).
  const int64_t default_epochs = n <= 10000 ? 500 : 200;
  const int64_t n_epochs = opt.maxiter ? *opt.maxiter : default_epochs;
  res.n_epochs = n_epochs;
  res.init = "given";
  const float threshold = wmax / static_cast<float>(n_epochs > 10 ? n_epochs : default_epochs);
  const int64_t n_edges = graph.nnz();
  const bool run_epochs = n_edges > 0 && wmax > 0 && n_epochs > 1;

  DeviceArray<float> emb(r, static_cast<size_t>(n * dim), "umap embedding");
  DeviceCsr dg;  // the graph on the device, uploaded once for the start and the epochs
  bool have_graph = false;
  auto upload_graph = [&] {
    if (!have_graph) dg = upload(r, graph);  // through pinned staging
    have_graph = true;
  };
  auto upload_start = [&](const DenseF& start) {
    std::vector<float> h(static_cast<size_t>(n * dim));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) h[static_cast<size_t>(i * dim + c)] = start(i, c);
    to_device(r, emb, h.data(), h.size());
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // (h is pageable and goes now)
  };
  if (host_init) {
    upload_start(*host_init);
  } else {
    // The spectral start (umap.cpp): on the graph pruned below max / default_epochs (the CPU path's
    // start with maxiter 0), connected (checked on the host threads meanwhile) and without isolated nodes.
    const float start_threshold = wmax / static_cast<float>(default_epochs);
    std::future<int64_t> components = std::async(std::launch::async, [&] {
      return connected_components_above(graph, start_threshold, nullptr, ctx.threads());
    });
    std::optional<spectral::DeviceStart> spec;
    try {
      upload_graph();
      umap_mark("gpu: graph uploaded");
      SpectralOptions so;
      so.dim = dim;
      so.random_state = opt.random_state;
      spec = spectral::device_spectral_start(r, dg, start_threshold, so);
      umap_mark("gpu: spectral layout");
    } catch (...) {
      components.wait();
      throw;
    }
    const bool connected = components.get() == 1;
    umap_mark("gpu: components");
    if (spec && connected) {
      finish_spectral_start(r, spec->block.data(), n, spec->width, dim, opt.random_state, emb.data());
      res.init = "spectral";
      umap_mark("gpu: noise and scaling");
    } else {
      UmapOptions ro = opt;
      ro.maxiter = 0;  // the CPU path's start, as a disconnected graph gets there (its multi-component layout)
      const UmapResult start = umap(ctx, graph, ro, nullptr, rep);
      upload_start(start.embedding);
      res.init = start.init;
    }
    res.init_seconds = seconds_since(t0);
  }

  float* cur = emb.data();
  if (run_epochs) {
    upload_graph();
    DeviceArray<int32_t>& tail = dg.indices;
    DeviceArray<float>& eps = dg.data;  // the weights become eps in place (the start has used them)
    DeviceArray<int64_t>& indptr = dg.indptr;
    epochs_per_sample_kernel<<<blocks_for(n_edges), kBlock, 0, r.stream>>>(eps.data(), n_edges, threshold, wmax);
    SCURRY_CUDA_LAUNCH();
    umap_sgd::EpochParams p = epoch_params(opt, res, n);
    // umap: epoch 0 samples nothing; after epoch m the rate becomes alpha (1 - m / n_epochs).
    umap_mark("gpu: graph ready");
    const DeviceItems dit = device_items(r, indptr.data(), n, dim);
    umap_mark("gpu: epoch items built");
    const bool timed = std::getenv("SCURRY_UMAP_TIMES") != nullptr;
    constexpr int kEv = 2 * umap_sgd::kSubRounds + 1;
    cudaEvent_t ev[kEv] = {};
    if (timed) {
      for (auto& e : ev) SCURRY_CUDA(cudaEventCreate(&e));
      std::fprintf(stderr, "[umap] gpu: %lld edges, %lld items of <= %lld edges, groups of %lld items\n",
                   static_cast<long long>(n_edges), static_cast<long long>(dit.group_begin[kK]),
                   static_cast<long long>(gpu_chunk()),
                   static_cast<long long>(dit.group_begin[1] - dit.group_begin[0]));
    }
    for (int64_t ep = 1; ep < n_epochs; ++ep) {
      umap_sgd::set_epoch(p, ep, opt.alpha, n_epochs);
      const bool sample = timed && (ep == 1 || ep == n_epochs / 2);
      launch_epoch(r, cur, dit, indptr.data(), tail.data(), eps.data(), n, p, sample ? ev : nullptr);
      if (sample) {
        SCURRY_CUDA(cudaEventSynchronize(ev[kEv - 1]));
        float chunk_ms = 0, comb_ms = 0, t = 0;
        for (int s2 = 0; s2 < umap_sgd::kSubRounds; ++s2) {
          SCURRY_CUDA(cudaEventElapsedTime(&t, ev[2 * s2], ev[2 * s2 + 1]));
          chunk_ms += t;
          SCURRY_CUDA(cudaEventElapsedTime(&t, ev[2 * s2 + 1], ev[2 * s2 + 2]));
          comb_ms += t;
        }
        std::fprintf(stderr, "[umap] gpu: epoch %lld: chunk kernels %.3f ms, combine kernels %.3f ms\n",
                     static_cast<long long>(ep), chunk_ms, comb_ms);
      }
    }
    if (timed)
      for (auto& e : ev) cudaEventDestroy(e);
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    umap_mark("gpu: epochs");
  }
  res.embedding = DenseF(n, dim);
  if (n * dim > 0)
    SCURRY_CUDA(cudaMemcpyAsync(res.embedding.data.data(), cur, static_cast<size_t>(n * dim) * sizeof(float),
                                cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  res.epochs_seconds = seconds_since(t0) - res.init_seconds;
  return res;
}

}  // namespace

UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const DenseF& init, const UmapOptions& opt) {
  return umap_gpu_layout(ctx, graph, &init, opt, -1.0f, {});
}

UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init,
                    const RepresentationFn& rep) {
  if (!ctx.cuda()) fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU umap");
  // The spectral start on the device above the dense solver's size (spectral.hpp); the others (random,
  // given, a small graph's exact eigenvectors) on the host by the CPU path with no epochs:
  // validation, a, b, pruning and the initial layout (scaled to [0, 10]).
  if (opt.init_pos == "spectral" && graph.n_rows > SpectralOptions{}.dense_max_nodes && !host_start_forced()) {
    return umap_gpu_layout(ctx, graph, nullptr, opt, -1.0f, rep);
  }
  UmapOptions start_opt = opt;
  start_opt.maxiter = 0;
  const UmapResult start = umap(ctx, graph, start_opt, init, rep);
  UmapOptions o = opt;
  o.a = start.a;
  o.b = start.b;
  UmapResult res = umap_gpu_layout(ctx, graph, &start.embedding, o, start.max_weight, {});
  res.init = start.init;
  res.init_seconds = start.init_seconds;
  return res;
}

}  // namespace scurry
