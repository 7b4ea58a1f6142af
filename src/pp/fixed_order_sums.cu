// scurry: the kernels behind fixed_order_sums.cuh.
#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "pp/fixed_order_sums.cuh"

namespace scurry::gpu {
namespace {

constexpr int kReduceThreads = 128;  // threads per output of reduce_partials (a power of two)
constexpr size_t kSharedBytes = 48 * 1024;

__global__ void reduce_columns(const double* part, int64_t n, double* out) {
  __shared__ double sh[kReduceThreads];
  const int64_t w = blockIdx.x;
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kReduceThreads) s += part[w * n + j];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int h = kReduceThreads / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[w] = sh[0];
}

// One thread per gene (blockIdx.x tiles the genes), one block row per chunk of rows (blockIdx.y);
// the thread's accumulators in shared memory, column-major by thread (acc[c * blockDim + t]).
__global__ void design_sums_kernel(const float* Y, int64_t n, int64_t g, const int32_t* codes, int64_t nb,
                                   const double* D, int64_t pd, bool count_diff, int64_t chunk, int64_t nch,
                                   double* part) {
  extern __shared__ double acc[];
  const int T = blockDim.x, t = threadIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * T + t, ch = blockIdx.y;
  const int64_t p = nb + pd + (count_diff ? 1 : 0);
  for (int64_t c = 0; c < p; ++c) acc[c * T + t] = 0;
  if (j >= g) return;
  const int64_t i0 = ch * chunk, i1 = min(n, i0 + chunk);
  const float y0 = Y[j];
  for (int64_t i = i0; i < i1; ++i) {
    const float yf = Y[i * g + j];
    const double y = yf;
    if (nb > 0) acc[static_cast<int64_t>(codes[i]) * T + t] += y;
    for (int64_t c = 0; c < pd; ++c) acc[(nb + c) * T + t] += D[i * pd + c] * y;
    if (count_diff && yf != y0) acc[(nb + pd) * T + t] += 1.0;
  }
  for (int64_t c = 0; c < p; ++c) part[(c * g + j) * nch + ch] = acc[c * T + t];
}

}  // namespace

unsigned grid_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  if (b > std::numeric_limits<int32_t>::max()) fail("gpu: ", n, " work items exceed a CUDA grid");
  return static_cast<unsigned>(std::max<int64_t>(b, 1));
}

unsigned as_grid(int64_t n) {
  if (n < 1 || n > std::numeric_limits<int32_t>::max()) fail("gpu: bad grid size ", n);
  return static_cast<unsigned>(n);
}

int64_t chunk_for(int64_t n, int64_t width, int64_t min_chunk) {
  // (also at most 65,535: a chunk count may be a grid's y dimension)
  const int64_t max_nch = std::clamp<int64_t>(kMaxPartials / std::max<int64_t>(1, width), 1, 65535);
  const int64_t nch = std::max<int64_t>(1, std::min((n + min_chunk - 1) / min_chunk, max_nch));
  return std::max<int64_t>(1, (n + nch - 1) / nch);
}

int64_t n_chunks(int64_t n, int64_t chunk) { return std::max<int64_t>(1, (n + chunk - 1) / chunk); }

void reduce_partials(CudaResources& r, const double* part, int64_t n_out, int64_t n, double* out) {
  if (n_out == 0) return;
  reduce_columns<<<as_grid(n_out), kReduceThreads, 0, r.stream>>>(part, n, out);
  SCURRY_CUDA_LAUNCH();
}

void design_sums(CudaResources& r, const float* Y, int64_t n, int64_t g, const int32_t* codes, int64_t nb,
                 const double* D, int64_t pd, bool count_diff, int64_t chunk, int64_t nch, double* part) {
  if (n == 0 || g == 0) return;
  const int64_t p = nb + pd + (count_diff ? 1 : 0);
  int T = 256;
  while (T > 32 && static_cast<size_t>(p) * T * sizeof(double) > kSharedBytes) T /= 2;
  if (static_cast<size_t>(p) * T * sizeof(double) > kSharedBytes)
    fail_input("gpu", p, " per-gene accumulators (batches, covariates) exceed the GPU path's limit of ",
               kSharedBytes / (32 * sizeof(double)), "; use --device cpu");
  const dim3 grid(grid_for(g, T), as_grid(nch));
  design_sums_kernel<<<grid, T, static_cast<size_t>(p) * T * sizeof(double), r.stream>>>(Y, n, g, codes, nb, D, pd,
                                                                                         count_diff, chunk, nch, part);
  SCURRY_CUDA_LAUNCH();
}

}  // namespace scurry::gpu
