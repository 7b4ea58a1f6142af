// Per-gene sums on the GPU without atomics on global memory and without a transposed copy: the
// genes are cut into tiles whose float64 accumulators fit in shared memory; each block takes a
// chunk of rows and one tile, accumulates with shared-memory atomics, and writes its partial sums
// to its own slice of a [chunk][gene] buffer; a second kernel adds the chunks in a fixed order.
#include "pp/kernels.cuh"

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

__global__ void reduce_chunks(const double* partial, int64_t n_chunks, int64_t width, double* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= width) return;
  double s = 0;
  for (int64_t c = 0; c < n_chunks; ++c) s += partial[c * width + i];
  out[i] = s;
}

}  // namespace

GeneSums gene_sums(CudaResources& r, const DeviceCsr& m, GeneTransform f, const float* clip) {
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
