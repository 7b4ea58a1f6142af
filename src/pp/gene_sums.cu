// Per-gene sums on the GPU, three strategies:
//  smem (default): a grid of a few blocks per SM, each block takes a strided share of the entries and
//    accumulates float32 partial sums of all the genes of a tile (2 x 4 bytes a gene: up to 28,672 genes
//    in the 227 KB of shared memory, more in tiles) with shared-memory atomics, then writes them as
//    float64 to its own slice of a [block][gene] buffer; a second kernel adds the blocks in a fixed
//    order in float64. A block sees ~1/500 of the entries, so each float32 partial adds a few hundred
//    values (relative error ~1e-7; counts stay exact below 2^24).
//  atomic (SCURRY_GENE_SUMS=atomic): one streaming pass over the column indices and values (8 bytes an entry; the
//    row pointers are not needed), float64 atomics into the per-gene sums (RED.F64 in L2; the genes'
//    addresses spread over the L2 slices). Floor at 2.6e9 entries: 21 GB / 4.3 TB/s = 4.9 ms.
//    The order of the atomic additions varies, so the sums can differ in the last bits run to run.
//  tiled (SCURRY_GENE_SUMS=tiled): the genes are cut into tiles whose float64 accumulators fit in
//    shared memory; each block takes a chunk of rows and one tile and writes its partial sums to its
//    own slice of a [chunk][gene] buffer, added in a fixed order. One pass per tile (5 passes at 28k genes).
#include <cstdlib>
#include <cstring>

#include "pp/kernels.cuh"

#include <algorithm>

namespace scurry::gpu {

namespace {

constexpr int kSumThreads = 512;
constexpr int kTileGenes = 6144;      // 3 accumulators x 8 bytes x 6144 = 144 KB of shared memory
constexpr int64_t kChunkNnz = 1 << 22;  // entries per row chunk (about 4M)

template <GeneTransform F>
__device__ __forceinline__ float transform(float v, int g, const float* clip) {
  if constexpr (F == GeneTransform::expm1) return expm1f(v);
  else if constexpr (F == GeneTransform::clip) return fminf(v, clip[g]);
  else return v;
}

template <GeneTransform F>
__global__ void __launch_bounds__(kSumThreads) gene_sums_kernel(const int64_t* indptr, const int32_t* idx,
                                                                const float* val, const int64_t* chunk_rows,
                                                                int64_t n_cols, const float* clip, double* partial) {
  extern __shared__ double acc[];  // [3][kTileGenes]
  const int64_t chunk = blockIdx.x;
  const int g0 = blockIdx.y * kTileGenes;
  const int g1 = static_cast<int>(g0 + kTileGenes < n_cols ? g0 + kTileGenes : n_cols);
  const int tile = g1 - g0;
  for (int i = threadIdx.x; i < 3 * kTileGenes; i += kSumThreads) acc[i] = 0.0;
  __syncthreads();
  const int64_t r0 = chunk_rows[chunk], r1 = chunk_rows[chunk + 1];
  const int64_t p0 = indptr[r0], p1 = indptr[r1];
  for (int64_t p = p0 + threadIdx.x; p < p1; p += kSumThreads) {
    const int g = idx[p];
    if (g >= g0 && g < g1) {
      const double x = transform<F>(val[p], g, clip);
      atomicAdd(&acc[g - g0], x);
      atomicAdd(&acc[kTileGenes + g - g0], x * x);
      atomicAdd(&acc[2 * kTileGenes + g - g0], x != 0.0 ? 1.0 : 0.0);
    }
  }
  __syncthreads();
  double* out = partial + chunk * 3 * n_cols;
  for (int i = threadIdx.x; i < tile; i += kSumThreads) {
    out[g0 + i] = acc[i];
    out[n_cols + g0 + i] = acc[kTileGenes + i];
    out[2 * n_cols + g0 + i] = acc[2 * kTileGenes + i];
  }
}

constexpr int kAtomicThreads = 256;

template <GeneTransform F, bool kSquares>
__global__ void __launch_bounds__(kAtomicThreads) gene_sums_atomic(const int32_t* idx, const float* val, int64_t nnz,
                                                                   const float* clip, double* sum, double* sumsq,
                                                                   unsigned long long* count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kAtomicThreads;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kAtomicThreads) + threadIdx.x; p < nnz; p += stride) {
    const int g = idx[p];
    const float x = transform<F>(val[p], g, clip);
    if (x != 0.f) {
      atomicAdd(&sum[g], static_cast<double>(x));
      if (kSquares) atomicAdd(&sumsq[g], static_cast<double>(x) * x);
      atomicAdd(&count[g], 1ull);
    }
  }
}

constexpr int kSmemThreads = 1024;
constexpr int kSmemBlocksPerSm = 4;
constexpr int kSmemMaxTile = 28672;  // 2 x 4 bytes x 28,672 = 224 KB of shared memory

// acc[0, tile): sum of f(x); acc[tile, 2 tile): sum of f(x)^2 (kSquares) or the count of nonzeros.
template <GeneTransform F, bool kSquares>
__global__ void __launch_bounds__(kSmemThreads) gene_sums_smem(const int32_t* idx, const float* val, int64_t nnz,
                                                               int g0, int tile, const float* clip, double* partial) {
  extern __shared__ float facc[];
  for (int i = threadIdx.x; i < 2 * tile; i += kSmemThreads) facc[i] = 0.f;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSmemThreads;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kSmemThreads) + threadIdx.x; p < nnz; p += stride) {
    const int g = idx[p] - g0;
    if (static_cast<unsigned>(g) < static_cast<unsigned>(tile)) {
      const float x = transform<F>(val[p], g + g0, clip);
      if (x != 0.f) {
        atomicAdd(&facc[g], x);
        atomicAdd(&facc[tile + g], kSquares ? x * x : 1.f);
      }
    }
  }
  __syncthreads();
  double* out = partial + static_cast<int64_t>(blockIdx.x) * 2 * tile;
  for (int i = threadIdx.x; i < 2 * tile; i += kSmemThreads) out[i] = facc[i];
}

// out[j] = sum over blocks b (in order) of partial[b * width + j].
__global__ void sum_blocks(const double* partial, int n_blocks, int64_t width, double* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= width) return;
  double s = 0;
  for (int b = 0; b < n_blocks; ++b) s += partial[b * width + j];
  out[j] = s;
}

// Two passes' worth of statistics per call: (sum, sumsq) or (sum, count).
void gene_sums_smem_impl(CudaResources& r, const DeviceCsr& m, GeneTransform f, const float* clip, bool squares,
                         std::vector<double>& sum, std::vector<double>& second) {
  const int64_t g = m.n_cols;
  sum.assign(g, 0.0), second.assign(g, 0.0);
  if (g == 0 || m.nnz == 0) return;
  int sms = 0;
  SCURRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r.device));
  const int blocks = sms * kSmemBlocksPerSm;
  const int tile_max = static_cast<int>(std::min<int64_t>(g, kSmemMaxTile));
  DeviceArray<double> partial(r, static_cast<size_t>(blocks) * 2 * tile_max, "gene sums partials");
  DeviceArray<double> total(r, 2 * static_cast<size_t>(tile_max), "gene sums");
  std::vector<double> h(2 * static_cast<size_t>(tile_max));
  for (int64_t g0 = 0; g0 < g; g0 += tile_max) {
    const int tile = static_cast<int>(std::min<int64_t>(tile_max, g - g0));
    const size_t smem = 2 * static_cast<size_t>(tile) * sizeof(float);
    auto launch = [&](auto kernel) {
      SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      kernel<<<blocks, kSmemThreads, smem, r.stream>>>(m.indices.data(), m.data.data(), m.nnz, static_cast<int>(g0), tile,
                                                       clip, partial.data());
      SCURRY_CUDA_LAUNCH();
    };
    switch (f) {
      case GeneTransform::identity:
        squares ? launch(gene_sums_smem<GeneTransform::identity, true>) : launch(gene_sums_smem<GeneTransform::identity, false>);
        break;
      case GeneTransform::expm1:
        squares ? launch(gene_sums_smem<GeneTransform::expm1, true>) : launch(gene_sums_smem<GeneTransform::expm1, false>);
        break;
      case GeneTransform::clip:
        squares ? launch(gene_sums_smem<GeneTransform::clip, true>) : launch(gene_sums_smem<GeneTransform::clip, false>);
        break;
    }
    sum_blocks<<<static_cast<unsigned>((2 * tile + 255) / 256), 256, 0, r.stream>>>(partial.data(), blocks, 2 * tile,
                                                                                   total.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaMemcpyAsync(h.data(), total.data(), 2 * tile * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    std::copy(h.begin(), h.begin() + tile, sum.begin() + g0);
    std::copy(h.begin() + tile, h.begin() + 2 * tile, second.begin() + g0);
  }
}

__global__ void counts_to_double(const unsigned long long* c, int64_t n, double* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<double>(c[i]);
}

GeneSums gene_sums_atomic_impl(CudaResources& r, const DeviceCsr& m, GeneTransform f, const float* clip) {
  const int64_t g = m.n_cols;
  GeneSums out;
  out.sum.assign(g, 0.0), out.sumsq.assign(g, 0.0), out.nnz.assign(g, 0.0);
  if (g == 0) return out;
  DeviceArray<double> acc(r, 3 * static_cast<size_t>(g), "gene sums");
  DeviceArray<unsigned long long> cnt(r, g, "gene counts");
  SCURRY_CUDA(cudaMemsetAsync(acc.data(), 0, 3 * g * sizeof(double), r.stream));
  SCURRY_CUDA(cudaMemsetAsync(cnt.data(), 0, g * sizeof(unsigned long long), r.stream));
  int sms = 0;
  SCURRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r.device));
  const int64_t want = (m.nnz + kAtomicThreads - 1) / kAtomicThreads;
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(want, int64_t(sms) * 16)));
  auto launch = [&](auto kernel) {
    kernel<<<blocks, kAtomicThreads, 0, r.stream>>>(m.indices.data(), m.data.data(), m.nnz, clip, acc.data(),
                                                    acc.data() + g, cnt.data());
    SCURRY_CUDA_LAUNCH();
  };
  switch (f) {
    case GeneTransform::identity: launch(gene_sums_atomic<GeneTransform::identity, true>); break;
    case GeneTransform::expm1: launch(gene_sums_atomic<GeneTransform::expm1, true>); break;
    case GeneTransform::clip: launch(gene_sums_atomic<GeneTransform::clip, true>); break;
  }
  counts_to_double<<<static_cast<unsigned>((g + 255) / 256), 256, 0, r.stream>>>(cnt.data(), g, acc.data() + 2 * g);
  SCURRY_CUDA_LAUNCH();
  std::vector<double> h(3 * static_cast<size_t>(g));
  SCURRY_CUDA(cudaMemcpyAsync(h.data(), acc.data(), h.size() * 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  std::copy(h.begin(), h.begin() + g, out.sum.begin());
  std::copy(h.begin() + g, h.begin() + 2 * g, out.sumsq.begin());
  std::copy(h.begin() + 2 * g, h.end(), out.nnz.begin());
  return out;
}

__global__ void reduce_chunks(const double* partial, int64_t n_chunks, int64_t width, double* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= width) return;
  double s = 0;
  for (int64_t c = 0; c < n_chunks; ++c) s += partial[c * width + i];
  out[i] = s;
}

}  // namespace

GeneSums gene_sums(CudaResources& r, const DeviceCsr& m, GeneTransform f, const float* clip, SecondStat second) {
  const char* strategy = std::getenv("SCURRY_GENE_SUMS");
  if (strategy && std::strcmp(strategy, "atomic") == 0) return gene_sums_atomic_impl(r, m, f, clip);
  if (!(strategy && std::strcmp(strategy, "tiled") == 0)) {
    GeneSums out;
    if (second != SecondStat::squares) gene_sums_smem_impl(r, m, f, clip, false, out.sum, out.nnz);
    if (second != SecondStat::count) {
      std::vector<double> sum2;
      gene_sums_smem_impl(r, m, f, clip, true, sum2, out.sumsq);
      if (out.sum.empty()) out.sum = std::move(sum2);
    }
    if (out.nnz.empty()) out.nnz.assign(m.n_cols, 0.0);
    if (out.sumsq.empty()) out.sumsq.assign(m.n_cols, 0.0);
    return out;
  }
  const int64_t g = m.n_cols, n = m.n_rows;
  // Row chunks of about kChunkNnz entries, from the host copy of the row pointers.
  std::vector<int64_t> h_indptr(static_cast<size_t>(n) + 1);
  SCURRY_CUDA(cudaMemcpyAsync(h_indptr.data(), m.indptr.data(), h_indptr.size() * 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  std::vector<int64_t> bounds{0};
  for (int64_t row = 0; row < n; ++row)
    if (h_indptr[row + 1] - h_indptr[bounds.back()] >= kChunkNnz) bounds.push_back(row + 1);
  if (bounds.back() != n) bounds.push_back(n);
  const int64_t n_chunks = static_cast<int64_t>(bounds.size()) - 1;
  GeneSums out;
  out.sum.assign(g, 0.0), out.sumsq.assign(g, 0.0), out.nnz.assign(g, 0.0);
  if (n_chunks == 0 || g == 0) return out;
  DeviceArray<int64_t> d_bounds(r, bounds.size(), "gene sums chunks");
  SCURRY_CUDA(cudaMemcpyAsync(d_bounds.data(), bounds.data(), bounds.size() * 8, cudaMemcpyHostToDevice, r.stream));
  DeviceArray<double> partial(r, static_cast<size_t>(n_chunks) * 3 * g, "gene sums partials");
  DeviceArray<double> total(r, 3 * static_cast<size_t>(g), "gene sums");
  const dim3 grid(static_cast<unsigned>(n_chunks), static_cast<unsigned>((g + kTileGenes - 1) / kTileGenes));
  const size_t smem = 3 * kTileGenes * sizeof(double);
  auto launch = [&](auto kernel) {
    SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<grid, kSumThreads, smem, r.stream>>>(m.indptr.data(), m.indices.data(), m.data.data(), d_bounds.data(), g,
                                                  clip, partial.data());
    SCURRY_CUDA_LAUNCH();
  };
  switch (f) {
    case GeneTransform::identity: launch(gene_sums_kernel<GeneTransform::identity>); break;
    case GeneTransform::expm1: launch(gene_sums_kernel<GeneTransform::expm1>); break;
    case GeneTransform::clip: launch(gene_sums_kernel<GeneTransform::clip>); break;
  }
  reduce_chunks<<<static_cast<unsigned>((3 * g + 255) / 256), 256, 0, r.stream>>>(partial.data(), n_chunks, 3 * g, total.data());
  SCURRY_CUDA_LAUNCH();
  std::vector<double> h(3 * static_cast<size_t>(g));
  SCURRY_CUDA(cudaMemcpyAsync(h.data(), total.data(), h.size() * 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  std::copy(h.begin(), h.begin() + g, out.sum.begin());
  std::copy(h.begin() + g, h.begin() + 2 * g, out.sumsq.begin());
  std::copy(h.begin() + 2 * g, h.end(), out.nnz.begin());
  return out;
}

}  // namespace scurry::gpu
