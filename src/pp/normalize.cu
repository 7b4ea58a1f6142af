// normalize_total + log1p on the GPU: one warp per row, the row read twice (its total, then the
// rescale), the second read from L1/L2.
#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

__global__ void row_totals_kernel(const int64_t* indptr, const float* val, int64_t n_rows, double* totals) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n_rows) return;
  double s = 0;
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32) s += val[p];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if (lane == 0) totals[row] = s;
}

__global__ void normalize_kernel(const int64_t* indptr, float* val, int64_t n_rows, const double* totals,
                                 double target, bool log1p) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n_rows) return;
  const double t = totals[row];
  const float scale = t > 0 ? static_cast<float>(target / t) : 1.0f;
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
    const float x = val[p] * scale;
    val[p] = log1p ? log1pf(x) : x;
  }
}

unsigned warp_blocks(int64_t rows) { return static_cast<unsigned>((rows * 32 + kWarpRowsBlock - 1) / kWarpRowsBlock); }

}  // namespace

void row_totals(CudaResources& r, const DeviceCsr& m, double* d_totals) {
  if (m.n_rows == 0) return;
  row_totals_kernel<<<warp_blocks(m.n_rows), kWarpRowsBlock, 0, r.stream>>>(m.indptr.data(), m.data.data(), m.n_rows, d_totals);
  SCURRY_CUDA_LAUNCH();
}

void normalize_log1p(CudaResources& r, DeviceCsr& m, double target_sum, bool log1p, std::vector<double>* totals_out) {
  if (m.n_rows == 0) return;
  DeviceArray<double> totals(r, m.n_rows, "row totals");
  row_totals(r, m, totals.data());
  normalize_kernel<<<warp_blocks(m.n_rows), kWarpRowsBlock, 0, r.stream>>>(m.indptr.data(), m.data.data(), m.n_rows,
                                                                           totals.data(), target_sum, log1p);
  SCURRY_CUDA_LAUNCH();
  if (totals_out) {
    totals_out->resize(static_cast<size_t>(m.n_rows));
    SCURRY_CUDA(cudaMemcpyAsync(totals_out->data(), totals.data(), m.n_rows * 8, cudaMemcpyDeviceToHost, r.stream));
  }
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
}

}  // namespace scurry::gpu
