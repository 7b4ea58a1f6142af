// scurry: logreg's data term on one or more GPUs (logreg_gpu.hpp says what is computed, in which
// order, and why the gradient's sums are exact).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/multi_device.cuh"
#include "tl/logreg_gpu.hpp"

namespace scurry {

namespace {

constexpr int64_t kRowsPerBlock = 256;  // the loss and intercept partials: one per block of cells

// Per cell (one warp): z[k] = b[k] + sum over the row's entries, in order, of wt[j * R + k] * v (a lane
// per class, classes in chunks of 32; __dmul_rn / __dadd_rn: no FMA, the CPU's roundings), into
// D[row * R + k]; one lane turns the row into P - Y (logreg_row) and its loss into loss[row]; then
// per entry and class the gradient term (P - Y) * v, scaled by the gene's 2^shift and rounded to an
// integer, is added to acc[j * R + k] (64-bit, exact in any order). ptr holds the rows' offsets into
// the whole matrix; base is this chunk's first offset.
__global__ void logreg_rows(const int64_t* __restrict__ ptr, int64_t base, const int32_t* __restrict__ idx,
                            const float* __restrict__ val, int64_t n_rows, const int32_t* __restrict__ y, int K,
                            int R, const double* __restrict__ wt, int64_t p, const int* __restrict__ shift,
                            double* __restrict__ D, double* __restrict__ loss, unsigned long long* __restrict__ acc) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;  // (the whole warp)
  const int64_t q0 = ptr[w] - base, q1 = ptr[w + 1] - base;
  double* z = D + w * R;
  for (int c0 = 0; c0 < R; c0 += 32) {
    const int k = c0 + lane;
    if (k >= R) continue;
    double a = wt[p * R + k];
    for (int64_t q = q0; q < q1; ++q)
      a = __dadd_rn(a, __dmul_rn(wt[static_cast<int64_t>(idx[q]) * R + k], static_cast<double>(val[q])));
    z[k] = a;
  }
  __syncwarp();
  if (lane == 0) loss[w] = logreg_row(z, K, y[w], z);
  __syncwarp();
  for (int c0 = 0; c0 < R; c0 += 32) {
    const int k = c0 + lane;
    if (k >= R) continue;
    const double d = z[k];
    for (int64_t q = q0; q < q1; ++q) {
      const int32_t j = idx[q];
      const double t = __dmul_rn(d, static_cast<double>(val[q]));
      if (!isfinite(t)) continue;  // (weights that overflow: the loss is not finite either, and the
                                   // line search rejects the step)
      const long long qv = __double2ll_rn(ldexp(t, shift[j]));
      if (qv) atomicAdd(acc + static_cast<int64_t>(j) * R + k, static_cast<unsigned long long>(qv));
    }
  }
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

struct Chunk {
  int64_t r0, r1;  // rows [r0, r1) of the matrix, r0 a multiple of kRowsPerBlock
};

}  // namespace

// One device's share of the cells: its chunks (one, loaded once, when the share fits), its buffers.
struct LogregPart {
  CudaResources* r = nullptr;
  int64_t r0 = 0, r1 = 0;
  std::vector<Chunk> chunks;
  bool resident = false;
  DeviceArray<int64_t> ptr;
  DeviceArray<int32_t> idx, y;
  DeviceArray<float> val;
  DeviceArray<int> shift;
  DeviceArray<double> wt, D, loss, block_sums;
  DeviceArray<unsigned long long> acc;
  std::vector<unsigned long long> h_acc;
  ~LogregPart() {
    if (r) cudaSetDevice(r->device);  // (the arrays below are freed with their device current)
  }
};

struct LogregGpu::Impl {
  const CsrF* x = nullptr;
  int64_t n = 0, p = 0;
  int K = 0, R = 0;
  int first_device = 0;
  std::vector<int> shift;  // per gene: the fixed-point grid 2^-shift of its gradient terms
  std::vector<std::unique_ptr<LogregPart>> parts;
  std::vector<const Context*> devices;
  std::vector<double> h_wt, h_blocks;
  ~Impl() {
    parts.clear();
    cudaSetDevice(first_device);
  }
};

namespace {

// Uploads rows [c.r0, c.r1) of x into the part's chunk buffers (its offsets as they are: the kernel
// subtracts the chunk's first).
void load_chunk(LogregPart& m, const CsrF& x, const Chunk& c) {
  CudaResources& r = *m.r;
  const int64_t e0 = x.indptr[c.r0], e1 = x.indptr[c.r1], rows = c.r1 - c.r0;
  SCURRY_CUDA(cudaMemcpyAsync(m.ptr.data(), x.indptr.data() + c.r0, static_cast<size_t>(rows + 1) * 8,
                              cudaMemcpyHostToDevice, r.stream));
  if (e1 > e0) {
    SCURRY_CUDA(cudaMemcpyAsync(m.idx.data(), x.indices.data() + e0, static_cast<size_t>(e1 - e0) * 4,
                                cudaMemcpyHostToDevice, r.stream));
    SCURRY_CUDA(cudaMemcpyAsync(m.val.data(), x.data.data() + e0, static_cast<size_t>(e1 - e0) * 4,
                                cudaMemcpyHostToDevice, r.stream));
  }
}

}  // namespace

LogregGpu::LogregGpu(const std::vector<const Context*>& devices, const CsrF& x, const std::vector<int32_t>& y, int K,
                     int64_t max_chunk_entries)
    : impl_(std::make_unique<Impl>()) {
  if (devices.empty()) fail("logreg (gpu): no device");
  for (const Context* c : devices)
    if (!c || !c->cuda()) fail("logreg (gpu): a context has no CUDA device");
  if (static_cast<int64_t>(y.size()) != x.n_rows) fail("logreg (gpu): ", y.size(), " labels for ", x.n_rows, " cells");
  if (K < 2) fail("logreg (gpu): fewer than 2 classes");
  if (max_chunk_entries <= 0)
    if (const char* e = std::getenv("SCURRY_RGG_GPU_CHUNK")) max_chunk_entries = std::max<int64_t>(1, std::atoll(e));
  Impl& m = *impl_;
  m.x = &x, m.devices = devices, m.first_device = devices[0]->cuda()->device;
  m.n = x.n_rows, m.p = x.n_cols, m.K = K, m.R = K == 2 ? 1 : K;
  const int64_t n = m.n, p = m.p, R = m.R, nb = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  // The grid: every term |(P - Y) v| <= max |v| of its gene < 2^e, and at most n of them are added, so
  // with 2^L >= n and shift = 62 - L - e no sum passes 2^62.
  {
    std::vector<float> maxabs(static_cast<size_t>(p), 0.0f);
    for (int64_t q = 0; q < x.nnz(); ++q) {
      const float v = std::fabs(x.data[q]);
      if (!std::isfinite(v)) fail("logreg (gpu): the matrix holds NaN or infinite values");
      float& mx = maxabs[x.indices[q]];
      mx = std::max(mx, v);
    }
    int L = 0;
    while ((int64_t(1) << L) < std::max<int64_t>(n, 1)) ++L;
    m.shift.assign(static_cast<size_t>(p), 0);
    for (int64_t j = 0; j < p; ++j) {
      if (maxabs[j] == 0) continue;
      int e = 0;
      std::frexp(static_cast<double>(maxabs[j]), &e);  // maxabs = f 2^e, f in [0.5, 1)
      m.shift[j] = 62 - L - e;
    }
  }
  m.h_wt.resize(static_cast<size_t>((p + 1) * R));
  m.h_blocks.assign(static_cast<size_t>(nb * (R + 1)), 0.0);
  const int64_t Dn = static_cast<int64_t>(devices.size());
  m.parts.resize(devices.size());
  on_each_device(devices, [&](size_t k) {
    auto part = std::make_unique<LogregPart>();
    LogregPart& q = *part;
    q.r = devices[k]->cuda();
    CudaResources& r = *q.r;
    const int64_t kk = static_cast<int64_t>(k);
    q.r0 = std::min(n, nb * kk / Dn * kRowsPerBlock), q.r1 = std::min(n, nb * (kk + 1) / Dn * kRowsPerBlock);
    const int64_t share = q.r1 - q.r0;
    // What stays on the device whatever the chunks: weights, accumulators, grid, the share's classes.
    const double fixed = static_cast<double>((p + 1) * R * 8 + p * R * 8 + p * 4 + share * 4 +
                                             (share / kRowsPerBlock + 1) * (R + 1) * 8);
    const double per_row = static_cast<double>(8 + R * 8 + 8), per_entry = 8.0;
    const double budget = static_cast<double>(available_bytes(r)) * 0.8 - fixed;
    const auto chunk_bytes = [&](int64_t a, int64_t b) {
      return per_row * static_cast<double>(b - a + 1) + per_entry * static_cast<double>(x.indptr[b] - x.indptr[a]);
    };
    if (max_chunk_entries <= 0 && chunk_bytes(q.r0, q.r1) <= budget) {
      q.chunks.push_back({q.r0, q.r1});
      q.resident = true;
    } else {  // whole blocks while they fit the budget (or the cap); at least one block a chunk
      for (int64_t a = q.r0; a < q.r1;) {
        int64_t b = std::min(q.r1, a + kRowsPerBlock);
        while (b < q.r1) {
          const int64_t nb2 = std::min(q.r1, b + kRowsPerBlock);
          const bool fits = max_chunk_entries > 0 ? x.indptr[nb2] - x.indptr[a] <= max_chunk_entries
                                                  : chunk_bytes(a, nb2) <= budget;
          if (!fits) break;
          b = nb2;
        }
        q.chunks.push_back({a, b});
        a = b;
      }
      q.resident = q.chunks.size() <= 1;
    }
    int64_t max_rows = 1, max_nnz = 1;
    for (const Chunk& c : q.chunks) {
      max_rows = std::max(max_rows, c.r1 - c.r0);
      max_nnz = std::max(max_nnz, x.indptr[c.r1] - x.indptr[c.r0]);
    }
    q.ptr = DeviceArray<int64_t>(r, static_cast<size_t>(max_rows + 1), "logreg: row offsets");
    q.idx = DeviceArray<int32_t>(r, static_cast<size_t>(max_nnz), "logreg: column indices");
    q.val = DeviceArray<float>(r, static_cast<size_t>(max_nnz), "logreg: values");
    q.y = DeviceArray<int32_t>(r, static_cast<size_t>(std::max<int64_t>(share, 1)), "logreg: classes");
    q.shift = DeviceArray<int>(r, static_cast<size_t>(std::max<int64_t>(p, 1)), "logreg: gradient grid");
    q.wt = DeviceArray<double>(r, static_cast<size_t>((p + 1) * R), "logreg: weights");
    q.D = DeviceArray<double>(r, static_cast<size_t>(max_rows * R), "logreg: probabilities");
    q.loss = DeviceArray<double>(r, static_cast<size_t>(max_rows), "logreg: losses");
    q.block_sums = DeviceArray<double>(r, static_cast<size_t>((max_rows / kRowsPerBlock + 1) * (R + 1)),
                                       "logreg: block sums");
    q.acc = DeviceArray<unsigned long long>(r, static_cast<size_t>(std::max<int64_t>(p * R, 1)), "logreg: gradient");
    q.h_acc.resize(static_cast<size_t>(p * R));
    if (share > 0)
      SCURRY_CUDA(cudaMemcpyAsync(q.y.data(), y.data() + q.r0, static_cast<size_t>(share) * 4, cudaMemcpyHostToDevice,
                                  r.stream));
    if (p > 0)
      SCURRY_CUDA(cudaMemcpyAsync(q.shift.data(), m.shift.data(), static_cast<size_t>(p) * 4, cudaMemcpyHostToDevice,
                                  r.stream));
    if (q.resident && share > 0) load_chunk(q, x, q.chunks[0]);
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    m.parts[k] = std::move(part);
  });
}

LogregGpu::~LogregGpu() = default;

int LogregGpu::streamed_devices() const {
  int s = 0;
  for (const auto& q : impl_->parts) s += q->resident ? 0 : 1;
  return s;
}

double LogregGpu::operator()(const std::vector<double>& w, std::vector<double>& g) {
  Impl& m = *impl_;
  const CsrF& x = *m.x;
  const int64_t n = m.n, p = m.p, R = m.R, nb = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  if (static_cast<int64_t>(w.size()) != R * (p + 1)) fail("logreg (gpu): ", w.size(), " weights, not ", R * (p + 1));
  // gene-major on the device (a warp's lanes read one gene's classes together), the intercepts last
  for (int64_t k = 0; k < R; ++k) {
    for (int64_t j = 0; j < p; ++j) m.h_wt[j * R + k] = w[k * p + j];
    m.h_wt[p * R + k] = w[R * p + k];
  }
  on_each_device(m.devices, [&](size_t k) {
    LogregPart& q = *m.parts[k];
    CudaResources& r = *q.r;
    SCURRY_CUDA(cudaMemcpyAsync(q.wt.data(), m.h_wt.data(), m.h_wt.size() * 8, cudaMemcpyHostToDevice, r.stream));
    if (p > 0) SCURRY_CUDA(cudaMemsetAsync(q.acc.data(), 0, static_cast<size_t>(p * R) * 8, r.stream));
    for (const Chunk& c : q.chunks) {
      const int64_t rows = c.r1 - c.r0, cb = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
      if (rows <= 0) continue;
      if (!q.resident) load_chunk(q, x, c);
      logreg_rows<<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, r.stream>>>(
          q.ptr.data(), x.indptr[c.r0], q.idx.data(), q.val.data(), rows, q.y.data() + (c.r0 - q.r0), m.K, m.R,
          q.wt.data(), p, q.shift.data(), q.D.data(), q.loss.data(), q.acc.data());
      SCURRY_CUDA_LAUNCH();
      logreg_block_sums<<<static_cast<unsigned>(cb), 64, 0, r.stream>>>(q.D.data(), q.loss.data(), rows, m.R,
                                                                        q.block_sums.data());
      SCURRY_CUDA_LAUNCH();
      SCURRY_CUDA(cudaMemcpyAsync(m.h_blocks.data() + c.r0 / kRowsPerBlock * (R + 1), q.block_sums.data(),
                                  static_cast<size_t>(cb * (R + 1)) * 8, cudaMemcpyDeviceToHost, r.stream));
      if (!q.resident) SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // (the buffers are reloaded next)
    }
    if (p > 0)
      SCURRY_CUDA(cudaMemcpyAsync(q.h_acc.data(), q.acc.data(), static_cast<size_t>(p * R) * 8, cudaMemcpyDeviceToHost,
                                  r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  });
  g.assign(static_cast<size_t>(R * (p + 1)), 0.0);
  for (int64_t j = 0; j < p; ++j)
    for (int64_t k = 0; k < R; ++k) {
      unsigned long long s = 0;  // (modulo 2^64: exact, the true sum is below 2^62 in magnitude)
      for (const auto& q : m.parts) s += q->h_acc[j * R + k];
      g[k * p + j] = std::ldexp(static_cast<double>(static_cast<long long>(s)), -m.shift[j]);
    }
  double f = 0;
  for (int64_t b = 0; b < nb; ++b) {  // (blocks in order)
    f += m.h_blocks[b * (R + 1)];
    for (int64_t k = 0; k < R; ++k) g[R * p + k] += m.h_blocks[b * (R + 1) + 1 + k];
  }
  return f;
}

}  // namespace scurry
