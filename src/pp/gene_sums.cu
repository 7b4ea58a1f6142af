// Per-gene sums on the GPU, two strategies:
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
// Templated on the value type V and the column-index type I (kernels.cuh; instantiations at the end).
// The shared-memory partials are of type V: float32 for float values (as above), float64 for double
// values (whose sums would otherwise lose the precision the caller chose), with half the genes a tile.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

template <GeneTransform F, class V>
__device__ __forceinline__ V transform(V v, int64_t g, const V* clip) {
  if constexpr (F == GeneTransform::expm1) {
    if constexpr (sizeof(V) == 4) return expm1f(v);
    else return expm1(v);
  } else if constexpr (F == GeneTransform::clip) {
    if constexpr (sizeof(V) == 4) return fminf(v, clip[g]);
    else return fmin(v, clip[g]);
  } else {
    return v;
  }
}

constexpr int kAtomicThreads = 256;

template <GeneTransform F, bool kSquares, class V, class I>
__global__ void __launch_bounds__(kAtomicThreads) gene_sums_atomic(const I* idx, const V* val, int64_t nnz,
                                                                   const V* clip, double* sum, double* sumsq,
                                                                   unsigned long long* count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kAtomicThreads;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kAtomicThreads) + threadIdx.x; p < nnz; p += stride) {
    const I g = idx[p];
    const V x = transform<F>(val[p], g, clip);
    if (x != V(0)) {
      atomicAdd(&sum[g], static_cast<double>(x));
      if (kSquares) atomicAdd(&sumsq[g], static_cast<double>(x) * x);
      atomicAdd(&count[g], 1ull);
    }
  }
}

constexpr int kSmemThreads = 1024;
constexpr int kSmemBlocksPerSm = 4;
constexpr size_t kSmemBytes = 229376;  // 224 KB of shared memory: 2 x 4 bytes x 28,672 genes (float)
template <class V>
constexpr int kSmemMaxTile = static_cast<int>(kSmemBytes / (2 * sizeof(V)));

// acc[0, tile): sum of f(x); acc[tile, 2 tile): sum of f(x)^2 (kSquares) or the count of nonzeros.
// The tile's genes are [g0, g0 + tile): the test is one unsigned comparison of idx - g0.
template <GeneTransform F, bool kSquares, class V, class I>
__global__ void __launch_bounds__(kSmemThreads) gene_sums_smem(const I* idx, const V* val, int64_t nnz, int64_t g0,
                                                               int tile, const V* clip, double* partial) {
  using U = std::make_unsigned_t<I>;
  extern __shared__ __align__(8) unsigned char smem_raw[];
  V* facc = reinterpret_cast<V*>(smem_raw);
  for (int i = threadIdx.x; i < 2 * tile; i += kSmemThreads) facc[i] = V(0);
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSmemThreads;
  const I base = static_cast<I>(g0);
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kSmemThreads) + threadIdx.x; p < nnz; p += stride) {
    const I g = idx[p] - base;
    if (static_cast<U>(g) < static_cast<U>(tile)) {
      const V x = transform<F>(val[p], static_cast<int64_t>(g) + g0, clip);
      if (x != V(0)) {
        atomicAdd(&facc[g], x);
        atomicAdd(&facc[tile + g], kSquares ? x * x : V(1));
      }
    }
  }
  __syncthreads();
  double* out = partial + static_cast<int64_t>(blockIdx.x) * 2 * tile;
  for (int i = threadIdx.x; i < 2 * tile; i += kSmemThreads) out[i] = facc[i];
}

// out[j] = sum over blocks b (in order) of partial[b * width + j]. (No value type: float64 in and out.)
__global__ void sum_blocks(const double* partial, int n_blocks, int64_t width, double* out) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= width) return;
  double s = 0;
  for (int b = 0; b < n_blocks; ++b) s += partial[b * width + j];
  out[j] = s;
}

// Two passes' worth of statistics per call: (sum, sumsq) or (sum, count).
template <class V, class I>
void gene_sums_smem_impl(CudaResources& r, const CsrView<V, I>& m, GeneTransform f, const V* clip, bool squares,
                         std::vector<double>& sum, std::vector<double>& second) {
  const int64_t g = m.n_cols;
  sum.assign(g, 0.0), second.assign(g, 0.0);
  if (g == 0 || m.nnz == 0) return;
  int sms = 0;
  SCURRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r.device));
  const int blocks = sms * kSmemBlocksPerSm;
  const int tile_max = static_cast<int>(std::min<int64_t>(g, kSmemMaxTile<V>));
  DeviceArray<double> partial(r, static_cast<size_t>(blocks) * 2 * tile_max, "gene sums partials");
  DeviceArray<double> total(r, 2 * static_cast<size_t>(tile_max), "gene sums");
  std::vector<double> h(2 * static_cast<size_t>(tile_max));
  for (int64_t g0 = 0; g0 < g; g0 += tile_max) {
    const int tile = static_cast<int>(std::min<int64_t>(tile_max, g - g0));
    const size_t smem = 2 * static_cast<size_t>(tile) * sizeof(V);
    auto launch = [&](auto kernel) {
      SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      kernel<<<blocks, kSmemThreads, smem, r.stream>>>(m.indices, m.data, m.nnz, g0, tile, clip, partial.data());
      SCURRY_CUDA_LAUNCH();
    };
    using T = GeneTransform;
    switch (f) {
      case T::identity:
        squares ? launch(gene_sums_smem<T::identity, true, V, I>) : launch(gene_sums_smem<T::identity, false, V, I>);
        break;
      case T::expm1:
        squares ? launch(gene_sums_smem<T::expm1, true, V, I>) : launch(gene_sums_smem<T::expm1, false, V, I>);
        break;
      case T::clip:
        squares ? launch(gene_sums_smem<T::clip, true, V, I>) : launch(gene_sums_smem<T::clip, false, V, I>);
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

template <class V, class I>
GeneSums gene_sums_atomic_impl(CudaResources& r, const CsrView<V, I>& m, GeneTransform f, const V* clip) {
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
    kernel<<<blocks, kAtomicThreads, 0, r.stream>>>(m.indices, m.data, m.nnz, clip, acc.data(), acc.data() + g,
                                                    cnt.data());
    SCURRY_CUDA_LAUNCH();
  };
  switch (f) {
    case GeneTransform::identity: launch(gene_sums_atomic<GeneTransform::identity, true, V, I>); break;
    case GeneTransform::expm1: launch(gene_sums_atomic<GeneTransform::expm1, true, V, I>); break;
    case GeneTransform::clip: launch(gene_sums_atomic<GeneTransform::clip, true, V, I>); break;
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

// Per gene, the nonzero entries of the selected rows (one warp per row; integer atomics: exact).
template <class V, class I>
__global__ void rows_gene_nnz_kernel(const int64_t* indptr, const I* idx, const V* val, const int64_t* rows,
                                     int64_t n_rows, unsigned long long* cnt) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  const int64_t row = rows[w];
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32)
    if (val[p] != V(0)) atomicAdd(&cnt[idx[p]], 1ull);
}

}  // namespace

template <class V, class I>
void rows_gene_nnz(CudaResources& r, const CsrView<V, I>& m, const int64_t* d_rows, int64_t n_sel,
                   unsigned long long* d_cnt) {
  if (n_sel <= 0) return;
  const int64_t threads = n_sel * 32;
  rows_gene_nnz_kernel<V, I><<<static_cast<unsigned>((threads + kWarpRowsBlock - 1) / kWarpRowsBlock), kWarpRowsBlock, 0,
                               r.stream>>>(m.indptr, m.indices, m.data, d_rows, n_sel, d_cnt);
  SCURRY_CUDA_LAUNCH();
}

template <class V, class I>
GeneSums gene_sums(CudaResources& r, const CsrView<V, I>& m, GeneTransform f, const NonDeduced<V>* clip,
                   SecondStat second) {
  const char* strategy = std::getenv("SCURRY_GENE_SUMS");
  if (strategy && std::strcmp(strategy, "atomic") == 0) return gene_sums_atomic_impl(r, m, f, clip);
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

#define SCURRY_GENE_SUMS(V, I)                                                                                 \
  template GeneSums gene_sums<V, I>(CudaResources&, const CsrView<V, I>&, GeneTransform, const V*, SecondStat); \
  template void rows_gene_nnz<V, I>(CudaResources&, const CsrView<V, I>&, const int64_t*, int64_t, unsigned long long*);
SCURRY_GENE_SUMS(float, int32_t)
SCURRY_GENE_SUMS(double, int32_t)
SCURRY_GENE_SUMS(float, int64_t)
SCURRY_GENE_SUMS(double, int64_t)
#undef SCURRY_GENE_SUMS

}  // namespace scurry::gpu
