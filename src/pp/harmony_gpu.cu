// scurry: Harmony on the GPU (harmony_gpu.hpp says what and how; harmony.cpp is the CPU path and
// the oracle). Everything row-major; a row-major product is one column-major cuBLAS call with the
// operands swapped (rm_dgemm / rm_sgemm). Sums over cells: each block of a kernel writes its
// partial sums into a [output][chunk] array, and gpu::reduce_partials adds the chunks of every output in
// a fixed order (strided per thread, then a fixed tree), so the same inputs give the same bits.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "exec/comm.hpp"
#include "exec/cuda_resources.cuh"
#include "graph/mix64.cuh"
#include "pp/harmony_gpu.hpp"
#include "pp/fixed_order_sums.cuh"
#include "pp/linalg.hpp"

namespace scurry {
namespace {

using gpu::as_grid;
using gpu::chunk_for;
using gpu::grid_for;
using gpu::n_chunks;

void reduce(CudaResources& r, const double* part, int64_t n_out, int64_t n, double* out) {
  gpu::reduce_partials(r, part, n_out, n, out);
}

constexpr int kThreads = 256;        // element-wise kernels
constexpr int kReduceThreads = 128;  // threads per segment of segment_sums (a power of two)
constexpr int kSumThreads = 128;     // threads over clusters (or columns) of the chunk-sum kernels
constexpr int kWarps = 8;            // warps per block of the warp-per-cell kernels
constexpr int64_t kRChunk = 64;      // cells per block of the R-update sums (at least)
constexpr int64_t kObjCells = 32;    // cells per warp of the objective
constexpr int64_t kScanChunk = 2048; // cells per segment of the k-means++ sampling sums
constexpr int kWindow = 3;           // harmonypy's window_size
constexpr size_t kMaxShared = 48 * 1024;  // dynamic shared memory without opting in

int as_int(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max()) fail("harmony (gpu): ", what, " = ", v, " exceeds cuBLAS' 32-bit sizes");
  return static_cast<int>(v);
}

// Row-major C (m x n) = alpha op(A) op(B) + beta C, leading dimensions the row strides.
void rm_dgemm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* A,
              int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (m == 0 || n == 0) return;
  SCURRY_CUBLAS(cublasDgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(n, "n"),
                            as_int(m, "m"), as_int(k, "k"), &alpha, B, as_int(ldb, "ldb"), A, as_int(lda, "lda"),
                            &beta, C, as_int(ldc, "ldc")));
}
void rm_sgemm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (m == 0 || n == 0) return;
  SCURRY_CUBLAS(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(n, "n"),
                            as_int(m, "m"), as_int(k, "k"), &alpha, B, as_int(ldb, "ldb"), A, as_int(lda, "lda"),
                            &beta, C, as_int(ldc, "ldc")));
}

template <class T>
void to_device(CudaResources& r, DeviceArray<T>& dst, const T* src, size_t n) {
  if (n) SCURRY_CUDA(cudaMemcpyAsync(dst.data(), src, n * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}
template <class T>
void to_host(CudaResources& r, T* dst, const T* src, size_t n) {
  if (n) SCURRY_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
}
void zero(CudaResources& r, void* p, size_t bytes) {
  if (bytes) SCURRY_CUDA(cudaMemsetAsync(p, 0, bytes, r.stream));
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // the butterfly pairs are symmetric: every lane holds the same bits
}
__device__ __forceinline__ double warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// out[row * nseg + s] = sum of x[row * n + j] over segment s (j in [s * seg, (s + 1) * seg)).
__global__ void segment_sums(const double* x, int64_t n, int64_t seg, int64_t nseg, double* out) {
  __shared__ double sh[kReduceThreads];
  const int64_t s = blockIdx.x, row = blockIdx.y;
  const int64_t j0 = s * seg, j1 = min(n, j0 + seg);
  double a = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += kReduceThreads) a += x[row * n + j];
  sh[threadIdx.x] = a;
  __syncthreads();
  for (int h = kReduceThreads / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[row * nseg + s] = sh[0];
}

// Zcos = Z / max over dims (per cell, as harmony.cpp), then unit length. One thread per cell.
__global__ void cosine_init(const double* Z, int64_t N, int64_t d, double* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  const double* z = Z + i * d;
  double* o = out + i * d;
  double mx = z[0];
  for (int64_t q = 1; q < d; ++q) mx = z[q] > mx ? z[q] : mx;
  double s = 0;
  for (int64_t q = 0; q < d; ++q) {
    o[q] = z[q] / mx;
    s += o[q] * o[q];
  }
  const double inv = s > 0 ? 1.0 / sqrt(s) : 0.0;
  for (int64_t q = 0; q < d; ++q) o[q] *= inv;
}

// out = src / |src| per row (src == out allowed). One thread per row.
__global__ void normalize_rows(const double* src, int64_t rows, int64_t d, double* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows) return;
  double s = 0;
  for (int64_t q = 0; q < d; ++q) s += src[i * d + q] * src[i * d + q];
  const double inv = s > 0 ? 1.0 / sqrt(s) : 0.0;
  for (int64_t q = 0; q < d; ++q) out[i * d + q] = src[i * d + q] * inv;
}

__global__ void add_constant(double* x, int64_t n, double c) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += c;
}

// The first soft assignment: R_i = softmax(-dist_i / sigma). One warp per cell.
__global__ void init_R(const double* dist, const double* sigma, int64_t N, int64_t K, double* R) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (i >= N) return;
  const double* dd = dist + i * K;
  double* r = R + i * K;
  double mx = -INFINITY;
  for (int64_t k = lane; k < K; k += 32) mx = fmax(mx, -dd[k] / sigma[k]);
  mx = warp_max(mx);
  double tot = 0;
  for (int64_t k = lane; k < K; k += 32) tot += (r[k] = exp(-dd[k] / sigma[k] - mx));
  tot = warp_sum(tot);
  for (int64_t k = lane; k < K; k += 32) r[k] /= tot;
}

// One R-update block: for the block's cells, R_i = softmax(-dist_i / sigma) * penalty, the penalty
// of cluster k the sum over the cell's batch columns of PT[col][k]. One warp per cell.
__global__ void update_R_block(const int64_t* cells, int64_t len, const double* dist, const double* inv_sigma,
                               const double* PT, const int32_t* col, int64_t V, int64_t K, double* R) {
  const int64_t t = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (t >= len) return;
  const int64_t i = cells[t];
  const double* dd = dist + i * K;
  double* r = R + i * K;
  const int32_t* ci = col + i * V;
  double mx = -INFINITY;
  for (int64_t k = lane; k < K; k += 32) mx = fmax(mx, -dd[k] * inv_sigma[k]);
  mx = warp_max(mx);
  double tot = 0;
  for (int64_t k = lane; k < K; k += 32) {
    double pen = 0;
    for (int64_t v = 0; v < V; ++v) pen += PT[static_cast<int64_t>(ci[v]) * K + k];
    const double x = exp(-dd[k] * inv_sigma[k] - mx) * pen;
    r[k] = x;
    tot += x;
  }
  tot = warp_sum(tot);
  const double inv = 1.0 / tot;
  for (int64_t k = lane; k < K; k += 32) r[k] *= inv;
}

// Sums of R and of R Phi^T over cells[0, len) in chunks of `chunk` cells, one block per chunk,
// threads over clusters: part[w * nch + ch], w = k (sum of R_k) or K + k B + c (over the cells of
// one-hot column c). kShared: the K x B accumulators in shared memory (dynamic, K B doubles);
// otherwise in part itself, which must then be zero beforehand. Each accumulator has one owner
// thread, which adds the chunk's cells in order.
template <bool kShared>
__global__ void r_sums(const int64_t* __restrict__ cells, int64_t len, int64_t chunk, const double* __restrict__ R,
                       const int32_t* __restrict__ col, int64_t V, int64_t K, int64_t B, int64_t nch,
                       double* __restrict__ part) {
  extern __shared__ double sh[];
  const int64_t ch = blockIdx.x, t0 = ch * chunk, t1 = min(len, t0 + chunk);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    double tot = 0;
    double* o = kShared ? sh + k * B : part + (K + k * B) * nch + ch;
    const int64_t stride = kShared ? 1 : nch;
    if (kShared)
      for (int64_t c = 0; c < B; ++c) o[c] = 0;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = cells[t];
      const double r = R[i * K + k];
      tot += r;
      for (int64_t v = 0; v < V; ++v) o[static_cast<int64_t>(col[i * V + v]) * stride] += r;
    }
    part[k * nch + ch] = tot;
    if (kShared)
      for (int64_t c = 0; c < B; ++c) part[(K + k * B + c) * nch + ch] = o[c];
  }
}

// E += sign acc[k] Pr[c], O += sign acc[K + k B + c]; with PT, the penalties PT[c K + k] =
// ((E + 1) / (O + 1))^theta_c. One thread per (k, c).
__global__ void eo_update(const double* acc, double sign, const double* Pr, const double* theta, int64_t K, int64_t B,
                          double* E, double* O, double* PT) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= K * B) return;
  const int64_t k = j / B, c = j % B;
  E[j] += sign * acc[k] * Pr[c];
  O[j] += sign * acc[K + j];
  if (PT) PT[c * K + k] = pow((E[j] + 1) / (O[j] + 1), theta[c]);
}
__global__ void eo_fresh(const double* acc, const double* Pr, int64_t K, int64_t B, double* E, double* O) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= K * B) return;
  E[j] = acc[j / B] * Pr[j % B];
  O[j] = acc[K + j];
}
__global__ void log_ratio(const double* E, const double* O, const double* theta, int64_t K, int64_t B, double* lq) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= K * B) return;
  lq[j] = theta[j % B] * log((O[j] + 1) / (E[j] + 1));
}

// harmonypy's objective, per block of kWarps * kObjCells cells: part[{0,1,2} * nblk + block] =
// k-means error, sigma-weighted entropy, diversity cross entropy.
__global__ void objective_part(const double* R, const double* dist, const double* sigma, const double* lq,
                               const int32_t* col, int64_t N, int64_t K, int64_t B, int64_t V, int64_t nblk,
                               double* part) {
  __shared__ double sh[3][kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kObjCells;
  double err = 0, ent = 0, cross = 0;
  for (int64_t i = c0; i < min(N, c0 + kObjCells); ++i)
    for (int64_t k = lane; k < K; k += 32) {
      const double r = R[i * K + k];
      err += r * dist[i * K + k];
      if (r > 0) ent += sigma[k] * r * log(r);
      double w = 0;
      for (int64_t v = 0; v < V; ++v) w += lq[k * B + col[i * V + v]];
      cross += r * sigma[k] * w;
    }
  err = warp_sum(err), ent = warp_sum(ent), cross = warp_sum(cross);
  if (lane == 0) sh[0][warp] = err, sh[1][warp] = ent, sh[2][warp] = cross;
  __syncthreads();
  if (threadIdx.x < 3) {
    double s = 0;
    for (int w = 0; w < kWarps; ++w) s += sh[threadIdx.x][w];
    part[threadIdx.x * nblk + blockIdx.x] = s;
  }
}

// The ridge systems: per cluster k the (B+1) x (B+1) sums of R_ik a_i a_i^T, a_i the cell's
// intercept and one-hot columns: part[(k P1 P1 + a P1 + c) * nch + ch] (zero beforehand), one block
// per chunk of cells, threads over clusters.
__global__ void ridge_sums(const double* __restrict__ R, const int32_t* __restrict__ col, int64_t N, int64_t K,
                           int64_t V, int64_t P1,
                           int64_t chunk, int64_t nch, double* __restrict__ part) {
  const int64_t ch = blockIdx.x, i0 = ch * chunk, i1 = min(N, i0 + chunk);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    double* base = part + k * P1 * P1 * nch + ch;
    for (int64_t i = i0; i < i1; ++i) {
      const double r = R[i * K + k];
      for (int64_t a = 0; a <= V; ++a) {
        const int64_t ia = a == 0 ? 0 : 1 + col[i * V + a - 1];
        for (int64_t c = 0; c <= V; ++c) {
          const int64_t ic = c == 0 ? 0 : 1 + col[i * V + c - 1];
          base[(ia * P1 + ic) * nch] += r;
        }
      }
    }
  }
}

// dst[t, :] = src[perm[t], :] (rows of w values). One thread per value.
template <class T>
__global__ void gather_rows(const T* src, const int64_t* perm, int64_t rows, int64_t w, T* dst) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= rows * w) return;
  const int64_t t = e / w, q = e % w;
  dst[e] = src[perm[t] * w + q];
}
// Z[perm[t], :] -= sub[t, :] (perm a permutation: each value written once).
__global__ void scatter_sub(const double* sub, const int64_t* perm, int64_t rows, int64_t w, double* Z) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= rows * w) return;
  const int64_t t = e / w, q = e % w;
  Z[perm[t] * w + q] -= sub[e];
}

__global__ void shuffle_keys(uint64_t seed, int64_t N, uint64_t* keys, int64_t* vals) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  keys[i] = gpu::mix64(seed ^ gpu::mix64(static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ULL));
  vals[i] = i;
}

// Several GPUs (harmony_gpus): this rank holds the cells [lo, lo + n) of N. flag[t] = whether the
// cell at position t of the global order is this rank's.
__global__ void mark_local(const int64_t* order, int64_t N, int64_t lo, int64_t n, int64_t* flag) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= N) return;
  const int64_t i = order[t] - lo;
  flag[t] = i >= 0 && i < n;
}
// mine[pos[t]] = order[t] - lo for this rank's cells (pos the inclusive running count, shifted by
// one: pos[t] = this rank's cells before t): its cells, local ids, in the global order.
__global__ void scatter_local(const int64_t* order, int64_t N, int64_t lo, int64_t n, const int64_t* pos, int64_t* mine) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= N) return;
  const int64_t i = order[t] - lo;
  if (i >= 0 && i < n) mine[pos[t]] = i;
}
// bounds[b] = pos[start of block b] for b <= nblocks (numpy.array_split's blocks of N positions;
// bounds[nblocks] = pos[N], this rank's cell count).
__global__ void block_bounds(const int64_t* pos, int64_t N, int64_t nblocks, int64_t* bounds) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b > nblocks) return;
  const int64_t q = N / nblocks, rem = N % nblocks;
  bounds[b] = pos[b * q + min(b, rem)];
}

// ---- the initial k-means, float32 (harmony.cpp's initial_centroids on the device)

// X = float(Z), xsq = float(sum of X^2 in float64). One thread per cell.
__global__ void to_float(const double* Z, int64_t n, int64_t d, float* X, float* xsq) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double s = 0;
  for (int64_t q = 0; q < d; ++q) {
    const float x = static_cast<float>(Z[i * d + q]);
    X[i * d + q] = x;
    s += static_cast<double>(x) * x;
  }
  xsq[i] = static_cast<float>(s);
}

// Per chunk of cells: part[q * nch + ch] = sum over the chunk of (Z[i, q] - mean[q])^k, k = 1 (no
// mean) or 2.
__global__ void column_moments(const double* Z, int64_t n, int64_t d, const double* mean, int64_t chunk, int64_t nch,
                               double* part) {
  const int64_t ch = blockIdx.x, i0 = ch * chunk, i1 = min(n, i0 + chunk);
  for (int64_t q = threadIdx.x; q < d; q += blockDim.x) {
    double s = 0;
    if (mean) {
      for (int64_t i = i0; i < i1; ++i) {
        const double t = Z[i * d + q] - mean[q];
        s += t * t;
      }
    } else {
      for (int64_t i = i0; i < i1; ++i) s += Z[i * d + q];
    }
    part[q * nch + ch] = s;
  }
}

// D (n x m) after D = -2 X C^T: + |x|^2 + |c|^2, clamped at 0.
__global__ void finish_dists(float* D, int64_t n, int64_t m, const float* xsq, const float* csq) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * m) return;
  const int64_t i = e / m, c = e % m;
  D[e] = fmaxf(0.0f, D[e] + xsq[i] + csq[c]);
}

// closest[r * n + i] = D[i * m + col[r]] (cols: one per restart) or min(closest, that).
__global__ void closest_update(const float* D, int64_t n, int64_t m, const int32_t* cols, int64_t n_init, bool first,
                               double* closest) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * n_init) return;
  const int64_t r = e / n, i = e % n;
  const double v = D[i * m + cols[r]];
  closest[e] = first ? v : fmin(closest[e], v);
}

// k-means++ sampling: for each query j (restart j / trials), the first cell i whose running sum of
// closest[r] reaches v[j] (numpy's searchsorted on the cumulative sum), by the segment sums first. A
// block per query: the segment sums, then the chosen segment's cells, are staged through shared memory
// and scanned by one thread in order (the running sums added in cell order; no dependent global load
// per step). seg <= kSampleTile.
constexpr int kSampleTile = 2048;
__global__ void sample_cells_block(const double* __restrict__ closest, const double* __restrict__ seg_sums, int64_t n,
                                   int64_t nseg, int64_t seg, const double* __restrict__ v, int64_t trials,
                                   int64_t* out) {
  __shared__ double tile[kSampleTile];
  __shared__ int64_t s_found;
  __shared__ double s_run;
  const int64_t j = blockIdx.x, r = j / trials;
  const double* x = closest + r * n;
  const double* ss = seg_sums + r * nseg;
  const double target = v[j];
  double run = 0;
  int64_t found = -1;
  for (int64_t t0 = 0; t0 < nseg; t0 += kSampleTile) {
    const int64_t t1 = min(nseg, t0 + kSampleTile);
    __syncthreads();
    for (int64_t i = t0 + threadIdx.x; i < t1; i += blockDim.x) tile[i - t0] = ss[i];
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int64_t s = t0; s < t1; ++s) {
        if (run + tile[s - t0] >= target) {
          found = s;
          break;
        }
        run += tile[s - t0];
      }
      s_found = found;
      s_run = run;
    }
    __syncthreads();
    found = s_found;
    run = s_run;
    if (found >= 0) break;  // block-uniform
  }
  if (found < 0) {
    if (threadIdx.x == 0) out[j] = n - 1;
    return;
  }
  const int64_t j0 = found * seg, j1 = min(n, j0 + seg);
  __syncthreads();
  for (int64_t i = j0 + threadIdx.x; i < j1; i += blockDim.x) tile[i - j0] = x[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t pick = j1 - 1;  // rounding: the segment's sum reached the target but its running sum did not
    double rr = run;
    for (int64_t i = j0; i < j1; ++i) {
      rr += tile[i - j0];
      if (rr >= target) {
        pick = i;
        break;
      }
    }
    out[j] = pick;
  }
}

// p[j * nch + ch] = sum over the chunk's cells of min(closest[j / trials][i], D[i * m + j]).
__global__ void min_sums(const double* closest, const float* D, int64_t n, int64_t m, int64_t trials, int64_t chunk,
                         int64_t nch, double* part) {
  const int64_t ch = blockIdx.x, i0 = ch * chunk, i1 = min(n, i0 + chunk);
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const double* c = closest + (j / trials) * n;
    double s = 0;
    for (int64_t i = i0; i < i1; ++i) s += fmin(c[i], static_cast<double>(D[i * m + j]));
    part[j * nch + ch] = s;
  }
}

// Lloyd assignment: per (cell, restart) the nearest of the restart's k centres (first minimum), its
// label and squared distance, on D = -2 X C^T as the GEMM left it (no finish pass over the n x m
// matrix): the score of centre c is D + csq[c]. One warp per cell: the lanes read the row's n_init k scores coalesced; per restart a
// lane keeps its first minimum over c = lane, lane + 32, ... and the warp takes the least (score, c).
__global__ void assign_labels_warp(const float* __restrict__ D, int64_t n, int64_t n_init, int64_t k,
                                   const float* __restrict__ csq, const float* __restrict__ xsq, int32_t* lab,
                                   float* best) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (i >= n) return;  // warp-uniform
  const float* row = D + i * n_init * k;
  for (int64_t r = 0; r < n_init; ++r) {
    float bv = __int_as_float(0x7f800000);
    int64_t bl = k;  // none yet (every score +inf: centre 0)
    for (int64_t c = lane; c < k; c += 32) {
      const float v = row[r * k + c] + csq[r * k + c];
      if (v < bv) bv = v, bl = c;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int64_t ol = __shfl_xor_sync(0xffffffffu, bl, o);
      if (ov < bv || (ov == bv && ol < bl)) bv = ov, bl = ol;
    }
    if (lane == 0) {
      if (bl == k) bl = 0, bv = row[r * k] + csq[r * k];
      lab[i * n_init + r] = static_cast<int32_t>(bl);
      best[i * n_init + r] = fmaxf(0.0f, bv + xsq[i]);
    }
  }
}

// centre_sums with the chunk's partial sums of one restart in shared memory (k (d + 1) doubles):
// block (ch, r), thread q adds column q of the chunk's cells in cell order, as centre_sums does, then
// the block writes its partials (the same values, the same order of additions: the same bits).
__global__ void centre_sums_shared(const float* __restrict__ X, const int32_t* __restrict__ lab,
                                   const uint8_t* __restrict__ done, int64_t n, int64_t d, int64_t n_init, int64_t k,
                                   int64_t chunk, int64_t nch, double* __restrict__ part) {
  extern __shared__ double sh_sums[];
  const int64_t ch = blockIdx.x, r = blockIdx.y, i0 = ch * chunk, i1 = min(n, i0 + chunk);
  if (done[r]) return;  // block-uniform; its partials stay zero
  const int64_t w = k * (d + 1);
  for (int64_t t = threadIdx.x; t < w; t += blockDim.x) sh_sums[t] = 0.0;
  __syncthreads();
  constexpr int kAhead = 8;  // cells whose label and value are loaded before their adds
  for (int64_t q = threadIdx.x; q <= d; q += blockDim.x) {
    for (int64_t i = i0; i < i1; i += kAhead) {
      int32_t ll[kAhead];
      double xv[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const bool in = i + u < i1;
        ll[u] = in ? lab[(i + u) * n_init + r] : 0;
        xv[u] = !in ? 0.0 : q < d ? static_cast<double>(X[(i + u) * d + q]) : 1.0;
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u)
        if (i + u < i1) sh_sums[ll[u] * (d + 1) + q] += xv[u];
    }
  }
  __syncthreads();
  for (int64_t t = threadIdx.x; t < w; t += blockDim.x) part[((r * k) * (d + 1) + t) * nch + ch] = sh_sums[t];
}

// Per chunk of rows of a row-major float matrix (n x cols): part[c * nch + ch] = the column's sum.
__global__ void float_column_sums(const float* x, int64_t n, int64_t cols, int64_t chunk, int64_t nch, double* part) {
  const int64_t ch = blockIdx.x, i0 = ch * chunk, i1 = min(n, i0 + chunk);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    double s = 0;
    for (int64_t i = i0; i < i1; ++i) s += x[i * cols + c];
    part[c * nch + ch] = s;
  }
}

// Lloyd centre sums: part[((r k + lab) (d + 1) + q) * nch + ch] += X[i, q] (q < d) or 1 (q = d), for
// the restarts still moving. Zero beforehand; threads over (r, q).
__global__ void centre_sums(const float* __restrict__ X, const int32_t* __restrict__ lab,
                            const uint8_t* __restrict__ done, int64_t n, int64_t d,
                            int64_t n_init, int64_t k, int64_t chunk, int64_t nch, double* __restrict__ part) {
  const int64_t ch = blockIdx.x, i0 = ch * chunk, i1 = min(n, i0 + chunk);
  for (int64_t j = threadIdx.x; j < n_init * (d + 1); j += blockDim.x) {
    const int64_t r = j / (d + 1), q = j % (d + 1);
    if (done[r]) continue;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t l = lab[i * n_init + r];
      part[((r * k + l) * (d + 1) + q) * nch + ch] += q < d ? static_cast<double>(X[i * d + q]) : 1.0;
    }
  }
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// SCURRY_HARMONY_TIMES=1: mark(what) prints the wall time since the previous mark on stderr (the
// stream synchronised first); without it, nothing (no synchronisation).
struct Phases {
  // mute: another rank than the first of harmony_gpus (one set of marks).
  explicit Phases(CudaResources& res, bool mute_ = false)
      : r(res), marks("SCURRY_HARMONY_TIMES", "harmony gpu"), mute(mute_) {}
  void mark(const std::string& what) {
    if (mute || !marks.on()) return;
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    marks.lap(what.c_str());
  }
  // Adds the time since the previous lap to the total of `what` (printed by report()).
  void lap(const char* what) {
    if (mute || !marks.on()) return;
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    const auto now = std::chrono::steady_clock::now();
    const double t = std::chrono::duration<double>(now - last).count();
    last = now;
    for (auto& e : laps)
      if (e.first == what) {
        e.second += t;
        return;
      }
    laps.emplace_back(what, t);
  }
  void report(const std::string& head) {
    if (mute || !marks.on()) return;
    for (const auto& e : laps) std::fprintf(stderr, "[harmony gpu] %s: %s %.4f s\n", head.c_str(), e.first.c_str(), e.second);
    laps.clear();
  }
  CudaResources& r;
  EnvLaps marks;
  bool mute;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, double>> laps;
};

struct Kmeans {
  CudaResources& r;
  int64_t n, d;
  DeviceArray<float> X, xsq;
  DeviceArray<float> dC, dcsq, D;
  DeviceArray<double> part, red;

  // D (n x m) = squared distances of every cell to the m centres C (host, m x d).
  // finish = false: D is left as -2 X C^T (the centre norms in dcsq): assign_labels_warp adds them.
  void sq_dists(const std::vector<float>& C, int64_t m, bool finish) {
    std::vector<float> csq(static_cast<size_t>(m));
    for (int64_t c = 0; c < m; ++c) {
      double s = 0;
      for (int64_t q = 0; q < d; ++q) s += static_cast<double>(C[c * d + q]) * C[c * d + q];
      csq[c] = static_cast<float>(s);
    }
    if (dC.size() < static_cast<size_t>(m * d)) dC = DeviceArray<float>(r, static_cast<size_t>(m * d), "k-means centres");
    if (dcsq.size() < static_cast<size_t>(m)) dcsq = DeviceArray<float>(r, static_cast<size_t>(m), "k-means centre norms");
    if (D.size() < static_cast<size_t>(n * m)) {
      D.release();
      D = DeviceArray<float>(r, static_cast<size_t>(n * m), "k-means distances");
    }
    to_device(r, dC, C.data(), C.size());
    to_device(r, dcsq, csq.data(), csq.size());
    rm_sgemm(r.cublas, false, true, n, m, d, -2.0f, X.data(), d, dC.data(), d, 0.0f, D.data(), m);
    if (!finish) return;
    finish_dists<<<grid_for(n * m, kThreads), kThreads, 0, r.stream>>>(D.data(), n, m, xsq.data(), dcsq.data());
    SCURRY_CUDA_LAUNCH();
  }
  double* partials(int64_t count) {
    if (part.size() < static_cast<size_t>(count)) {
      part.release();
      part = DeviceArray<double>(r, static_cast<size_t>(count), "k-means partial sums");
    }
    return part.data();
  }
  double* reduced(int64_t count) {
    if (red.size() < static_cast<size_t>(count)) red = DeviceArray<double>(r, static_cast<size_t>(count), "k-means sums");
    return red.data();
  }
};

// Greedy k-means++ (Arthur & Vassilvitskii 2007; sklearn's 2 + ln k local trials per centre), the
// restarts in lockstep, as harmony.cpp's kmeans_pp with the same RNG draws.
std::vector<std::vector<float>> kmeans_pp(Kmeans& km, int k, int n_init, std::vector<std::mt19937_64>& rngs) {
  CudaResources& r = km.r;
  const int64_t n = km.n, d = km.d;
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(k)));
  std::vector<std::vector<float>> C(static_cast<size_t>(n_init), std::vector<float>(static_cast<size_t>(k * d)));
  const int64_t m = static_cast<int64_t>(n_init) * trials;
  DeviceArray<int64_t> ids(r, static_cast<size_t>(m), "k-means++ candidates");
  DeviceArray<float> cand_d(r, static_cast<size_t>(m * d), "k-means++ candidate rows");
  DeviceArray<double> closest(r, static_cast<size_t>(n_init * n), "k-means++ closest distances");
  DeviceArray<int32_t> cols(r, static_cast<size_t>(n_init), "k-means++ chosen columns");
  DeviceArray<double> v(r, static_cast<size_t>(m), "k-means++ targets");
  const int64_t nseg = n_chunks(n, kScanChunk);
  DeviceArray<double> seg(r, static_cast<size_t>(n_init * nseg), "k-means++ segment sums");
  std::vector<float> cand(static_cast<size_t>(m * d));
  auto gather = [&](const std::vector<int64_t>& idx) {
    to_device(r, ids, idx.data(), idx.size());
    const int64_t cnt = static_cast<int64_t>(idx.size());
    gather_rows<float><<<grid_for(cnt * d, kThreads), kThreads, 0, r.stream>>>(km.X.data(), ids.data(), cnt, d, cand_d.data());
    SCURRY_CUDA_LAUNCH();
    cand.resize(static_cast<size_t>(cnt * d));
    to_host(r, cand.data(), cand_d.data(), cand.size());
  };
  std::vector<int64_t> first(static_cast<size_t>(n_init));
  for (int q = 0; q < n_init; ++q)
    first[q] = std::min<int64_t>(static_cast<int64_t>(uniform01(rngs[q]) * n), n - 1);
  gather(first);
  for (int q = 0; q < n_init; ++q) std::copy(cand.begin() + q * d, cand.begin() + (q + 1) * d, C[q].begin());
  km.sq_dists(cand, n_init, /*finish=*/true);
  std::vector<int32_t> hc(static_cast<size_t>(n_init));
  std::iota(hc.begin(), hc.end(), 0);
  to_device(r, cols, hc.data(), hc.size());
  closest_update<<<grid_for(n * n_init, kThreads), kThreads, 0, r.stream>>>(km.D.data(), n, n_init, cols.data(), n_init,
                                                                            true, closest.data());
  SCURRY_CUDA_LAUNCH();
  std::vector<double> pot(static_cast<size_t>(n_init));
  double* dpot = km.reduced(std::max<int64_t>(n_init, m));
  reduce(r, closest.data(), n_init, n, dpot);
  to_host(r, pot.data(), dpot, pot.size());
  const int64_t chunk = chunk_for(n, m, 256), nch = n_chunks(n, chunk);
  std::vector<double> hv(static_cast<size_t>(m)), p(static_cast<size_t>(m));
  std::vector<int64_t> picks(static_cast<size_t>(m));
  Phases ph(r);
  for (int c = 1; c < k; ++c) {
    segment_sums<<<dim3(as_grid(nseg), as_grid(n_init)), kReduceThreads, 0, r.stream>>>(closest.data(), n, kScanChunk,
                                                                                        nseg, seg.data());
    SCURRY_CUDA_LAUNCH();
    for (int q = 0; q < n_init; ++q)
      for (int t = 0; t < trials; ++t) hv[q * trials + t] = uniform01(rngs[q]) * pot[q];
    to_device(r, v, hv.data(), hv.size());
    sample_cells_block<<<as_grid(m), 256, 0, r.stream>>>(closest.data(), seg.data(), n, nseg, kScanChunk, v.data(),
                                                         trials, ids.data());
    SCURRY_CUDA_LAUNCH();
    to_host(r, picks.data(), ids.data(), picks.size());
    ph.lap("sampling");
    gather(picks);
    ph.lap("gather");
    km.sq_dists(cand, m, /*finish=*/true);
    ph.lap("distances");
    double* pp = km.partials(m * nch);
    min_sums<<<as_grid(nch), kSumThreads, 0, r.stream>>>(closest.data(), km.D.data(), n, m, trials, chunk, nch, pp);
    SCURRY_CUDA_LAUNCH();
    reduce(r, pp, m, nch, dpot);
    to_host(r, p.data(), dpot, p.size());
    ph.lap("potentials");
    for (int q = 0; q < n_init; ++q) {
      int best = 0;
      for (int t = 1; t < trials; ++t)
        if (p[q * trials + t] < p[q * trials + best]) best = t;
      pot[q] = p[q * trials + best];
      hc[q] = q * trials + best;
      std::copy(cand.begin() + hc[q] * d, cand.begin() + (hc[q] + 1) * d, C[q].begin() + c * d);
    }
    to_device(r, cols, hc.data(), hc.size());
    closest_update<<<grid_for(n * n_init, kThreads), kThreads, 0, r.stream>>>(km.D.data(), n, m, cols.data(), n_init,
                                                                              false, closest.data());
    SCURRY_CUDA_LAUNCH();
    ph.lap("closest update");
  }
  ph.report("k-means++");
  return C;
}

// Lloyd iterations of all restarts in lockstep (a restart stops once its centre shift is <= tol);
// the best restart's centres (least inertia). As harmony.cpp's lloyd_best. Several GPUs (comm): km
// holds this rank's cells, from cell lo of all; the inertias and the centre sums are added across
// the ranks (rank order: every rank the same centres), an empty cluster takes the farthest cell of
// all (the distances gathered, the row broadcast by its rank).
std::vector<double> lloyd_best(Kmeans& km, int k, std::vector<std::vector<float>>& C, int max_iter, double tol,
                               Comm* comm = nullptr, int64_t lo = 0) {
  CudaResources& r = km.r;
  const int64_t n = km.n, d = km.d;
  const int R = comm ? comm->size() : 1;
  std::vector<int64_t> ranges(static_cast<size_t>(2 * R), 0);  // per rank: first cell, cells
  ranges[0] = lo, ranges[1] = n;
  if (comm) {
    const int64_t mine[2] = {lo, n};
    comm->allgather(mine, sizeof mine, ranges.data());
  }
  const int64_t n_all = ranges[2 * (R - 1)] + ranges[2 * R - 1];
  const int n_init = static_cast<int>(C.size());
  const int64_t m = static_cast<int64_t>(n_init) * k;
  std::vector<float> all(static_cast<size_t>(m * d));
  DeviceArray<int32_t> lab(r, static_cast<size_t>(n * n_init), "k-means labels");
  DeviceArray<float> best(r, static_cast<size_t>(n * n_init), "k-means distances to the nearest centre");
  DeviceArray<uint8_t> done_d(r, static_cast<size_t>(n_init), "k-means restart flags");
  std::vector<uint8_t> done(static_cast<size_t>(n_init), 0);
  const int64_t ichunk = chunk_for(n, n_init, 256), inch = n_chunks(n, ichunk);
  Phases ph(r, comm && comm->rank() != 0);
  auto assign = [&]() {
    for (int q = 0; q < n_init; ++q) std::copy(C[q].begin(), C[q].end(), all.begin() + q * k * d);
    km.sq_dists(all, m, /*finish=*/false);
    ph.lap("distances (GEMM)");
    assign_labels_warp<<<grid_for(n * 32, kThreads), kThreads, 0, r.stream>>>(km.D.data(), n, n_init, k, km.dcsq.data(),
                                                                              km.xsq.data(), lab.data(), best.data());
    SCURRY_CUDA_LAUNCH();
    ph.lap("labels");
    double* pp = km.partials(n_init * inch);
    float_column_sums<<<as_grid(inch), kSumThreads, 0, r.stream>>>(best.data(), n, n_init, ichunk, inch, pp);
    SCURRY_CUDA_LAUNCH();
    double* out = km.reduced(n_init);
    reduce(r, pp, n_init, inch, out);
    std::vector<double> inertia(static_cast<size_t>(n_init));
    to_host(r, inertia.data(), out, inertia.size());
    if (comm) comm->allreduce_sum(inertia.data(), inertia.size());
    ph.lap("inertia");
    return inertia;
  };
  const int64_t width = m * (d + 1);
  const int64_t chunk = chunk_for(n, width, 256), nch = n_chunks(n, chunk);
  std::vector<double> acc(static_cast<size_t>(width));
  std::vector<float> hbest;
  int64_t empties = 0;
  const size_t csum_smem = static_cast<size_t>(k * (d + 1)) * sizeof(double);
  const bool csum_shared = csum_smem <= 96 * 1024;
  if (csum_shared)
    SCURRY_CUDA(cudaFuncSetAttribute(centre_sums_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(csum_smem)));
  int iters = 0;
  for (int it = 0; it < max_iter; ++it) {
    ++iters;
    assign();
    to_device(r, done_d, done.data(), done.size());
    double* pp = km.partials(width * nch);
    zero(r, pp, static_cast<size_t>(width * nch) * sizeof(double));
    if (csum_shared) {
      centre_sums_shared<<<dim3(as_grid(nch), as_grid(n_init)), 64, csum_smem, r.stream>>>(
          km.X.data(), lab.data(), done_d.data(), n, d, n_init, k, chunk, nch, pp);
    } else {
      centre_sums<<<as_grid(nch), 512, 0, r.stream>>>(km.X.data(), lab.data(), done_d.data(), n, d, n_init, k, chunk,
                                                     nch, pp);
    }
    SCURRY_CUDA_LAUNCH();
    ph.lap("centre sums");
    double* out = km.reduced(width);
    reduce(r, pp, width, nch, out);
    to_host(r, acc.data(), out, acc.size());
    if (comm) comm->allreduce_sum(acc.data(), acc.size());
    ph.lap("centre sums reduced and downloaded");
    hbest.clear();
    bool all_done = true;
    for (int q = 0; q < n_init; ++q) {
      if (done[q]) continue;
      std::vector<int64_t> far;  // empty clusters take the points farthest from their centres (sklearn)
      double shift = 0;
      for (int c = 0; c < k; ++c) {
        const double* a = acc.data() + (static_cast<int64_t>(q) * k + c) * (d + 1);
        float* cc = C[q].data() + c * d;
        std::vector<float> nc(static_cast<size_t>(d));
        if (a[d] > 0) {
          for (int64_t t = 0; t < d; ++t) nc[t] = static_cast<float>(a[t] / a[d]);
        } else {
          if (far.empty()) {
            if (hbest.empty()) {  // all cells' distances to their nearest centres, in cell order
              hbest.resize(static_cast<size_t>(n_all * n_init));
              std::vector<float> mine(static_cast<size_t>(n * n_init));
              to_host(r, mine.data(), best.data(), mine.size());
              if (comm) {
                std::vector<size_t> counts;
                for (int q2 = 0; q2 < R; ++q2) counts.push_back(static_cast<size_t>(ranges[2 * q2 + 1] * n_init) * sizeof(float));
                comm->allgatherv(mine.data(), counts, hbest.data());
              } else {
                hbest = std::move(mine);
              }
            }
            far.resize(static_cast<size_t>(n_all));
            for (int64_t i = 0; i < n_all; ++i) far[i] = i;
            std::stable_sort(far.begin(), far.end(),
                             [&](int64_t x, int64_t y) { return hbest[x * n_init + q] < hbest[y * n_init + q]; });
          }
          const int64_t pnt = far.back();
          far.pop_back();
          ++empties;
          int owner = 0;  // the rank holding cell pnt
          while (owner + 1 < R && ranges[2 * (owner + 1)] <= pnt) ++owner;
          if (!comm || comm->rank() == owner) {
            std::vector<int64_t> one{pnt - ranges[2 * owner]};
            DeviceArray<int64_t> id(r, 1, "k-means empty cluster");
            to_device(r, id, one.data(), 1);
            DeviceArray<float> row(r, static_cast<size_t>(d), "k-means empty cluster row");
            gather_rows<float><<<grid_for(d, kThreads), kThreads, 0, r.stream>>>(km.X.data(), id.data(), 1, d, row.data());
            SCURRY_CUDA_LAUNCH();
            to_host(r, nc.data(), row.data(), nc.size());
          }
          if (comm) comm->broadcast(nc.data(), nc.size() * sizeof(float), owner);
        }
        for (int64_t t = 0; t < d; ++t) {
          shift += (static_cast<double>(nc[t]) - cc[t]) * (static_cast<double>(nc[t]) - cc[t]);
          cc[t] = nc[t];
        }
      }
      if (shift <= tol) done[q] = 1;
      all_done = all_done && done[q];
    }
    ph.lap("host update");
    if (all_done) break;
  }
  const std::vector<double> inertia = assign();
  ph.report("lloyd, " + std::to_string(iters) + " iterations (" + std::to_string(empties) + " empty clusters)");
  int b = 0;
  for (int q = 1; q < n_init; ++q)
    if (inertia[q] < inertia[b]) b = q;
  return std::vector<double>(C[b].begin(), C[b].end());
}

// The k-means restarts' RNG streams, drawn from Harmony's: every rank of harmony_gpus draws them (only
// rank 0 runs the k-means), so the R-update seeds that follow are the same on every rank.
std::vector<std::mt19937_64> kmeans_streams(const HarmonyOptions& opt, std::mt19937_64& rng) {
  std::vector<std::mt19937_64> rngs;
  for (int q = 0; q < std::max(1, opt.kmeans_n_init); ++q) rngs.emplace_back(rng());
  return rngs;
}

// The k-means data: float(Zcos) and the cells' squared norms.
Kmeans kmeans_data(CudaResources& r, const double* Zcos, int64_t n, int64_t d) {
  Kmeans km{r, n, d, DeviceArray<float>(r, static_cast<size_t>(n * d), "k-means cells (float32)"),
            DeviceArray<float>(r, static_cast<size_t>(n), "k-means cell norms"), {}, {}, {}, {}, {}};
  to_float<<<grid_for(n, kThreads), kThreads, 0, r.stream>>>(Zcos, n, d, km.X.data(), km.xsq.data());
  SCURRY_CUDA_LAUNCH();
  return km;
}

// sklearn's tol (1e-4) times the mean per-column variance of Zcos (n x d).
double kmeans_tol(Kmeans& km, const double* Zcos) {
  CudaResources& r = km.r;
  const int64_t n = km.n, d = km.d;
  const int64_t chunk = chunk_for(n, d, 1024), nch = n_chunks(n, chunk);
  double* pp = km.partials(d * nch);
  double* mean = km.reduced(2 * d);
  column_moments<<<as_grid(nch), kSumThreads, 0, r.stream>>>(Zcos, n, d, nullptr, chunk, nch, pp);
  SCURRY_CUDA_LAUNCH();
  reduce(r, pp, d, nch, mean);
  std::vector<double> h(static_cast<size_t>(d));
  to_host(r, h.data(), mean, h.size());
  for (auto& x : h) x /= static_cast<double>(n);
  to_device(r, km.red, h.data(), h.size());
  column_moments<<<as_grid(nch), kSumThreads, 0, r.stream>>>(Zcos, n, d, mean, chunk, nch, pp);
  SCURRY_CUDA_LAUNCH();
  reduce(r, pp, d, nch, mean + d);
  to_host(r, h.data(), mean + d, h.size());
  double tol = 0;
  for (double x : h) tol += x / static_cast<double>(n);
  return tol / static_cast<double>(d) * 1e-4;
}

// The initial centroids (harmony.cpp's initial_centroids on the device): k-means++ restarts, then
// Lloyd, on Zcos (n x d).
std::vector<double> initial_centroids(CudaResources& r, const double* Zcos, int64_t n, int64_t d, int k,
                                      const HarmonyOptions& opt, std::vector<std::mt19937_64> rngs) {
  Kmeans km = kmeans_data(r, Zcos, n, d);
  const double tol = kmeans_tol(km, Zcos);
  const int n_init = static_cast<int>(rngs.size());
  Phases ph(r);
  std::vector<std::vector<float>> C = kmeans_pp(km, k, n_init, rngs);
  ph.mark("  k-means++ (" + std::to_string(k) + " centres, " + std::to_string(n_init) + " restarts)");
  return lloyd_best(km, k, C, opt.kmeans_max_iter, tol);
}

// The same over the ranks of harmony_gpus: the tolerance and k-means++ on rank 0 over all cells
// (Zcos_all, Ng x d there; null elsewhere), its centres and tolerance broadcast, then Lloyd over
// every rank's own cells (Zcos, n x d from cell lo; rank 0's are the first n of Zcos_all).
std::vector<double> initial_centroids_ranks(CudaResources& r, const double* Zcos_all, int64_t Ng, const double* Zcos,
                                            int64_t n, int64_t lo, int64_t d, int k, const HarmonyOptions& opt,
                                            std::vector<std::mt19937_64> rngs, Comm& comm) {
  const bool root = comm.rank() == 0;
  const int n_init = static_cast<int>(rngs.size());
  Kmeans km = kmeans_data(r, root ? Zcos_all : Zcos, root ? Ng : n, d);
  double tol = 0;
  std::vector<std::vector<float>> C(static_cast<size_t>(n_init), std::vector<float>(static_cast<size_t>(k * d)));
  if (root) {
    tol = kmeans_tol(km, Zcos_all);
    Phases ph(r);
    C = kmeans_pp(km, k, n_init, rngs);
    ph.mark("  k-means++ (" + std::to_string(k) + " centres, " + std::to_string(n_init) + " restarts, rank 0)");
    km.n = n;  // Lloyd over its own cells: the first n rows
  }
  comm.broadcast(&tol, sizeof tol, 0);
  for (auto& c : C) comm.broadcast(c.data(), c.size() * sizeof(float), 0);
  return lloyd_best(km, k, C, opt.kmeans_max_iter, tol, &comm, lo);
}

// ---- Harmony proper
// One rank's state: its cells [lo, lo + N) of Ng (one GPU: all of them, lo = 0, comm null). Every sum
// over cells is this rank's, then added across the ranks in rank order on the host (across_ranks).
struct Gpu {
  explicit Gpu(CudaResources& res) : r(res) {}
  CudaResources& r;
  int64_t N = 0, d = 0, K = 0, B = 0, V = 0;
  int64_t Ng = 0, lo = 0;   // all ranks' cells; this rank's first
  Comm* comm = nullptr;     // several GPUs: the ThreadComm of the ranks
  std::vector<double> hsum;  // across_ranks' host copy
  DeviceArray<int64_t> flag, pos, mine, bounds;  // several GPUs: this rank's cells in the R-update order
  DeviceArray<unsigned char> scan_tmp;
  size_t scan_tmp_bytes = 0;
  std::vector<double> Pr, theta, lamb;
  std::vector<std::vector<int64_t>> perm_h;               // per variable: cells stably by column
  std::vector<std::vector<int64_t>> col_start;            // per variable: each column's first position
  std::vector<int32_t> col_of;                            // one-hot column -> its variable's level offset
  DeviceArray<double> Zorig, Zcorr, Zcos, Y, R, dist, E, O, PT, lq, sigma, inv_sigma, dPr, dtheta;
  DeviceArray<int32_t> col;
  DeviceArray<int64_t> identity, order, keys_vals;
  DeviceArray<uint64_t> keys, keys_out;
  DeviceArray<unsigned char> sort_tmp;
  size_t sort_tmp_bytes = 0;
  DeviceArray<double> part, acc;
  std::vector<DeviceArray<int64_t>> perm;
  DeviceArray<double> Rg, tmp, ridgeX, rhs, W;
  std::vector<double> obj_kmeans, obj_harmony;
  std::mt19937_64 rng;

  double* partials(int64_t count) {
    if (part.size() < static_cast<size_t>(count)) {
      part.release();
      part = DeviceArray<double>(r, static_cast<size_t>(count), "harmony partial sums");
    }
    return part.data();
  }
  double* sums(int64_t count) {
    if (acc.size() < static_cast<size_t>(count)) {
      acc.release();
      acc = DeviceArray<double>(r, static_cast<size_t>(count), "harmony sums");
    }
    return acc.data();
  }

  // The n device values summed over the ranks (in place; rank order, the same bits on every rank).
  void across_ranks(double* x, int64_t n) {
    if (!comm) return;
    hsum.resize(static_cast<size_t>(n));
    to_host(r, hsum.data(), x, hsum.size());
    comm->allreduce_sum(hsum.data(), hsum.size());
    SCURRY_CUDA(cudaMemcpyAsync(x, hsum.data(), hsum.size() * sizeof(double), cudaMemcpyHostToDevice, r.stream));
  }
  void update_centroids() {
    rm_dgemm(r.cublas, true, false, K, d, N, 1.0, R.data(), K, Zcos.data(), d, 0.0, Y.data(), d);
    across_ranks(Y.data(), K * d);
    normalize_rows<<<grid_for(K, kThreads), kThreads, 0, r.stream>>>(Y.data(), K, d, Y.data());
    SCURRY_CUDA_LAUNCH();
  }
  void update_dist() {
    rm_dgemm(r.cublas, false, true, N, K, d, -2.0, Zcos.data(), d, Y.data(), d, 0.0, dist.data(), K);
    add_constant<<<grid_for(N * K, kThreads), kThreads, 0, r.stream>>>(dist.data(), N * K, 2.0);
    SCURRY_CUDA_LAUNCH();
  }
  // Sums of R and R Phi^T over cells[0, len) into out (K + K B; zero when len = 0).
  void block_sums(const int64_t* cells, int64_t len, int64_t chunk, double* out) {
    const int64_t width = K + K * B, nch = n_chunks(len, chunk);
    if (len == 0) {
      zero(r, out, static_cast<size_t>(width) * sizeof(double));
      return;
    }
    double* pp = partials(width * nch);
    const size_t shared = static_cast<size_t>(K * B) * sizeof(double);
    if (shared <= kMaxShared) {
      r_sums<true><<<as_grid(nch), kSumThreads, shared, r.stream>>>(cells, len, chunk, R.data(), col.data(), V, K, B,
                                                                     nch, pp);
    } else {
      zero(r, pp, static_cast<size_t>(width * nch) * sizeof(double));
      r_sums<false><<<as_grid(nch), kSumThreads, 0, r.stream>>>(cells, len, chunk, R.data(), col.data(), V, K, B, nch,
                                                                 pp);
    }
    SCURRY_CUDA_LAUNCH();
    reduce(r, pp, width, nch, out);
  }
  void fresh_EO() {
    const int64_t width = K + K * B, chunk = chunk_for(N, width, 1024);
    double* a = sums(width);
    block_sums(identity.data(), N, chunk, a);
    across_ranks(a, width);
    eo_fresh<<<grid_for(K * B, kThreads), kThreads, 0, r.stream>>>(a, dPr.data(), K, B, E.data(), O.data());
    SCURRY_CUDA_LAUNCH();
  }
  void compute_objective() {
    log_ratio<<<grid_for(K * B, kThreads), kThreads, 0, r.stream>>>(E.data(), O.data(), dtheta.data(), K, B, lq.data());
    SCURRY_CUDA_LAUNCH();
    const int64_t nblk = n_chunks(N, kWarps * kObjCells);
    double* pp = partials(3 * nblk);
    objective_part<<<as_grid(nblk), kWarps * 32, 0, r.stream>>>(R.data(), dist.data(), sigma.data(), lq.data(),
                                                                  col.data(), N, K, B, V, nblk, pp);
    SCURRY_CUDA_LAUNCH();
    double* a = sums(3);
    reduce(r, pp, 3, nblk, a);
    double h[3];
    to_host(r, h, a, 3);
    if (comm) comm->allreduce_sum(h, 3);
    obj_kmeans.push_back(h[0] + h[1] + h[2]);
  }
  // harmonypy's update_R: the cells in a fresh random order (a seeded hash key per cell of all ranks,
  // sorted: cub's radix sort, stable and exact), in ceil(1 / block_size) blocks (numpy.array_split);
  // per block E and O lose the block's sums, its cells' R are recomputed, E and O gain the new sums.
  // Several GPUs: every rank sorts all Ng keys (the same order), keeps its own cells of each block in
  // that order, and the block sums are added across the ranks; the new sums of block b and the old
  // ones of block b + 1 (other cells: unchanged by block b) cross in one exchange.
  void update_R(double block_size) {
    const uint64_t seed = rng();
    shuffle_keys<<<grid_for(Ng, kThreads), kThreads, 0, r.stream>>>(seed, Ng, keys.data(), keys_vals.data());
    SCURRY_CUDA_LAUNCH();
    size_t bytes = sort_tmp_bytes;
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(sort_tmp.data(), bytes, keys.data(), keys_out.data(), keys_vals.data(),
                                                order.data(), Ng, 0, 64, r.stream));
    const int64_t nb = static_cast<int64_t>(std::ceil(1.0 / block_size - 1e-12));
    const int64_t nblocks = std::min<int64_t>(std::max<int64_t>(nb, 1), Ng);
    const int64_t maxlen = Ng / nblocks + (Ng % nblocks ? 1 : 0);
    const int64_t chunk = chunk_for(maxlen, K + K * B, kRChunk);
    std::vector<int64_t> at(static_cast<size_t>(nblocks + 1), 0);  // block b: cells[at[b], at[b + 1])
    const int64_t* cells = order.data();
    if (Ng == N) {
      for (int64_t blk = 0; blk < nblocks; ++blk) at[blk + 1] = at[blk] + Ng / nblocks + (blk < Ng % nblocks ? 1 : 0);
    } else {
      mark_local<<<grid_for(Ng, kThreads), kThreads, 0, r.stream>>>(order.data(), Ng, lo, N, flag.data());
      SCURRY_CUDA_LAUNCH();
      zero(r, pos.data(), sizeof(int64_t));
      size_t sb = scan_tmp_bytes;
      SCURRY_CUDA(cub::DeviceScan::InclusiveSum(scan_tmp.data(), sb, flag.data(), pos.data() + 1, Ng, r.stream));
      scatter_local<<<grid_for(Ng, kThreads), kThreads, 0, r.stream>>>(order.data(), Ng, lo, N, pos.data(), mine.data());
      SCURRY_CUDA_LAUNCH();
      block_bounds<<<grid_for(nblocks + 1, kThreads), kThreads, 0, r.stream>>>(pos.data(), Ng, nblocks, bounds.data());
      SCURRY_CUDA_LAUNCH();
      to_host(r, at.data(), bounds.data(), at.size());
      cells = mine.data();
    }
    const int64_t width = K + K * B;
    double* both = sums(2 * width);  // [new sums of block b | old sums of block b + 1]
    double* old_sums = both + width;
    block_sums(cells, at[1], chunk, old_sums);
    across_ranks(old_sums, width);
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t* bc = cells + at[blk];
      const int64_t len = at[blk + 1] - at[blk];
      eo_update<<<grid_for(K * B, kThreads), kThreads, 0, r.stream>>>(old_sums, -1.0, dPr.data(), dtheta.data(), K, B,
                                                                      E.data(), O.data(), PT.data());
      SCURRY_CUDA_LAUNCH();
      if (len > 0) {
        update_R_block<<<grid_for(len * 32, kWarps * 32), kWarps * 32, 0, r.stream>>>(
            bc, len, dist.data(), inv_sigma.data(), PT.data(), col.data(), V, K, R.data());
        SCURRY_CUDA_LAUNCH();
      }
      block_sums(bc, len, chunk, both);
      const bool next = blk + 1 < nblocks;
      if (next) block_sums(cells + at[blk + 1], at[blk + 2] - at[blk + 1], chunk, old_sums);
      across_ranks(both, next ? 2 * width : width);
      eo_update<<<grid_for(K * B, kThreads), kThreads, 0, r.stream>>>(both, 1.0, dPr.data(), dtheta.data(), K, B, E.data(),
                                                                      O.data(), nullptr);
      SCURRY_CUDA_LAUNCH();
    }
  }
  bool kmeans_converged(double eps) const {
    const size_t okl = obj_kmeans.size();
    double o = 0, n = 0;
    for (int i = 0; i < kWindow; ++i) {
      o += obj_kmeans[okl - 2 - i];
      n += obj_kmeans[okl - 1 - i];
    }
    return std::fabs(o - n) / std::fabs(o) < eps;
  }
  int cluster(const HarmonyOptions& opt) {
    int i = 0;
    for (; i < opt.max_iter_kmeans; ++i) {
      update_centroids();
      update_dist();
      update_R(opt.block_size);
      compute_objective();
      if (i > kWindow && kmeans_converged(opt.epsilon_cluster)) break;
    }
    if (i == opt.max_iter_kmeans) i = opt.max_iter_kmeans - 1;  // python's loop variable
    obj_harmony.push_back(obj_kmeans.back());
    return i;
  }
  void gather_R(int64_t v) {
    gather_rows<double><<<grid_for(N * K, kThreads), kThreads, 0, r.stream>>>(R.data(), perm[v].data(), N, K, Rg.data());
    SCURRY_CUDA_LAUNCH();
  }
  // harmony.cpp's moe_correct_ridge.
  void moe_correct_ridge() {
    const int64_t P1 = B + 1;
    const int64_t wX = K * P1 * P1;
    const int64_t chunk = chunk_for(N, wX, 256), nch = n_chunks(N, chunk);
    double* pp = partials(wX * nch);
    zero(r, pp, static_cast<size_t>(wX * nch) * sizeof(double));
    ridge_sums<<<as_grid(nch), kSumThreads, 0, r.stream>>>(R.data(), col.data(), N, K, V, P1, chunk, nch, pp);
    SCURRY_CUDA_LAUNCH();
    reduce(r, pp, wX, nch, ridgeX.data());
    // Right-hand sides (K x P1 x d): the intercept row R^T Z over all cells, row 1 + c over the cells
    // of column c (contiguous once gathered in the variable's column order).
    zero(r, rhs.data(), rhs.size() * sizeof(double));
    rm_dgemm(r.cublas, true, false, K, d, N, 1.0, R.data(), K, Zorig.data(), d, 0.0, rhs.data(), P1 * d);
    for (int64_t v = 0; v < V; ++v) {
      gather_R(v);
      gather_rows<double><<<grid_for(N * d, kThreads), kThreads, 0, r.stream>>>(Zorig.data(), perm[v].data(), N, d,
                                                                                tmp.data());
      SCURRY_CUDA_LAUNCH();
      const auto& cs = col_start[v];
      for (size_t l = 0; l + 1 < cs.size(); ++l) {
        const int64_t off = cs[l], g = cs[l + 1] - cs[l], c = col_of[v] + static_cast<int64_t>(l);
        if (g == 0) continue;
        rm_dgemm(r.cublas, true, false, K, d, g, 1.0, Rg.data() + off * K, K, tmp.data() + off * d, d, 0.0,
                 rhs.data() + (1 + c) * d, P1 * d);
      }
    }
    std::vector<double> hx(static_cast<size_t>(wX)), hr(static_cast<size_t>(K * P1 * d));
    to_host(r, hx.data(), ridgeX.data(), hx.size());
    to_host(r, hr.data(), rhs.data(), hr.size());
    if (comm) {  // every rank then solves the same systems: the same W
      comm->allreduce_sum(hx.data(), hx.size());
      comm->allreduce_sum(hr.data(), hr.size());
    }
    std::vector<double> Wh(static_cast<size_t>(K * B * d), 0.0), x, inv;
    for (int64_t k = 0; k < K; ++k) {
      x.assign(hx.begin() + k * P1 * P1, hx.begin() + (k + 1) * P1 * P1);
      for (int64_t c = 0; c < B; ++c) x[(c + 1) * P1 + (c + 1)] += lamb[c];
      if (!linalg::invert_gauss_jordan(x, P1, inv, 0.0))
        fail("harmony: singular ridge system (a cluster without weight and lamb = 0)");
      const double* rh = hr.data() + k * P1 * d;
      for (int64_t a = 1; a < P1; ++a) {
        double* w = Wh.data() + (k * B + (a - 1)) * d;
        for (int64_t c = 0; c < P1; ++c) {
          const double f = inv[a * P1 + c];
          for (int64_t q = 0; q < d; ++q) w[q] += f * rh[c * d + q];
        }
      }
    }
    to_device(r, W, Wh.data(), Wh.size());
    // Z_corr = Z_orig - sum over variables (in order) of R_i W[:, col(i, v)].
    SCURRY_CUDA(cudaMemcpyAsync(Zcorr.data(), Zorig.data(), static_cast<size_t>(N * d) * sizeof(double),
                                cudaMemcpyDeviceToDevice, r.stream));
    for (int64_t v = 0; v < V; ++v) {
      gather_R(v);
      const auto& cs = col_start[v];
      for (size_t l = 0; l + 1 < cs.size(); ++l) {
        const int64_t off = cs[l], g = cs[l + 1] - cs[l], c = col_of[v] + static_cast<int64_t>(l);
        if (g == 0) continue;
        rm_dgemm(r.cublas, false, false, g, d, K, 1.0, Rg.data() + off * K, K, W.data() + c * d, B * d, 0.0,
                 tmp.data() + off * d, d);
      }
      scatter_sub<<<grid_for(N * d, kThreads), kThreads, 0, r.stream>>>(tmp.data(), perm[v].data(), N, d, Zcorr.data());
      SCURRY_CUDA_LAUNCH();
    }
    normalize_rows<<<grid_for(N, kThreads), kThreads, 0, r.stream>>>(Zcorr.data(), N, d, Zcos.data());
    SCURRY_CUDA_LAUNCH();
  }
};

}  // namespace

namespace {

__global__ void widen(const float* x, int64_t n, double* y) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) y[e] = x[e];
}
__global__ void narrow(const double* x, int64_t n, float* y) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) y[e] = static_cast<float>(x[e]);
}

// Rows [row0, row0 + rows) of the host embedding (float64 Zd, or float32 Zf widened on the device:
// half the bytes over the bus, the same values as a host-side widening) into dst. A pageable copy: in
// a fresh process the pinned staging buffers' first use costs more (~0.25 s) than this 0.5 GB copy.
void upload_rows(CudaResources& r, const double* Zd, const float* Zf, int64_t row0, int64_t rows, int64_t d,
                 DeviceArray<double>& dst) {
  const size_t n = static_cast<size_t>(rows * d), off = static_cast<size_t>(row0 * d);
  if (Zf) {
    DeviceArray<float> zf(r, n, "harmony Z (float32)");
    to_device(r, zf, Zf + off, n);
    widen<<<grid_for(static_cast<int64_t>(n), kThreads), kThreads, 0, r.stream>>>(zf.data(), static_cast<int64_t>(n),
                                                                                 dst.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  } else {
    to_device(r, dst, Zd + off, n);
  }
}

}  // namespace

// Harmony on the device for the cells [part.lo, part.lo + part.n) of the embedding (harmony_gpu: all
// of them); harmony_gpu.hpp says what crosses between the ranks.
HarmonyResult detail::harmony_gpu_rank(const Context& ctx, const HarmonySetup& st, const std::vector<int32_t>& n_levels,
                                       const double* Zd, const float* Zf, const HarmonyOptions& opt,
                                       const HarmonyRank& part, double* outd, float* outf) {
  CudaResources& r = *ctx.cuda();
  SCURRY_CUDA(cudaSetDevice(r.device));
  const bool root = !part.comm || part.comm->rank() == 0;
  Phases ph(r);
  auto mark = [&](const std::string& what) {
    if (root) ph.mark(what);
  };
  const int64_t Ng = st.N, N = part.n, lo = part.lo, d = st.d, K = st.K, B = st.B, V = st.V;
  const size_t ND = static_cast<size_t>(N * d), NK = static_cast<size_t>(N * K), KB = static_cast<size_t>(K * B);
  Gpu s(r);
  s.N = N, s.d = d, s.K = K, s.B = B, s.V = V;
  s.Ng = Ng, s.lo = lo, s.comm = part.comm;
  s.Pr = st.Pr, s.theta = st.theta, s.lamb = st.lamb;
  s.rng = std::mt19937_64(opt.random_state);
  const int32_t* colh = st.col.data() + lo * V;  // this rank's cells' one-hot columns
  // Per variable: the cells stably sorted by column (a counting sort) and each column's range.
  s.col_of.resize(static_cast<size_t>(V));
  {
    int32_t off = 0;
    for (int64_t v = 0; v < V; ++v) {
      s.col_of[v] = off;
      off += n_levels[v];
    }
  }
  for (int64_t v = 0; v < V; ++v) {
    const int64_t L = n_levels[v];
    std::vector<int64_t> start(static_cast<size_t>(L + 1), 0);
    for (int64_t i = 0; i < N; ++i) ++start[colh[i * V + v] - s.col_of[v] + 1];
    for (int64_t l = 0; l < L; ++l) start[l + 1] += start[l];
    std::vector<int64_t> pos(start.begin(), start.end() - 1), p(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) p[pos[colh[i * V + v] - s.col_of[v]]++] = i;
    s.perm_h.push_back(std::move(p));
    s.col_start.push_back(std::move(start));
  }
  s.Zorig = DeviceArray<double>(r, ND, "harmony Z_orig");
  s.Zcorr = DeviceArray<double>(r, ND, "harmony Z_corr");
  s.Zcos = DeviceArray<double>(r, ND, "harmony Z_cos");
  s.Y = DeviceArray<double>(r, static_cast<size_t>(K * d), "harmony centroids");
  s.R = DeviceArray<double>(r, NK, "harmony R");
  s.dist = DeviceArray<double>(r, NK, "harmony distances");
  s.E = DeviceArray<double>(r, KB, "harmony E");
  s.O = DeviceArray<double>(r, KB, "harmony O");
  s.PT = DeviceArray<double>(r, KB, "harmony penalties");
  s.lq = DeviceArray<double>(r, KB, "harmony log ratios");
  s.sigma = DeviceArray<double>(r, static_cast<size_t>(K), "harmony sigma");
  s.inv_sigma = DeviceArray<double>(r, static_cast<size_t>(K), "harmony 1/sigma");
  s.dPr = DeviceArray<double>(r, static_cast<size_t>(B), "harmony Pr");
  s.dtheta = DeviceArray<double>(r, static_cast<size_t>(B), "harmony theta");
  s.col = DeviceArray<int32_t>(r, static_cast<size_t>(N * V), "harmony batch columns");
  s.identity = DeviceArray<int64_t>(r, static_cast<size_t>(N), "harmony cell ids");
  s.order = DeviceArray<int64_t>(r, static_cast<size_t>(Ng), "harmony cell order");
  s.keys_vals = DeviceArray<int64_t>(r, static_cast<size_t>(Ng), "harmony sort values");
  s.keys = DeviceArray<uint64_t>(r, static_cast<size_t>(Ng), "harmony sort keys");
  s.keys_out = DeviceArray<uint64_t>(r, static_cast<size_t>(Ng), "harmony sorted keys");
  s.Rg = DeviceArray<double>(r, NK, "harmony R by batch");
  s.tmp = DeviceArray<double>(r, ND, "harmony rows by batch");
  s.ridgeX = DeviceArray<double>(r, static_cast<size_t>(K * (B + 1) * (B + 1)), "harmony ridge systems");
  s.rhs = DeviceArray<double>(r, static_cast<size_t>(K * (B + 1) * d), "harmony ridge right-hand sides");
  s.W = DeviceArray<double>(r, static_cast<size_t>(K * B * d), "harmony ridge coefficients");
  for (int64_t v = 0; v < V; ++v) {
    s.perm.emplace_back(r, static_cast<size_t>(N), "harmony cells by batch");
    to_device(r, s.perm.back(), s.perm_h[v].data(), static_cast<size_t>(N));
  }
  SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, s.sort_tmp_bytes, s.keys.data(), s.keys_out.data(),
                                              s.keys_vals.data(), s.order.data(), Ng, 0, 64, r.stream));
  s.sort_tmp = DeviceArray<unsigned char>(r, std::max<size_t>(s.sort_tmp_bytes, 1), "harmony sort workspace");
  if (N < Ng) {
    const int64_t nb = static_cast<int64_t>(std::ceil(1.0 / opt.block_size - 1e-12));
    s.flag = DeviceArray<int64_t>(r, static_cast<size_t>(Ng), "harmony own-cell flags");
    s.pos = DeviceArray<int64_t>(r, static_cast<size_t>(Ng + 1), "harmony own-cell positions");
    s.mine = DeviceArray<int64_t>(r, static_cast<size_t>(N), "harmony own cells in order");
    s.bounds = DeviceArray<int64_t>(r, static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(nb, 1), Ng) + 1),
                                    "harmony own-cell block bounds");
    SCURRY_CUDA(cub::DeviceScan::InclusiveSum(nullptr, s.scan_tmp_bytes, s.flag.data(), s.pos.data() + 1, Ng, r.stream));
    s.scan_tmp = DeviceArray<unsigned char>(r, std::max<size_t>(s.scan_tmp_bytes, 1), "harmony scan workspace");
  }
  {
    std::vector<int64_t> id(static_cast<size_t>(N));
    std::iota(id.begin(), id.end(), int64_t{0});
    to_device(r, s.identity, id.data(), id.size());
    const std::vector<double> sg(static_cast<size_t>(K), opt.sigma), isg(static_cast<size_t>(K), 1.0 / opt.sigma);
    to_device(r, s.sigma, sg.data(), sg.size());
    to_device(r, s.inv_sigma, isg.data(), isg.size());
    to_device(r, s.dPr, s.Pr.data(), s.Pr.size());
    to_device(r, s.dtheta, s.theta.data(), s.theta.size());
    to_device(r, s.col, colh, static_cast<size_t>(N * V));
    upload_rows(r, Zd, Zf, lo, N, d, s.Zorig);
    SCURRY_CUDA(cudaMemcpyAsync(s.Zcorr.data(), s.Zorig.data(), ND * sizeof(double), cudaMemcpyDeviceToDevice, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // the host vectors above go out of scope
  }
  mark("setup and upload");
  cosine_init<<<grid_for(N, kThreads), kThreads, 0, r.stream>>>(s.Zorig.data(), N, d, s.Zcos.data());
  SCURRY_CUDA_LAUNCH();
  // The initial centroids: the k-means on all cells, on rank 0 (several GPUs: from the whole embedding
  // uploaded there once more), broadcast to the others; every rank draws the restarts' streams.
  std::vector<std::mt19937_64> streams = kmeans_streams(opt, s.rng);
  std::vector<double> Y0;
  if (!part.comm) {
    Y0 = initial_centroids(r, s.Zcos.data(), N, d, static_cast<int>(K), opt, std::move(streams));
  } else {
    DeviceArray<double> zcos;  // rank 0: all cells, for k-means++
    if (root) {
      DeviceArray<double> zall(r, static_cast<size_t>(Ng * d), "harmony Z (all cells, for k-means++)");
      upload_rows(r, Zd, Zf, 0, Ng, d, zall);
      zcos = DeviceArray<double>(r, static_cast<size_t>(Ng * d), "harmony Z_cos (all cells, for k-means++)");
      cosine_init<<<grid_for(Ng, kThreads), kThreads, 0, r.stream>>>(zall.data(), Ng, d, zcos.data());
      SCURRY_CUDA_LAUNCH();
    }
    Y0 = initial_centroids_ranks(r, zcos.data(), Ng, s.Zcos.data(), N, lo, d, static_cast<int>(K), opt,
                                 std::move(streams), *part.comm);
  }
  mark("initial k-means");
  for (int64_t k = 0; k < K; ++k) {  // normalize_rows on the host, as harmony.cpp
    double sq = 0;
    for (int64_t q = 0; q < d; ++q) sq += Y0[k * d + q] * Y0[k * d + q];
    const double inv = sq > 0 ? 1.0 / std::sqrt(sq) : 0.0;
    for (int64_t q = 0; q < d; ++q) Y0[k * d + q] *= inv;
  }
  to_device(r, s.Y, Y0.data(), Y0.size());
  s.update_dist();
  init_R<<<grid_for(N * 32, kWarps * 32), kWarps * 32, 0, r.stream>>>(s.dist.data(), s.sigma.data(), N, K, s.R.data());
  SCURRY_CUDA_LAUNCH();
  s.fresh_EO();
  s.compute_objective();
  s.obj_harmony.push_back(s.obj_kmeans.back());
  mark("first R and objective");
  HarmonyResult res;
  for (int it = 1; it <= opt.max_iter_harmony; ++it) {
    if (part.fail)
      fail("harmony (gpus): rank ", part.comm ? part.comm->rank() : 0,
           " fails on purpose (SCURRY_HARMONY_GPUS_FAIL_RANK, a test knob)");
    res.kmeans_rounds.push_back(s.cluster(opt));
    mark("iteration " + std::to_string(it) + ": clustering (" + std::to_string(res.kmeans_rounds.back()) + " rounds)");
    s.moe_correct_ridge();
    mark("iteration " + std::to_string(it) + ": ridge correction");
    res.iterations = it;
    const double o = s.obj_harmony[s.obj_harmony.size() - 2], n = s.obj_harmony.back();
    if ((o - n) / std::fabs(o) < opt.epsilon_harmony) {
      res.converged = true;
      break;
    }
  }
  if (outf) {
    DeviceArray<float> zf(r, ND, "harmony Z_corr (float32)");
    narrow<<<grid_for(static_cast<int64_t>(ND), kThreads), kThreads, 0, r.stream>>>(s.Zcorr.data(), static_cast<int64_t>(ND),
                                                                                    zf.data());
    SCURRY_CUDA_LAUNCH();
    to_host(r, outf + lo * d, zf.data(), ND);
  } else {
    to_host(r, outd + lo * d, s.Zcorr.data(), ND);  // pageable: see the upload
  }
  mark("download");
  res.objective_harmony = s.obj_harmony;
  return res;
}

namespace {

void require_gpu(const Context& ctx) {
  if (ctx.backend() != Backend::cuda || !ctx.cuda()) fail("harmony_gpu: the context has no CUDA device");
}

}  // namespace

HarmonyResult harmony_gpu(const Context& ctx, const DenseD& Z, const std::vector<std::vector<int32_t>>& codes,
                          const std::vector<int32_t>& n_levels, const HarmonyOptions& opt) {
  require_gpu(ctx);
  const detail::HarmonySetup st = detail::harmony_setup(Z, codes, n_levels, opt);
  DenseD out(st.N, st.d);
  HarmonyResult res = detail::harmony_gpu_rank(ctx, st, n_levels, Z.data.data(), nullptr, opt, {0, st.N, nullptr, false},
                                               out.data.data(), nullptr);
  res.Z_corr = std::move(out);
  return res;
}

HarmonyResult harmony_gpu(const Context& ctx, const DenseF& Z, const std::vector<std::vector<int32_t>>& codes,
                          const std::vector<int32_t>& n_levels, const HarmonyOptions& opt, DenseF& Z_corr) {
  require_gpu(ctx);
  const detail::HarmonySetup st =
      detail::harmony_setup(Z.n_rows, Z.n_cols, detail::all_finite(Z.data.data(), static_cast<int64_t>(Z.data.size()), ctx.threads()),
                            codes, n_levels, opt);
  Z_corr = DenseF(st.N, st.d);
  return detail::harmony_gpu_rank(ctx, st, n_levels, nullptr, Z.data.data(), opt, {0, st.N, nullptr, false}, nullptr,
                                  Z_corr.data.data());
}

}  // namespace scurry
