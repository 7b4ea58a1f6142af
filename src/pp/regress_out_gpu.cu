// scurry: regress_out on the GPU (regress_out.hpp; issue 21 point 2). The matrix goes to the device
// once; one pass of gpu::design_sums gives Q^T Y (Q the design's orthonormal basis, computed on the
// host as on the CPU path) or the per-category sums, and each gene's varying flag; the host turns
// those into the fit (the CPU path's code); a second, element-wise pass subtracts it in float64.
// Sums are fixed-order (fixed_order_sums.cuh): two runs give the same bits.
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "pp/fixed_order_sums.cuh"
#include "pp/gpu_timer.cuh"
#include "pp/regress_out.hpp"

namespace scurry {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMinChunkRows = 512;

// y_ij -= sum_c Q_ic C_cj (float64). One thread per value.
__global__ void subtract_fit(float* Y, int64_t n, int64_t g, const double* Q, int64_t q, const double* C) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * g) return;
  const int64_t i = e / g, j = e % g;
  double f = 0;
  for (int64_t c = 0; c < q; ++c) f += Q[i * q + c] * C[c * g + j];
  Y[e] = static_cast<float>(static_cast<double>(Y[e]) - f);
}

// y_ij -= fitted[codes_i, j] for the varying genes. One thread per value.
__global__ void subtract_category(float* Y, int64_t n, int64_t g, const int32_t* codes, const double* fitted,
                                  const uint8_t* vary) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * g) return;
  const int64_t i = e / g, j = e % g;
  if (vary[j]) Y[e] = static_cast<float>(static_cast<double>(Y[e]) - fitted[static_cast<int64_t>(codes[i]) * g + j]);
}

CudaResources& resources(const Context& ctx) {
  if (ctx.backend() != Backend::cuda || !ctx.cuda()) fail("regress_out (gpu): the context has no CUDA device");
  CudaResources& r = *ctx.cuda();
  SCURRY_CUDA(cudaSetDevice(r.device));
  return r;
}

template <class T>
DeviceArray<T> upload(CudaResources& r, const std::vector<T>& v, const char* what) {
  DeviceArray<T> d(r, v.size(), what);
  if (!v.empty()) SCURRY_CUDA(cudaMemcpyAsync(d.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  return d;
}
template <class T>
std::vector<T> download(CudaResources& r, const T* p, size_t n) {
  std::vector<T> h(n);
  if (n) SCURRY_CUDA(cudaMemcpyAsync(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return h;
}

// Column sums of Y against the design (dQ, q columns) or the categories (dcodes, k): rows of
// (q or k) + 1 (the last: rows differing from row 0) x g, on the host.
std::vector<double> sums(CudaResources& r, const float* dY, int64_t n, int64_t g, const int32_t* dcodes, int64_t k,
                         const double* dQ, int64_t q) {
  const int64_t p = k + q + 1;
  const int64_t chunk = gpu::chunk_for(n, p * g, kMinChunkRows), nch = gpu::n_chunks(n, chunk);
  DeviceArray<double> part(r, static_cast<size_t>(p * g * nch), "regress_out partial sums");
  gpu::design_sums(r, dY, n, g, dcodes, k, dQ, q, true, chunk, nch, part.data());
  DeviceArray<double> out(r, static_cast<size_t>(p * g), "regress_out sums");
  gpu::reduce_partials(r, part.data(), p * g, nch, out.data());
  return download(r, out.data(), static_cast<size_t>(p * g));
}

}  // namespace

void regress_out_design_gpu(const Context& ctx, DenseF& Y, const DenseD& design, double* device_seconds) {
  const int64_t n = Y.n_rows, g = Y.n_cols;
  if (design.n_rows != n) fail("regress_out: the design has ", design.n_rows, " rows for ", n, " cells");
  for (double v : design.data)
    if (!std::isfinite(v)) fail_input("regress_out", "a regressor has a missing or infinite value");
  if (device_seconds) *device_seconds = 0;
  if (n == 0 || g == 0) return;
  CudaResources& r = resources(ctx);
  const DenseD Q = detail::orthonormal_basis(design);
  const int64_t q = Q.n_cols;
  DeviceArray<float> dY = upload(r, Y.data, "regress_out matrix");
  DeviceArray<double> dQ = upload(r, Q.data, "regress_out design basis");
  gpu::StreamTimer timer(r.stream);
  timer.start();
  std::vector<double> s = sums(r, dY.data(), n, g, nullptr, 0, dQ.data(), q);
  // C = Q^T Y, zero for the genes whose values are all equal (kept unchanged, as scanpy).
  std::vector<double> C(s.begin(), s.begin() + q * g);
  for (int64_t j = 0; j < g; ++j)
    if (!(s[q * g + j] > 0))
      for (int64_t c = 0; c < q; ++c) C[c * g + j] = 0.0;
  DeviceArray<double> dC = upload(r, C, "regress_out coefficients");
  subtract_fit<<<gpu::grid_for(n * g, kThreads), kThreads, 0, r.stream>>>(dY.data(), n, g, dQ.data(), q, dC.data());
  SCURRY_CUDA_LAUNCH();
  const double t = timer.stop();
  if (device_seconds) *device_seconds = t;
  SCURRY_CUDA(cudaMemcpyAsync(Y.data.data(), dY.data(), Y.data.size() * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
}

void regress_out_categorical_gpu(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes, int32_t k,
                                 double* device_seconds) {
  const int64_t n = Y.n_rows, g = Y.n_cols;
  if (static_cast<int64_t>(codes.size()) != n) fail("regress_out: ", codes.size(), " codes for ", n, " cells");
  for (int32_t c : codes)
    if (c < 0 || c >= k) fail("regress_out: a category code is out of range");
  if (device_seconds) *device_seconds = 0;
  if (n == 0 || g == 0) return;
  CudaResources& r = resources(ctx);
  std::vector<double> nc(static_cast<size_t>(k), 0.0);
  for (int32_t c : codes) nc[c] += 1.0;
  DeviceArray<float> dY = upload(r, Y.data, "regress_out matrix");
  DeviceArray<int32_t> dcodes = upload(r, codes, "regress_out categories");
  gpu::StreamTimer timer(r.stream);
  timer.start();
  std::vector<double> s = sums(r, dY.data(), n, g, dcodes.data(), k, nullptr, 0);
  std::vector<uint8_t> vary(static_cast<size_t>(g));
  for (int64_t j = 0; j < g; ++j) vary[j] = s[static_cast<int64_t>(k) * g + j] > 0 ? 1 : 0;
  s.resize(static_cast<size_t>(k) * static_cast<size_t>(g));
  const std::vector<double> fitted = detail::categorical_fit(s, nc, vary, n, k, g);
  DeviceArray<double> dfit = upload(r, fitted, "regress_out fitted values");
  DeviceArray<uint8_t> dvary = upload(r, vary, "regress_out varying genes");
  subtract_category<<<gpu::grid_for(n * g, kThreads), kThreads, 0, r.stream>>>(dY.data(), n, g, dcodes.data(),
                                                                                dfit.data(), dvary.data());
  SCURRY_CUDA_LAUNCH();
  const double t = timer.stop();
  if (device_seconds) *device_seconds = t;
  SCURRY_CUDA(cudaMemcpyAsync(Y.data.data(), dY.data(), Y.data.size() * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
}

}  // namespace scurry
