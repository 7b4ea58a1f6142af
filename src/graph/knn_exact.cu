// Exact kNN on the GPU (knn_gpu.hpp) and the primitives shared with IVF-Flat (knn_gpu.cuh).
//
// Floor on one H200 for 1,306,127 cells x 50 dims, k = 15 (W = 32 candidates):
//  FLOPs 2 n^2 d = 1.7e14: fp32 SGEMM 3.3 s at 51 TFLOP/s; one TF32 pass 0.38 s at 452 TFLOP/s; split
//  TF32 (tf32x3, K = 3d) 1.1 s. Scores: n^2 = 1.7e12 floats written by the GEMM and read by the
//  select, 13.6 TB: 3.2 s if they went through HBM (4.3 TB/s), hence score tiles of 32 MiB
//  (8192 queries x 1024 database rows) that stay in L2; running lists n W 8 bytes re-read per tile
//  (2 MiB a tile). Re-rank: n W d float64 FLOPs (2e9), negligible.
//  Expected: GEMM + L2 traffic, about 1.5-2.5 s with tf32x3 (204k tile pairs, two launches each);
//  a fused GEMM + select kernel (scores never leave registers) is the way below that.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "exec/parallel.hpp"
#include "graph/knn_gpu.cuh"
#include "graph/knn_fused.cuh"
#include "graph/knn_gpu.hpp"
#include "graph/topk.cuh"

namespace scurry {
namespace gpu::knn {

namespace {

constexpr int kThreads = 256;                       // threads per block of the elementwise kernels
constexpr int kWarpsPerBlock = 8;                   // warps per block of the per-row kernels (at most)
constexpr int64_t kSmemBudget = 48 * 1024;          // dynamic shared memory per block (no opt-in)
constexpr int64_t kQueryTile = 8192;                // queries per score tile
constexpr int64_t kTileFloats = int64_t(1) << 23;   // score tile: 8M floats = 32 MiB (fits L2)
constexpr int64_t kColumnPad = 8;                   // GEMM depth padded to a multiple of this
constexpr int64_t kMinMargin = 8;                   // extra candidates re-ranked (at least)
constexpr int64_t kCheckBlock = 1 << 16;            // rows per block of the host finiteness check

unsigned grid_for(int64_t n, int t = kThreads) { return static_cast<unsigned>((n + t - 1) / t); }

int warps_per_block(int64_t smem_per_warp) {
  return static_cast<int>(std::clamp<int64_t>(kSmemBudget / smem_per_warp, 1, kWarpsPerBlock));
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__global__ void row_stats_kernel(const float* X, int64_t n, int64_t d, const float* mean, double* nrm, float* sqn) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x & (kWarp - 1);
  if (row >= n) return;  // warp-uniform
  const float* x = X + row * d;
  double s = 0, c = 0;
  for (int64_t j = lane; j < d; j += kWarp) {
    const double v = x[j];
    s += v * v;
    const float u = x[j] - (mean ? mean[j] : 0.f);
    c += static_cast<double>(u) * u;
  }
  s = warp_sum(s);
  c = warp_sum(c);
  if (lane == 0) {
    nrm[row] = sqrt(s);
    if (sqn) sqn[row] = static_cast<float>(c);
  }
}

__global__ void column_means_kernel(const float* X, int64_t n, int64_t d, float* mean) {
  const int64_t col = blockIdx.x;
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += X[i * d + col];
  __shared__ double part[kThreads];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) mean[col] = static_cast<float>(part[0] / static_cast<double>(n));
}

__global__ void unit_rows_kernel(const float* X, const double* nrm, int64_t n, int64_t d, float* out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * d) return;
  const double nr = nrm[e / d];
  const double s = nr > 0 ? 1.0 / nr : 0.0;
  out[e] = static_cast<float>(static_cast<double>(X[e]) * s);
}

__global__ void fill_empty_kernel(float* d, int32_t* i, int64_t count) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= count) return;
  d[e] = __int_as_float(0x7f800000);
  i[e] = -1;
}

__device__ __forceinline__ float tf32_round(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;
  u += 0x1000u;  // round to nearest (ties away) at 10 mantissa bits
  u &= 0xffffe000u;
  return __uint_as_float(u);
}

// GEMM operands, n x kp row-major. Rows: x - mean (euclidean) or x / ||x|| (cosine). split: A = [hi,
// hi, lo], B = [hi, lo, hi] so that A_q . B_r = hi.hi + hi.lo + lo.hi; otherwise A = the rows
// (B unused). Padding columns are 0.
__global__ void prepare_operands_kernel(const float* X, int64_t n, int64_t d, int64_t kp, const float* mean,
                                        const double* nrm, bool cosine, bool split, bool round, float* A, float* B,
                                        const int32_t* rows) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * kp) return;
  const int64_t i = e / kp, col = e - i * kp;
  const int64_t seg = col / d, c = col - seg * d;
  float v = 0.f;
  if (seg < (split ? 3 : 1)) {
    const int64_t src = rows ? rows[i] : i;  // rows: a gathered subset
    const float x = X[src * d + c];
    if (cosine) {
      const double nr = nrm[src];
      v = static_cast<float>(static_cast<double>(x) * (nr > 0 ? 1.0 / nr : 0.0));
    } else {
      v = x - mean[c];
    }
  }
  if (!split) {
    A[e] = round ? tf32_round(v) : v;
    return;
  }
  const float hi = tf32_round(v), lo = v - hi;
  A[e] = seg == 2 ? lo : hi;
  B[e] = seg == 1 ? lo : hi;
}

__global__ void select_tile_kernel(const float* tile, int64_t nq, int64_t nr, const float* col_add, int64_t id0,
                                   int64_t self0, const int32_t* self_ids, float* best_d, int32_t* best_i, int w) {
  extern __shared__ float smem_f[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x & (kWarp - 1);
  const int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x / kWarp) + warp;
  if (q >= nq) return;  // warp-uniform
  WarpTopK top(smem_f + static_cast<int64_t>(warp) * 4 * w, w);
  float* gd = best_d + q * w;
  int32_t* gi = best_i + q * w;
  top.load(gd, gi);
  const float* row = tile + q * nr;
  const int64_t self = self_ids ? self_ids[q] : self0 >= 0 ? self0 + q : -1;
  for (int64_t b = 0; b < nr; b += kWarp) {
    const int64_t c = b + lane;
    const bool in = c < nr;
    const float s = in ? row[c] + (col_add ? col_add[c] : 0.f) : 0.f;
    const int64_t id = id0 + c;
    top.push(s, static_cast<int32_t>(id), in && id != self);
  }
  top.store(gd, gi);
}

__global__ void rerank_kernel(const float* X, const double* nrm, int64_t n, int64_t d, bool cosine,
                              const int32_t* cand, int w, int64_t k, int32_t* out_idx, float* out_dist,
                              const int32_t* rows, int64_t row0, bool compact, bool cand_at_cell, double* out_dist64) {
  extern __shared__ double smem_d[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x & (kWarp - 1);
  const int64_t t_row = blockIdx.x * static_cast<int64_t>(blockDim.x / kWarp) + warp;
  if (t_row >= n) return;  // warp-uniform
  const int64_t i = rows ? rows[t_row] : row0 + t_row;  // rows: candidates of a gathered subset, row t_row
  const int64_t o = compact ? t_row : i - row0;             // the output row
  const int64_t c_row = cand_at_cell ? i : t_row;            // the candidates' row
  double* key = smem_d + static_cast<int64_t>(warp) * (w + w / 2);
  int32_t* id = reinterpret_cast<int32_t*>(key + w);
  const float* xi = X + i * d;
  const double inf = __longlong_as_double(0x7ff0000000000000LL);
  for (int t = lane; t < w; t += kWarp) {
    const int32_t j = cand[c_row * w + t];
    double dist = inf;
    if (j >= 0) {
      const float* xj = X + static_cast<int64_t>(j) * d;
      double s = 0;
      if (cosine) {
        for (int64_t c = 0; c < d; ++c) s += static_cast<double>(xi[c]) * xj[c];
        dist = (nrm[i] == 0 || nrm[j] == 0) ? 1.0 : 1.0 - s / (nrm[i] * nrm[j]);
      } else {
        for (int64_t c = 0; c < d; ++c) {
          const double t2 = static_cast<double>(xi[c]) - xj[c];
          s += t2 * t2;
        }
        dist = sqrt(s);
      }
    }
    key[t] = dist;
    id[t] = j;
  }
  warp_bitonic_sort(key, id, w);
  int32_t* oi = out_idx + o * k;
  float* od = out_dist + o * k;
  double* od64 = out_dist64 ? out_dist64 + o * k : nullptr;
  if (lane == 0) {
    oi[0] = static_cast<int32_t>(i), od[0] = 0.f;
    if (od64) od64[0] = 0.0;
  }
  for (int64_t t = lane; t < k - 1; t += kWarp) {
    const int32_t j = id[t];
    if (j < 0) {
      oi[t + 1] = -1;
      od[t + 1] = __int_as_float(0x7f800000);
    } else {
      oi[t + 1] = j;
      od[t + 1] = static_cast<float>(fmax(0.0, key[t]));
    }
    if (od64) od64[t + 1] = key[t];  // +inf for a missing one
  }
}

// The certificate of the fused TF32 search (knn_fused.cu): fail[i] = 1 unless the exact (k-1)-th
// neighbour's score is below the W-th candidate's TF32 score by more than the TF32 error bound.
__global__ void certify_kernel(const float* best_d, const int32_t* best_i, int w, const float* out_dist, int64_t k,
                               const float* sqn, double max_norm, int64_t n, uint8_t* fail) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  uint8_t bad = 0;
  if (k >= 2 && best_i[i * w + w - 1] >= 0) {
    const double T = best_d[i * w + w - 1];
    const double dist = out_dist[i * k + k - 1];
    double s, bound;
    if (sqn) {  // euclidean on centred rows: score = dist^2 - ||q||^2
      // A row y outside the candidates with ||y|| > ||q|| + dist is farther than dist anyway (triangle
      // inequality), so the bound needs ||y|| only up to min(max_norm, ||q|| + dist).
      const double q2 = sqn[i], qn = sqrt(q2);
      const double rho = fmin(max_norm, qn + dist);
      s = dist * dist - q2;
      // 2^-8 |q| |y|: the TF32 rounding of both rows; 2^-16 (|q|^2 + |y|^2): the float32 accumulation
      // of the d + 2 exact products (at most 64 terms of total size <= 2 |q||y| + |y|^2, each addition
      // off by 2^-23 even if the tensor cores truncate) and the split of ||y||^2 (knn_mma.cu).
      bound = 0x1p-8 * qn * rho + 0x1p-16 * (q2 + rho * rho);
    } else {  // cosine on unit rows: score = -cos = dist - 1
      s = dist - 1.0;
      bound = 0x1p-8 + 0x1p-15;
    }
    bad = !(s < T - bound);
  }
  fail[i] = bad;
}

}  // namespace

CudaResources& require_cuda(const Context& ctx, const char* where) {
  if (ctx.backend() != Backend::cuda || ctx.cuda() == nullptr)
    fail_input(where, "the GPU neighbour search needs a CUDA context; use --device gpu or the CPU search");
  return *ctx.cuda();
}

void check_input(const Context& ctx, const DenseF& X, int64_t k, const char* where) {
  if (X.n_rows < 2) fail_input(where, "the embedding has ", X.n_rows, " rows; the search needs at least 2 cells");
  if (X.n_cols < 1) fail_input(where, "the embedding has no columns; nothing to search");
  if (X.n_rows > INT32_MAX)
    fail_input(where, X.n_rows, " cells is more than the 2^31 - 1 the neighbour indices can hold");
  if (k < 1 || k >= X.n_rows)
    fail_input(where, "k = ", k, " neighbours (the cell itself included) is out of range for ", X.n_rows,
               " cells; use 1 <= k < n_cells");
  if (2 * (k - 1) > kMaxTopK)
    fail_input(where, "k = ", k, " is too large for the GPU search (at most ", kMaxTopK / 2 + 1,
               "); use the CPU search for more neighbours");
  const int64_t n_blocks = (X.n_rows + kCheckBlock - 1) / kCheckBlock;
  std::vector<char> bad(static_cast<size_t>(n_blocks), 0);
  parallel_for(ctx.threads(), n_blocks, [&](int64_t b) {
    const int64_t r0 = b * kCheckBlock, r1 = std::min(X.n_rows, r0 + kCheckBlock);
    const float* p = X.row(r0);
    const int64_t m = (r1 - r0) * X.n_cols;
    for (int64_t e = 0; e < m; ++e)
      if (!std::isfinite(p[e])) {
        bad[b] = 1;
        return;
      }
  });
  for (char c : bad)
    if (c) fail_input(where, "the embedding contains NaN or infinite values; clean it before the neighbour search");
}

int pow2_width(int64_t v) {
  int w = kWarp;
  while (w < v) w <<= 1;
  return w;
}

int candidate_width(int64_t k) {
  const int64_t want = k - 1;
  return pow2_width(want + std::max(kMinMargin, want));
}

int ivf_candidate_width(int64_t k) {
  const int64_t want = k - 1;
  if (want <= 32) return candidate_width(k);
  return pow2_width(want + std::max(kMinMargin, want / 4));
}

void row_stats(CudaResources& r, const float* dX, int64_t n, int64_t d, const float* mean, double* nrm, float* sqn) {
  row_stats_kernel<<<grid_for(n * kWarp), kThreads, 0, r.stream>>>(dX, n, d, mean, nrm, sqn);
  SCURRY_CUDA_LAUNCH();
}

void column_means(CudaResources& r, const float* dX, int64_t n, int64_t d, float* mean) {
  column_means_kernel<<<static_cast<unsigned>(d), kThreads, 0, r.stream>>>(dX, n, d, mean);
  SCURRY_CUDA_LAUNCH();
}

void unit_rows(CudaResources& r, const float* dX, const double* nrm, int64_t n, int64_t d, float* out) {
  unit_rows_kernel<<<grid_for(n * d), kThreads, 0, r.stream>>>(dX, nrm, n, d, out);
  SCURRY_CUDA_LAUNCH();
}

void fill_empty(CudaResources& r, float* d, int32_t* i, int64_t count) {
  if (count == 0) return;
  fill_empty_kernel<<<grid_for(count), kThreads, 0, r.stream>>>(d, i, count);
  SCURRY_CUDA_LAUNCH();
}

void select_tile(CudaResources& r, const float* tile, int64_t nq, int64_t nr, const float* col_add, int64_t id0,
                 int64_t self0, float* best_d, int32_t* best_i, int w, const int32_t* self_ids) {
  if (nq == 0 || nr == 0) return;
  const int64_t per_warp = warp_topk_smem_bytes(w);
  const int wpb = warps_per_block(per_warp);
  const unsigned blocks = static_cast<unsigned>((nq + wpb - 1) / wpb);
  select_tile_kernel<<<blocks, wpb * kWarp, static_cast<size_t>(wpb * per_warp), r.stream>>>(
      tile, nq, nr, col_add, id0, self0, self_ids, best_d, best_i, w);
  SCURRY_CUDA_LAUNCH();
}

void rerank(CudaResources& r, const float* dX, const double* nrm, int64_t n, int64_t d, KnnMetric metric,
            const int32_t* cand, int w, int64_t k, int32_t* out_idx, float* out_dist, const int32_t* rows, int64_t row0,
            bool compact, bool cand_at_cell, double* out_dist64) {
  const int64_t per_warp = static_cast<int64_t>(w) * (sizeof(double) + sizeof(int32_t));
  const int wpb = warps_per_block(per_warp);
  const unsigned blocks = static_cast<unsigned>((n + wpb - 1) / wpb);
  rerank_kernel<<<blocks, wpb * kWarp, static_cast<size_t>(wpb * per_warp), r.stream>>>(
      dX, nrm, n, d, metric == KnnMetric::cosine, cand, w, k, out_idx, out_dist, rows, row0, compact, cand_at_cell,
      out_dist64);
  SCURRY_CUDA_LAUNCH();
}

Knn download(CudaResources& r, const int32_t* d_idx, const float* d_dist, int64_t n, int64_t k) {
  Knn out;
  out.n = n;
  out.k = k;
  out.indices.resize(static_cast<size_t>(n * k));
  out.distances.resize(static_cast<size_t>(n * k));
  SCURRY_CUDA(cudaMemcpyAsync(out.indices.data(), d_idx, static_cast<size_t>(n * k) * sizeof(int32_t),
                              cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(out.distances.data(), d_dist, static_cast<size_t>(n * k) * sizeof(float),
                              cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return out;
}

void on_each_gpu(const std::vector<Context*>& ctxs, const std::function<void(int)>& fn) {
  const int S = static_cast<int>(ctxs.size());
  std::vector<std::exception_ptr> errors(static_cast<size_t>(S));
  {
    std::vector<std::thread> workers;
    for (int s = 0; s < S; ++s)
      workers.emplace_back([&, s] {
        try {
          CudaResources& res = require_cuda(*ctxs[s], "neighbors");
          SCURRY_CUDA(cudaSetDevice(res.device));  // the resources were made on another thread
          fn(s);
        } catch (...) {
          errors[s] = std::current_exception();
        }
      });
    for (auto& t : workers) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace gpu::knn

namespace {

// Whether the default exact search can take a part of the queries (knn_exact_part): the mma kernel
// for this depth and k.
bool splits_queries(int64_t d, KnnMetric metric, int64_t k) {
  using namespace gpu::knn;
  return k > 1 && mma_enabled() && mma_supported(mma_depth(d, metric == KnnMetric::euclidean), candidate_width(k));
}

// The exact search for the queries [q_begin, q_end) against the database rows [db_begin, db_end)
// (db_end < 0: every row): a Knn of q_end - q_begin rows (row t is cell q_begin + t), neighbour
// indices global. Only the default fused search over every row (brute, the mma kernel) takes a part of
// the queries or of the rows; the other paths need the whole ranges. With a share of the rows (an
// index sharded over GPUs) every step is restricted to it: the mma candidates, the float64 re-rank,
// the certificate (it bounds the TF32 scores of this share's rows left out of this share's candidates,
// so it certifies the k - 1 nearest rows of the share) and the split-TF32 redo; the result is then the
// exact top k - 1 of the share. lists (optional): receives the result as float64 neighbour lists
// without the cell itself (q_end - q_begin rows of k - 1, the keys of merge_topk), and the returned
// Knn is empty.
Knn knn_exact_part(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const KnnExactGpuOptions& opt,
                   int64_t q_begin, int64_t q_end, int64_t db_begin = 0, int64_t db_end = -1,
                   TopkLists* lists = nullptr) {
  using namespace gpu;
  using namespace gpu::knn;
  const char* where = "neighbors";
  CudaResources& r = require_cuda(ctx, where);
  check_input(ctx, X, k, where);
  const int64_t n = X.n_rows, d = X.n_cols;
  const bool cosine = metric == KnnMetric::cosine;

  DeviceArray<float> dX(r, static_cast<size_t>(n * d), "kNN embedding");
  SCURRY_CUDA(cudaMemcpyAsync(dX.data(), X.data.data(), static_cast<size_t>(n * d) * sizeof(float),
                              cudaMemcpyHostToDevice, r.stream));
  DeviceArray<double> nrm(r, static_cast<size_t>(n), "kNN row norms");
  const int64_t m = q_end - q_begin;  // the queries
  if (db_end < 0) db_end = n;
  if (q_begin < 0 || q_end > n || q_begin > q_end || db_begin < 0 || db_end > n || db_begin >= db_end)
    fail("exact kNN: queries [", q_begin, ", ", q_end, ") against rows [", db_begin, ", ", db_end, ") of ", n);
  const int64_t nd = db_end - db_begin;  // the database rows
  const bool part = m != n || nd != n;
  DeviceArray<int32_t> out_idx(r, static_cast<size_t>(m * k), "kNN indices");
  DeviceArray<float> out_dist(r, static_cast<size_t>(m * k), "kNN distances");
  DeviceArray<double> out_dist64;  // lists: the float64 distances
  if (lists) out_dist64 = DeviceArray<double>(r, static_cast<size_t>(m * k), "kNN distances (float64)");
  const int w = candidate_width(k);

  DeviceArray<float> mean, sqn;
  if (!cosine) {
    mean = DeviceArray<float>(r, static_cast<size_t>(d), "kNN column means");
    sqn = DeviceArray<float>(r, static_cast<size_t>(n), "kNN squared norms");
    column_means(r, dX.data(), n, d, mean.data());
  }
  row_stats(r, dX.data(), n, d, cosine ? nullptr : mean.data(), nrm.data(), cosine ? nullptr : sqn.data());

  DeviceArray<float> best_d(r, static_cast<size_t>(m) * w, "kNN candidate scores");
  DeviceArray<int32_t> best_i(r, static_cast<size_t>(m) * w, "kNN candidates");
  fill_empty(r, best_d.data(), best_i.data(), m * w);
  // The cuBLAS tile path (fp32, tf32, tf32x3) for the queries `rows` (all when null; nq of them),
  // leaving their candidates in cand_d/cand_i (nq x w). With rows, the database is rows
  // [db_begin, db_end); without, every row.
  auto tile_search = [&](KnnGemmPrecision prec, const int32_t* rows, int64_t nq_all, float* cand_d, int32_t* cand_i) {
    const bool split = prec == KnnGemmPrecision::tf32x3;
    const int64_t depth = split ? 3 * d : d;
    const int64_t kp = (depth + kColumnPad - 1) / kColumnPad * kColumnPad;
    DeviceArray<float> A(r, static_cast<size_t>(nq_all * kp), "kNN GEMM operand");
    DeviceArray<float> B;
    if (split) B = DeviceArray<float>(r, static_cast<size_t>(nq_all * kp), "kNN GEMM operand (split)");
    DeviceArray<float> Bdb;  // database operand when the queries are a subset
    float* qA = A.data();
    prepare_operands_kernel<<<grid_for(nq_all * kp), kThreads, 0, r.stream>>>(
        dX.data(), nq_all, d, kp, cosine ? nullptr : mean.data(), nrm.data(), cosine, split, false, A.data(),
        split ? B.data() : nullptr, rows);
    SCURRY_CUDA_LAUNCH();
    const float* Bq = split ? B.data() : A.data();
    const int64_t n_db = rows ? nd : n, id_base = rows ? db_begin : 0;  // database rows id_base + [0, n_db)
    if (rows) {  // the database side: rows [db_begin, db_end)
      Bdb = DeviceArray<float>(r, static_cast<size_t>(n_db * kp), "kNN GEMM operand (database)");
      DeviceArray<float> scratch;
      if (split) scratch = DeviceArray<float>(r, static_cast<size_t>(n_db * kp), "kNN GEMM operand (scratch)");
      // split: B = [hi, lo, hi] is the database operand; the kernel writes A-form into scratch
      prepare_operands_kernel<<<grid_for(n_db * kp), kThreads, 0, r.stream>>>(
          dX.data() + id_base * d, n_db, d, kp, cosine ? nullptr : mean.data(), nrm.data() + id_base, cosine, split,
          false, split ? scratch.data() : Bdb.data(), split ? Bdb.data() : nullptr, nullptr);
      SCURRY_CUDA_LAUNCH();
      Bq = Bdb.data();
    }
    const int64_t qt = std::min(nq_all, kQueryTile);
    const int64_t rt = std::min(n_db, std::max<int64_t>(kWarp, kTileFloats / std::max<int64_t>(qt, 1)));
    DeviceArray<float> tile(r, static_cast<size_t>(qt * rt), "kNN score tile");
    const cublasComputeType_t compute = prec == KnnGemmPrecision::fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    const float alpha = cosine ? -1.f : -2.f, beta = 0.f;
    for (int64_t q0 = 0; q0 < nq_all; q0 += qt) {
      const int64_t nq = std::min(qt, nq_all - q0);
      for (int64_t r0 = 0; r0 < n_db; r0 += rt) {
        const int64_t nr = std::min(rt, n_db - r0);
        // Column-major: tile (nr x nq, ld nr) = B[r0 : r0 + nr]^T-view x A[q0 : q0 + nq], i.e. row q of
        // the row-major nq x nr tile holds alpha * <query q0 + q, row r0 + r>.
        SCURRY_CUBLAS(cublasGemmEx(r.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr), static_cast<int>(nq),
                                   static_cast<int>(kp), &alpha, Bq + r0 * kp, CUDA_R_32F, static_cast<int>(kp),
                                   qA + q0 * kp, CUDA_R_32F, static_cast<int>(kp), &beta, tile.data(), CUDA_R_32F,
                                   static_cast<int>(nr), compute, CUBLAS_GEMM_DEFAULT));
        select_tile(r, tile.data(), nq, nr, cosine ? nullptr : sqn.data() + id_base + r0, id_base + r0,
                    rows ? -1 : q0, cand_d + q0 * w, cand_i + q0 * w, w, rows ? rows + q0 : nullptr);
      }
    }
  };

  if (part && (k < 2 || opt.precision != KnnGemmPrecision::fused))
    fail("exact kNN: a part of the queries needs the fused search and k >= 2");
  if (k > 1 && opt.precision != KnnGemmPrecision::fused) {
    tile_search(opt.precision, nullptr, n, best_d.data(), best_i.data());
    rerank(r, dX.data(), nrm.data(), n, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data(), nullptr,
           0, false, false, out_dist64.data());
  } else if (k > 1) {
    PhaseClock clock(r, "knn_exact");  // SCURRY_PROFILE=1: phase times on stderr
    const bool profile = clock.on();
    auto prof = [&](const char* what) { clock.mark(what); };
    prof("setup");
    const int64_t kp = (d + kColumnPad - 1) / kColumnPad * kColumnPad;
    if (part && !splits_queries(d, metric, k)) fail("exact kNN: a part of the queries needs the mma kernel");
    if (!fused_supported(kp, w) && !part) {  // too deep or too wide for the fused kernel's shared memory
      tile_search(KnnGemmPrecision::tf32x3, nullptr, n, best_d.data(), best_i.data());
      rerank(r, dX.data(), nrm.data(), n, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data(), nullptr,
             0, false, false, out_dist64.data());
    } else {
      // The strategy: through the IVF lists (euclidean, large n) or every row.
      KnnExactStrategy strategy = opt.strategy;
      if (const char* e = std::getenv("SCURRY_KNN_EXACT"); e && *e)
        strategy = std::string(e) == "brute" ? KnnExactStrategy::brute
                   : std::string(e) == "lists" ? KnnExactStrategy::lists
                                               : strategy;
      const bool lists = !cosine && strategy == KnnExactStrategy::lists && !part;
      DeviceArray<float> sqn_lists;
      DeviceArray<uint8_t> redo_lists;
      const float* cert_sqn = cosine ? nullptr : sqn.data();
      if (lists) {
        sqn_lists = DeviceArray<float>(r, static_cast<size_t>(n), "kNN squared norms (lists)");
        redo_lists = DeviceArray<uint8_t>(r, static_cast<size_t>(n), "kNN queries to search whole");
        IvfOptions io;
        io.n_probes = opt.list_probes;
        if (const char* e = std::getenv("SCURRY_KNN_LIST_PROBES"); e && *e) io.n_probes = std::atoll(e);
        IvfExactStats st;
        ivf_exact_candidates(r, dX.data(), nrm.data(), n, d, k, io, w, best_d.data(), best_i.data(), out_idx.data(),
                             out_dist.data(), sqn_lists.data(), redo_lists.data(), &st);
        cert_sqn = sqn_lists.data();
        if (opt.report || profile) {
          char buf[320];
          std::snprintf(buf, sizeof buf,
                        "lists: %lld lists, %lld probes; stage 2: %lld of %lld query blocks, %.1f ranges each, "
                        "%lld blocks over the cap; margin %.3g",
                        static_cast<long long>(st.lists), static_cast<long long>(st.probes),
                        static_cast<long long>(st.stage2_blocks), static_cast<long long>(st.blocks),
                        st.stage2_blocks ? static_cast<double>(st.stage2_ranges) / st.stage2_blocks : 0.0,
                        static_cast<long long>(st.overflow_blocks), st.e_abs);
          if (opt.report) *opt.report = buf;
          if (profile) std::fprintf(stderr, "  knn_exact %s\n", buf);
        }
        prof("lists candidates");
      } else {
        DeviceArray<float> A(r, static_cast<size_t>(n * kp), "kNN fused operand");
        prepare_operands_kernel<<<grid_for(n * kp), kThreads, 0, r.stream>>>(
            dX.data(), n, d, kp, cosine ? nullptr : mean.data(), nrm.data(), cosine, false, true, A.data(), nullptr,
            nullptr);
        SCURRY_CUDA_LAUNCH();
        prof("prepare");
        const int64_t kpm = mma_depth(d, !cosine);
        if (mma_enabled() && mma_supported(kpm, w)) {
          // Q: every row (a query may be any of them); D: the database rows only.
          DeviceArray<float> Q(r, static_cast<size_t>(n * kpm), "kNN mma operand (queries)");
          DeviceArray<float> D(r, static_cast<size_t>(nd * kpm), "kNN mma operand (rows)");
          mma_operands(r, A.data(), cosine ? nullptr : sqn.data(), n, kp, d, kpm, Q.data(), nullptr);
          mma_operands(r, A.data() + db_begin * kp, cosine ? nullptr : sqn.data() + db_begin, nd, kp, d, kpm, nullptr,
                       D.data());
          A.release();
          mma_candidates(r, Q.data(), D.data(), n, kpm, d, w, q_begin, q_end, best_d.data(), best_i.data(), db_begin,
                         db_end);
        } else {
          fused_candidates(r, A.data(), cosine ? nullptr : sqn.data(), n, kp, w, best_d.data(), best_i.data());
        }
        prof("fused candidates");
        if (opt.report) *opt.report = "brute";
      }
      rerank(r, dX.data(), nrm.data(), m, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data(), nullptr,
             q_begin, false, false, out_dist64.data());
      prof("rerank");
      // The certificate; the queries without it are searched again with split TF32. max_norm bounds
      // the norms of the database rows.
      double max_norm = 1.0;
      if (!cosine) {
        std::vector<float> h_sqn(static_cast<size_t>(nd));
        SCURRY_CUDA(cudaMemcpyAsync(h_sqn.data(), cert_sqn + db_begin, static_cast<size_t>(nd) * 4,
                                    cudaMemcpyDeviceToHost, r.stream));
        SCURRY_CUDA(cudaStreamSynchronize(r.stream));
        double m2 = 0;
        for (float v : h_sqn) m2 = std::max(m2, static_cast<double>(v));
        max_norm = std::sqrt(m2);
      }
      DeviceArray<uint8_t> fail(r, static_cast<size_t>(m), "kNN certificate");
      certify_kernel<<<grid_for(m), kThreads, 0, r.stream>>>(best_d.data(), best_i.data(), w, out_dist.data(), k,
                                                              cert_sqn ? cert_sqn + q_begin : nullptr, max_norm, m,
                                                              fail.data());
      SCURRY_CUDA_LAUNCH();
      std::vector<uint8_t> h_fail(static_cast<size_t>(m));
      SCURRY_CUDA(cudaMemcpyAsync(h_fail.data(), fail.data(), static_cast<size_t>(m), cudaMemcpyDeviceToHost, r.stream));
      if (lists) {
        std::vector<uint8_t> h_redo(static_cast<size_t>(n));
        SCURRY_CUDA(cudaMemcpyAsync(h_redo.data(), redo_lists.data(), static_cast<size_t>(n), cudaMemcpyDeviceToHost,
                                    r.stream));
        SCURRY_CUDA(cudaStreamSynchronize(r.stream));
        for (int64_t i = 0; i < n; ++i) h_fail[i] |= h_redo[i];
      }
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      std::vector<int32_t> redo;  // cells
      for (int64_t i = 0; i < m; ++i)
        if (h_fail[i]) redo.push_back(static_cast<int32_t>(q_begin + i));
      if (opt.redo_count) *opt.redo_count = static_cast<int64_t>(redo.size());
      if (!redo.empty()) {
        const int64_t mr = static_cast<int64_t>(redo.size());
        DeviceArray<int32_t> drows(r, redo.size(), "kNN redo rows");
        SCURRY_CUDA(cudaMemcpyAsync(drows.data(), redo.data(), redo.size() * 4, cudaMemcpyHostToDevice, r.stream));
        DeviceArray<float> cd(r, static_cast<size_t>(mr) * w, "kNN redo candidates");
        DeviceArray<int32_t> ci(r, static_cast<size_t>(mr) * w, "kNN redo candidates");
        fill_empty(r, cd.data(), ci.data(), mr * w);
        tile_search(KnnGemmPrecision::tf32x3, drows.data(), mr, cd.data(), ci.data());
        rerank(r, dX.data(), nrm.data(), mr, d, metric, ci.data(), w, k, out_idx.data(), out_dist.data(), drows.data(),
               q_begin, false, false, out_dist64.data());
      }
      prof("certificate + redo");
    }
  } else {
    rerank(r, dX.data(), nrm.data(), n, d, metric, best_i.data(), w, k, out_idx.data(), out_dist.data(), nullptr, 0,
           false, false, out_dist64.data());
  }
  if (!lists) return download(r, out_idx.data(), out_dist.data(), m, k);
  // The float64 lists without the cell itself (column 0).
  std::vector<int32_t> h_idx(static_cast<size_t>(m * k));
  std::vector<double> h_dist(static_cast<size_t>(m * k));
  SCURRY_CUDA(cudaMemcpyAsync(h_idx.data(), out_idx.data(), h_idx.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                              r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(h_dist.data(), out_dist64.data(), h_dist.size() * sizeof(double), cudaMemcpyDeviceToHost,
                              r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  lists->n = m;
  lists->w = k - 1;
  lists->indices.resize(static_cast<size_t>(m * (k - 1)));
  lists->keys.resize(static_cast<size_t>(m * (k - 1)));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 1; j < k; ++j) {
      lists->indices[static_cast<size_t>(i * (k - 1) + j - 1)] = h_idx[static_cast<size_t>(i * k + j)];
      lists->keys[static_cast<size_t>(i * (k - 1) + j - 1)] = h_dist[static_cast<size_t>(i * k + j)];
    }
  return Knn{};
}

}  // namespace

Knn knn_exact_gpu(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const KnnExactGpuOptions& opt) {
  return knn_exact_part(ctx, X, k, metric, opt, 0, X.n_rows);
}

Knn knn_exact_gpu_rows(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, int64_t begin, int64_t end) {
  using namespace gpu::knn;
  check_input(ctx, X, k, "neighbors");
  if (begin < 0 || end > X.n_rows || begin > end) fail("exact kNN: rows [", begin, ", ", end, ") of ", X.n_rows);
  if (splits_queries(X.n_cols, metric, k) && !(begin == 0 && end == X.n_rows))
    return knn_exact_part(ctx, X, k, metric, KnnExactGpuOptions{}, begin, end);
  Knn all = knn_exact_gpu(ctx, X, k, metric);  // the whole search, then the rows
  Knn out;
  out.n = end - begin;
  out.k = k;
  out.indices.assign(all.indices.begin() + begin * k, all.indices.begin() + end * k);
  out.distances.assign(all.distances.begin() + begin * k, all.distances.begin() + end * k);
  return out;
}

Knn knn_exact_gpus(const std::vector<Context*>& ctxs, const DenseF& X, int64_t k, KnnMetric metric,
                   const KnnExactGpuOptions& opt) {
  using namespace gpu::knn;
  if (ctxs.empty()) fail_input("neighbors", "no GPU contexts given");
  const int64_t n = X.n_rows;
  // Only the default search (fused, every row, the mma kernel) splits its queries; anything else, and
  // too few cells to share, runs on the first GPU.
  const bool splits = ctxs.size() > 1 && opt.precision == KnnGemmPrecision::fused &&
                      opt.strategy != KnnExactStrategy::lists && splits_queries(X.n_cols, metric, k) &&
                      n >= 1024 * static_cast<int64_t>(ctxs.size());
  if (!splits) return knn_exact_gpu(*ctxs[0], X, k, metric, opt);
  check_input(*ctxs[0], X, k, "neighbors");
  const int S = static_cast<int>(ctxs.size());
  if (opt.sharding == KnnShard::index) {
    // The index sharded: GPU s holds the operand of rows [n s / S, n (s + 1) / S) and searches every
    // query against them (exactly: its certificate and redo cover its rows); the per-query float64
    // top k - 1 lists are merged on the host by (distance, index), which gives the exact top k - 1 of
    // all rows: knn_exact_gpu's result.
    std::vector<TopkLists> lists(static_cast<size_t>(S));
    std::vector<int64_t> redo(static_cast<size_t>(S), 0);
    on_each_gpu(ctxs, [&](int s) {
      KnnExactGpuOptions o = opt;
      o.redo_count = &redo[s];
      o.report = nullptr;
      knn_exact_part(*ctxs[s], X, k, metric, o, 0, n, n * s / S, n * (s + 1) / S, &lists[s]);
    });
    if (opt.redo_count) {  // queries searched again, summed over the shards (a query may count in several)
      *opt.redo_count = 0;
      for (int64_t v : redo) *opt.redo_count += v;
    }
    if (opt.report) *opt.report = "brute, index sharded";
    return knn_from_lists(merge_topk(lists, k - 1, ctxs[0]->threads()), k);
  }
  // Every query costs the same (a pass over all rows): equal shares of the rows, in order.
  std::vector<Knn> parts(static_cast<size_t>(S));
  std::vector<int64_t> redo(static_cast<size_t>(S), 0);
  on_each_gpu(ctxs, [&](int s) {
    KnnExactGpuOptions o = opt;
    o.redo_count = &redo[s];
    o.report = nullptr;
    parts[s] = knn_exact_part(*ctxs[s], X, k, metric, o, n * s / S, n * (s + 1) / S);
  });
  Knn out;
  out.n = n;
  out.k = k;
  out.indices.reserve(static_cast<size_t>(n * k));
  out.distances.reserve(static_cast<size_t>(n * k));
  int64_t redo_all = 0;
  for (int s = 0; s < S; ++s) {
    out.indices.insert(out.indices.end(), parts[s].indices.begin(), parts[s].indices.end());
    out.distances.insert(out.distances.end(), parts[s].distances.begin(), parts[s].distances.end());
    redo_all += redo[s];
  }
  if (opt.redo_count) *opt.redo_count = redo_all;
  if (opt.report) *opt.report = "brute";
  return out;
}

}  // namespace scurry
