// scurry: batched NMF on one GPU (the semantics of nmf.hpp; replicates over several GPUs: later).
//
// Layout as on the CPU: W [n, R*k] and Ht [g, R*k] (replicate-interleaved rows), X as CSR and X^T as
// a second CSR (genes x cells). Per half-iteration:
//  - the per-replicate Grams (k x k) of H (resp. W) by one cuBLAS strided batched SGEMM over the
//    interleaved matrix (A_r = columns r*k..r*k+k, lda = R*k, stride k);
//  - one fused kernel, one thread per (row, replicate): gathers the row of X Ht_r (resp. X^T W_r)
//    over the row's nonzeros in float64, then applies HALS (sklearn's coordinate order) or the
//    multiplicative update in registers; no X Ht temporary, X read once per half-iteration for all
//    replicates. Violations and objective partials are summed with float64 atomics (their order
//    varies run to run: the last bits of the violation can differ between runs; factors do not
//    depend on it except through the stopping decision).
// Floors (H200: 4.3 TB/s, 51 TFLOP/s fp32): one iteration reads X twice (nnz * 8 bytes each, CSR
// values + indices) and the factors ~2 * (n + g) * R * k * 4 bytes several times; it computes
// 4 * nnz * R * k FLOPs for the gathers plus 2 * (n + g) * R * k^2 for the Grams and updates.
// Example, 1M cells, 2000 genes, nnz 3e8, R = 100, k = 10: gathers 1.2e12 FLOP -> 24 ms at fp32 peak
// (the gathers run in fp64 on 67 TFLOP/s: ~18 ms); bytes ~ 2 * 2.4 GB (X) + 8 GB (W reads) -> ~3 ms.
// So the floor is ~25 ms an iteration; the thread-per-(row, replicate) gather is not coalesced
// across the k columns of one thread, expect a few times the floor.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "nmf/nmf.hpp"

namespace scurry {

namespace {

constexpr int kThreads = 256;  // threads per block of the row kernels
constexpr int kMaxK = 64;      // most components handled by the register/local-memory kernels
constexpr double kEps32 = 1.1920928955078125e-07;
constexpr double kEps64 = 2.220446049250313e-16;

int64_t blocks_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

// Frobenius update (HALS or MU) of the rows of A given M (CSR, rows of A), B and the Grams G.
// cached: optional precomputed M B rows (float64, [m, rk]) when B is constant.
__global__ void frob_rows_kernel(int64_t m, int R, int k, const int64_t* __restrict__ indptr,
                                 const int32_t* __restrict__ indices, const float* __restrict__ vals,
                                 float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ G,
                                 const uint8_t* __restrict__ active, int cd, double* __restrict__ viol) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= m * R) return;
  const int64_t i = t / R;
  const int r = static_cast<int>(t % R);
  if (!active[r]) return;
  const int64_t rk = static_cast<int64_t>(R) * k;
  double acc[kMaxK], row[kMaxK], tmp[kMaxK];
  for (int c = 0; c < k; ++c) acc[c] = 0;
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
    const double x = vals[p];
    const float* b = B + static_cast<int64_t>(indices[p]) * rk + r * k;
    for (int c = 0; c < k; ++c) acc[c] += x * b[c];
  }
  float* a = A + i * rk + r * k;
  const float* g = G + static_cast<int64_t>(r) * k * k;
  for (int c = 0; c < k; ++c) row[c] = a[c];
  if (cd) {
    double v = 0;
    for (int s = 0; s < k; ++s) {
      double grad = -acc[s];
      for (int q = 0; q < k; ++q) grad += static_cast<double>(g[s * k + q]) * row[q];
      v += fabs(row[s] == 0 ? fmin(0.0, grad) : grad);
      const double hess = g[s * k + s];
      if (hess != 0) row[s] = fmax(row[s] - grad / hess, 0.0);
    }
    atomicAdd(viol + r, v);
    for (int c = 0; c < k; ++c) a[c] = static_cast<float>(row[c]);
  } else {
    for (int s = 0; s < k; ++s) {
      double den = 0;
      for (int q = 0; q < k; ++q) den += row[q] * static_cast<double>(g[q * k + s]);
      if (den == 0) den = kEps32;
      tmp[s] = row[s] * (acc[s] / den);
    }
    for (int c = 0; c < k; ++c) a[c] = static_cast<float>(tmp[c]);
  }
}

// Kullback-Leibler multiplicative update of the rows of A (is_h: sklearn's H rules).
__global__ void kl_rows_kernel(int64_t m, int R, int k, const int64_t* __restrict__ indptr,
                               const int32_t* __restrict__ indices, const float* __restrict__ vals,
                               float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bsum,
                               const uint8_t* __restrict__ active, int is_h) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= m * R) return;
  const int64_t i = t / R;
  const int r = static_cast<int>(t % R);
  if (!active[r]) return;
  const int64_t rk = static_cast<int64_t>(R) * k;
  float* a = A + i * rk + r * k;
  double acc[kMaxK], row[kMaxK];
  for (int c = 0; c < k; ++c) acc[c] = 0, row[c] = a[c];
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
    const double x = vals[p];
    const float* b = B + static_cast<int64_t>(indices[p]) * rk + r * k;
    double wh = 0;
    for (int c = 0; c < k; ++c) wh += row[c] * b[c];
    const double q = x / fmax(wh, kEps32);
    for (int c = 0; c < k; ++c) acc[c] += q * b[c];
  }
  for (int c = 0; c < k; ++c) {
    double den = bsum[r * k + c];
    if (is_h && den == 0) den = 1.0;
    if (den == 0) den = kEps32;
    double v = row[c] * (acc[c] / den);
    if (is_h && v < kEps64) v = 0;
    a[c] = static_cast<float>(v);
  }
}

// Objective partials per replicate: Frobenius cross term <X Ht_r, W_r>, or KL's sum x log(x/wh)
// (out[R] collects sum x over x > eps).
__global__ void objective_kernel(int64_t n, int R, int k, const int64_t* __restrict__ indptr,
                                 const int32_t* __restrict__ indices, const float* __restrict__ vals,
                                 const float* __restrict__ W, const float* __restrict__ Ht, int kl,
                                 double* __restrict__ out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * R) return;
  const int64_t i = t / R;
  const int r = static_cast<int>(t % R);
  const int64_t rk = static_cast<int64_t>(R) * k;
  const float* w = W + i * rk + r * k;
  double s = 0, sx = 0;
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
    const double x = vals[p];
    const float* h = Ht + static_cast<int64_t>(indices[p]) * rk + r * k;
    double wh = 0;
    for (int c = 0; c < k; ++c) wh += static_cast<double>(w[c]) * h[c];
    if (kl) {
      if (!(x > kEps32)) continue;
      s += x * log(x / fmax(wh, kEps32));
      sx += x;
    } else {
      s += x * wh;
    }
  }
  atomicAdd(out + r, s);
  if (kl && r == 0) atomicAdd(out + R, sx);
}

struct GpuFit {
  CudaResources& res;
  int R, k;
  int64_t n, g, rk;
  DeviceCsr X, Xt;
  DeviceArray<float> W, Ht, G, sums, ones;
  DeviceArray<uint8_t> active;
  DeviceArray<double> acc;

  GpuFit(CudaResources& r, const CsrF& x, const NmfBatch& f, bool need_t)
      : res(r), R(f.R), k(f.k), n(f.n), g(f.g), rk(f.rk()) {
    X = upload(res, x);
    if (need_t) Xt = upload(res, transpose(x));
    W = DeviceArray<float>(res, f.W.size(), "NMF W");
    Ht = DeviceArray<float>(res, f.Ht.size(), "NMF H");
    G = DeviceArray<float>(res, static_cast<size_t>(R) * k * k, "NMF Gram");
    sums = DeviceArray<float>(res, static_cast<size_t>(rk), "NMF sums");
    ones = DeviceArray<float>(res, static_cast<size_t>(std::max(n, g)), "NMF ones");
    active = DeviceArray<uint8_t>(res, static_cast<size_t>(R), "NMF active");
    acc = DeviceArray<double>(res, static_cast<size_t>(R) + 1, "NMF partials");
    SCURRY_CUDA(cudaMemcpyAsync(W.data(), f.W.data(), f.W.size() * 4, cudaMemcpyHostToDevice, res.stream));
    SCURRY_CUDA(cudaMemcpyAsync(Ht.data(), f.Ht.data(), f.Ht.size() * 4, cudaMemcpyHostToDevice, res.stream));
    const std::vector<float> one(static_cast<size_t>(std::max(n, g)), 1.0f);
    SCURRY_CUDA(cudaMemcpyAsync(ones.data(), one.data(), one.size() * 4, cudaMemcpyHostToDevice, res.stream));
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));
  }

  // Per-replicate Grams of the interleaved [m, rk] matrix A: one strided batched SGEMM.
  void grams(const float* A, int64_t m) {
    const float one = 1.0f, zero = 0.0f;
    if (m > INT32_MAX) fail("NMF on GPU: more than 2^31 rows in one Gram is not supported yet");
    SCURRY_CUBLAS(cublasSetStream(res.cublas, res.stream));
    SCURRY_CUBLAS(cublasSgemmStridedBatched(res.cublas, CUBLAS_OP_N, CUBLAS_OP_T, k, k, static_cast<int>(m), &one, A,
                                            static_cast<int>(rk), k, A, static_cast<int>(rk), k, &zero, G.data(), k,
                                            static_cast<long long>(k) * k, R));
  }
  // Per-replicate column sums of A [m, rk] into sums (SGEMV with a ones vector).
  void colsums(const float* A, int64_t m) {
    const float one = 1.0f, zero = 0.0f;
    SCURRY_CUBLAS(cublasSetStream(res.cublas, res.stream));
    SCURRY_CUBLAS(cublasSgemv(res.cublas, CUBLAS_OP_N, static_cast<int>(rk), static_cast<int>(m), &one, A,
                              static_cast<int>(rk), ones.data(), 1, &zero, sums.data(), 1));
  }
  std::vector<double> read_acc(size_t count) {
    std::vector<double> h(count);
    SCURRY_CUDA(cudaMemcpyAsync(h.data(), acc.data(), count * 8, cudaMemcpyDeviceToHost, res.stream));
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));
    return h;
  }
  void zero_acc() { SCURRY_CUDA(cudaMemsetAsync(acc.data(), 0, acc.size() * 8, res.stream)); }
  void set_active(const std::vector<uint8_t>& a) {
    SCURRY_CUDA(cudaMemcpyAsync(active.data(), a.data(), a.size(), cudaMemcpyHostToDevice, res.stream));
  }

  std::vector<double> objective(NmfLoss loss, double normx) {
    zero_acc();
    objective_kernel<<<blocks_for(n * R), kThreads, 0, res.stream>>>(n, R, k, X.indptr.data(), X.indices.data(),
                                                                     X.data.data(), W.data(), Ht.data(),
                                                                     loss == NmfLoss::kullback_leibler, acc.data());
    SCURRY_CUDA_LAUNCH();
    const std::vector<double> part = read_acc(static_cast<size_t>(R) + 1);
    std::vector<double> out(R);
    const size_t kk = static_cast<size_t>(k) * k;
    if (loss == NmfLoss::frobenius) {
      std::vector<float> wtw(R * kk), hht(R * kk);
      grams(W.data(), n);
      SCURRY_CUDA(cudaMemcpyAsync(wtw.data(), G.data(), wtw.size() * 4, cudaMemcpyDeviceToHost, res.stream));
      SCURRY_CUDA(cudaStreamSynchronize(res.stream));
      grams(Ht.data(), g);
      SCURRY_CUDA(cudaMemcpyAsync(hht.data(), G.data(), hht.size() * 4, cudaMemcpyDeviceToHost, res.stream));
      SCURRY_CUDA(cudaStreamSynchronize(res.stream));
      for (int r = 0; r < R; ++r) {
        double nwh = 0;
        for (size_t q = 0; q < kk; ++q) nwh += static_cast<double>(wtw[r * kk + q]) * hht[r * kk + q];
        out[r] = std::sqrt(std::max(normx + nwh - 2.0 * part[r], 0.0));
      }
    } else {
      std::vector<float> ws(rk), hs(rk);
      colsums(W.data(), n);
      SCURRY_CUDA(cudaMemcpyAsync(ws.data(), sums.data(), rk * 4, cudaMemcpyDeviceToHost, res.stream));
      SCURRY_CUDA(cudaStreamSynchronize(res.stream));
      colsums(Ht.data(), g);
      SCURRY_CUDA(cudaMemcpyAsync(hs.data(), sums.data(), rk * 4, cudaMemcpyDeviceToHost, res.stream));
      SCURRY_CUDA(cudaStreamSynchronize(res.stream));
      for (int r = 0; r < R; ++r) {
        double swh = 0;
        for (int c = 0; c < k; ++c) swh += static_cast<double>(ws[r * k + c]) * hs[r * k + c];
        out[r] = std::sqrt(2.0 * std::max(part[r] + swh - part[R], 0.0));
      }
    }
    return out;
  }
};

}  // namespace

NmfResult nmf_fit_gpu(const Context& ctx, const CsrF& X, NmfBatch init, const NmfOptions& opt) {
  CudaResources* res = ctx.cuda();
  if (!res) fail_input("--device", "the GPU NMF needs a CUDA context (--device gpu)");
  for (const float v : X.data)
    if (!std::isfinite(v) || v < 0) fail_input("NMF input", "X has the value ", v, "; NMF needs finite non-negative values");
  if (init.k > kMaxK) fail_input("-k", "the GPU NMF handles at most ", kMaxK, " components (got ", init.k, ")");
  const bool kl = opt.loss == NmfLoss::kullback_leibler, cd = opt.solver == NmfSolver::cd;
  if (kl && cd) fail_input("NMF", "the cd solver supports only the frobenius loss; use --solver mu for kullback-leibler");
  if (opt.max_iter < 1) fail_input("--max-iter", "must be at least 1 (got ", opt.max_iter, ")");
  const int R = init.R;
  double normx = 0;
  for (const float v : X.data) normx += static_cast<double>(v) * v;
  GpuFit f(*res, X, init, opt.update_h);
  NmfResult out;
  out.n_iter.assign(R, 0);
  std::vector<uint8_t> active(R, 1);
  f.set_active(active);
  std::vector<double> err_init, prev, vinit(R, 0.0);
  if (!cd) prev = err_init = f.objective(opt.loss, normx);
  const int64_t tn = f.n * R, tg = f.g * R;
  for (int it = 1; it <= opt.max_iter; ++it) {
    if (std::none_of(active.begin(), active.end(), [](uint8_t a) { return a != 0; })) break;
    f.zero_acc();
    if (kl) {
      f.colsums(f.Ht.data(), f.g);
      kl_rows_kernel<<<blocks_for(tn), kThreads, 0, res->stream>>>(f.n, R, f.k, f.X.indptr.data(), f.X.indices.data(),
                                                                   f.X.data.data(), f.W.data(), f.Ht.data(),
                                                                   f.sums.data(), f.active.data(), 0);
      SCURRY_CUDA_LAUNCH();
    } else {
      f.grams(f.Ht.data(), f.g);
      frob_rows_kernel<<<blocks_for(tn), kThreads, 0, res->stream>>>(f.n, R, f.k, f.X.indptr.data(),
                                                                     f.X.indices.data(), f.X.data.data(), f.W.data(),
                                                                     f.Ht.data(), f.G.data(), f.active.data(), cd,
                                                                     f.acc.data());
      SCURRY_CUDA_LAUNCH();
    }
    if (opt.update_h) {
      if (kl) {
        f.colsums(f.W.data(), f.n);
        kl_rows_kernel<<<blocks_for(tg), kThreads, 0, res->stream>>>(f.g, R, f.k, f.Xt.indptr.data(),
                                                                     f.Xt.indices.data(), f.Xt.data.data(),
                                                                     f.Ht.data(), f.W.data(), f.sums.data(),
                                                                     f.active.data(), 1);
        SCURRY_CUDA_LAUNCH();
      } else {
        f.grams(f.W.data(), f.n);
        frob_rows_kernel<<<blocks_for(tg), kThreads, 0, res->stream>>>(f.g, R, f.k, f.Xt.indptr.data(),
                                                                       f.Xt.indices.data(), f.Xt.data.data(),
                                                                       f.Ht.data(), f.W.data(), f.G.data(),
                                                                       f.active.data(), cd, f.acc.data());
        SCURRY_CUDA_LAUNCH();
      }
    }
    for (int r = 0; r < R; ++r)
      if (active[r]) out.n_iter[r] = it;
    bool changed = false;
    if (cd) {
      const std::vector<double> viol = f.read_acc(R);
      for (int r = 0; r < R; ++r) {
        if (!active[r]) continue;
        if (it == 1) vinit[r] = viol[r];
        if (vinit[r] == 0 || viol[r] / vinit[r] <= opt.tol) active[r] = 0, changed = true;
      }
    } else if (opt.tol > 0 && it % 10 == 0) {
      const std::vector<double> err = f.objective(opt.loss, normx);
      for (int r = 0; r < R; ++r) {
        if (!active[r]) continue;
        if ((prev[r] - err[r]) / err_init[r] < opt.tol) active[r] = 0, changed = true;
        prev[r] = err[r];
      }
    }
    if (changed) f.set_active(active);
  }
  out.error = f.objective(opt.loss, normx);
  SCURRY_CUDA(cudaMemcpyAsync(init.W.data(), f.W.data(), init.W.size() * 4, cudaMemcpyDeviceToHost, res->stream));
  SCURRY_CUDA(cudaMemcpyAsync(init.Ht.data(), f.Ht.data(), init.Ht.size() * 4, cudaMemcpyDeviceToHost, res->stream));
  SCURRY_CUDA(cudaStreamSynchronize(res->stream));
  out.f = std::move(init);
  return out;
}

}  // namespace scurry
