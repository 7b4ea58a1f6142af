// scurry: starCAT's exact fit on the GPU (see nnls_fixed_spectra_gpu in starcat.hpp).
//
// A thread per cell: b = H x over the cell's nonzeros (float64, in the row's order), then Lawson &
// Hanson's active set on the k x k Gram (nmf/nnls_active_set.hpp, the code the CPU runs; its
// products unfused), the Gram in shared memory, the solver's scratch (a packed Cholesky factor of at
// most k (k + 1) / 2 doubles) in local memory, sized by a compile-time bound on k. The query is
// uploaded in blocks of cells (all of it at once through upload()'s pinned staging when it is one
// block), each block's usages downloaded before the next is uploaded; no
// atomics, no reduction across threads: the usages are the CPU's bit for bit, for any block size.
//
// Cost at 1M cells, 1,500 genes, k = 20 (H200): the gather reads ~450 nonzeros x 20 doubles of H^T
// per cell (L2-resident, 240 KB), ~1e10 FLOPs; the active set ~k outer steps of an m^3 / 6 Cholesky
// (m <= k), ~1e4-1e5 float64 FLOPs per cell: ~1e10-1e11 in all against the H200's ~60 TFLOP/s
// float64, so the device time is milliseconds to a few tenths of a second and the upload of the
// query (8 bytes a nonzero) is of the same order.
#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "nmf/nnls_active_set.hpp"
#include "nmf/starcat.hpp"

namespace scurry {

namespace {

constexpr int kThreads = 128;  // cells per thread block
constexpr int kMaxPrograms = 64;

template <int KM>
__global__ void starcat_nnls_kernel(int64_t rows, int k, const int64_t* __restrict__ indptr, int64_t base,
                                    const int32_t* __restrict__ indices, const float* __restrict__ data,
                                    const double* __restrict__ Ht, const double* __restrict__ G, double tol,
                                    float* __restrict__ W) {
  extern __shared__ double Gs[];
  for (int q = threadIdx.x; q < k * k; q += blockDim.x) Gs[q] = G[q];
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  double b[KM], w[KM], z[KM], L[KM * (KM + 1) / 2];
  int P[KM];
  unsigned char passive[KM];
  for (int a = 0; a < k; ++a) b[a] = 0;
  for (int64_t p = indptr[i] - base; p < indptr[i + 1] - base; ++p) {
    const double v = data[p];
    const double* h = Ht + static_cast<int64_t>(indices[p]) * k;
    for (int a = 0; a < k; ++a) b[a] = b[a] + nnls_mul(v, h[a]);
  }
  nnls_active_set(Gs, k, b, tol, w, z, P, passive, L);
  for (int a = 0; a < k; ++a) W[i * k + a] = static_cast<float>(w[a]);
}

template <class T>
void to_device(CudaResources& res, T* dst, const T* src, size_t n) {
  if (n) SCURRY_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, res.stream));
}

}  // namespace

DenseF nnls_fixed_spectra_gpu(const Context& ctx, const CsrF& X, const DenseD& H, int64_t rows_per_block) {
  CudaResources* resp = ctx.cuda();
  if (!resp) fail_input("--device", "starCAT's GPU fit needs a CUDA context (--device gpu)");
  CudaResources& res = *resp;
  const int64_t n = X.n_rows, k = H.n_rows, g = H.n_cols;
  if (X.n_cols != g) fail("nnls_fixed_spectra_gpu: X has ", X.n_cols, " genes, the spectra ", g);
  if (k < 1 || k > kMaxPrograms)
    fail_input("reference", "starCAT on the GPU fits 1..", kMaxPrograms, " programs (the reference has ", k,
               "); use --device cpu");
  const DenseD G = spectra_gram(H);
  const double tol = nnls_tolerance(G.data.data(), static_cast<int>(k));
  std::vector<double> ht(static_cast<size_t>(g * k));
  for (int64_t a = 0; a < k; ++a)
    for (int64_t j = 0; j < g; ++j) ht[static_cast<size_t>(j * k + a)] = H(a, j);
  DeviceArray<double> dG(res, G.data.size(), "starCAT Gram"), dHt(res, ht.size(), "starCAT spectra");
  to_device(res, dG.data(), G.data.data(), G.data.size());
  to_device(res, dHt.data(), ht.data(), ht.size());
  DenseF W(n, k);
  const int64_t step = std::max<int64_t>(1, rows_per_block);
  for (int64_t r0 = 0; r0 < n; r0 += step) {
    const int64_t rows = std::min(step, n - r0);
    const int64_t p0 = X.indptr[r0], nnz = X.indptr[r0 + rows] - p0;
    DeviceCsr blk;  // the whole query in one block: upload()'s pinned staging (several times a plain copy)
    if (rows == n) {
      blk = upload(res, X);
    } else {
      blk.indptr = DeviceArray<int64_t>(res, static_cast<size_t>(rows + 1), "starCAT row pointers");
      blk.indices = DeviceArray<int32_t>(res, static_cast<size_t>(nnz), "starCAT indices");
      blk.data = DeviceArray<float>(res, static_cast<size_t>(nnz), "starCAT values");
      to_device(res, blk.indptr.data(), X.indptr.data() + r0, static_cast<size_t>(rows + 1));
      to_device(res, blk.indices.data(), X.indices.data() + p0, static_cast<size_t>(nnz));
      to_device(res, blk.data.data(), X.data.data() + p0, static_cast<size_t>(nnz));
    }
    DeviceArray<float> dW(res, static_cast<size_t>(rows * k), "starCAT usages");
    const unsigned blocks = static_cast<unsigned>((rows + kThreads - 1) / kThreads);
    const size_t shared = static_cast<size_t>(k * k) * sizeof(double);
    const int kk = static_cast<int>(k);
#define SCURRY_STARCAT_LAUNCH(KM)                                                                            \
  starcat_nnls_kernel<KM><<<blocks, kThreads, shared, res.stream>>>(rows, kk, blk.indptr.data(), p0,            \
                                                                   blk.indices.data(), blk.data.data(), dHt.data(), \
                                                                   dG.data(), tol, dW.data())
    if (k <= 8) SCURRY_STARCAT_LAUNCH(8);
    else if (k <= 16) SCURRY_STARCAT_LAUNCH(16);
    else if (k <= 32) SCURRY_STARCAT_LAUNCH(32);
    else SCURRY_STARCAT_LAUNCH(64);
#undef SCURRY_STARCAT_LAUNCH
    SCURRY_CUDA_LAUNCH();
    copy_to_host(res, W.data.data() + r0 * k, dW.data(), static_cast<size_t>(rows * k) * sizeof(float));
  }
  return W;
}

}  // namespace scurry
