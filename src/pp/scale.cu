// scale on the GPU: the sparse log data of the selected genes written as a dense row-major matrix,
// standardised per gene and clipped. One warp per row: fill the row with the value of a zero, then
// scatter the nonzeros.
#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

__global__ void scale_kernel(const int64_t* indptr, const int32_t* idx, const float* val, int64_t n_rows, int64_t n_cols,
                             const float* mean, const float* sd, bool center, float max_value, float* out) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n_rows) return;
  float* o = out + row * n_cols;
  auto f = [&](float x, int64_t g) {
    float y = center ? (x - mean[g]) / sd[g] : x / sd[g];
    if (max_value > 0.f) y = fminf(y, max_value);
    return y;
  };
  for (int64_t g = lane; g < n_cols; g += 32) o[g] = f(0.f, g);
  __syncwarp();
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32) o[idx[p]] = f(val[p], idx[p]);
}

}  // namespace

void scale_to_dense(CudaResources& r, const DeviceCsr& m, const float* mean, const float* std_, bool zero_center,
                    float max_value, float* out) {
  if (m.n_rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((m.n_rows * 32 + kWarpRowsBlock - 1) / kWarpRowsBlock);
  scale_kernel<<<blocks, kWarpRowsBlock, 0, r.stream>>>(m.indptr.data(), m.indices.data(), m.data.data(), m.n_rows,
                                                        m.n_cols, mean, std_, zero_center, max_value, out);
  SCURRY_CUDA_LAUNCH();
}

}  // namespace scurry::gpu
