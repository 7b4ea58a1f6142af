// scurry: logreg's data term on the GPU (logreg_gpu.hpp says what is computed and in which order).
#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "tl/logreg_gpu.hpp"

namespace scurry {

namespace {

constexpr int kRowsPerBlock = 256;  // the loss and intercept partials: one per block of cells

// Per cell (one warp): z[k] = b[k] + sum over the row's entries, in order, of wt[j * R + k] * v (a lane
// per class, classes in chunks of 32; __dmul_rn / __dadd_rn: no FMA, the CPU's roundings), into
// D[row * R + k]; then one lane turns the row into P - Y (logreg_row) and its loss into loss[row].
__global__ void logreg_rows(const int64_t* __restrict__ ptr, const int32_t* __restrict__ idx,
                            const float* __restrict__ val, int64_t n_rows, const int32_t* __restrict__ y, int K, int R,
                            const double* __restrict__ wt, int64_t p, double* __restrict__ D,
                            double* __restrict__ loss) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  const int64_t q0 = ptr[w], q1 = ptr[w + 1];
  double* z = D + w * R;
  for (int c0 = 0; c0 < R; c0 += 32) {
    const int k = c0 + lane;
    if (k >= R) continue;
    double acc = wt[p * R + k];
    for (int64_t q = q0; q < q1; ++q)
      acc = __dadd_rn(acc, __dmul_rn(wt[static_cast<int64_t>(idx[q]) * R + k], static_cast<double>(val[q])));
    z[k] = acc;
  }
  __syncwarp();
  if (lane == 0) loss[w] = logreg_row(z, K, y[w], z);
}

// Per block of kRowsPerBlock cells: out[b * (R + 1)] = the sum of their losses, out[b * (R + 1) + 1 + k]
// the sum of D[., k] (the intercepts' gradient), each in cell order by one thread.
__global__ void logreg_block_sums(const double* __restrict__ D, const double* __restrict__ loss, int64_t n_rows,
                                  int R, double* __restrict__ out) {
  const int64_t b = blockIdx.x;
  const int64_t r0 = b * kRowsPerBlock, r1 = min(n_rows, r0 + kRowsPerBlock);
  for (int k = threadIdx.x; k <= R; k += blockDim.x) {
    double s = 0;
    for (int64_t r = r0; r < r1; ++r) s += k == 0 ? loss[r] : D[r * R + (k - 1)];
    out[b * (R + 1) + k] = s;
  }
}

// Per gene (one warp, a lane per class): gt[j * R + k] = sum over the gene's cells, in cell order, of
// D[cell * R + k] * v (the transpose's rows: cells ascending).
__global__ void logreg_gradient(const int64_t* __restrict__ tptr, const int32_t* __restrict__ tidx,
                                const float* __restrict__ tval, int64_t p, int R, const double* __restrict__ D,
                                double* __restrict__ gt) {
  const int64_t j = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (j >= p) return;
  const int64_t q0 = tptr[j], q1 = tptr[j + 1];
  for (int c0 = 0; c0 < R; c0 += 32) {
    const int k = c0 + lane;
    if (k >= R) continue;
    double acc = 0;
    for (int64_t q = q0; q < q1; ++q)
      acc = __dadd_rn(acc, __dmul_rn(D[static_cast<int64_t>(tidx[q]) * R + k], static_cast<double>(tval[q])));
    gt[j * R + k] = acc;
  }
}

}  // namespace

struct LogregGpu::Impl {
  CudaResources* r = nullptr;
  int64_t n = 0, p = 0;
  int K = 0, R = 0;
  DeviceCsr x, xt;
  DeviceArray<int32_t> y;
  DeviceArray<double> wt, D, loss, block_sums, gt;
  std::vector<double> h_wt, h_gt, h_blocks;
};

LogregGpu::LogregGpu(const Context& ctx, const CsrF& x, const std::vector<int32_t>& y, int K)
    : impl_(std::make_unique<Impl>()) {
  if (!ctx.cuda()) fail("logreg (gpu): the context has no CUDA device");
  if (static_cast<int64_t>(y.size()) != x.n_rows) fail("logreg (gpu): ", y.size(), " labels for ", x.n_rows, " cells");
  if (K < 2) fail("logreg (gpu): fewer than 2 classes");
  Impl& m = *impl_;
  m.r = ctx.cuda();
  CudaResources& r = *m.r;
  SCURRY_CUDA(cudaSetDevice(r.device));
  m.n = x.n_rows, m.p = x.n_cols, m.K = K, m.R = K == 2 ? 1 : K;
  m.x = upload(r, x);
  m.xt = upload(r, transpose(x));  // (core/matrix.hpp: each gene's cells ascending)
  m.y = DeviceArray<int32_t>(r, std::max<size_t>(y.size(), 1), "logreg: classes");
  if (!y.empty()) SCURRY_CUDA(cudaMemcpyAsync(m.y.data(), y.data(), y.size() * 4, cudaMemcpyHostToDevice, r.stream));
  const int64_t R = m.R, nb = (m.n + kRowsPerBlock - 1) / kRowsPerBlock;
  m.wt = DeviceArray<double>(r, static_cast<size_t>((m.p + 1) * R), "logreg: weights");
  m.D = DeviceArray<double>(r, static_cast<size_t>(std::max<int64_t>(m.n, 1) * R), "logreg: probabilities");
  m.loss = DeviceArray<double>(r, static_cast<size_t>(std::max<int64_t>(m.n, 1)), "logreg: losses");
  m.block_sums = DeviceArray<double>(r, static_cast<size_t>(std::max<int64_t>(nb, 1) * (R + 1)), "logreg: block sums");
  m.gt = DeviceArray<double>(r, static_cast<size_t>(std::max<int64_t>(m.p, 1) * R), "logreg: gradient");
  m.h_wt.resize(static_cast<size_t>((m.p + 1) * R));
  m.h_gt.resize(static_cast<size_t>(m.p * R));
  m.h_blocks.resize(static_cast<size_t>(nb * (R + 1)));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
}

LogregGpu::~LogregGpu() = default;

double LogregGpu::operator()(const std::vector<double>& w, std::vector<double>& g) {
  Impl& m = *impl_;
  CudaResources& r = *m.r;
  SCURRY_CUDA(cudaSetDevice(r.device));
  const int64_t n = m.n, p = m.p, R = m.R, nb = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  if (static_cast<int64_t>(w.size()) != R * (p + 1)) fail("logreg (gpu): ", w.size(), " weights, not ", R * (p + 1));
  // gene-major on the device (a warp's lanes read one gene's classes together), the intercepts last
  for (int64_t k = 0; k < R; ++k) {
    for (int64_t j = 0; j < p; ++j) m.h_wt[j * R + k] = w[k * p + j];
    m.h_wt[p * R + k] = w[R * p + k];
  }
  SCURRY_CUDA(cudaMemcpyAsync(m.wt.data(), m.h_wt.data(), m.h_wt.size() * 8, cudaMemcpyHostToDevice, r.stream));
  if (n > 0) {
    logreg_rows<<<static_cast<unsigned>((n * 32 + 255) / 256), 256, 0, r.stream>>>(
        m.x.indptr.data(), m.x.indices.data(), m.x.data.data(), n, m.y.data(), m.K, m.R, m.wt.data(), p, m.D.data(),
        m.loss.data());
    SCURRY_CUDA_LAUNCH();
    logreg_block_sums<<<static_cast<unsigned>(nb), 64, 0, r.stream>>>(m.D.data(), m.loss.data(), n, m.R,
                                                                      m.block_sums.data());
    SCURRY_CUDA_LAUNCH();
  }
  if (p > 0) {
    logreg_gradient<<<static_cast<unsigned>((p * 32 + 255) / 256), 256, 0, r.stream>>>(
        m.xt.indptr.data(), m.xt.indices.data(), m.xt.data.data(), p, m.R, m.D.data(), m.gt.data());
    SCURRY_CUDA_LAUNCH();
  }
  if (!m.h_gt.empty())
    SCURRY_CUDA(cudaMemcpyAsync(m.h_gt.data(), m.gt.data(), m.h_gt.size() * 8, cudaMemcpyDeviceToHost, r.stream));
  if (!m.h_blocks.empty())
    SCURRY_CUDA(cudaMemcpyAsync(m.h_blocks.data(), m.block_sums.data(), m.h_blocks.size() * 8, cudaMemcpyDeviceToHost,
                                r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  g.assign(static_cast<size_t>(R * (p + 1)), 0.0);
  for (int64_t k = 0; k < R; ++k)
    for (int64_t j = 0; j < p; ++j) g[k * p + j] = m.h_gt[j * R + k];
  double f = 0;
  for (int64_t b = 0; b < nb; ++b) {  // (blocks in order)
    f += m.h_blocks[b * (R + 1)];
    for (int64_t k = 0; k < R; ++k) g[R * p + k] += m.h_blocks[b * (R + 1) + 1 + k];
  }
  return f;
}

}  // namespace scurry
