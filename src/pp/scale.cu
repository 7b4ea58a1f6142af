// scale on the GPU: the sparse log data of the selected genes written as a dense row-major matrix,
// standardised per gene and clipped. One warp per row: fill the row with the value of a zero, then
// scatter the nonzeros. Templated on the value type V and the column-index type I (kernels.cuh;
// instantiations at the end).
#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

template <class V>
__device__ __forceinline__ V min_v(V a, V b) {
  if constexpr (sizeof(V) == 4) return fminf(a, b);
  else return fmin(a, b);
}

template <class V, class I>
__global__ void scale_kernel(const int64_t* indptr, const I* idx, const V* val, int64_t n_rows, int64_t n_cols,
                             const V* mean, const V* sd, bool center, V max_value, V* out) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n_rows) return;
  V* o = out + row * n_cols;
  auto f = [&](V x, int64_t g) {
    V y = center ? (x - mean[g]) / sd[g] : x / sd[g];
    if (max_value > V(0)) y = min_v(y, max_value);
    return y;
  };
  for (int64_t g = lane; g < n_cols; g += 32) o[g] = f(V(0), g);
  __syncwarp();
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
    const I g = idx[p];
    o[g] = f(val[p], g);
  }
}

__global__ void scale_sparse_kernel(const int32_t* idx, float* val, int64_t nnz, const float* sd, float max_value) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= nnz) return;
  float y = val[p] / sd[idx[p]];
  if (max_value > 0.f) y = fminf(y, max_value);
  val[p] = y;
}

__global__ void subtract_columns_kernel(float* x, int64_t total, int64_t g, const float* shift) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) x[i] -= shift[i % g];
}

}  // namespace

void subtract_columns(CudaResources& r, float* x, int64_t rows, int64_t g, const float* shift) {
  const int64_t total = rows * g;
  if (total == 0) return;
  constexpr int kT = 256;
  subtract_columns_kernel<<<static_cast<unsigned>((total + kT - 1) / kT), kT, 0, r.stream>>>(x, total, g, shift);
  SCURRY_CUDA_LAUNCH();
}

void scale_sparse_inplace(CudaResources& r, DeviceCsr& m, const float* sd, float max_value) {
  if (m.nnz == 0) return;
  constexpr int kThreadsSparse = 256;
  const auto blocks = static_cast<unsigned>((m.nnz + kThreadsSparse - 1) / kThreadsSparse);
  scale_sparse_kernel<<<blocks, kThreadsSparse, 0, r.stream>>>(m.indices.data(), m.data.data(), m.nnz, sd, max_value);
  SCURRY_CUDA_LAUNCH();
}

template <class V, class I>
void scale_to_dense(CudaResources& r, const CsrView<V, I>& m, const V* mean, const V* std_, bool zero_center,
                    NonDeduced<V> max_value, V* out) {
  if (m.n_rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((m.n_rows * 32 + kWarpRowsBlock - 1) / kWarpRowsBlock);
  scale_kernel<V, I><<<blocks, kWarpRowsBlock, 0, r.stream>>>(m.indptr, m.indices, m.data, m.n_rows, m.n_cols, mean,
                                                              std_, zero_center, max_value, out);
  SCURRY_CUDA_LAUNCH();
}

#define SCURRY_SCALE(V, I)                                                                                 \
  template void scale_to_dense<V, I>(CudaResources&, const CsrView<V, I>&, const V*, const V*, bool, V, V*);
SCURRY_SCALE(float, int32_t)
SCURRY_SCALE(double, int32_t)
SCURRY_SCALE(float, int64_t)
SCURRY_SCALE(double, int64_t)
#undef SCURRY_SCALE

}  // namespace scurry::gpu
