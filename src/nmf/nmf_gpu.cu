// scurry: batched NMF on one GPU (the semantics of nmf.hpp; several GPUs: nmf_gpus.cu).
//
// Layout as on the CPU: W [n, R*k] and Ht [g, R*k] (replicate-interleaved rows). X is held either
//  - sparse: CSR, plus X^T as a second CSR (genes x cells). One fused kernel per half-iteration,
//    one thread per (row, replicate), grid (row blocks, replicates): gathers the row of X Ht_r
//    (resp. X^T W_r) over the row's nonzeros in float64 and applies HALS (sklearn's coordinate
//    order) or the multiplicative update;
//  - dense: row-major n x g, densified once on the device. Per half-iteration one cuBLAS GEMM for all
//    replicates (P = X Ht_cat [n, R*k], or X^T W_cat [g, R*k]; float32 or TF32), then an update
//    kernel per (row, replicate) reading P, with the replicate's Gram in shared memory and the row in
//    registers (templated on a bound of k).
// Every per-replicate reduction (Grams, column sums, HALS violations, objectives) is made over fixed
// row chunks / row blocks that do not depend on R, partials summed in a fixed order (never atomics),
// so in the sparse layout a replicate's factors do not depend on its batch mates or on the number of
// GPUs, bit for bit; in the dense layout the GEMM kernel cuBLAS picks depends on R * k (float32
// rounding differences).
//
// Floors (H200: 4.3 TB/s, 51 TFLOP/s fp32, ~450 TFLOP/s TF32), per iteration of R replicates:
//  dense: 4 n g R k FLOPs (two GEMMs) + ~4 (n + g) R k^2 (Grams, updates); bytes 2 n g 4 (X read
//   twice) + ~6 (n + g) R k 4 (factors and P). 2.4M cells x 2000 genes, k = 60, R = 20: 2.3e13 FLOP
//   -> 0.45 s fp32 / ~50 ms TF32 per iteration; bytes 38 GB + 69 GB -> 25 ms. fp32 is compute-bound:
//   100 iterations of 20 replicates >= 45 s, i.e. <= 0.44 replicates/s per GPU at k = 60 (2.7 at
//   k = 10); TF32 roughly 4-8x that.
//  sparse: 4 nnz R k FLOPs in float64 gathers (not coalesced across a thread's k columns), X read
//   twice (nnz * 8 bytes each): a few times the dense layout's time above ~3% density.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "nmf/nmf.hpp"
#include "nmf/nmf_gpu.cuh"

namespace scurry {

namespace {

constexpr int kThreads = 256;           // threads per block of the row kernels (a power of two)
constexpr int kMaxK = kNmfGpuMaxK;      // most components handled by the row kernels
constexpr int64_t kChunk = 32768;       // rows per partial of the Gram / column-sum reductions
constexpr int kGramRows = 32;           // rows staged in shared memory by the Gram kernel
constexpr int kGramThreads = 256;       // 16 x 16 threads, each a 4 x 4 tile of a 64 x 64 Gram
constexpr int64_t kSumChunk = 1 << 16;  // values per partial of the value sums
constexpr double kEps32 = 1.1920928955078125e-07;
constexpr double kEps64 = 2.220446049250313e-16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sum over the block (blockDim.x == kThreads) in a fixed tree order; every thread must call it.
__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double out = sh[0];
  __syncthreads();
  return out;
}

// ---- reductions --------------------------------------------------------------------------------

// Per (chunk, replicate) partial Gram of the k columns of replicate r of A [m, R*k]:
// part[(chunk * R + r) * k * k + a * k + b], float64.
__global__ void gram_part_kernel(int64_t m, int R, int k, const float* __restrict__ A, double* __restrict__ part) {
  __shared__ float s[kGramRows][kMaxK];
  const int64_t chunk = blockIdx.x;
  const int r = blockIdx.y;
  const int64_t rk = static_cast<int64_t>(R) * k;
  const int64_t lo = chunk * kChunk, hi = min(m, lo + kChunk);
  const int a0 = (threadIdx.x / 16) * 4, b0 = (threadIdx.x % 16) * 4;
  double acc[4][4];
  for (int x = 0; x < 4; ++x)
    for (int y = 0; y < 4; ++y) acc[x][y] = 0;
  for (int64_t base = lo; base < hi; base += kGramRows) {
    for (int e = threadIdx.x; e < kGramRows * kMaxK; e += blockDim.x) {
      const int rr = e / kMaxK, c = e % kMaxK;
      const int64_t i = base + rr;
      s[rr][c] = (c < k && i < hi) ? A[i * rk + static_cast<int64_t>(r) * k + c] : 0.0f;
    }
    __syncthreads();
    if (a0 < k && b0 < k) {
      for (int rr = 0; rr < kGramRows; ++rr) {
        float av[4], bv[4];
        for (int x = 0; x < 4; ++x) av[x] = s[rr][a0 + x], bv[x] = s[rr][b0 + x];
        for (int x = 0; x < 4; ++x)
          for (int y = 0; y < 4; ++y) acc[x][y] += static_cast<double>(av[x]) * bv[y];
      }
    }
    __syncthreads();
  }
  const int64_t kk = static_cast<int64_t>(k) * k;
  double* o = part + (chunk * R + r) * kk;
  for (int x = 0; x < 4; ++x)
    for (int y = 0; y < 4; ++y)
      if (a0 + x < k && b0 + y < k) o[(a0 + x) * k + b0 + y] = acc[x][y];
}

// Per (chunk, replicate) partial column sums of replicate r of A: part[(chunk * R + r) * k + c].
__global__ void colsum_part_kernel(int64_t m, int R, int k, const float* __restrict__ A, double* __restrict__ part) {
  const int64_t chunk = blockIdx.x;
  const int r = blockIdx.y, c = threadIdx.x;
  if (c >= k) return;
  const int64_t rk = static_cast<int64_t>(R) * k;
  const int64_t lo = chunk * kChunk, hi = min(m, lo + kChunk);
  double s = 0;
  for (int64_t i = lo; i < hi; ++i) s += A[i * rk + static_cast<int64_t>(r) * k + c];
  part[(chunk * R + r) * k + c] = s;
}

// out[r * width + e] = sum over chunks, in order, of part[(chunk * R + r) * width + e].
__global__ void sum_chunks_kernel(int64_t n_chunks, int R, int64_t width, const double* __restrict__ part,
                                  double* __restrict__ out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= R * width) return;
  const int64_t r = t / width, e = t % width;
  double s = 0;
  for (int64_t c = 0; c < n_chunks; ++c) s += part[(c * R + r) * width + e];
  out[t] = s;
}

// out[r] (+)= sum over blocks, in order, of part[r * n_parts + b].
__global__ void sum_parts_kernel(int R, int64_t n_parts, const double* __restrict__ part, double* __restrict__ out,
                                 int accumulate) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  double s = 0;
  for (int64_t b = 0; b < n_parts; ++b) s += part[static_cast<int64_t>(r) * n_parts + b];
  out[r] = accumulate ? out[r] + s : s;
}

// Per chunk of values: sum, sum of squares, sum of the values > float32 eps: part[chunk * 3 + q].
__global__ void value_sums_kernel(int64_t nnz, const float* __restrict__ v, double* __restrict__ part) {
  __shared__ double sh[kThreads];
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kSumChunk, hi = min(nnz, lo + kSumChunk);
  double s0 = 0, s1 = 0, s2 = 0;
  for (int64_t p = lo + threadIdx.x; p < hi; p += kThreads) {
    const double x = v[p];
    s0 += x, s1 += x * x;
    if (x > kEps32) s2 += x;
  }
  s0 = block_sum(s0, sh);
  s1 = block_sum(s1, sh);
  s2 = block_sum(s2, sh);
  if (threadIdx.x == 0) part[blockIdx.x * 3] = s0, part[blockIdx.x * 3 + 1] = s1, part[blockIdx.x * 3 + 2] = s2;
}

// Dense D (zeroed) <- CSR, one warp per row.
__global__ void densify_kernel(int64_t n, int64_t g, const int64_t* __restrict__ indptr,
                               const int32_t* __restrict__ indices, const float* __restrict__ vals, float* __restrict__ D) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= n) return;
  for (int64_t p = indptr[w] + lane; p < indptr[w + 1]; p += 32) D[w * g + indices[p]] = vals[p];
}

// ---- updates -----------------------------------------------------------------------------------

// Sparse Frobenius update (HALS or MU) of row i of replicate r = blockIdx.y of A, given M (CSR, the
// rows of A), B and the Grams G (float64). viol_part[r * gridDim.x + blockIdx.x]: the block's HALS
// violation.
__global__ void frob_sparse_kernel(int64_t m, int R, int k, const int64_t* __restrict__ indptr,
                                   const int32_t* __restrict__ indices, const float* __restrict__ vals,
                                   float* __restrict__ A, const float* __restrict__ B, const double* __restrict__ G,
                                   const uint8_t* __restrict__ active, int cd, double* __restrict__ viol_part) {
  __shared__ double sh[kThreads];
  const int r = blockIdx.y;
  if (!active[r]) return;  // uniform over the block
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  double v = 0;
  if (i < m) {
    const int64_t rk = static_cast<int64_t>(R) * k;
    double acc[kMaxK], row[kMaxK], tmp[kMaxK];
    for (int c = 0; c < k; ++c) acc[c] = 0;
    for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
      const double x = vals[p];
      const float* b = B + static_cast<int64_t>(indices[p]) * rk + static_cast<int64_t>(r) * k;
      for (int c = 0; c < k; ++c) acc[c] += x * b[c];
    }
    float* a = A + i * rk + static_cast<int64_t>(r) * k;
    const double* g = G + static_cast<int64_t>(r) * k * k;
    for (int c = 0; c < k; ++c) row[c] = a[c];
    if (cd) {
      for (int s = 0; s < k; ++s) {
        double grad = -acc[s];
        for (int q = 0; q < k; ++q) grad += g[s * k + q] * row[q];
        v += fabs(row[s] == 0 ? fmin(0.0, grad) : grad);
        const double hess = g[s * k + s];
        if (hess != 0) row[s] = fmax(row[s] - grad / hess, 0.0);
      }
      for (int c = 0; c < k; ++c) a[c] = static_cast<float>(row[c]);
    } else {
      for (int s = 0; s < k; ++s) {
        double den = 0;
        for (int q = 0; q < k; ++q) den += row[q] * g[q * k + s];
        if (den == 0) den = kEps32;
        tmp[s] = row[s] * (acc[s] / den);
      }
      for (int c = 0; c < k; ++c) a[c] = static_cast<float>(tmp[c]);
    }
  }
  v = block_sum(v, sh);
  if (threadIdx.x == 0) viol_part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = v;
}

// Dense Frobenius update of row i of replicate r = blockIdx.y of A given P = (M B)[i, r] (float32,
// from the GEMM) and the Gram G; KM >= k bounds k at compile time so that the row stays in registers
// (the Gram is zero-padded to KM x KM in shared memory). float32 arithmetic.
template <int KM>
__global__ void frob_dense_kernel(int64_t m, int R, int k, const float* __restrict__ P, float* __restrict__ A,
                                  const double* __restrict__ G, const uint8_t* __restrict__ active, int cd,
                                  double* __restrict__ viol_part) {
  __shared__ float gs[KM * KM];
  __shared__ double sh[kThreads];
  const int r = blockIdx.y;
  if (!active[r]) return;  // uniform over the block
  for (int e = threadIdx.x; e < KM * KM; e += blockDim.x) {
    const int a = e / KM, b = e % KM;
    gs[e] = (a < k && b < k) ? static_cast<float>(G[static_cast<int64_t>(r) * k * k + a * k + b]) : 0.0f;
  }
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  double v = 0;
  if (i < m) {
    const int64_t off = i * R * static_cast<int64_t>(k) + static_cast<int64_t>(r) * k;
    const float* p = P + off;
    float* a = A + off;
    float row[KM];
#pragma unroll
    for (int c = 0; c < KM; ++c) row[c] = c < k ? a[c] : 0.0f;
    if (cd) {
#pragma unroll
      for (int s = 0; s < KM; ++s) {
        if (s < k) {
          float grad = -p[s];
#pragma unroll
          for (int q = 0; q < KM; ++q) grad = fmaf(gs[s * KM + q], row[q], grad);
          v += fabs(static_cast<double>(row[s] == 0.0f ? fminf(0.0f, grad) : grad));
          const float hess = gs[s * KM + s];
          if (hess != 0.0f) row[s] = fmaxf(row[s] - grad / hess, 0.0f);
        }
      }
    } else {
      float out[KM];
#pragma unroll
      for (int s = 0; s < KM; ++s) {
        float den = 0;
#pragma unroll
        for (int q = 0; q < KM; ++q) den = fmaf(row[q], gs[q * KM + s], den);
        if (den == 0.0f) den = static_cast<float>(kEps32);
        out[s] = s < k ? row[s] * (p[s] / den) : 0.0f;
      }
#pragma unroll
      for (int s = 0; s < KM; ++s) row[s] = out[s];
    }
#pragma unroll
    for (int c = 0; c < KM; ++c)
      if (c < k) a[c] = row[c];
  }
  v = block_sum(v, sh);
  if (threadIdx.x == 0) viol_part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = v;
}

// Kullback-Leibler multiplicative update of the rows of A (is_h: sklearn's H rules); one thread per
// (row, replicate); no reduction.
__global__ void kl_rows_kernel(int64_t m, int R, int k, const int64_t* __restrict__ indptr,
                               const int32_t* __restrict__ indices, const float* __restrict__ vals,
                               float* __restrict__ A, const float* __restrict__ B, const double* __restrict__ bsum,
                               const uint8_t* __restrict__ active, int is_h) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= m * R) return;
  const int64_t i = t / R;
  const int r = static_cast<int>(t % R);
  if (!active[r]) return;
  const int64_t rk = static_cast<int64_t>(R) * k;
  float* a = A + i * rk + static_cast<int64_t>(r) * k;
  double acc[kMaxK], row[kMaxK];
  for (int c = 0; c < k; ++c) acc[c] = 0, row[c] = a[c];
  for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
    const double x = vals[p];
    const float* b = B + static_cast<int64_t>(indices[p]) * rk + static_cast<int64_t>(r) * k;
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

// ---- objective partials ------------------------------------------------------------------------

// Sparse: per (row block, replicate) the Frobenius cross term <X Ht_r, W_r> or KL's sum over
// x > eps of x log(x / max(wh, eps)).
__global__ void objective_sparse_kernel(int64_t n, int R, int k, const int64_t* __restrict__ indptr,
                                        const int32_t* __restrict__ indices, const float* __restrict__ vals,
                                        const float* __restrict__ W, const float* __restrict__ Ht, int kl,
                                        double* __restrict__ part) {
  __shared__ double sh[kThreads];
  const int r = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  double s = 0;
  if (i < n) {
    const int64_t rk = static_cast<int64_t>(R) * k;
    const float* w = W + i * rk + static_cast<int64_t>(r) * k;
    for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
      const double x = vals[p];
      const float* h = Ht + static_cast<int64_t>(indices[p]) * rk + static_cast<int64_t>(r) * k;
      double wh = 0;
      for (int c = 0; c < k; ++c) wh += static_cast<double>(w[c]) * h[c];
      if (kl) {
        if (x > kEps32) s += x * log(x / fmax(wh, kEps32));
      } else {
        s += x * wh;
      }
    }
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = s;
}

// Dense: per (row block, replicate) <P_r, W_r> with P = X Ht_cat.
__global__ void objective_dense_kernel(int64_t n, int R, int k, const float* __restrict__ P,
                                       const float* __restrict__ W, double* __restrict__ part) {
  __shared__ double sh[kThreads];
  const int r = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  double s = 0;
  if (i < n) {
    const int64_t off = i * R * static_cast<int64_t>(k) + static_cast<int64_t>(r) * k;
    for (int c = 0; c < k; ++c) s += static_cast<double>(P[off + c]) * W[off + c];
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = s;
}

// ---- the fit -----------------------------------------------------------------------------------

struct Fit {
  CudaResources& res;
  const NmfDeviceX& X;
  const NmfDeviceFactors& f;  // updated in place through its device pointers
  int R, k;
  int64_t n, g, rk, kk;
  bool tf32;
  DeviceArray<double> G, sums, part, vpart, acc;
  DeviceArray<float> P;  // dense layout: X Ht_cat [n, rk] (and X^T W_cat [g, rk])
  DeviceArray<uint8_t> active;

  Fit(CudaResources& r, const NmfDeviceX& x, const NmfDeviceFactors& fa, bool use_tf32)
      : res(r), X(x), f(fa), R(fa.R), k(fa.k), n(fa.n), g(fa.g), rk(fa.rk()),
        kk(static_cast<int64_t>(fa.k) * fa.k), tf32(use_tf32) {
    const int64_t chunks = ceil_div(std::max(n, g), kChunk), blocks = ceil_div(std::max(n, g), kThreads);
    G = DeviceArray<double>(res, static_cast<size_t>(R * kk), "NMF Grams");
    sums = DeviceArray<double>(res, static_cast<size_t>(rk), "NMF column sums");
    part = DeviceArray<double>(res, static_cast<size_t>(chunks * R * kk), "NMF Gram partials");
    vpart = DeviceArray<double>(res, static_cast<size_t>(blocks) * R, "NMF block partials");
    acc = DeviceArray<double>(res, static_cast<size_t>(R) + 1, "NMF per-replicate sums");
    active = DeviceArray<uint8_t>(res, static_cast<size_t>(R), "NMF active");
    if (X.dense) P = DeviceArray<float>(res, static_cast<size_t>(std::max(n, g) * rk), "NMF dense products X Ht");
    SCURRY_CUDA(cudaMemsetAsync(vpart.data(), 0, vpart.size() * 8, res.stream));
    SCURRY_CUDA(cudaMemsetAsync(acc.data(), 0, acc.size() * 8, res.stream));
  }

  dim3 row_grid(int64_t m) const { return dim3(static_cast<unsigned>(ceil_div(m, kThreads)), static_cast<unsigned>(R)); }

  // G <- per-replicate Grams of A [m, rk] (float64, fixed chunk order).
  void grams(const float* A, int64_t m) {
    const int64_t chunks = ceil_div(m, kChunk);
    gram_part_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(R)), kGramThreads, 0, res.stream>>>(
        m, R, k, A, part.data());
    SCURRY_CUDA_LAUNCH();
    sum_chunks_kernel<<<static_cast<unsigned>(ceil_div(R * kk, kThreads)), kThreads, 0, res.stream>>>(
        chunks, R, kk, part.data(), G.data());
    SCURRY_CUDA_LAUNCH();
  }
  // sums <- per-replicate column sums of A [m, rk].
  void colsums(const float* A, int64_t m) {
    const int64_t chunks = ceil_div(m, kChunk);
    colsum_part_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(R)), kMaxK, 0, res.stream>>>(
        m, R, k, A, part.data());
    SCURRY_CUDA_LAUNCH();
    sum_chunks_kernel<<<static_cast<unsigned>(ceil_div(rk, kThreads)), kThreads, 0, res.stream>>>(chunks, R, k, part.data(),
                                                                                                sums.data());
    SCURRY_CUDA_LAUNCH();
  }
  // acc[0..R) (+)= per-replicate sums of vpart [R][blocks].
  void sum_parts(int64_t blocks, bool accumulate) {
    sum_parts_kernel<<<static_cast<unsigned>(ceil_div(R, kThreads)), kThreads, 0, res.stream>>>(R, blocks, vpart.data(),
                                                                                              acc.data(), accumulate);
    SCURRY_CUDA_LAUNCH();
  }
  void gemm(cublasOperation_t opb, int m_, int n_, int k_, const float* A, int lda, const float* B, int ldb, float* C,
            int ldc) {
    const float one = 1.0f, zero = 0.0f;
    SCURRY_CUBLAS(cublasSetStream(res.cublas, res.stream));
    SCURRY_CUBLAS(cublasGemmEx(res.cublas, CUBLAS_OP_N, opb, m_, n_, k_, &one, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb,
                               &zero, C, CUDA_R_32F, ldc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
  }
  // P [n, rk] = X [n, g] Ht [g, rk]  (column-major: P^T [rk, n] = Ht^T [rk, g] X^T [g, n]).
  void gemm_xh() {
    gemm(CUBLAS_OP_N, static_cast<int>(rk), static_cast<int>(n), static_cast<int>(g), f.Ht.data(), static_cast<int>(rk),
         X.D.data(), static_cast<int>(g), P.data(), static_cast<int>(rk));
  }
  // P[0 .. g*rk) = X^T W  (column-major: [rk, g] = W^T [rk, n] (X^T [g, n])^T).
  void gemm_xtw() {
    gemm(CUBLAS_OP_T, static_cast<int>(rk), static_cast<int>(g), static_cast<int>(n), f.W.data(), static_cast<int>(rk),
         X.D.data(), static_cast<int>(g), P.data(), static_cast<int>(rk));
  }
  void frob_dense(int64_t m, float* A, int cd) {
    const dim3 grid = row_grid(m);
    if (k <= 8) frob_dense_kernel<8><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    else if (k <= 16) frob_dense_kernel<16><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    else if (k <= 32) frob_dense_kernel<32><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    else frob_dense_kernel<64><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    SCURRY_CUDA_LAUNCH();
  }
  void frob_sparse(const DeviceCsr& M, float* A, const float* B, int cd) {
    frob_sparse_kernel<<<row_grid(M.n_rows), kThreads, 0, res.stream>>>(M.n_rows, R, k, M.indptr.data(), M.indices.data(),
                                                                       M.data.data(), A, B, G.data(), active.data(), cd,
                                                                       vpart.data());
    SCURRY_CUDA_LAUNCH();
  }
  void kl_update(const DeviceCsr& M, float* A, const float* B, int is_h) {
    kl_rows_kernel<<<static_cast<unsigned>(ceil_div(M.n_rows * R, kThreads)), kThreads, 0, res.stream>>>(
        M.n_rows, R, k, M.indptr.data(), M.indices.data(), M.data.data(), A, B, sums.data(), active.data(), is_h);
    SCURRY_CUDA_LAUNCH();
  }
  std::vector<double> read(const DeviceArray<double>& a, size_t count) {
    std::vector<double> h(count);
    SCURRY_CUDA(cudaMemcpyAsync(h.data(), a.data(), count * 8, cudaMemcpyDeviceToHost, res.stream));
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));
    return h;
  }
  void set_active(const std::vector<uint8_t>& a) {
    SCURRY_CUDA(cudaMemcpyAsync(active.data(), a.data(), a.size(), cudaMemcpyHostToDevice, res.stream));
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));  // `a` may change before the copy would run
  }

  std::vector<double> objective(NmfLoss loss) {
    const bool kl = loss == NmfLoss::kullback_leibler;
    const int64_t blocks = ceil_div(n, kThreads);
    if (X.dense) {
      gemm_xh();
      objective_dense_kernel<<<row_grid(n), kThreads, 0, res.stream>>>(n, R, k, P.data(), f.W.data(), vpart.data());
    } else {
      objective_sparse_kernel<<<row_grid(n), kThreads, 0, res.stream>>>(n, R, k, X.X.indptr.data(), X.X.indices.data(),
                                                                       X.X.data.data(), f.W.data(), f.Ht.data(), kl,
                                                                       vpart.data());
    }
    SCURRY_CUDA_LAUNCH();
    sum_parts(blocks, false);
    const std::vector<double> cross = read(acc, static_cast<size_t>(R));
    std::vector<double> out(R);
    if (!kl) {
      grams(f.W.data(), n);
      const std::vector<double> wtw = read(G, static_cast<size_t>(R * kk));
      grams(f.Ht.data(), g);
      const std::vector<double> hht = read(G, static_cast<size_t>(R * kk));
      for (int r = 0; r < R; ++r) {
        double nwh = 0;
        for (int64_t q = 0; q < kk; ++q) nwh += wtw[r * kk + q] * hht[r * kk + q];
        out[r] = std::sqrt(std::max(X.sum_sq + nwh - 2.0 * cross[r], 0.0));
      }
    } else {
      colsums(f.W.data(), n);
      const std::vector<double> ws = read(sums, static_cast<size_t>(rk));
      colsums(f.Ht.data(), g);
      const std::vector<double> hs = read(sums, static_cast<size_t>(rk));
      for (int r = 0; r < R; ++r) {
        double swh = 0;
        for (int c = 0; c < k; ++c) swh += ws[r * k + c] * hs[r * k + c];
        out[r] = std::sqrt(2.0 * std::max(cross[r] + swh - X.sum_pos, 0.0));
      }
    }
    return out;
  }
};

void check_shapes(const NmfDeviceX& X, const NmfDeviceFactors& f, const NmfOptions& opt) {
  if (f.n != X.n || f.g != X.g) fail("NMF on GPU: factors are for ", f.n, " x ", f.g, " but X is ", X.n, " x ", X.g);
  if (f.k < 1) fail_input("NMF", "the number of components k must be at least 1 (got ", f.k, ")");
  if (f.k > kMaxK) fail_input("-k", "the GPU NMF handles at most ", kMaxK, " components (got ", f.k, ")");
  if (f.R < 1 || f.R > 65535) fail("NMF on GPU: ", f.R, " replicates in one batch (1..65535)");
  if (X.n > INT32_MAX || X.g > INT32_MAX || f.rk() > INT32_MAX) fail("NMF on GPU: dimensions above 2^31 are not supported");
  const bool kl = opt.loss == NmfLoss::kullback_leibler;
  if (kl && opt.solver == NmfSolver::cd)
    fail_input("NMF", "the cd solver supports only the frobenius loss; use --solver mu for kullback-leibler");
  if (kl && X.dense) fail_input("NMF", "the dense GPU layout supports only the frobenius loss; use the sparse layout");
  if (opt.update_h && !X.dense && X.Xt.n_rows != X.g) fail("NMF on GPU: X^T is missing");
  if (opt.max_iter < 1) fail_input("--max-iter", "must be at least 1 (got ", opt.max_iter, ")");
  if (!(opt.tol >= 0)) fail_input("--tol", "must be >= 0 (got ", opt.tol, ")");
}

}  // namespace

NmfDeviceX nmf_device_x(CudaResources& res, DeviceCsr Xc, const CsrF* host, const NmfOptions& opt, int R, int k) {
  NmfDeviceX x;
  x.n = Xc.n_rows, x.g = Xc.n_cols, x.nnz = Xc.nnz;
  if (host) {
    for (const float v : host->data) {
      const double d = v;
      x.sum += d, x.sum_sq += d * d;
      if (d > kEps32) x.sum_pos += d;
    }
  } else if (x.nnz > 0) {
    const int64_t chunks = ceil_div(x.nnz, kSumChunk);
    DeviceArray<double> part(res, static_cast<size_t>(chunks) * 3, "NMF value sums");
    value_sums_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, res.stream>>>(x.nnz, Xc.data.data(), part.data());
    SCURRY_CUDA_LAUNCH();
    std::vector<double> h(static_cast<size_t>(chunks) * 3);
    SCURRY_CUDA(cudaMemcpyAsync(h.data(), part.data(), h.size() * 8, cudaMemcpyDeviceToHost, res.stream));
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));
    for (int64_t c = 0; c < chunks; ++c) x.sum += h[c * 3], x.sum_sq += h[c * 3 + 1], x.sum_pos += h[c * 3 + 2];
  }
  const bool kl = opt.loss == NmfLoss::kullback_leibler;
  bool dense = opt.gpu_layout == NmfGpuLayout::dense;
  if (dense && kl) fail_input("NMF", "the dense GPU layout supports only the frobenius loss");
  if (opt.gpu_layout == NmfGpuLayout::automatic && !kl && x.n > 0 && x.g > 0) {
    const double density = static_cast<double>(x.nnz) / (static_cast<double>(x.n) * static_cast<double>(x.g));
    size_t free_b = 0, total_b = 0;
    SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const double dense_b = static_cast<double>(x.n) * x.g * 4;
    const double csr_b = static_cast<double>(x.nnz) * 8 + static_cast<double>(x.n + 1) * 8;
    const double factors_b = 3.0 * static_cast<double>(x.n + x.g) * R * k * 4;  // W, Ht, P
    dense = density >= opt.gpu_dense_min_density && dense_b <= 0.95 * static_cast<double>(free_b) &&
            dense_b + factors_b <= 0.9 * (static_cast<double>(free_b) + csr_b);
  }
  if (dense) {
    x.dense = true;
    x.D = DeviceArray<float>(res, static_cast<size_t>(x.n * x.g), "NMF dense X");
    SCURRY_CUDA(cudaMemsetAsync(x.D.data(), 0, static_cast<size_t>(x.n * x.g) * 4, res.stream));
    if (x.nnz > 0) {
      densify_kernel<<<static_cast<unsigned>(ceil_div(x.n * 32, kThreads)), kThreads, 0, res.stream>>>(
          x.n, x.g, Xc.indptr.data(), Xc.indices.data(), Xc.data.data(), x.D.data());
      SCURRY_CUDA_LAUNCH();
    }
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));
    return x;  // the CSR (Xc) is released here
  }
  if (opt.update_h) {
    if (host) {
      x.Xt = upload(res, transpose(*host));
    } else {
      const CsrF h = download(res, Xc);
      x.Xt = upload(res, transpose(h));
    }
  }
  x.X = std::move(Xc);
  return x;
}

NmfDeviceFactors nmf_upload_factors(CudaResources& res, const NmfBatch& b) {
  NmfDeviceFactors f;
  f.n = b.n, f.g = b.g, f.k = b.k, f.R = b.R;
  f.W = DeviceArray<float>(res, b.W.size(), "NMF W");
  f.Ht = DeviceArray<float>(res, b.Ht.size(), "NMF H");
  SCURRY_CUDA(cudaMemcpyAsync(f.W.data(), b.W.data(), b.W.size() * 4, cudaMemcpyHostToDevice, res.stream));
  SCURRY_CUDA(cudaMemcpyAsync(f.Ht.data(), b.Ht.data(), b.Ht.size() * 4, cudaMemcpyHostToDevice, res.stream));
  SCURRY_CUDA(cudaStreamSynchronize(res.stream));
  return f;
}

void nmf_download_factors(CudaResources& res, const NmfDeviceFactors& f, NmfBatch& out) {
  out.n = f.n, out.g = f.g, out.k = f.k, out.R = f.R;
  out.W.resize(f.W.size());
  out.Ht.resize(f.Ht.size());
  if (!out.W.empty()) copy_to_host(res, out.W.data(), f.W.data(), out.W.size() * 4);
  if (!out.Ht.empty()) copy_to_host(res, out.Ht.data(), f.Ht.data(), out.Ht.size() * 4);
}

std::vector<double> nmf_device_objective(CudaResources& res, const NmfDeviceX& X, const NmfDeviceFactors& f,
                                         NmfLoss loss, bool tf32) {
  Fit fit(res, X, f, tf32);
  return fit.objective(loss);
}

NmfDeviceStats nmf_fit_device(CudaResources& res, const NmfDeviceX& X, NmfDeviceFactors& f, const NmfOptions& opt,
                              bool final_error) {
  check_shapes(X, f, opt);
  const int R = f.R;
  const bool kl = opt.loss == NmfLoss::kullback_leibler, cd = opt.solver == NmfSolver::cd;
  Fit fit(res, X, f, opt.gpu_tf32 && X.dense);
  NmfDeviceStats out;
  out.n_iter.assign(R, 0);
  std::vector<uint8_t> active(R, 1);
  fit.set_active(active);
  std::vector<double> err_init, prev, vinit(R, 0.0);
  if (!cd && opt.tol > 0) prev = err_init = fit.objective(opt.loss);
  const int64_t bn = ceil_div(f.n, kThreads), bg = ceil_div(f.g, kThreads);
  for (int it = 1; it <= opt.max_iter; ++it) {
    if (std::none_of(active.begin(), active.end(), [](uint8_t a) { return a != 0; })) break;
    // W half-step.
    if (kl) {
      fit.colsums(f.Ht.data(), f.g);
      fit.kl_update(X.X, f.W.data(), f.Ht.data(), 0);
    } else {
      fit.grams(f.Ht.data(), f.g);
      if (X.dense) {
        fit.gemm_xh();
        fit.frob_dense(f.n, f.W.data(), cd);
      } else {
        fit.frob_sparse(X.X, f.W.data(), f.Ht.data(), cd);
      }
      fit.sum_parts(bn, false);
    }
    // H half-step.
    if (opt.update_h) {
      if (kl) {
        fit.colsums(f.W.data(), f.n);
        fit.kl_update(X.Xt, f.Ht.data(), f.W.data(), 1);
      } else {
        fit.grams(f.W.data(), f.n);
        if (X.dense) {
          fit.gemm_xtw();
          fit.frob_dense(f.g, f.Ht.data(), cd);
        } else {
          fit.frob_sparse(X.Xt, f.Ht.data(), f.W.data(), cd);
        }
        fit.sum_parts(bg, true);
      }
    }
    for (int r = 0; r < R; ++r)
      if (active[r]) out.n_iter[r] = it;
    bool changed = false;
    if (cd) {
      const std::vector<double> viol = fit.read(fit.acc, static_cast<size_t>(R));
      for (int r = 0; r < R; ++r) {
        if (!active[r]) continue;
        if (it == 1) vinit[r] = viol[r];
        if (vinit[r] == 0 || viol[r] / vinit[r] <= opt.tol) active[r] = 0, changed = true;
      }
    } else if (opt.tol > 0 && it % 10 == 0) {
      const std::vector<double> err = fit.objective(opt.loss);
      for (int r = 0; r < R; ++r) {
        if (!active[r]) continue;
        if ((prev[r] - err[r]) / err_init[r] < opt.tol) active[r] = 0, changed = true;
        prev[r] = err[r];
      }
    }
    if (changed) fit.set_active(active);
  }
  if (final_error) out.error = fit.objective(opt.loss);
  SCURRY_CUDA(cudaStreamSynchronize(res.stream));
  return out;
}

NmfResult nmf_fit_gpu_on(CudaResources& res, const CsrF& X, NmfBatch init, const NmfOptions& opt) {
  for (const float v : X.data)
    if (!std::isfinite(v) || v < 0) fail_input("NMF input", "X has the value ", v, "; NMF needs finite non-negative values");
  if (init.n != X.n_rows || init.g != X.n_cols)
    fail("nmf_fit_gpu: factors are for ", init.n, " x ", init.g, " but X is ", X.n_rows, " x ", X.n_cols);
  if (init.k > kMaxK) fail_input("-k", "the GPU NMF handles at most ", kMaxK, " components (got ", init.k, ")");
  const NmfDeviceX x = nmf_device_x(res, upload(res, X), &X, opt, init.R, init.k);
  NmfDeviceFactors f = nmf_upload_factors(res, init);
  NmfDeviceStats st = nmf_fit_device(res, x, f, opt, true);
  nmf_download_factors(res, f, init);
  NmfResult out;
  out.f = std::move(init);
  out.n_iter = std::move(st.n_iter);
  out.error = std::move(st.error);
  return out;
}

NmfResult nmf_fit_gpu(const Context& ctx, const CsrF& X, NmfBatch init, const NmfOptions& opt) {
  CudaResources* res = ctx.cuda();
  if (!res) fail_input("--device", "the GPU NMF needs a CUDA context (--device gpu)");
  return nmf_fit_gpu_on(*res, X, std::move(init), opt);
}

}  // namespace scurry
