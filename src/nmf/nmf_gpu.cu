// scurry: batched NMF on one GPU (the semantics of nmf.hpp; several GPUs: nmf_gpus.cu).
//
// Layout as on the CPU: W [n, R*k] and Ht [g, R*k] (replicate-interleaved rows). X is held either
//  - sparse: CSR, plus X^T as a second CSR (genes x cells). One fused kernel per half-iteration,
//    one thread per (row, replicate), grid (row blocks, replicates): gathers the row of X Ht_r
//    (resp. X^T W_r) over the row's nonzeros in float64 and applies HALS (sklearn's coordinate
//    order) or the multiplicative update;
//  - dense: densified once on the device, kept as X [n, g] and (when it fits) X^T [g, n]. The fit
//    then holds the factors component-major: Wt [R*k, n], Hc [R*k, g] (transposed in at the start
//    of nmf_fit_device, back at the end; Wt lives in the products' buffer and the products in W's,
//    so only X^T and Hc are extra). Per half-iteration one cuBLAS GEMM for all replicates, both
//    operands contiguous along the reduction ("TN", what Hopper's TF32 kernels want): Pc [R*k, n] =
//    Hc X^T, and Pc [R*k, g] = Wt X (read as X^T; optionally split over the cells,
//    SCURRY_NMF_SPLITK); then an update kernel, coalesced: HALS at k > 32 on the tensor cores
//    (frob_tc_kernel: a warp per 32 columns, Q = G W - P by 3xTF32 mma, sklearn's sequential
//    coordinate pass by blocks of 8 components, the corrections of later blocks by mma), MU and HALS
//    at k <= 32 one thread per (column, replicate), the column of Pc staged in shared memory, the row
//    in registers (templated on a bound of k), the replicate's Gram as a kernel argument in the
//    constant bank (cells, k <= 16) or from shared memory; the Grams by a cp.async double-buffered
//    kernel (float32 FMAs; SCURRY_NMF_GRAM=tc: 3xTF32 mma, slower so far). Without X^T (memory) or
//    with SCURRY_NMF_DENSE=legacy: the row-major fit on W [n, R*k], Ht [g, R*k] as given (GEMMs on
//    them as stored).
// Every per-replicate reduction (Grams, column sums, HALS violations, objectives) is made over fixed
// row chunks / row blocks that do not depend on R, partials summed in a fixed order (never atomics),
// so in the sparse layout a replicate's factors do not depend on its batch mates or on the number of
// GPUs, bit for bit; in the dense layout the GEMM kernel cuBLAS picks depends on R * k (float32
// rounding differences). The tensor-core kernels (3xTF32: a = hi + lo, the product hi*hi + hi*lo +
// lo*hi, fp32 accumulation: about float32's accuracy, not its rounding) work per column / per fixed
// chunk of columns of one replicate: they do not depend on R either.
//
// Floors (H200: 4.3 TB/s, 51 TFLOP/s fp32, ~450 TFLOP/s TF32), per iteration of R replicates:
//  dense: 4 n g R k FLOPs (two GEMMs) + ~4 (n + g) R k^2 (Grams, updates); bytes 2 n g 4 (X read
//   twice) + ~6 (n + g) R k 4 (factors and P). 2.4M cells x 2000 genes, R k = 1200: 2.3e13 FLOP
//   -> 0.45 s fp32 / ~51 ms TF32 per iteration; bytes 38 GB + 69 GB -> 25 ms.
//   Measured (H200, TF32, SCURRY_PROFILE=1, ms per iteration), row-major -> component-major:
//     k = 60, R = 20:  X Ht 34.2 -> 32.7, W update 65.1 -> 47.7, W Gram 34.3 -> 15.5,
//                      X^T W 74.4 -> 32.4; total 208 -> 128.5
//     k = 10, R = 120: X Ht 34.2 -> 36.8, W update 67.9 -> 10.2, W Gram 108.7 -> 8.6,
//                      X^T W 74.4 -> 36.0; total 286 -> 91.7
//   Session 4, HALS on the tensor cores (frob_tc_kernel), k = 60: W update 47.7 -> 30.4 (the
//   sequential coordinate pass now ~1/8 of the FMAs; still ~4x its 8 ms memory floor).
//   The GEMMs run at ~350 TFLOP/s (cuBLAS's own split of the 2.4M-long reduction beat explicit
//   chunks: 33.0 ms vs 37.5-40.6 for 4-32 chunks); at k = 60 the W update is bound by its Gram
//   reads (60 x 64 per column, shared memory; the 16.6 KB Gram thrashes the constant cache).
//  sparse: 4 nnz R k FLOPs in float64 gathers (not coalesced across a thread's k columns), X read
//   twice (nnz * 8 bytes each): a few times the dense layout's time above ~3% density.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
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
constexpr int kGramFold = 4;            // staged steps summed in float32 before the float64 fold
constexpr int kTile = 32;               // transpose tile side
constexpr int kTileRows = 8;            // transpose block: kTile x kTileRows threads
constexpr unsigned kGridStride = 4096;  // blocks of the grid-stride kernels
constexpr int kSplitTile = 128;         // output tile side assumed when choosing the split-K count
constexpr int kMaxSplits = 32;          // most cell chunks of X^T W
constexpr int64_t kMinSplitLen = 512;   // fewest cells per chunk
constexpr int64_t kSplitAlign = 128;    // chunk length multiple (aligned operand offsets)
constexpr int64_t kArgMinCols = 2048;   // update with the Gram as a kernel argument from this many columns
constexpr double kArgMaxGramBytes = 64.0 * (1 << 20);  // ... while the Grams (float64) fit in this
// ... and k at most this: the padded Gram (<= 1.1 KB) stays in the constant cache. H200, 2.4M cells:
// k = 10 update 10.2 ms (shared memory: 14.0), k = 30 20.3 (19.9), k = 60 64.6 (47.7; 16.6 KB).
constexpr int kArgMaxK = 16;
// HALS on the tensor cores (frob_tc_kernel) above this k. H200, 2.4M cells, W update: k = 60 30.4 ms
// (frob_cm_kernel: 47.7), k = 30 22.2 (19.9).
constexpr int kTcMinK = 32;
constexpr double kEps32 = 1.1920928955078125e-07;
constexpr double kEps64 = 2.220446049250313e-16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sum over the block (blockDim.x == kThreads) in a fixed tree order; every thread must call it.
template <int NT>
__device__ double block_sum_n(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = NT / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double out = sh[0];
  __syncthreads();
  return out;
}
__device__ double block_sum(double v, double* sh) { return block_sum_n<kThreads>(v, sh); }

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

// ---- the component-major dense fit ---------------------------------------------------------------
//
// The factors held transposed during the fit: Wt [R*k, n], Hc [R*k, g] (component rows, replicate r's
// rows r*k .. r*k+k-1), the products likewise ([R*k, n] / [R*k, g]), and X also as X^T [g, n]. Then
// both GEMMs have their two operands contiguous along the reduction (cuBLAS "TN": what Hopper's TF32
// tensor-core kernels want), X^T W is split along the cells into batched GEMMs (its 1200 x 2000
// output alone is ~100 tiles for 132 SMs) summed in a fixed order, and the row kernels read and
// write coalesced (a warp's threads are consecutive cells of one component row).

// out [cols, rows] = in [rows, cols]^T, 32 x 32 tiles (one block each, 32 x 8 threads).
__global__ void transpose_kernel(int64_t rows, int64_t cols, const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float t[kTile][kTile + 1];
  const int64_t ctiles = (cols + kTile - 1) / kTile;
  const int64_t tile = blockIdx.x;
  const int64_t r0 = (tile / ctiles) * kTile, c0 = (tile % ctiles) * kTile;
  for (int y = threadIdx.y; y < kTile; y += kTileRows) {
    const int64_t r = r0 + y, c = c0 + threadIdx.x;
    if (r < rows && c < cols) t[y][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int y = threadIdx.y; y < kTile; y += kTileRows) {
    const int64_t c = c0 + y, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * rows + r] = t[threadIdx.x][y];
  }
}

// Per (chunk of kChunk columns, replicate) partial Gram of the k rows of replicate r of A [R*k, m]:
// part[(chunk * R + r) * k * k + a * k + b], float64. KM (a multiple of 4, >= k) bounds k. The block
// stages CT columns at a time as s[column][component] through cp.async, double-buffered (the next
// stage in flight while the current one is multiplied; no registers held by the loads), each thread
// owns a 4 x 4 tile on or above the diagonal of the KM x KM Gram; when there are fewer tiles than
// threads, NG groups of threads take every NG-th staged column and are summed in group order at the
// end. float32 products accumulated over kGramFold stages, then folded into float64.
template <int KM>
struct GramCm {
  static constexpr int CT = KM <= 16 ? 512 : KM <= 32 ? 128 : 64;  // columns per stage
  static constexpr int KP = KM % 8 == 0 ? KM + 4 : KM;  // staged row stride: float4-aligned, 4-way stores
  static constexpr int LD = KM * CT / kThreads;         // copies per thread per stage
  static constexpr int TD = KM / 4;                     // 4 x 4 tiles per side
  static constexpr int TT = TD * (TD + 1) / 2;          // tiles on and above the diagonal
  static constexpr int NG = kThreads / TT;              // thread groups over the staged columns
  static constexpr size_t smem = 2 * static_cast<size_t>(CT) * KP * sizeof(float);
  static_assert(KM % 4 == 0 && KM <= kMaxK && (KM * CT) % kThreads == 0 && NG >= 1, "GramCm bounds");
};

__device__ inline void cp_async4(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::); }

template <int KM>
__global__ void __launch_bounds__(kThreads) gram_cm_kernel(int64_t m, int R, int k, const float* __restrict__ A,
                                                           double* __restrict__ part) {
  using C = GramCm<KM>;
  constexpr int CT = C::CT, KP = C::KP, LD = C::LD, TD = C::TD, TT = C::TT, NG = C::NG;
  extern __shared__ __align__(16) float stage[];  // [2][CT * KP]
  __shared__ double red[NG > 1 ? TT * 16 : 1];
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kChunk, hi = min(m, lo + kChunk);
  const int r = blockIdx.y;
  const float* a = A + static_cast<int64_t>(r) * k * m;
  const int tile = threadIdx.x % TT, grp = threadIdx.x / TT;
  const bool work = grp < NG;
  int ta = 0, rem = tile;
  while (rem >= TD - ta) rem -= TD - ta, ++ta;
  const int a0 = ta * 4, b0 = (ta + rem) * 4;
  float facc[16];
  double dacc[16];
#pragma unroll
  for (int x = 0; x < 16; ++x) facc[x] = 0.0f, dacc[x] = 0.0;
  auto issue = [&](int64_t base, float* s) {
#pragma unroll 4
    for (int j = 0; j < LD; ++j) {
      const int e = threadIdx.x + j * kThreads, c = e / CT, t = e % CT;
      const int64_t i = base + t;
      const bool valid = c < k && i < hi;
      cp_async4(s + t * KP + c, valid ? a + c * m + i : a, valid);
    }
  };
  const int64_t n_stages = (hi - lo + CT - 1) / CT;
  issue(lo, stage);
  cp_async_commit();
  int fold = 0;
  for (int64_t st = 0; st < n_stages; ++st) {
    if (st + 1 < n_stages) issue(lo + (st + 1) * CT, stage + ((st + 1) & 1) * CT * KP);
    cp_async_commit();
    cp_async_wait_one();
    __syncthreads();
    const float* s = stage + (st & 1) * CT * KP;
    if (work) {
#pragma unroll 4
      for (int t = grp; t < CT; t += NG) {
        const float4 av = *reinterpret_cast<const float4*>(&s[t * KP + a0]);
        const float4 bv = *reinterpret_cast<const float4*>(&s[t * KP + b0]);
        const float x4[4] = {av.x, av.y, av.z, av.w}, y4[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
        for (int x = 0; x < 4; ++x)
#pragma unroll
          for (int y = 0; y < 4; ++y) facc[x * 4 + y] = fmaf(x4[x], y4[y], facc[x * 4 + y]);
      }
    }
    __syncthreads();
    if (++fold == kGramFold) {
      fold = 0;
#pragma unroll
      for (int x = 0; x < 16; ++x) dacc[x] += facc[x], facc[x] = 0.0f;
    }
  }
#pragma unroll
  for (int x = 0; x < 16; ++x) dacc[x] += facc[x];
  if (NG > 1) {
    for (int q = 1; q < NG; ++q) {
      if (grp == q) {
#pragma unroll
        for (int x = 0; x < 16; ++x) red[tile * 16 + x] = dacc[x];
      }
      __syncthreads();
      if (grp == 0) {
#pragma unroll
        for (int x = 0; x < 16; ++x) dacc[x] += red[tile * 16 + x];
      }
      __syncthreads();
    }
  }
  if (grp != 0) return;
  const int64_t kk = static_cast<int64_t>(k) * k;
  double* o = part + (static_cast<int64_t>(blockIdx.x) * R + r) * kk;
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) {
      const int ra = a0 + x, cb = b0 + y;
      if (ra < k && cb < k) o[ra * k + cb] = dacc[x * 4 + y], o[cb * k + ra] = dacc[x * 4 + y];
    }
}

// The replicates' Grams as the update kernel reads them: gf[r * (KM * KM + KM)] = G_r zero-padded to
// KM x KM (float32), then the reciprocals of its diagonal (0 where the diagonal is 0).
template <int KM>
__global__ void gram_float_kernel(int R, int k, const double* __restrict__ G, float* __restrict__ gf) {
  const int r = blockIdx.x;
  const double* g = G + static_cast<int64_t>(r) * k * k;
  float* o = gf + static_cast<int64_t>(r) * (KM * KM + KM);
  for (int e = threadIdx.x; e < KM * KM + KM; e += blockDim.x) {
    if (e < KM * KM) {
      const int a = e / KM, b = e % KM;
      o[e] = (a < k && b < k) ? static_cast<float>(g[a * k + b]) : 0.0f;
    } else {
      const int s = e - KM * KM;
      const float d = s < k ? static_cast<float>(g[s * k + s]) : 0.0f;
      o[e] = d != 0.0f ? 1.0f / d : 0.0f;
    }
  }
}

// Frobenius update (HALS or MU) of column i of replicate r = blockIdx.y of A [R*k, m] given
// P = (B M)[r's rows, i] [R*k, m] and the replicate's padded float Gram gf: frob_dense_kernel's
// arithmetic on the transposed layout (float32; HALS divides by the Hessian as a product with its
// reciprocal; the Gram's symmetry gives MU's denominators from its rows; the HALS violation summed
// in float32 over a column's k terms, then float64). The column's k values of P are staged in shared
// memory at the start (all loads in flight at once), the row stays in registers.
// Threads (columns) per block: 128 for the largest bounds (the row in ~200 registers: two blocks per
// SM then overlap one's loads with the other's arithmetic), else 256.
template <int KM>
constexpr int frob_cm_threads() {
  return KM >= 48 ? 128 : kThreads;
}
template <int KM>
constexpr size_t frob_cm_smem() {
  return static_cast<size_t>(KM * KM + KM + KM * frob_cm_threads<KM>()) * sizeof(float);
}

template <int KM>
__global__ void __launch_bounds__(frob_cm_threads<KM>(), 2)
    frob_cm_kernel(int64_t m, int R, int k, const float* __restrict__ P, float* __restrict__ A,
                   const float* __restrict__ gf, const uint8_t* __restrict__ active, int cd,
                   double* __restrict__ viol_part) {
  constexpr int NT = frob_cm_threads<KM>();
  extern __shared__ __align__(16) float dyn[];
  float* gs = dyn;                    // KM x KM Gram, then KM reciprocals of its diagonal
  float* ps = dyn + KM * KM + KM;     // [KM][NT]: this block's columns of P
  __shared__ double sh[NT];
  const int r = blockIdx.y;
  if (!active[r]) return;  // uniform over the block
  {
    const float4* src = reinterpret_cast<const float4*>(gf + static_cast<int64_t>(r) * (KM * KM + KM));
    for (int e = threadIdx.x; e < (KM * KM + KM) / 4; e += NT) reinterpret_cast<float4*>(gs)[e] = src[e];
  }
  const int64_t i = static_cast<int64_t>(blockIdx.x) * NT + threadIdx.x;
  const int64_t off = static_cast<int64_t>(r) * k * m + i;
  float row[KM];
  if (i < m) {
#pragma unroll
    for (int c = 0; c < KM; ++c) row[c] = c < k ? A[off + c * m] : 0.0f;
#pragma unroll
    for (int c = 0; c < KM; ++c)
      if (c < k) ps[c * NT + threadIdx.x] = P[off + c * m];
  }
  __syncthreads();
  double v = 0;
  if (i < m) {
    float* pc = ps + threadIdx.x;
    if (cd) {
      float vr = 0.0f;
#pragma unroll
      for (int s = 0; s < KM; ++s) {
        if (s < k) {
          // Four independent chains (KM is a multiple of 4): the FMA latency hidden within a thread.
          float g4[4] = {-pc[s * NT], 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int q = 0; q < KM; ++q) g4[q % 4] = fmaf(gs[s * KM + q], row[q], g4[q % 4]);
          const float grad = (g4[0] + g4[1]) + (g4[2] + g4[3]);
          vr += fabsf(row[s] == 0.0f ? fminf(0.0f, grad) : grad);
          const float inv = gs[KM * KM + s];
          if (inv != 0.0f) row[s] = fmaxf(row[s] - grad * inv, 0.0f);
        }
      }
      v = vr;
    } else {
#pragma unroll
      for (int s = 0; s < KM; ++s) {
        if (s < k) {
          float d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int q = 0; q < KM; ++q) d4[q % 4] = fmaf(row[q], gs[s * KM + q], d4[q % 4]);
          float den = (d4[0] + d4[1]) + (d4[2] + d4[3]);
          if (den == 0.0f) den = static_cast<float>(kEps32);
          pc[s * NT] = row[s] * (pc[s * NT] / den);
        }
      }
#pragma unroll
      for (int s = 0; s < KM; ++s)
        if (s < k) row[s] = pc[s * NT];
    }
#pragma unroll
    for (int c = 0; c < KM; ++c)
      if (c < k) A[off + c * m] = row[c];
  }
  v = block_sum_n<NT>(v, sh);
  if (threadIdx.x == 0) viol_part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = v;
}

__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

// HALS (cd) update of the component-major layout on the tensor cores (frob_tc_kernel).
// One warp per 32 columns (cells or genes) of replicate r = blockIdx.y, four warps per block sharing
// the replicate's padded Gram in shared memory. With Q = G W_old - P computed for all rows at once
// (mma.sync m16n8k8, 3xTF32: a = hi + lo, products hi*hi + hi*lo + lo*hi, fp32 accumulation), the
// gradient of component s in sklearn's sequential order is Q[s] + sum_{q<s} G[s,q] (new_q - old_q);
// the rows go in blocks of 8: within a block the correction is summed in float32 by the thread of the
// column, component by component (the clamping, the Hessian's reciprocal and the violation exactly
// as in frob_cm_kernel), then the block's deltas update Q of the rows below by one more mma step.
constexpr int kTcWarps = 4;                 // warps (of 32 columns) per block
constexpr int kTcCols = 32 * kTcWarps;      // columns per block
constexpr int kTcLdw = 40;                  // row stride of the staged W / delta tiles (conflict-free fragments)
constexpr int kTcLdr = 40;                  // row stride of the staged block of Q

template <int KM>
struct FrobTc {
  static_assert(KM % 16 == 0 && KM <= kMaxK, "FrobTc: KM a multiple of 16");
  static constexpr int LDG = KM + 4;        // Gram row stride (conflict-free A fragments)
  static constexpr int WARP_FLOATS = KM * kTcLdw + 8 * kTcLdr + 8 * kTcLdw;
  static constexpr size_t smem = (static_cast<size_t>(KM) * LDG + KM + static_cast<size_t>(kTcWarps) * WARP_FLOATS) * sizeof(float);
};

__device__ inline uint32_t tf32_hi(float x) {
  uint32_t h;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(h) : "f"(x));
  return h;
}
// x = hi + lo (both TF32).
__device__ inline void tf32_split(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_hi(x);
  lo = tf32_hi(x - __uint_as_float(hi));
}
__device__ inline void mma_tf32(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// d += A B in 3xTF32 (the small products first).
__device__ inline void mma_3xtf32(float* d, const uint32_t* ah, const uint32_t* al, uint32_t bh0, uint32_t bh1,
                                  uint32_t bl0, uint32_t bl1) {
  mma_tf32(d, al, bh0, bh1);
  mma_tf32(d, ah, bl0, bl1);
  mma_tf32(d, ah, bh0, bh1);
}
// The A fragment (16 x 8, row-major) at rows r0.., columns c0.. of the Gram gs (stride LDG), split.
template <int LDG>
__device__ inline void load_a(const float* gs, int r0, int c0, int gid, int tig, uint32_t* ah, uint32_t* al) {
  tf32_split(gs[(r0 + gid) * LDG + c0 + tig], ah[0], al[0]);
  tf32_split(gs[(r0 + gid + 8) * LDG + c0 + tig], ah[1], al[1]);
  tf32_split(gs[(r0 + gid) * LDG + c0 + tig + 4], ah[2], al[2]);
  tf32_split(gs[(r0 + gid + 8) * LDG + c0 + tig + 4], ah[3], al[3]);
}

template <int KM>
__global__ void __launch_bounds__(kTcCols, 3)
    frob_tc_kernel(int64_t m, int R, int k, const float* __restrict__ P, float* __restrict__ A,
                   const float* __restrict__ gf, const uint8_t* __restrict__ active, double* __restrict__ viol_part) {
  using C = FrobTc<KM>;
  constexpr int LDG = C::LDG, MT = KM / 16, NB = KM / 8;
  extern __shared__ __align__(16) float dyn[];
  float* gs = dyn;                   // [KM][LDG] Gram
  float* ginv = dyn + KM * LDG;      // [KM] reciprocals of its diagonal
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  float* ws = ginv + KM + warp * C::WARP_FLOATS;  // [KM][kTcLdw] this warp's columns of W
  float* rs = ws + KM * kTcLdw;                   // [8][kTcLdr] a block of rows of Q
  float* ds = rs + 8 * kTcLdr;                    // [8][kTcLdw] the block's deltas
  __shared__ double sh[kTcCols];
  const int r = blockIdx.y;
  if (!active[r]) return;  // uniform over the block
  {
    const float* src = gf + static_cast<int64_t>(r) * (KM * KM + KM);
    for (int e = threadIdx.x; e < KM * KM; e += kTcCols) gs[(e / KM) * LDG + e % KM] = src[e];
    for (int e = threadIdx.x; e < KM; e += kTcCols) ginv[e] = src[KM * KM + e];
  }
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTcCols + warp * 32;  // the warp's first column
  const int64_t base = static_cast<int64_t>(r) * k * m;
  const bool ok = c0 + lane < m;
  // This warp's columns of W (zero past k and m), by cp.async: in flight with the loads of P below.
#pragma unroll
  for (int s = 0; s < KM; ++s) {
    const bool valid = s < k && ok;
    cp_async4(ws + s * kTcLdw + lane, valid ? A + base + s * m + c0 + lane : A, valid);
  }
  cp_async_commit();
  // Q = -P to begin with, in the accumulator layout: acc[mt][nt] holds rows mt*16 + gid (+8), columns
  // nt*8 + 2*tig (+1).
  float acc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int s = mt * 16 + gid + (e / 2) * 8;
        const int64_t c = c0 + nt * 8 + 2 * tig + (e % 2);
        acc[mt][nt][e] = s < k && c < m ? -P[base + s * m + c] : 0.0f;
      }
  cp_async_wait_all();
  __syncthreads();
  // Q += G W_old.
#pragma unroll
  for (int kt = 0; kt < KM / 8; ++kt) {
    uint32_t bh[4][2], bl[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      tf32_split(ws[(kt * 8 + tig) * kTcLdw + nt * 8 + gid], bh[nt][0], bl[nt][0]);
      tf32_split(ws[(kt * 8 + tig + 4) * kTcLdw + nt * 8 + gid], bh[nt][1], bl[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      uint32_t ah[4], al[4];
      load_a<LDG>(gs, mt * 16, kt * 8, gid, tig, ah, al);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) mma_3xtf32(acc[mt][nt], ah, al, bh[nt][0], bh[nt][1], bl[nt][0], bl[nt][1]);
    }
  }
  float vr = 0.0f;
#pragma unroll
  for (int jb = 0; jb < NB; ++jb) {
    const int j0 = jb * 8;
    if (j0 >= k) break;  // uniform
    const int mt = jb / 2, h = jb % 2;
    // The block's rows of Q to shared memory (then one column per thread).
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      *reinterpret_cast<float2*>(&rs[gid * kTcLdr + nt * 8 + 2 * tig]) = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
    __syncwarp();
    float d[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int s = j0 + u;
      d[u] = 0.0f;
      if (s < k) {
        float corr = 0.0f;
#pragma unroll
        for (int v = 0; v < u; ++v) corr = fmaf(gs[s * LDG + j0 + v], d[v], corr);
        const float grad = rs[u * kTcLdr + lane] + corr;
        const float old = ws[s * kTcLdw + lane];
        vr += fabsf(old == 0.0f ? fminf(0.0f, grad) : grad);
        const float inv = ginv[s];
        if (inv != 0.0f) {
          const float nw = fmaxf(old - grad * inv, 0.0f);
          d[u] = nw - old;
          ws[s * kTcLdw + lane] = nw;
        }
      }
      ds[u * kTcLdw + lane] = d[u];
    }
    __syncwarp();
    // Q of the rows below += G[rows, block] deltas (one mma k-step; the 16-row tiles from the one
    // holding row j0 + 8; rows of finished blocks in it are updated too and never read again).
    if (jb + 1 < NB && j0 + 8 < k) {
      uint32_t bh[4][2], bl[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        tf32_split(ds[tig * kTcLdw + nt * 8 + gid], bh[nt][0], bl[nt][0]);
        tf32_split(ds[(tig + 4) * kTcLdw + nt * 8 + gid], bh[nt][1], bl[nt][1]);
      }
#pragma unroll
      for (int mt2 = (jb + 1) / 2; mt2 < MT; ++mt2) {
        uint32_t ah[4], al[4];
        load_a<LDG>(gs, mt2 * 16, j0, gid, tig, ah, al);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_3xtf32(acc[mt2][nt], ah, al, bh[nt][0], bh[nt][1], bl[nt][0], bl[nt][1]);
      }
    }
    __syncwarp();
  }
  // The new W back.
  if (ok) {
#pragma unroll 8
    for (int s = 0; s < KM; ++s)
      if (s < k) A[base + s * m + c0 + lane] = ws[s * kTcLdw + lane];
  }
  double v = ok ? static_cast<double>(vr) : 0.0;
  v = block_sum_n<kTcCols>(v, sh);
  if (threadIdx.x == 0) viol_part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = v;
}

// Per (chunk of kChunk columns, replicate) partial Gram of the k rows of replicate r of A [R*k, m] on
// the tensor cores (3xTF32 mma.sync, fp32 accumulation over kGramFold stages, then float64):
// gram_cm_kernel's partials (part[(chunk * R + r) * k * k + a * k + b]). The block stages CT columns
// at a time as s[component][column] by cp.async, double-buffered; the 16 x 8 output tiles on and above
// the diagonal are dealt to the four warps (tile w, w + 4, ...); each entry a <= b is taken from the one
// tile that holds it at (a, b), and mirrored.
constexpr int kGramTcCols = 64;  // columns per stage
template <int KM>
struct GramTc {
  static_assert(KM % 16 == 0 && KM <= kMaxK, "GramTc: KM a multiple of 16");
  static constexpr int LDS = kGramTcCols + 4;        // staged row stride (conflict-free fragments)
  static constexpr int MT = KM / 16, TILES = MT * MT + MT, TPW = (TILES + kTcWarps - 1) / kTcWarps;
  static constexpr int LD = KM * kGramTcCols / kTcCols;  // copies per thread per stage
  static constexpr size_t smem = 2 * static_cast<size_t>(KM) * LDS * sizeof(float);
};

template <int KM>
__global__ void __launch_bounds__(kTcCols) gram_tc_kernel(int64_t m, int R, int k, const float* __restrict__ A,
                                                          double* __restrict__ part) {
  using C = GramTc<KM>;
  constexpr int LDS = C::LDS, TPW = C::TPW, CT = kGramTcCols;
  extern __shared__ __align__(16) float stage[];  // [2][KM * LDS]
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kChunk, hi = min(m, lo + kChunk);
  const int r = blockIdx.y;
  const float* a = A + static_cast<int64_t>(r) * k * m;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  int tm[TPW], tn[TPW];
  bool has[TPW];
#pragma unroll
  for (int j = 0; j < TPW; ++j) {
    int t = warp + j * kTcWarps, mt = 0;
    has[j] = t < C::TILES;
    while (has[j] && t >= 2 * (C::MT - mt)) t -= 2 * (C::MT - mt), ++mt;
    tm[j] = has[j] ? mt * 16 : 0, tn[j] = has[j] ? (2 * mt + t) * 8 : 0;
  }
  float facc[TPW][4];
  double dacc[TPW][4];
#pragma unroll
  for (int j = 0; j < TPW; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) facc[j][e] = 0.0f, dacc[j][e] = 0.0;
  auto issue = [&](int64_t base, float* s) {
#pragma unroll 4
    for (int q = 0; q < C::LD; ++q) {
      const int e = threadIdx.x + q * kTcCols, c = e / CT, t = e % CT;
      const int64_t i = base + t;
      const bool valid = c < k && i < hi;
      cp_async4(s + c * LDS + t, valid ? a + c * m + i : a, valid);
    }
  };
  const int64_t n_stages = (hi - lo + CT - 1) / CT;
  issue(lo, stage);
  cp_async_commit();
  int fold = 0;
  for (int64_t st = 0; st < n_stages; ++st) {
    if (st + 1 < n_stages) issue(lo + (st + 1) * CT, stage + ((st + 1) & 1) * KM * LDS);
    cp_async_commit();
    cp_async_wait_one();
    __syncthreads();
    const float* s = stage + (st & 1) * KM * LDS;
#pragma unroll 2
    for (int kk = 0; kk < CT; kk += 8) {
#pragma unroll
      for (int j = 0; j < TPW; ++j) {
        if (!has[j]) continue;
        uint32_t ah[4], al[4], bh0, bl0, bh1, bl1;
        load_a<LDS>(s, tm[j], kk, gid, tig, ah, al);
        tf32_split(s[(tn[j] + gid) * LDS + kk + tig], bh0, bl0);
        tf32_split(s[(tn[j] + gid) * LDS + kk + tig + 4], bh1, bl1);
        mma_3xtf32(facc[j], ah, al, bh0, bh1, bl0, bl1);
      }
    }
    __syncthreads();
    if (++fold == kGramFold) {
      fold = 0;
#pragma unroll
      for (int j = 0; j < TPW; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dacc[j][e] += facc[j][e], facc[j][e] = 0.0f;
    }
  }
  const int64_t kk2 = static_cast<int64_t>(k) * k;
  double* o = part + (static_cast<int64_t>(blockIdx.x) * R + r) * kk2;
#pragma unroll
  for (int j = 0; j < TPW; ++j) {
    if (!has[j]) continue;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int ra = tm[j] + gid + (e / 2) * 8, cb = tn[j] + 2 * tig + (e % 2);
      const double val = dacc[j][e] + facc[j][e];
      if (ra <= cb && cb < k) o[ra * k + cb] = val, o[cb * k + ra] = val;
    }
  }
}

// The same update for one replicate r with its Gram passed by value as a kernel argument (held in
// the constant bank: with the loops unrolled, every Gram read is an FFMA operand, not a shared-memory
// load; the shared-memory loads of frob_cm_kernel, broadcast or not, bound it at large k). The
// host builds the argument from the Grams (GramArg: padded KM x KM float32, then the reciprocals of
// its diagonal), one launch per replicate.
template <int KM>
struct GramArg {
  float g[KM * KM + KM];
};

template <int KM>
__global__ void __launch_bounds__(frob_cm_threads<KM>(), 2)
    frob_cm_arg_kernel(int64_t m, int r, int k, const float* __restrict__ P, float* __restrict__ A,
                       const __grid_constant__ GramArg<KM> ga, int cd, double* __restrict__ viol_part) {
  constexpr int NT = frob_cm_threads<KM>();
  extern __shared__ __align__(16) float dyn[];
  float* ps = dyn;  // [KM][NT]: this block's columns of P
  __shared__ double sh[NT];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * NT + threadIdx.x;
  const int64_t off = static_cast<int64_t>(r) * k * m + i;
  float row[KM];
  if (i < m) {
#pragma unroll
    for (int c = 0; c < KM; ++c) row[c] = c < k ? A[off + c * m] : 0.0f;
#pragma unroll
    for (int c = 0; c < KM; ++c)
      if (c < k) ps[c * NT + threadIdx.x] = P[off + c * m];
  }
  double v = 0;
  if (i < m) {
    float* pc = ps + threadIdx.x;
    if (cd) {
      float vr = 0.0f;
#pragma unroll
      for (int s = 0; s < KM; ++s) {
        if (s < k) {
          float g4[4] = {-pc[s * NT], 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int q = 0; q < KM; ++q) g4[q % 4] = fmaf(ga.g[s * KM + q], row[q], g4[q % 4]);
          const float grad = (g4[0] + g4[1]) + (g4[2] + g4[3]);
          vr += fabsf(row[s] == 0.0f ? fminf(0.0f, grad) : grad);
          const float inv = ga.g[KM * KM + s];
          if (inv != 0.0f) row[s] = fmaxf(row[s] - grad * inv, 0.0f);
        }
      }
      v = vr;
    } else {
#pragma unroll
      for (int s = 0; s < KM; ++s) {
        if (s < k) {
          float d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int q = 0; q < KM; ++q) d4[q % 4] = fmaf(row[q], ga.g[s * KM + q], d4[q % 4]);
          float den = (d4[0] + d4[1]) + (d4[2] + d4[3]);
          if (den == 0.0f) den = static_cast<float>(kEps32);
          pc[s * NT] = row[s] * (pc[s * NT] / den);
        }
      }
#pragma unroll
      for (int s = 0; s < KM; ++s)
        if (s < k) row[s] = pc[s * NT];
    }
#pragma unroll
    for (int c = 0; c < KM; ++c)
      if (c < k) A[off + c * m] = row[c];
  }
  v = block_sum_n<NT>(v, sh);
  if (threadIdx.x == 0) viol_part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = v;
}

// Per (column block, replicate) <P_r, W_r> on the transposed layout.
__global__ void objective_cm_kernel(int64_t m, int R, int k, const float* __restrict__ P, const float* __restrict__ W,
                                    double* __restrict__ part) {
  __shared__ double sh[kThreads];
  const int r = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  double s = 0;
  if (i < m) {
    const int64_t off = static_cast<int64_t>(r) * k * m + i;
    for (int c = 0; c < k; ++c) s += static_cast<double>(P[off + c * m]) * W[off + c * m];
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) part[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = s;
}

// out[e] = sum over the split-K parts, in order, of part[s * count + e] (float64 sum).
__global__ void sum_splits_kernel(int64_t count, int parts, const float* __restrict__ part, float* __restrict__ out) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int q = 0; q < parts; ++q) s += part[q * count + e];
    out[e] = static_cast<float>(s);
  }
}

// ---- the fit -----------------------------------------------------------------------------------

// Options read from the environment (for A/B runs and profiles; the defaults are the fast paths):
//  SCURRY_NMF_DENSE=legacy  the row-major dense fit (W [n, R*k], GEMMs on it as stored);
//  SCURRY_NMF_SPLITK=S      X^T W as S batched GEMMs over chunks of the cells, summed in order
//                           (default 1: one GEMM, cuBLAS splits the reduction itself, which measured
//                           faster on an H200; -1: enough output tiles for ~4 waves);
//  SCURRY_NMF_UPDATE=shared|arg|tc  the update reads the Grams from shared memory one column per
//                           thread (frob_cm_kernel) / as a kernel argument for the cells whatever k
//                           (else frob_cm_kernel) / HALS on the tensor cores (frob_tc_kernel) for every
//                           half-step and k; default: the argument for the cells up to kArgMaxK,
//                           frob_tc_kernel for HALS above kTcMinK, frob_cm_kernel everywhere else;
//  SCURRY_NMF_GRAM=tc       the component-major Grams by 3xTF32 mma (gram_tc_kernel), not by float32
//                           FMAs (gram_cm_kernel);
//  SCURRY_PROFILE=1         per-phase device milliseconds per iteration of every fit, on stderr;
//                 2         also times the GEMM variants once per fit (before the iterations).
bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, value) == 0;
}
int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::atoi(e) : fallback;
}
bool dense_legacy() { return env_is("SCURRY_NMF_DENSE", "legacy"); }

// Per-phase device time by CUDA events (SCURRY_PROFILE): mark(name) closes the phase `name` begun at
// the previous mark; end_iteration() synchronises and accumulates.
struct PhaseTimer {
  cudaStream_t stream = nullptr;
  bool on = false;
  int iterations = 0;
  std::vector<std::string> names;
  std::vector<double> total_ms;
  std::vector<cudaEvent_t> ev;
  std::vector<int> slot;  // phase index of each event after the first
  explicit PhaseTimer(cudaStream_t s) : stream(s), on(env_int("SCURRY_PROFILE", 0) > 0) {}
  ~PhaseTimer() {
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
  }
  void ensure(size_t q) {
    while (ev.size() <= q) {
      cudaEvent_t e;
      SCURRY_CUDA(cudaEventCreate(&e));
      ev.push_back(e);
    }
  }
  void begin() {
    if (!on) return;
    slot.clear();
    ensure(0);
    SCURRY_CUDA(cudaEventRecord(ev[0], stream));
  }
  void mark(const char* name) {
    if (!on) return;
    size_t idx = 0;
    while (idx < names.size() && names[idx] != name) ++idx;
    if (idx == names.size()) names.emplace_back(name), total_ms.push_back(0.0);
    slot.push_back(static_cast<int>(idx));
    ensure(slot.size());
    SCURRY_CUDA(cudaEventRecord(ev[slot.size()], stream));
  }
  void end_iteration() {
    if (!on || slot.empty()) return;
    SCURRY_CUDA(cudaEventSynchronize(ev[slot.size()]));
    for (size_t q = 0; q < slot.size(); ++q) {
      float ms = 0;
      SCURRY_CUDA(cudaEventElapsedTime(&ms, ev[q], ev[q + 1]));
      total_ms[slot[q]] += ms;
    }
    ++iterations;
  }
  void print(const std::string& what) const {
    if (!on || iterations == 0) return;
    double sum = 0;
    std::string s = "scurry: nmf profile (" + what + "), ms per iteration over " + std::to_string(iterations) + ":";
    char buf[96];
    for (size_t q = 0; q < names.size(); ++q) {
      std::snprintf(buf, sizeof buf, " %s %.3f", names[q].c_str(), total_ms[q] / iterations);
      s += buf;
      sum += total_ms[q];
    }
    std::snprintf(buf, sizeof buf, " | total %.3f", sum / iterations);
    std::fprintf(stderr, "%s%s\n", s.c_str(), buf);
  }
};

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
  // The component-major dense fit (enter_cm .. leave_cm): Wt lives in P's buffer and the products
  // in f.W's (or in Pextra when g > n), Hc on its own; split-K partials of X^T W in kpart.
  bool cm = false;
  float* Wt = nullptr;
  float* Pc = nullptr;
  DeviceArray<float> Hc, Pextra, kpart, Gf;
  int splits = 1;
  int64_t split_len = 0;
  int64_t last_blocks = 0;  // block partials (vpart per replicate) written by the last update
  std::vector<uint8_t> active_h;   // the host's copy of `active`
  double* gram_host = nullptr;     // pinned: the Grams for frob_cm_arg_k
  cudaEvent_t gram_ready = nullptr;
  bool gram_pending = false;

  Fit(CudaResources& r, const NmfDeviceX& x, const NmfDeviceFactors& fa, bool use_tf32)
      : res(r), X(x), f(fa), R(fa.R), k(fa.k), n(fa.n), g(fa.g), rk(fa.rk()),
        kk(static_cast<int64_t>(fa.k) * fa.k), tf32(use_tf32) {
    // Block partials: the row kernels' blocks of kThreads, the component-major update's of 128 at least.
    const int64_t chunks = ceil_div(std::max(n, g), kChunk), blocks = ceil_div(std::max(n, g), 128);
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

  ~Fit() {
    if (gram_ready) cudaEventDestroy(gram_ready);
    if (gram_host) {
      cudaStreamSynchronize(res.stream);  // no copy into it may still be in flight
      cudaFreeHost(gram_host);
    }
  }
  Fit(const Fit&) = delete;
  Fit& operator=(const Fit&) = delete;

  dim3 row_grid(int64_t m) const { return dim3(static_cast<unsigned>(ceil_div(m, kThreads)), static_cast<unsigned>(R)); }

  // G <- per-replicate Grams of A [m, rk] (float64, fixed chunk order).
  void grams(const float* A, int64_t m) {
    if (cm) return grams_cm(A, m);
    const int64_t chunks = ceil_div(m, kChunk);
    gram_part_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(R)), kGramThreads, 0, res.stream>>>(
        m, R, k, A, part.data());
    SCURRY_CUDA_LAUNCH();
    sum_chunks_kernel<<<static_cast<unsigned>(ceil_div(R * kk, kThreads)), kThreads, 0, res.stream>>>(
        chunks, R, kk, part.data(), G.data());
    SCURRY_CUDA_LAUNCH();
  }
  // G <- per-replicate Grams of A [rk, m] (component-major).
  template <int KM>
  void grams_cm_k(const float* A, int64_t m, int64_t chunks) {
    constexpr size_t smem = GramCm<KM>::smem;
    SCURRY_CUDA(cudaFuncSetAttribute(gram_cm_kernel<KM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
    gram_cm_kernel<KM><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(R)), kThreads, smem, res.stream>>>(
        m, R, k, A, part.data());
    SCURRY_CUDA_LAUNCH();
  }
  template <int KM>
  void grams_tc_k(const float* A, int64_t m, int64_t chunks) {
    constexpr size_t smem = GramTc<KM>::smem;
    SCURRY_CUDA(cudaFuncSetAttribute(gram_tc_kernel<KM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
    gram_tc_kernel<KM><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(R)), kTcCols, smem, res.stream>>>(
        m, R, k, A, part.data());
    SCURRY_CUDA_LAUNCH();
  }
  // By float32 FMAs (gram_cm_kernel), or with SCURRY_NMF_GRAM=tc on the tensor cores (gram_tc_kernel:
  // slower as it stands, H200, 2.4M cells: k = 60 21.1 ms (15.5), k = 10 16.6 (8.6)).
  void grams_cm(const float* A, int64_t m) {
    const int64_t chunks = ceil_div(m, kChunk);
    if (env_is("SCURRY_NMF_GRAM", "tc"))
      by_width16(k, [&](auto km) { grams_tc_k<decltype(km)::value>(A, m, chunks); });
    else
      by_width(k, [&](auto km) { grams_cm_k<decltype(km)::value>(A, m, chunks); });
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
  cublasComputeType_t compute_type() const { return tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; }
  // Column-major C [m_ x n_] = op(A) op(B) (cuBLAS conventions).
  void gemm_ex(cublasOperation_t opa, cublasOperation_t opb, int64_t m_, int64_t n_, int64_t k_, const float* A,
               int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
    const float one = 1.0f, zero = 0.0f;
    SCURRY_CUBLAS(cublasSetStream(res.cublas, res.stream));
    SCURRY_CUBLAS(cublasGemmEx(res.cublas, opa, opb, static_cast<int>(m_), static_cast<int>(n_), static_cast<int>(k_),
                               &one, A, CUDA_R_32F, static_cast<int>(lda), B, CUDA_R_32F, static_cast<int>(ldb), &zero,
                               C, CUDA_R_32F, static_cast<int>(ldc), compute_type(), CUBLAS_GEMM_DEFAULT));
  }
  void gemm(cublasOperation_t opb, int m_, int n_, int k_, const float* A, int lda, const float* B, int ldb, float* C,
            int ldc) {
    gemm_ex(CUBLAS_OP_N, opb, m_, n_, k_, A, lda, B, ldb, C, ldc);
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

  // ---- component-major ----
  static void transpose_on(CudaResources& r, const float* in, int64_t rows, int64_t cols, float* out) {
    const int64_t tiles = ceil_div(rows, kTile) * ceil_div(cols, kTile);
    if (tiles == 0) return;
    transpose_kernel<<<static_cast<unsigned>(tiles), dim3(kTile, kTileRows), 0, r.stream>>>(rows, cols, in, out);
    SCURRY_CUDA_LAUNCH();
  }
  void transpose(const float* in, int64_t rows, int64_t cols, float* out) { transpose_on(res, in, rows, cols, out); }
  // The number of cell chunks of X^T W: SCURRY_NMF_SPLITK, or enough output tiles for ~4 waves.
  void set_splits(int want) {
    int sms = 0;
    SCURRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, res.device));
    int s = want;
    if (s < 0) {  // enough output tiles for ~4 waves
      const int64_t tiles = ceil_div(g, kSplitTile) * ceil_div(rk, kSplitTile);
      s = static_cast<int>(std::min<int64_t>(kMaxSplits, ceil_div(4 * static_cast<int64_t>(sms), tiles)));
    }
    s = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(s, n / kMinSplitLen)));
    splits = s;
    split_len = s > 1 ? ceil_div(ceil_div(n, s), kSplitAlign) * kSplitAlign : n;
  }
  void enter_cm() {
    cm = true;
    transpose(f.W.data(), n, rk, P.data());
    Wt = P.data();
    if (n >= g) {
      Pc = f.W.data();
    } else {
      Pextra = DeviceArray<float>(res, static_cast<size_t>(g * rk), "NMF products (component-major)");
      Pc = Pextra.data();
    }
    Hc = DeviceArray<float>(res, static_cast<size_t>(g * rk), "NMF H (component-major)");
    Gf = DeviceArray<float>(res, static_cast<size_t>(R) * (kMaxK * kMaxK + kMaxK), "NMF float Grams");
    transpose(f.Ht.data(), g, rk, Hc.data());
    set_splits(env_int("SCURRY_NMF_SPLITK", 0));
    if (splits > 1) kpart = DeviceArray<float>(res, static_cast<size_t>(splits) * g * rk, "NMF split-K partials");
  }
  void leave_cm() {
    transpose(Wt, rk, n, f.W.data());
    transpose(Hc.data(), rk, g, f.Ht.data());
    cm = false;
  }
  // Pc [rk, n] = Hc [rk, g] X^T  (column-major [n x rk] = (X as [g x n])^T Hc as [g x rk]).
  void gemm_xh_cm() { gemm_ex(CUBLAS_OP_T, CUBLAS_OP_N, n, rk, g, X.D.data(), g, Hc.data(), g, Pc, n); }
  // Pc [rk, g] = Wt [rk, n] X  (column-major [g x rk] = (X^T as [n x g])^T Wt as [n x rk]), the cells in
  // `splits` chunks: batched GEMMs into kpart, summed in chunk order.
  void gemm_xtw_cm() {
    if (splits <= 1) return gemm_ex(CUBLAS_OP_T, CUBLAS_OP_N, g, rk, n, X.Dt.data(), n, Wt, n, Pc, g);
    const int64_t full = n / split_len, tail = n - full * split_len, out = g * rk;
    const float one = 1.0f, zero = 0.0f;
    SCURRY_CUBLAS(cublasSetStream(res.cublas, res.stream));
    SCURRY_CUBLAS(cublasGemmStridedBatchedEx(
        res.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(g), static_cast<int>(rk), static_cast<int>(split_len), &one,
        X.Dt.data(), CUDA_R_32F, static_cast<int>(n), split_len, Wt, CUDA_R_32F, static_cast<int>(n), split_len, &zero,
        kpart.data(), CUDA_R_32F, static_cast<int>(g), out, static_cast<int>(full), compute_type(), CUBLAS_GEMM_DEFAULT));
    if (tail > 0)
      gemm_ex(CUBLAS_OP_T, CUBLAS_OP_N, g, rk, tail, X.Dt.data() + full * split_len, n, Wt + full * split_len, n,
              kpart.data() + full * out, g);
    sum_splits_kernel<<<kGridStride, kThreads, 0, res.stream>>>(out, static_cast<int>(full + (tail > 0)), kpart.data(),
                                                                Pc);
    SCURRY_CUDA_LAUNCH();
  }
  template <int KM>
  void frob_cm_k(int64_t m, float* A, int cd) {
    gram_float_kernel<KM><<<static_cast<unsigned>(R), kThreads, 0, res.stream>>>(R, k, G.data(), Gf.data());
    SCURRY_CUDA_LAUNCH();
    constexpr size_t smem = frob_cm_smem<KM>();
    SCURRY_CUDA(cudaFuncSetAttribute(frob_cm_kernel<KM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
    constexpr int nt = frob_cm_threads<KM>();
    const int64_t blocks = ceil_div(m, nt);
    frob_cm_kernel<KM><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(R)), nt, smem, res.stream>>>(
        m, R, k, Pc, A, Gf.data(), active.data(), cd, vpart.data());
    SCURRY_CUDA_LAUNCH();
    last_blocks = blocks;
  }
  // The Grams by argument (frob_cm_arg_kernel): for the cells' half-step (m >= kArgMinCols) at
  // k <= kArgMaxK, or at any k with SCURRY_NMF_UPDATE=arg (SCURRY_NMF_UPDATE=shared: never);
  // fetch_grams() starts their copy to the host right after grams() (the GEMM runs meanwhile),
  // frob_cm_arg_k waits for it.
  bool use_arg(int64_t m) const {
    if (!cm || m < kArgMinCols || static_cast<double>(R) * kk * 8 > kArgMaxGramBytes) return false;
    if (env_is("SCURRY_NMF_UPDATE", "shared") || env_is("SCURRY_NMF_UPDATE", "tc")) return false;
    return k <= kArgMaxK || env_is("SCURRY_NMF_UPDATE", "arg");
  }
  void fetch_grams() {
    const size_t bytes = static_cast<size_t>(R * kk) * 8;
    if (!gram_host) {
      SCURRY_CUDA(cudaMallocHost(reinterpret_cast<void**>(&gram_host), bytes));
      SCURRY_CUDA(cudaEventCreateWithFlags(&gram_ready, cudaEventDisableTiming));
    }
    SCURRY_CUDA(cudaMemcpyAsync(gram_host, G.data(), bytes, cudaMemcpyDeviceToHost, res.stream));
    SCURRY_CUDA(cudaEventRecord(gram_ready, res.stream));
    gram_pending = true;
  }
  template <int KM>
  void frob_cm_arg_k(int64_t m, float* A, int cd) {
    if (!gram_pending) fail("NMF on GPU: the Grams were not fetched before the update");
    SCURRY_CUDA(cudaEventSynchronize(gram_ready));
    gram_pending = false;
    constexpr int nt = frob_cm_threads<KM>();
    constexpr size_t smem = static_cast<size_t>(KM) * nt * sizeof(float);
    const int64_t blocks = ceil_div(m, nt);
    GramArg<KM> ga;
    for (int r = 0; r < R; ++r) {
      if (!active_h[r]) continue;
      const double* gr = gram_host + static_cast<int64_t>(r) * kk;
      for (int a = 0; a < KM; ++a)
        for (int b = 0; b < KM; ++b) ga.g[a * KM + b] = a < k && b < k ? static_cast<float>(gr[a * k + b]) : 0.0f;
      for (int s = 0; s < KM; ++s) {
        const float d = s < k ? static_cast<float>(gr[s * k + s]) : 0.0f;
        ga.g[KM * KM + s] = d != 0.0f ? 1.0f / d : 0.0f;
      }
      frob_cm_arg_kernel<KM><<<static_cast<unsigned>(blocks), nt, smem, res.stream>>>(m, r, k, Pc, A, ga, cd,
                                                                                     vpart.data());
      SCURRY_CUDA_LAUNCH();
    }
    last_blocks = blocks;
  }
  // The tensor-core HALS update (frob_tc_kernel) at the width KM (a multiple of 16).
  template <int KM>
  void frob_tc_k(int64_t m, float* A) {
    gram_float_kernel<KM><<<static_cast<unsigned>(R), kThreads, 0, res.stream>>>(R, k, G.data(), Gf.data());
    SCURRY_CUDA_LAUNCH();
    constexpr size_t smem = FrobTc<KM>::smem;
    SCURRY_CUDA(cudaFuncSetAttribute(frob_tc_kernel<KM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
    const int64_t blocks = ceil_div(m, kTcCols);
    frob_tc_kernel<KM><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(R)), kTcCols, smem, res.stream>>>(
        m, R, k, Pc, A, Gf.data(), active.data(), vpart.data());
    SCURRY_CUDA_LAUNCH();
    last_blocks = blocks;
  }
  // HALS on the tensor cores above kTcMinK (SCURRY_NMF_UPDATE=tc: for every half-step and k;
  // =shared: never).
  bool use_tc(int64_t m, int cd) const {
    if (!cd || env_is("SCURRY_NMF_UPDATE", "shared")) return false;
    return env_is("SCURRY_NMF_UPDATE", "tc") || (!use_arg(m) && k > kTcMinK);
  }
  // Calls f(std::integral_constant<int, KM>) with the smallest multiple of 16 KM >= k.
  template <class F>
  static void by_width16(int k, F&& f) {
    if (k <= 16) f(std::integral_constant<int, 16>{});
    else if (k <= 32) f(std::integral_constant<int, 32>{});
    else if (k <= 48) f(std::integral_constant<int, 48>{});
    else f(std::integral_constant<int, 64>{});
  }
  // Calls f(std::integral_constant<int, KM>) with the smallest compiled width KM >= k (8, 12, 16, 24,
  // 32, 48, then 64).
  template <class F>
  static void by_width(int k, F&& f) {
    if (k <= 8) f(std::integral_constant<int, 8>{});
    else if (k <= 12) f(std::integral_constant<int, 12>{});
    else if (k <= 16) f(std::integral_constant<int, 16>{});
    else if (k <= 24) f(std::integral_constant<int, 24>{});
    else if (k <= 32) f(std::integral_constant<int, 32>{});
    else if (k <= 48) f(std::integral_constant<int, 48>{});
    else f(std::integral_constant<int, 64>{});
  }
  void frob_cm(int64_t m, float* A, int cd) {
    if (use_tc(m, cd))
      by_width16(k, [&](auto km) { frob_tc_k<decltype(km)::value>(m, A); });
    else if (use_arg(m))
      by_width(k, [&](auto km) { frob_cm_arg_k<decltype(km)::value>(m, A, cd); });
    else
      by_width(k, [&](auto km) { frob_cm_k<decltype(km)::value>(m, A, cd); });
  }
  // SCURRY_PROFILE=2: each GEMM variant timed (second of two runs), on stderr. Runs between the
  // half-steps' real products, so it only clobbers scratch (Pc, kpart) and f.W (scratch in cm).
  void profile_gemms() {
    if (!cm || env_int("SCURRY_PROFILE", 0) < 2) return;
    cudaEvent_t e0, e1;
    SCURRY_CUDA(cudaEventCreate(&e0));
    SCURRY_CUDA(cudaEventCreate(&e1));
    std::string s = "scurry: nmf gemm variants (R=" + std::to_string(R) + ", k=" + std::to_string(k) + "), ms:";
    auto timed = [&](const std::string& name, auto&& fn) {
      double ms_best = 1e30;
      for (int rep = 0; rep < 2; ++rep) {
        SCURRY_CUDA(cudaEventRecord(e0, res.stream));
        fn();
        SCURRY_CUDA(cudaEventRecord(e1, res.stream));
        SCURRY_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        SCURRY_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        ms_best = std::min(ms_best, static_cast<double>(ms));
      }
      char buf[96];
      std::snprintf(buf, sizeof buf, " %s %.2f", name.c_str(), ms_best);
      s += buf;
    };
    // Row-major (legacy) products: X Ht into Pc, X^T W (f.W is scratch here) into Pc.
    timed("xh_rowmajor", [&] {
      gemm_ex(CUBLAS_OP_N, CUBLAS_OP_N, rk, n, g, f.Ht.data(), rk, X.D.data(), g, Pc, rk);
    });
    timed("xtw_rowmajor", [&] {
      gemm_ex(CUBLAS_OP_N, CUBLAS_OP_T, rk, g, n, f.W.data(), rk, X.D.data(), g, Pc, rk);
    });
    timed("xh_cm", [&] { gemm_xh_cm(); });
    const int keep = splits;
    const int64_t keep_len = split_len;
    DeviceArray<float> keep_part = std::move(kpart);
    for (const int s_try : {1, 4, 16}) {
      set_splits(s_try);
      if (splits != s_try) continue;
      if (splits > 1) kpart = DeviceArray<float>(res, static_cast<size_t>(splits) * g * rk, "NMF split-K partials");
      timed("xtw_cm_s" + std::to_string(s_try), [&] { gemm_xtw_cm(); });
      kpart.release();
    }
    splits = keep, split_len = keep_len, kpart = std::move(keep_part);
    SCURRY_CUDA(cudaEventDestroy(e0));
    SCURRY_CUDA(cudaEventDestroy(e1));
    std::fprintf(stderr, "%s (splits used: %d)\n", s.c_str(), splits);
  }

  void frob_dense(int64_t m, float* A, int cd) {
    if (cm) return frob_cm(m, A, cd);
    const dim3 grid = row_grid(m);
    last_blocks = grid.x;
    if (k <= 8) frob_dense_kernel<8><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    else if (k <= 16) frob_dense_kernel<16><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    else if (k <= 32) frob_dense_kernel<32><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    else frob_dense_kernel<64><<<grid, kThreads, 0, res.stream>>>(m, R, k, P.data(), A, G.data(), active.data(), cd, vpart.data());
    SCURRY_CUDA_LAUNCH();
  }
  void frob_sparse(const DeviceCsr& M, float* A, const float* B, int cd) {
    last_blocks = ceil_div(M.n_rows, kThreads);
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
    active_h = a;
    SCURRY_CUDA(cudaMemcpyAsync(active.data(), a.data(), a.size(), cudaMemcpyHostToDevice, res.stream));
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));  // `a` may change before the copy would run
  }

  std::vector<double> objective(NmfLoss loss) {
    const bool kl = loss == NmfLoss::kullback_leibler;
    const int64_t blocks = ceil_div(n, kThreads);
    if (cm) {
      gemm_xh_cm();
      objective_cm_kernel<<<row_grid(n), kThreads, 0, res.stream>>>(n, R, k, Pc, Wt, vpart.data());
    } else if (X.dense) {
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
      grams(cm ? Wt : f.W.data(), n);
      const std::vector<double> wtw = read(G, static_cast<size_t>(R * kk));
      grams(cm ? Hc.data() : f.Ht.data(), g);
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
    const double csr_held = static_cast<double>(x.nnz) * 8 + static_cast<double>(x.n + 1) * 8;
    Xc = DeviceCsr{};  // the CSR is not needed any more (its memory may stay in the stream-ordered pool)
    SCURRY_CUDA(cudaStreamSynchronize(res.stream));
    // X^T as well (both GEMMs of the component-major fit then read operands contiguous along the
    // reduction) when it fits next to the factors: W, H, the products and X^T W's split-K partials.
    if (!dense_legacy()) {
      size_t free_b = 0, total_b = 0;
      SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
      const double dense_b = static_cast<double>(x.n) * x.g * 4;
      const double factors_b = (3.0 * static_cast<double>(x.n + x.g) + kMaxSplits * static_cast<double>(x.g)) * R * k * 4;
      if (dense_b + factors_b <= 0.9 * (static_cast<double>(free_b) + csr_held)) {
        x.Dt = DeviceArray<float>(res, static_cast<size_t>(x.n * x.g), "NMF dense X^T");
        Fit::transpose_on(res, x.D.data(), x.n, x.g, x.Dt.data());
        SCURRY_CUDA(cudaStreamSynchronize(res.stream));
      }
    }
    return x;
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
  // W (up to ~12 GB for a factorize batch) through the pinned staging buffers: ~3x a pageable copy.
  copy_to_device(res, f.W.data(), b.W.data(), b.W.size() * 4);
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
  // The component-major dense fit when X^T is there (nmf_device_x) and not switched off.
  const bool cm = X.dense && !kl && X.Dt.size() == static_cast<size_t>(X.n * X.g) && !dense_legacy();
  if (cm) fit.enter_cm();
  float* W = cm ? fit.Wt : f.W.data();
  float* H = cm ? fit.Hc.data() : f.Ht.data();
  PhaseTimer prof(res.stream);
  NmfDeviceStats out;
  out.n_iter.assign(R, 0);
  std::vector<uint8_t> active(R, 1);
  fit.set_active(active);
  std::vector<double> err_init, prev, vinit(R, 0.0);
  if (!cd && opt.tol > 0) prev = err_init = fit.objective(opt.loss);
  if (prof.on && opt.max_iter >= 5) fit.profile_gemms();
  for (int it = 1; it <= opt.max_iter; ++it) {
    if (std::none_of(active.begin(), active.end(), [](uint8_t a) { return a != 0; })) break;
    prof.begin();
    // W half-step.
    if (kl) {
      fit.colsums(f.Ht.data(), f.g);
      prof.mark("colsums_h");
      fit.kl_update(X.X, f.W.data(), f.Ht.data(), 0);
      prof.mark("update_w");
    } else {
      fit.grams(H, f.g);
      if (fit.use_arg(f.n)) fit.fetch_grams();
      prof.mark("gram_h");
      if (cm) {
        fit.gemm_xh_cm();
        prof.mark("gemm_xh");
        fit.frob_dense(f.n, W, cd);
      } else if (X.dense) {
        fit.gemm_xh();
        prof.mark("gemm_xh");
        fit.frob_dense(f.n, W, cd);
      } else {
        fit.frob_sparse(X.X, W, H, cd);
      }
      prof.mark("update_w");
      fit.sum_parts(fit.last_blocks, false);
    }
    // H half-step.
    if (opt.update_h) {
      if (kl) {
        fit.colsums(f.W.data(), f.n);
        prof.mark("colsums_w");
        fit.kl_update(X.Xt, f.Ht.data(), f.W.data(), 1);
        prof.mark("update_h");
      } else {
        fit.grams(W, f.n);
        if (fit.use_arg(f.g)) fit.fetch_grams();
        prof.mark("gram_w");
        if (cm) {
          fit.gemm_xtw_cm();
          prof.mark("gemm_xtw");
          fit.frob_dense(f.g, H, cd);
        } else if (X.dense) {
          fit.gemm_xtw();
          prof.mark("gemm_xtw");
          fit.frob_dense(f.g, H, cd);
        } else {
          fit.frob_sparse(X.Xt, H, W, cd);
        }
        prof.mark("update_h");
        fit.sum_parts(fit.last_blocks, true);
      }
    }
    for (int r = 0; r < R; ++r)
      if (active[r]) out.n_iter[r] = it;
    bool changed = false;
    if (cd) {
      const std::vector<double> viol = fit.read(fit.acc, static_cast<size_t>(R));
      prof.mark("sums_sync");
      for (int r = 0; r < R; ++r) {
        if (!active[r]) continue;
        if (it == 1) vinit[r] = viol[r];
        if (vinit[r] == 0 || viol[r] / vinit[r] <= opt.tol) active[r] = 0, changed = true;
      }
    } else if (opt.tol > 0 && it % 10 == 0) {
      const std::vector<double> err = fit.objective(opt.loss);
      prof.mark("objective");
      for (int r = 0; r < R; ++r) {
        if (!active[r]) continue;
        if ((prev[r] - err[r]) / err_init[r] < opt.tol) active[r] = 0, changed = true;
        prev[r] = err[r];
      }
    }
    if (changed) fit.set_active(active);
    prof.end_iteration();
  }
  prof.print(std::string(cm ? "dense component-major" : X.dense ? "dense row-major" : "sparse") + ", n " +
             std::to_string(f.n) + ", g " + std::to_string(f.g) + ", R " + std::to_string(R) + ", k " +
             std::to_string(f.k) + (fit.tf32 ? ", tf32" : "") + (cm ? ", splits " + std::to_string(fit.splits) : ""));
  if (final_error) out.error = fit.objective(opt.loss);
  if (cm) fit.leave_cm();
  SCURRY_CUDA(cudaStreamSynchronize(res.stream));
  return out;
}

void nmf_gpu_check_x(const CsrF& X) {
  for (const float v : X.data)
    if (!std::isfinite(v) || v < 0) fail_input("NMF input", "X has the value ", v, "; NMF needs finite non-negative values");
}

void nmf_gpu_check_batch(const CsrF& X, const NmfBatch& b, const std::string& what) {
  if (b.n != X.n_rows || b.g != X.n_cols)
    fail(what, " is for ", b.n, " x ", b.g, " but X is ", X.n_rows, " x ", X.n_cols);
  if (b.k > kMaxK) fail_input("-k", "the GPU NMF handles at most ", kMaxK, " components (got ", b.k, ")");
}

NmfResult nmf_fit_gpu_on(CudaResources& res, const CsrF& X, NmfBatch init, const NmfOptions& opt) {
  nmf_gpu_check_x(X);
  nmf_gpu_check_batch(X, init, "nmf_fit_gpu: factors");
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
