// normalize_total + log1p on the GPU: one warp per row, the row read twice (its total, then the
// rescale), the second read from L1/L2. The kernels never read the column indices: templated on the
// value type V only; the launchers take a CsrView<V, I> (kernels.cuh; instantiations at the end).
#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

template <class V>
__global__ void row_totals_kernel(const int64_t* indptr, const V* val, int64_t n_rows, double* totals) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n_rows) return;
  double s = 0;
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32) s += val[p];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if (lane == 0) totals[row] = s;
}

template <class V>
__device__ __forceinline__ V log1p_v(V x) {
  if constexpr (sizeof(V) == 4) return log1pf(x);
  else return log1p(x);
}

// The scale factor target / total is rounded to V once per row, as the CPU path does.
template <class V>
__global__ void normalize_kernel(const int64_t* indptr, V* val, int64_t n_rows, const double* totals, double target,
                                 bool log1p) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n_rows) return;
  const double t = totals[row];
  const V scale = t > 0 ? static_cast<V>(target / t) : V(1);
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
    const V x = val[p] * scale;
    val[p] = log1p ? log1p_v(x) : x;
  }
}

unsigned warp_blocks(int64_t rows) { return static_cast<unsigned>((rows * 32 + kWarpRowsBlock - 1) / kWarpRowsBlock); }

}  // namespace

template <class V, class I>
void row_totals(CudaResources& r, const CsrView<V, I>& m, double* d_totals) {
  if (m.n_rows == 0) return;
  row_totals_kernel<V><<<warp_blocks(m.n_rows), kWarpRowsBlock, 0, r.stream>>>(m.indptr, m.data, m.n_rows, d_totals);
  SCURRY_CUDA_LAUNCH();
}

template <class V, class I>
void normalize_log1p(CudaResources& r, const CsrView<V, I>& m, double target_sum, bool log1p,
                     std::vector<double>* totals_out) {
  if (m.n_rows == 0) return;
  DeviceArray<double> totals(r, m.n_rows, "row totals");
  row_totals(r, m, totals.data());
  normalize_kernel<V><<<warp_blocks(m.n_rows), kWarpRowsBlock, 0, r.stream>>>(m.indptr, m.data, m.n_rows, totals.data(),
                                                                              target_sum, log1p);
  SCURRY_CUDA_LAUNCH();
  if (totals_out) {
    totals_out->resize(static_cast<size_t>(m.n_rows));
    SCURRY_CUDA(cudaMemcpyAsync(totals_out->data(), totals.data(), m.n_rows * 8, cudaMemcpyDeviceToHost, r.stream));
  }
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
}

#define SCURRY_NORMALIZE(V, I)                                                                                  \
  template void row_totals<V, I>(CudaResources&, const CsrView<V, I>&, double*);                                \
  template void normalize_log1p<V, I>(CudaResources&, const CsrView<V, I>&, double, bool, std::vector<double>*);
SCURRY_NORMALIZE(float, int32_t)
SCURRY_NORMALIZE(double, int32_t)
SCURRY_NORMALIZE(float, int64_t)
SCURRY_NORMALIZE(double, int64_t)
#undef SCURRY_NORMALIZE

}  // namespace scurry::gpu
