// The spectral layout's block operations on the GPU (spectral_ops.hpp): the solver's host math is
// spectral.cpp's; here the n x w blocks live on the device.
//
// Every kernel's sums run in a fixed order: the product with M sums each row's entries in CSR
// order (one thread per row and column), and the Gram matrices sum fixed chunks of rows into
// partials that a second kernel adds in chunk order, so the results are the same bits run after run.
//
// Floor (1.3M cells, 34M entries after the fuzzy union, w = 10): a product reads the entries
// (8 B each) and gathers one w-row of floats per entry (40 B, from L2: the float block is 52 MB),
// ~1.6 GB -> ~0.4 ms at 4.3 TB/s; the Gram and rotations stream n w 8 B = 104 MB a block, ~0.03 ms
// each. Measured (session 18, one H200): 61 products in 4 sweeps in 0.08-0.09 s with the Gram
// matrices and the host's small eigen-solves, ~1.3 ms a product (0.21-0.25 s with double gathers).
#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "graph/spectral_gpu.cuh"
#include "graph/spectral_ops.hpp"
#include "graph/spectral_rng.hpp"
#include "pp/linalg.hpp"

namespace scurry::spectral {
namespace {

constexpr int kBlock = 256;             // threads per block of every kernel here
constexpr int kTileRows = 32;           // Gram: rows staged in shared memory at a time
constexpr int64_t kMaxChunks = 1024;    // Gram: most row chunks (partials)
constexpr int kOutPerThread = (kMaxWidth * kMaxWidth + kBlock - 1) / kBlock;

int grid_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, (n + kBlock - 1) / kBlock)); }

// wt = D^-1/2 A D^-1/2 entry by entry; entries below min_weight, and zeros, are absent (0).
__global__ void scale_weights_kernel(const int64_t* indptr, const int32_t* indices, const float* data,
                                     const double* dinv, int64_t n, float min_weight, float* wt) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double di = dinv[i];
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
    const float a = data[p];
    wt[p] = a >= min_weight && a != 0.0f ? static_cast<float>(static_cast<double>(a) * __dmul_rn(di, dinv[indices[p]]))
                                         : 0.0f;
  }
}

// dinv[i] = D^-1/2 of row i's kept entries (summed in CSR order in double, as spectral_layout does on
// the host); a row with none gets 0 and sets *isolated.
__global__ void degrees_kernel(const int64_t* indptr, const float* data, int64_t n, float min_weight, double* dinv,
                               int* isolated) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double s = 0;
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
    const float a = data[p];
    if (a >= min_weight && a != 0.0f) s += static_cast<double>(a);
  }
  if (!(s > 0)) *isolated = 1;
  dinv[i] = s > 0 ? 1.0 / sqrt(s) : 0.0;
}

// part[chunk] = sum over the chunk's rows of 1 / dinv^2 (the degrees), in row order.
__global__ void degree_sum_partial_kernel(const double* dinv, int64_t n, int64_t chunk, double* part) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t r0 = c * chunk;
  if (r0 >= n) return;
  const int64_t r1 = min(n, r0 + chunk);
  double s = 0;
  for (int64_t i = r0; i < r1; ++i) s += 1.0 / (dinv[i] * dinv[i]);
  part[c] = s;
}

// v0 = D^1/2 1 / |D^1/2 1| from the sum of the degrees.
__global__ void trivial_vector_kernel(const double* dinv, const double* sum, int64_t n, double* v0) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  v0[i] = (1.0 / sqrt(*sum)) / dinv[i];
}

// The source block of a product as float (the host backend gathers from a float copy too).
__global__ void to_float_kernel(const double* x, float* xf, int64_t total) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g < total) xf[g] = static_cast<float>(x[g]);
}

__global__ void gaussian_kernel(double* y, int64_t total, uint64_t seed) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g < total) y[g] = gaussian_at(seed, static_cast<uint64_t>(g));
}

// y = alpha M x + beta x + gamma z (z may be null); one thread per (row, column). The rows of x
// gathered for the product come from its float copy xf (half the bytes: at 1.3M nodes and w = 10 the
// float block, 52 MB, stays in L2, the double one does not); products and sums in double.
__global__ void cheb_kernel(const int64_t* __restrict__ indptr, const int32_t* __restrict__ indices,
                            const float* __restrict__ wt, const float* __restrict__ xf, const double* __restrict__ x,
                            const double* __restrict__ z, double* __restrict__ y, int64_t n, int w, double alpha,
                            double beta, double gamma) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= n * w) return;
  const int64_t i = g / w;
  const int c = static_cast<int>(g - i * w);
  // Four entries' loads issued before their sums (the gathers of x do not wait on each other); the
  // sums still run entry by entry in CSR order, so the result is the same bits as one at a time.
  double acc = 0;
  int64_t p = indptr[i];
  const int64_t end = indptr[i + 1];
  for (; p + 4 <= end; p += 4) {
    const int32_t j0 = indices[p], j1 = indices[p + 1], j2 = indices[p + 2], j3 = indices[p + 3];
    const float w0 = wt[p], w1 = wt[p + 1], w2 = wt[p + 2], w3 = wt[p + 3];
    const float x0 = xf[static_cast<int64_t>(j0) * w + c], x1 = xf[static_cast<int64_t>(j1) * w + c],
                x2 = xf[static_cast<int64_t>(j2) * w + c], x3 = xf[static_cast<int64_t>(j3) * w + c];
    acc += static_cast<double>(w0) * static_cast<double>(x0);
    acc += static_cast<double>(w1) * static_cast<double>(x1);
    acc += static_cast<double>(w2) * static_cast<double>(x2);
    acc += static_cast<double>(w3) * static_cast<double>(x3);
  }
  for (; p < end; ++p)
    acc += static_cast<double>(wt[p]) * static_cast<double>(xf[static_cast<int64_t>(indices[p]) * w + c]);
  double v = alpha * acc + beta * x[g];
  if (z) v += gamma * z[g];
  y[g] = v;
}

__global__ void axpby_kernel(double* d, const double* x, double a, const double* y, double b, int64_t total) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g < total) d[g] = a * x[g] + b * y[g];
}

// part[chunk][p * wb + q] = sum over the chunk's rows of A(i, p) B(i, q).
__global__ void gram_partial_kernel(const double* __restrict__ a, int wa, const double* __restrict__ b, int wb,
                                    int64_t n, int64_t chunk, double* __restrict__ part) {
  __shared__ double ta[kTileRows * kMaxWidth], tb[kTileRows * kMaxWidth];
  const int64_t r0 = blockIdx.x * chunk, r1 = min(n, r0 + chunk);
  const int outs = wa * wb;
  double acc[kOutPerThread];
#pragma unroll
  for (int o = 0; o < kOutPerThread; ++o) acc[o] = 0;
  for (int64_t t0 = r0; t0 < r1; t0 += kTileRows) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kTileRows), r1 - t0));
    for (int e = threadIdx.x; e < rows * wa; e += blockDim.x) ta[e] = a[t0 * wa + e];
    for (int e = threadIdx.x; e < rows * wb; e += blockDim.x) tb[e] = b[t0 * wb + e];
    __syncthreads();
#pragma unroll
    for (int o = 0; o < kOutPerThread; ++o) {
      const int out = threadIdx.x + o * kBlock;
      if (out < outs) {
        const int p = out / wb, q = out - p * wb;
        double s = acc[o];
        for (int r = 0; r < rows; ++r) s += ta[r * wa + p] * tb[r * wb + q];
        acc[o] = s;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int o = 0; o < kOutPerThread; ++o) {
    const int out = threadIdx.x + o * kBlock;
    if (out < outs) part[blockIdx.x * static_cast<int64_t>(outs) + out] = acc[o];
  }
}

// out[o] = sum over chunks in order of part[chunk][o].
__global__ void gram_reduce_kernel(const double* part, int64_t chunks, int outs, double* out) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= outs) return;
  double s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += part[c * outs + o];
  out[o] = s;
}

// y = x S (S: w x w, row-major).
__global__ void mul_kernel(const double* __restrict__ x, const double* __restrict__ s, double* __restrict__ y,
                           int64_t n, int w) {
  __shared__ double ss[kMaxWidth * kMaxWidth];
  for (int e = threadIdx.x; e < w * w; e += blockDim.x) ss[e] = s[e];
  __syncthreads();
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= n * w) return;
  const int64_t i = g / w;
  const int c = static_cast<int>(g - i * w);
  const double* xi = x + i * w;
  double acc = 0;
  for (int t = 0; t < w; ++t) acc += xi[t] * ss[t * w + c];
  y[g] = acc;
}

// x -= v0 coef^T.
__global__ void deflate_kernel(double* x, const double* v0, const double* coef, int64_t n, int w) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= n * w) return;
  const int64_t i = g / w;
  x[g] -= v0[i] * coef[g - i * w];
}

class DeviceOps final : public BlockOps {
 public:
  // A host graph with its D^-1/2 (spectral_layout's): uploaded here.
  DeviceOps(CudaResources& r, const CsrF& g, const std::vector<double>& dinv, int64_t w, int slots)
      : r_(r), n_(g.n_rows), w_(w) {
    SCURRY_CUDA(cudaSetDevice(r.device));
    own_ = ::scurry::upload(r, g);  // through pinned staging
    DeviceArray<double> dinv_d(r, dinv.size(), "spectral degrees");
    upload(dinv_d, dinv.data(), dinv.size());
    init(own_.indptr.data(), own_.indices.data(), own_.data.data(), static_cast<int64_t>(g.data.size()),
         std::move(dinv_d), -std::numeric_limits<float>::infinity(), slots);
    own_.data = DeviceArray<float>();  // (scaled into wt_)
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // the pageable uploads' sources go now
  }
  // A graph already on the device, pruned as umap prunes it (entries below min_weight, and zeros,
  // absent), its degrees computed here; *isolated: a node has no kept entry (the solver must not run).
  DeviceOps(CudaResources& r, const DeviceCsr& g, float min_weight, int64_t w, int slots, bool* isolated)
      : r_(r), n_(g.n_rows), w_(w) {
    SCURRY_CUDA(cudaSetDevice(r.device));
    DeviceArray<double> dinv_d(r, static_cast<size_t>(n_), "spectral degrees");
    DeviceArray<int> flag(r, 1, "spectral isolated flag");
    SCURRY_CUDA(cudaMemsetAsync(flag.data(), 0, sizeof(int), r.stream));
    degrees_kernel<<<grid_for(n_), kBlock, 0, r.stream>>>(g.indptr.data(), g.data.data(), n_, min_weight,
                                                          dinv_d.data(), flag.data());
    SCURRY_CUDA_LAUNCH();
    int h_flag = 0;
    SCURRY_CUDA(cudaMemcpyAsync(&h_flag, flag.data(), sizeof(int), cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    *isolated = h_flag != 0;
    if (*isolated) return;
    init(g.indptr.data(), g.indices.data(), g.data.data(), g.nnz, std::move(dinv_d), min_weight, slots);
  }

  // Slot s's block (n x w doubles, row-major), moved out; the slot is empty after.
  DeviceArray<double> take(int s) { return std::move(slots_[static_cast<size_t>(s)]); }

  void gaussian(int dst, uint64_t seed) override {
    gaussian_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(slot(dst), n_ * w_, seed);
    SCURRY_CUDA_LAUNCH();
  }
  void cheb(int dst, int src, int prev, double alpha, double beta, double gamma) override {
    to_float_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(slot(src), xf_.data(), n_ * w_);
    SCURRY_CUDA_LAUNCH();
    cheb_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(indptr_, indices_, wt_.data(), xf_.data(), slot(src),
                                                              prev >= 0 ? slot(prev) : nullptr, slot(dst), n_,
                                                              static_cast<int>(w_), alpha, beta, gamma);
    SCURRY_CUDA_LAUNCH();
  }
  void axpby(int dst, int x, double a, int y, double b) override {
    axpby_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(slot(dst), slot(x), a, slot(y), b, n_ * w_);
    SCURRY_CUDA_LAUNCH();
  }
  DenseD gram(int x, int y) override {
    DenseD out(w_, w_);
    gram_into(slot(x), static_cast<int>(w_), slot(y), out.data.data());
    return out;
  }
  void mul(int dst, int src, const DenseD& s) override {
    SCURRY_CUDA(cudaMemcpyAsync(small_.data(), s.data.data(), static_cast<size_t>(w_ * w_) * sizeof(double),
                                cudaMemcpyHostToDevice, r_.stream));
    mul_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(slot(src), small_.data(), slot(dst), n_,
                                                             static_cast<int>(w_));
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));  // `s` is pageable host memory the caller may free
  }
  void deflate(int x) override {
    std::vector<double> coef(static_cast<size_t>(w_));
    gram_into(v0_.data(), 1, slot(x), coef.data());
    SCURRY_CUDA(cudaMemcpyAsync(small_.data(), coef.data(), coef.size() * sizeof(double), cudaMemcpyHostToDevice,
                                r_.stream));
    deflate_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(slot(x), v0_.data(), small_.data(), n_,
                                                                 static_cast<int>(w_));
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));
  }
  DenseD download(int src, int64_t cols) override {
    std::vector<double> all(static_cast<size_t>(n_ * w_));
    copy_to_host(r_, all.data(), slot(src), all.size() * sizeof(double));
    DenseD out(n_, cols);
    for (int64_t i = 0; i < n_; ++i)
      for (int64_t c = 0; c < cols; ++c) out(i, c) = all[static_cast<size_t>(i * w_ + c)];
    return out;
  }

 private:
  double* slot(int s) const { return slots_[static_cast<size_t>(s)].data(); }
  template <class T>
  void upload(DeviceArray<T>& d, const T* h, size_t count) {
    if (count) SCURRY_CUDA(cudaMemcpyAsync(d.data(), h, count * sizeof(T), cudaMemcpyHostToDevice, r_.stream));
  }
  // host out (wa x w) = A^T B, A n x wa, B n x w (slot layout).
  void gram_into(const double* a, int wa, const double* b, double* out) {
    const int wb = static_cast<int>(w_), outs = wa * wb;
    gram_partial_kernel<<<static_cast<int>(chunks_), kBlock, 0, r_.stream>>>(a, wa, b, wb, n_, chunk_, part_.data());
    SCURRY_CUDA_LAUNCH();
    gram_reduce_kernel<<<grid_for(outs), kBlock, 0, r_.stream>>>(part_.data(), chunks_, outs, small_.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaMemcpyAsync(out, small_.data(), static_cast<size_t>(outs) * sizeof(double),
                                cudaMemcpyDeviceToHost, r_.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));
  }

  // The scaled entries, v0, the slots and the Gram scratch, from the graph's arrays and D^-1/2.
  void init(const int64_t* indptr, const int32_t* indices, const float* data, int64_t nnz, DeviceArray<double> dinv,
            float min_weight, int slots) {
    indptr_ = indptr;
    indices_ = indices;
    wt_ = DeviceArray<float>(r_, static_cast<size_t>(nnz), "spectral scaled weights");
    scale_weights_kernel<<<grid_for(n_), kBlock, 0, r_.stream>>>(indptr, indices, data, dinv.data(), n_, min_weight,
                                                                  wt_.data());
    SCURRY_CUDA_LAUNCH();
    chunk_ = std::max<int64_t>(kTileRows, (n_ + kMaxChunks - 1) / kMaxChunks);
    chunk_ = (chunk_ + kTileRows - 1) / kTileRows * kTileRows;
    chunks_ = (n_ + chunk_ - 1) / chunk_;
    part_ = DeviceArray<double>(r_, static_cast<size_t>(chunks_ * w_ * w_), "spectral Gram partials");
    small_ = DeviceArray<double>(r_, static_cast<size_t>(w_ * w_), "spectral small matrix");
    // v0 = D^1/2 1 / |D^1/2 1|, the degrees summed in fixed chunks added in chunk order.
    v0_ = DeviceArray<double>(r_, static_cast<size_t>(n_), "spectral trivial eigenvector");
    degree_sum_partial_kernel<<<grid_for(chunks_), kBlock, 0, r_.stream>>>(dinv.data(), n_, chunk_, part_.data());
    SCURRY_CUDA_LAUNCH();
    gram_reduce_kernel<<<1, kBlock, 0, r_.stream>>>(part_.data(), chunks_, 1, small_.data());
    SCURRY_CUDA_LAUNCH();
    trivial_vector_kernel<<<grid_for(n_), kBlock, 0, r_.stream>>>(dinv.data(), small_.data(), n_, v0_.data());
    SCURRY_CUDA_LAUNCH();
    for (int s2 = 0; s2 < slots; ++s2) slots_.emplace_back(r_, static_cast<size_t>(n_ * w_), "spectral block");
    xf_ = DeviceArray<float>(r_, static_cast<size_t>(n_ * w_), "spectral float block");
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));  // (dinv is released on return)
  }

  CudaResources& r_;
  int64_t n_, w_, chunk_ = 0, chunks_ = 0;
  DeviceCsr own_;                      // the host graph's upload (its indptr and indices)
  const int64_t* indptr_ = nullptr;    // the graph's, owned by own_ or the caller
  const int32_t* indices_ = nullptr;
  DeviceArray<float> wt_, xf_;
  DeviceArray<double> v0_, part_, small_;
  std::vector<DeviceArray<double>> slots_;
};

}  // namespace

std::unique_ptr<BlockOps> device_block_ops(const Context& ctx, const CsrF& graph, const std::vector<double>& dinv,
                                           int64_t w, int slots) {
  CudaResources* r = ctx.cuda();
  if (!r) fail_input("spectral layout (gpu)", "needs a GPU context");
  if (w > kMaxWidth) fail_input("spectral layout (gpu)", "block width ", w, " is over ", kMaxWidth);
  return std::make_unique<DeviceOps>(*r, graph, dinv, w, slots);
}

}  // namespace scurry::spectral

namespace scurry::spectral {

std::optional<DeviceStart> device_spectral_start(CudaResources& r, const DeviceCsr& g, float min_weight,
                                                 const SpectralOptions& opt) {
  const int64_t n = g.n_rows, dim = opt.dim;
  if (g.n_cols != n) fail("device_spectral_start: the graph is ", n, " x ", g.n_cols, ", not square");
  if (dim < 1 || dim + 1 >= n) return std::nullopt;
  const int64_t w = std::min({n - 1, dim + std::max<int64_t>(1, opt.oversample), kMaxWidth});
  if (dim > w) fail_input("spectral_layout", "n_components = ", dim, " is more than the spectral layout supports (",
                          kMaxWidth - 1, "); use init_pos random");
  const auto t0 = std::chrono::steady_clock::now();
  bool isolated = false;
  constexpr int kSlots = 4;
  DeviceOps ops(r, g, min_weight, w, kSlots, &isolated);
  if (isolated) return std::nullopt;
  SpectralStats st;
  st.gpu = true;
  linalg::SingleThreadedBlas blas_guard;
  const int q = chebyshev_subspace(ops, dim, w, opt, st);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info(detail::concat("spectral layout (gpu, device graph): ", st.products, " products in ", st.sweeps,
                           " sweeps, residual ", st.residual, st.converged ? "" : " (not converged: the layout is still used)",
                           ", ", st.seconds, " s"));
  DeviceStart out;
  out.block = ops.take(q);
  out.width = w;
  out.stats = st;
  return out;
}

}  // namespace scurry::spectral
