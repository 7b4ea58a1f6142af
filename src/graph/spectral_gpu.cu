// The spectral layout's block operations on the GPU (spectral_ops.hpp): the solver's host math is
// spectral.cpp's; here the n x w blocks live on the device.
//
// Every kernel's sums run in a fixed order: the product with M sums each row's entries in CSR
// order (one thread per row and column), and the Gram matrices sum fixed chunks of rows into
// partials that a second kernel adds in chunk order, so the results are the same bits run after run.
//
// Floor (1.3M cells, ~25M entries after the fuzzy union, w = 10): a product reads the entries
// (8 B each) and gathers one w-row of doubles per entry (80 B, mostly from L2), ~2.2 GB -> ~0.5 ms
// at 4.3 TB/s; the Gram and rotations stream n w 8 B = 104 MB a block, ~0.03 ms each.
#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "graph/spectral_ops.hpp"
#include "graph/spectral_rng.hpp"

namespace scurry::spectral {
namespace {

constexpr int kBlock = 256;             // threads per block of every kernel here
constexpr int kTileRows = 32;           // Gram: rows staged in shared memory at a time
constexpr int64_t kMaxChunks = 1024;    // Gram: most row chunks (partials)
constexpr int kOutPerThread = (kMaxWidth * kMaxWidth + kBlock - 1) / kBlock;

int grid_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, (n + kBlock - 1) / kBlock)); }

// wt = D^-1/2 A D^-1/2 entry by entry (wt may be data: in place).
__global__ void scale_weights_kernel(const int64_t* indptr, const int32_t* indices, const float* data,
                                     const double* dinv, int64_t n, float* wt) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double di = dinv[i];
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p)
    wt[p] = static_cast<float>(static_cast<double>(data[p]) * __dmul_rn(di, dinv[indices[p]]));
}

__global__ void gaussian_kernel(double* y, int64_t total, uint64_t seed) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g < total) y[g] = gaussian_at(seed, static_cast<uint64_t>(g));
}

// y = alpha M x + beta x + gamma z (z may be null); one thread per (row, column).
__global__ void cheb_kernel(const int64_t* __restrict__ indptr, const int32_t* __restrict__ indices,
                            const float* __restrict__ wt, const double* __restrict__ x, const double* __restrict__ z,
                            double* __restrict__ y, int64_t n, int w, double alpha, double beta, double gamma) {
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
    const double x0 = x[static_cast<int64_t>(j0) * w + c], x1 = x[static_cast<int64_t>(j1) * w + c],
                 x2 = x[static_cast<int64_t>(j2) * w + c], x3 = x[static_cast<int64_t>(j3) * w + c];
    acc += static_cast<double>(w0) * x0;
    acc += static_cast<double>(w1) * x1;
    acc += static_cast<double>(w2) * x2;
    acc += static_cast<double>(w3) * x3;
  }
  for (; p < end; ++p) acc += static_cast<double>(wt[p]) * x[static_cast<int64_t>(indices[p]) * w + c];
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
  DeviceOps(CudaResources& r, const CsrF& g, const std::vector<double>& dinv, int64_t w, int slots)
      : r_(r), n_(g.n_rows), w_(w) {
    SCURRY_CUDA(cudaSetDevice(r.device));
    DeviceCsr dg = ::scurry::upload(r, g);  // through pinned staging
    indptr_ = std::move(dg.indptr);
    indices_ = std::move(dg.indices);
    wt_ = std::move(dg.data);  // scaled in place below
    std::vector<double> v0(static_cast<size_t>(n_));
    double s = 0;
    for (int64_t i = 0; i < n_; ++i) s += 1.0 / (dinv[i] * dinv[i]);
    const double inv = 1.0 / std::sqrt(s);
    for (int64_t i = 0; i < n_; ++i) v0[i] = inv / dinv[i];
    v0_ = DeviceArray<double>(r, v0.size(), "spectral trivial eigenvector");
    upload(v0_, v0.data(), v0.size());
    {
      DeviceArray<double> dinv_d(r, dinv.size(), "spectral degrees");
      upload(dinv_d, dinv.data(), dinv.size());
      scale_weights_kernel<<<grid_for(n_), kBlock, 0, r.stream>>>(indptr_.data(), indices_.data(), wt_.data(),
                                                                   dinv_d.data(), n_, wt_.data());
      SCURRY_CUDA_LAUNCH();
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // the pageable uploads' sources go now
    }
    for (int s2 = 0; s2 < slots; ++s2) slots_.emplace_back(r, static_cast<size_t>(n_ * w_), "spectral block");
    chunk_ = std::max<int64_t>(kTileRows, (n_ + kMaxChunks - 1) / kMaxChunks);
    chunk_ = (chunk_ + kTileRows - 1) / kTileRows * kTileRows;
    chunks_ = (n_ + chunk_ - 1) / chunk_;
    part_ = DeviceArray<double>(r, static_cast<size_t>(chunks_ * w_ * w_), "spectral Gram partials");
    small_ = DeviceArray<double>(r, static_cast<size_t>(w_ * w_), "spectral small matrix");
  }

  void gaussian(int dst, uint64_t seed) override {
    gaussian_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(slot(dst), n_ * w_, seed);
    SCURRY_CUDA_LAUNCH();
  }
  void cheb(int dst, int src, int prev, double alpha, double beta, double gamma) override {
    cheb_kernel<<<grid_for(n_ * w_), kBlock, 0, r_.stream>>>(indptr_.data(), indices_.data(), wt_.data(), slot(src),
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

  CudaResources& r_;
  int64_t n_, w_, chunk_ = 0, chunks_ = 0;
  DeviceArray<int64_t> indptr_;
  DeviceArray<int32_t> indices_;
  DeviceArray<float> wt_;
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
