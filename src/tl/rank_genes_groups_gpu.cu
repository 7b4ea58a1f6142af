// scurry: rank_genes_groups' statistics and wilcoxon rank sums on the GPU (rank_genes_groups_gpu.hpp
// says what and why the results are exact).
//
// 1. The matrix goes to the device with its rows in bucket order (category 0's cells, then 1's, ...,
//    the cells without a category last; gathered on the host into the pinned staging buffers), whole
//    or, when it does not fit beside the working memory, one chunk of rows at a time (each pass
//    streams the chunks again); every bucket is one contiguous range of entries. One
//    launch per pass covers every bucket (its blocks take slices of one bucket's range): pass A the
//    largest binary exponent of each gene and the nonzero counts, pass B the sums and then the squares
//    rounded onto a per-gene fixed-point grid and added as 64-bit integers (gene_sums.cu's scheme:
//    pre-rounding summation, Demmel & Nguyen 2013): the same bits on every run.
// 2. wilcoxon, in batches of genes that fit the device: the nonzeros of the batch's genes scattered
//    gene-major (order-preserving 32-bit keys of the values, each with its bucket), each gene's
//    segment sorted by value (cub's segmented sort), then one block per gene walks its segment in
//    tiles: a max-scan gives each entry the start s of its tie group, a reversed min-scan its end e
//    (a binary search when the group runs past the tile), and 2 x its average rank,
//    s + e + 1 (+ 2 z past the z zeros for positive values), is added to its bucket's 64-bit
//    counter. The zeros (implicit and explicit) form one tie group whose rank the host adds.
//    A reference group: per field, each gene's segment is first compacted to the field's and the
//    reference's entries (order kept), and ranked alone.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "exec/multi_device.cuh"
#include "pp/fixed_point.cuh"
#include "tl/rank_genes_groups_gpu.hpp"
#include "tl/stats_core.hpp"

namespace scurry {

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int kTileItems = kThreads * kItems;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxWarpBuckets = 768;  // per-warp shared counters up to this many buckets (48 KB)

// The float's bits as an unsigned key in the same order (negatives flipped, positives with the sign
// bit set): the key's top bit tells a positive value.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Gathers the rows of src in the order perm into dst (row pointers dst_ptr). One warp per row.
__global__ void gather_rows(const int64_t* src_ptr, const int32_t* src_idx, const float* src_val, const int64_t* perm,
                            const int64_t* dst_ptr, int32_t* dst_idx, float* dst_val, int64_t n_rows) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  const int64_t s = src_ptr[perm[w]], n = src_ptr[perm[w] + 1] - s, d = dst_ptr[w];
  for (int64_t k = lane; k < n; k += 32) {
    dst_idx[d + k] = src_idx[s + k];
    dst_val[d + k] = src_val[s + k];
  }
}

// A dense row-major matrix (n_cols columns) on the device, its rows in the order perm: per row the
// nonzeros (counts[i]) and, in *not_counts, 1 once a value is negative or not an integer. One warp
// per row.
__global__ void dense_row_counts(const float* __restrict__ x, int64_t n_cols, const int64_t* __restrict__ perm,
                                 int64_t n_rows, int64_t* __restrict__ counts, unsigned* __restrict__ not_counts) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  const float* row = x + perm[w] * n_cols;
  int c = 0;
  bool odd = false;
  for (int64_t j = lane; j < n_cols; j += 32) {
    const float v = row[j];
    c += v != 0.0f;
    odd = odd || !(v >= 0.0f && v == floorf(v));
  }
  for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
  if (__any_sync(0xffffffffu, odd) && lane == 0) atomicOr(not_counts, 1u);
  if (lane == 0) counts[w] = c;
}

// The nonzeros of the rows perm[i] of the dense matrix, in column order, into CSR row i (row
// pointers ptr). One warp per row: a ballot per 32 columns keeps their order.
__global__ void dense_gather_nonzeros(const float* __restrict__ x, int64_t n_cols, const int64_t* __restrict__ perm,
                                      int64_t n_rows, const int64_t* __restrict__ ptr, int32_t* __restrict__ idx,
                                      float* __restrict__ val) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  const float* row = x + perm[w] * n_cols;
  int64_t out = ptr[w];
  for (int64_t j0 = 0; j0 < n_cols; j0 += 32) {
    const int64_t j = j0 + lane;
    const float v = j < n_cols ? row[j] : 0.0f;
    const unsigned m = __ballot_sync(0xffffffffu, v != 0.0f);
    if (v != 0.0f) {
      const int64_t q = out + __popc(m & ((1u << lane) - 1u));
      idx[q] = static_cast<int32_t>(j);
      val[q] = v;
    }
    out += __popc(m);
  }
}

// The nonzeros of genes [g0, g0 + n_genes) of rows [0, n_rows) (bucket order; bucket of row r from
// the bucket starts) to their genes' segments (col_ptr, cursor: per gene, entries placed so far).
template <class C>
__global__ void scatter_gene_major(const int64_t* indptr, const int32_t* idx, const float* val, int64_t n_rows,
                                   const C* row_bucket, int32_t g0, int32_t n_genes, const int64_t* col_ptr,
                                   unsigned* cursor, uint32_t* keys, C* cats) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  const C b = row_bucket[w];
  for (int64_t p = indptr[w] + lane; p < indptr[w + 1]; p += 32) {
    const int32_t j = idx[p] - g0;
    if (static_cast<uint32_t>(j) >= static_cast<uint32_t>(n_genes)) continue;
    const float v = val[p];
    if (v == 0.0f) continue;  // explicit zeros rank with the implicit ones
    const int64_t at = col_ptr[j] + atomicAdd(&cursor[j], 1u);
    keys[at] = order_key(v);
    cats[at] = b;
  }
}

struct MaxOp {
  __device__ long long operator()(long long a, long long b) const { return a > b ? a : b; }
};
struct MinOp {
  __device__ long long operator()(long long a, long long b) const { return a < b ? a : b; }
};
struct SumOp {
  __device__ long long operator()(long long a, long long b) const { return a + b; }
};

// Running prefix for cub's block scans across the tiles of one segment.
template <class Op>
struct Carry {
  long long value;
  Op op;
  __device__ long long operator()(long long aggregate) {
    const long long old = value;
    value = op(value, aggregate);
    return old;
  }
};

// One block per gene of the batch: rank sums of the sorted segment keys[col_ptr[j], col_ptr[j+1])
// among n_total cells (the rest are zeros). rank2[b * stride + j] += 2 x ranks of bucket b;
// ties[j], n_neg[j] as in the header.
template <class C>
__global__ void __launch_bounds__(kThreads) rank_segments(const uint32_t* keys, const C* cats, const int64_t* col_ptr,
                                                          int64_t n_total, int n_buckets, int64_t stride,
                                                          unsigned long long* rank2, double* ties, long long* n_neg) {
  using Scan = cub::BlockScan<long long, kThreads>;
  using RedD = cub::BlockReduce<double, kThreads>;
  using RedL = cub::BlockReduce<long long, kThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename RedD::TempStorage redd;
    typename RedL::TempStorage redl;
  } tmp;
  __shared__ uint32_t tk[kTileItems];
  __shared__ long long tail_end;
  extern __shared__ unsigned long long acc[];  // kWarps x n_buckets (per-warp counters), when they fit
  const bool local = n_buckets <= kMaxWarpBuckets;
  const int j = blockIdx.x;
  const int64_t base = col_ptr[j], n = col_ptr[j + 1] - base;
  const long long z2 = 2 * (n_total - n);  // 2 x the zeros: the shift of positive values' ranks
  if (local)
    for (int i = threadIdx.x; i < kWarps * n_buckets; i += kThreads) acc[i] = 0ull;
  __syncthreads();
  unsigned long long* my_acc = acc + (threadIdx.x / 32) * n_buckets;
  double my_ties = 0;
  long long my_neg = 0;
  Carry<MaxOp> start_carry{0, MaxOp{}};
  for (int64_t t0 = 0; t0 < n; t0 += kTileItems) {
    const int len = static_cast<int>(n - t0 < kTileItems ? n - t0 : kTileItems);
    for (int i = threadIdx.x; i < len; i += kThreads) tk[i] = keys[base + t0 + i];
    if (threadIdx.x == 0) {
      // end of the tie group holding the tile's last entry: upper bound of its key after the tile
      const uint32_t k = keys[base + t0 + len - 1];
      int64_t lo = t0 + len, hi = n;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[base + mid] <= k) lo = mid + 1;
        else hi = mid;
      }
      tail_end = lo;
    }
    const uint32_t prev_key = t0 > 0 ? keys[base + t0 - 1] : 0u;
    __syncthreads();
    // starts: s(p) = the largest group start <= p (inclusive max-scan, carried across tiles)
    long long s[kItems], e[kItems];
    for (int k = 0; k < kItems; ++k) {
      const int p = threadIdx.x * kItems + k;
      bool start = false;
      if (p < len) start = (t0 + p == 0) || tk[p] != (p == 0 ? prev_key : tk[p - 1]);
      s[k] = start ? t0 + p : 0;
    }
    Scan(tmp.scan).InclusiveScan(s, s, MaxOp{}, start_carry);
    __syncthreads();
    // ends: e(p) = the first group start > p in the tile, else tail_end (reversed inclusive min-scan)
    {
      long long r[kItems];
      for (int k = 0; k < kItems; ++k) {
        const int p = kTileItems - 1 - (threadIdx.x * kItems + k);  // reversed position
        long long v = LLONG_MAX;
        if (p + 1 < len && tk[p + 1] != tk[p]) v = t0 + p + 1;
        r[k] = v;
      }
      Scan(tmp.scan).InclusiveScan(r, r, MinOp{});
      __syncthreads();
      // r[k] belongs to position p = kTileItems-1-(t*kItems+k); bring it back through shared memory
      // (reusing tk is not possible: keys are still needed), so every thread recomputes its own e
      // from a second pass: store to a shared buffer of ends.
      __shared__ long long ends[kTileItems];
      for (int k = 0; k < kItems; ++k) {
        const int p = kTileItems - 1 - (threadIdx.x * kItems + k);
        ends[p] = r[k];
      }
      __syncthreads();
      for (int k = 0; k < kItems; ++k) {
        const int p = threadIdx.x * kItems + k;
        if (p < len) e[k] = ends[p] < tail_end ? ends[p] : tail_end;
      }
    }
    for (int k = 0; k < kItems; ++k) {
      const int p = threadIdx.x * kItems + k;
      if (p >= len) continue;
      const uint32_t key = tk[p];
      const bool pos = (key & 0x80000000u) != 0;
      const unsigned long long r2 = static_cast<unsigned long long>(s[k] + e[k] + 1 + (pos ? z2 : 0));
      const int b = static_cast<int>(cats[base + t0 + p]);
      if (local) atomicAdd(&my_acc[b], r2);
      else atomicAdd(&rank2[static_cast<int64_t>(b) * stride + j], r2);
      if (s[k] == t0 + p) {
        const double t = static_cast<double>(e[k] - s[k]);
        my_ties += t * t * t - t;
      }
      my_neg += pos ? 0 : 1;
    }
    __syncthreads();
  }
  const double tsum = RedD(tmp.redd).Sum(my_ties);
  __syncthreads();
  const long long nsum = RedL(tmp.redl).Sum(my_neg);
  if (threadIdx.x == 0) {
    ties[j] = tsum;
    n_neg[j] = nsum;
  }
  if (local) {
    __syncthreads();
    for (int b = threadIdx.x; b < n_buckets; b += kThreads) {
      unsigned long long v = 0;
      for (int w = 0; w < kWarps; ++w) v += acc[w * n_buckets + b];
      rank2[static_cast<int64_t>(b) * stride + j] += v;
    }
  }
}

// One block per gene: the entries of buckets a and b of each sorted segment, in order, to the
// segment of the pair (out_ptr).
template <class C>
__global__ void __launch_bounds__(kThreads) compact_pair(const uint32_t* keys, const C* cats, const int64_t* col_ptr,
                                                         C a, C b, const int64_t* out_ptr, uint32_t* out_keys,
                                                         C* out_cats) {
  using Scan = cub::BlockScan<long long, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int j = blockIdx.x;
  const int64_t base = col_ptr[j], n = col_ptr[j + 1] - base, out = out_ptr[j];
  Carry<SumOp> carry{0, SumOp{}};
  for (int64_t t0 = 0; t0 < n; t0 += kTileItems) {
    long long f[kItems], o[kItems];
    for (int k = 0; k < kItems; ++k) {
      const int64_t p = t0 + threadIdx.x * kItems + k;
      f[k] = 0;
      if (p < n) {
        const C c = cats[base + p];
        f[k] = (c == a || c == b) ? 1 : 0;
      }
    }
    Scan(tmp).ExclusiveSum(f, o, carry);
    __syncthreads();
    for (int k = 0; k < kItems; ++k) {
      if (!f[k]) continue;
      const int64_t p = t0 + threadIdx.x * kItems + k;
      out_keys[out + o[k]] = keys[base + p];
      out_cats[out + o[k]] = cats[base + p];
    }
  }
}

// ---- per-bucket sums: gene_sums.cu's fixed-point scheme, every bucket in the same launch ---------
// Each block takes a slice of one bucket's entries (rows in bucket order: a bucket is one range of
// entries) and accumulates the genes [g0, g0 + tile) in shared memory; the finish kernels combine a
// bucket's blocks in block order (integers: exact in any order anyway).
constexpr int kSumThreads = 1024;
constexpr int kSumTile = 28672;  // genes per pass: 2 x 4 bytes of shared memory each (224 KB)

__device__ __forceinline__ unsigned exp_field(float x) { return (__float_as_uint(x) >> 23) & 0xffu; }

// A block's entries [p0, p1), kUnroll loads of an index and a value in flight per thread before
// any is used. (These blocks hold all of an SM's shared memory, so one runs per SM: 32 warps with
// one load each in flight read ~1 TB/s, a quarter of the memory's rate (Little's law: bytes in
// flight / latency); eight each reach the rate.) The streams bypass L1 (__ldcs: read once per pass),
// which keeps L1 for the per-gene exponents.
constexpr int kUnroll = 8;
template <class F>
__device__ __forceinline__ void for_block_entries(const int32_t* __restrict__ idx, const float* __restrict__ val,
                                                  int64_t p0, int64_t p1, F&& f) {
  int64_t p = p0 + threadIdx.x;
  for (; p + (kUnroll - 1) * int64_t{kSumThreads} < p1; p += kUnroll * int64_t{kSumThreads}) {
    int32_t g[kUnroll];
    float x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      g[u] = __ldcs(idx + p + u * kSumThreads);
      x[u] = __ldcs(val + p + u * kSumThreads);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(g[u], x[u]);
  }
  for (; p < p1; p += kSumThreads) f(__ldcs(idx + p), __ldcs(val + p));
}

// Pass A: per block, acc[0, tile) the largest exponent field of the nonzeros, acc[tile, 2 tile) their
// count; *nonfinite set when an inf or NaN is seen.
__global__ void __launch_bounds__(kSumThreads) bucket_bounds(const int32_t* idx, const float* val, const int64_t* lo,
                                                             const int64_t* hi, int32_t g0, int tile, unsigned* partial,
                                                             unsigned* nonfinite) {
  extern __shared__ __align__(8) unsigned char smem_raw[];
  unsigned* acc = reinterpret_cast<unsigned*>(smem_raw);
  for (int i = threadIdx.x; i < 2 * tile; i += kSumThreads) acc[i] = 0u;
  __syncthreads();
  volatile unsigned* seen = acc;
  bool bad = false;
  for_block_entries(idx, val, lo[blockIdx.x], hi[blockIdx.x], [&](int32_t gi, float x) {
    const int32_t g = gi - g0;
    if (static_cast<uint32_t>(g) >= static_cast<uint32_t>(tile) || x == 0.0f) return;
    const unsigned e = exp_field(x);
    if (e > seen[g]) atomicMax(&acc[g], e);
    atomicAdd(&acc[tile + g], 1u);
    bad = bad || e == 255u;
  });
  if (bad) atomicOr(nonfinite, 1u);
  __syncthreads();
  unsigned* out = partial + static_cast<int64_t>(blockIdx.x) * 2 * tile;
  for (int i = threadIdx.x; i < 2 * tile; i += kSumThreads) out[i] = acc[i];
}

// Over the chunks: emax[j] = the largest exponent field of gene g0 + j, nnz[bucket][g0 + j] += the
// blocks' counts (blocks of a bucket are consecutive).
__global__ void bucket_bounds_finish(const unsigned* partial, const int32_t* blk_bucket, int n_blocks, int tile,
                                     int64_t n_genes_total, int32_t g0, unsigned* emax, int64_t* nnz) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= tile) return;
  unsigned e = emax[g0 + j];
  for (int b = 0; b < n_blocks; ++b) e = max(e, partial[static_cast<int64_t>(b) * 2 * tile + j]);
  emax[g0 + j] = e;
  for (int b = 0; b < n_blocks; ++b)
    nnz[static_cast<int64_t>(blk_bucket[b]) * n_genes_total + g0 + j] += partial[static_cast<int64_t>(b) * 2 * tile + tile + j];
}

// The grids from the exponents, one byte per gene (the largest exponent field e; 28k genes stay in
// L1 beside the accumulators): a float x of the gene has |x| < 2^(e - 126), and the grid is 32 bits
// below that: the sums' terms are rint(x 2^(158 - e)), the squares' rint(x^2 2^(284 - 2e)).
__global__ void bucket_grids(const unsigned* emax, int64_t n_genes, uint8_t* exps) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n_genes) return;
  exps[j] = static_cast<uint8_t>(emax[j]);
}

// The grid's shift for exponent field e: 2^shift is the grid's unit's inverse.
template <bool kSquares>
__host__ __device__ __forceinline__ int grid_shift(unsigned e) {
  return kSquares ? 284 - 2 * static_cast<int>(e) : 158 - static_cast<int>(e);
}

// Pass B: per block, the sum of rint(x 2^k) (or x^2 2^k) per gene as 64 bits in two shared words.
// x 2^k (x^2 2^k) is formed as a product by the power of two, exact as gpu::fixed_term's ldexp is
// (every term is a normal float64 well inside the range: |x| 2^k < 2^32 and x^2 is exact in float64),
// so the terms are fixed_term's bits.
template <bool kSquares>
__global__ void __launch_bounds__(kSumThreads) bucket_fixed(const int32_t* idx, const float* val, const int64_t* lo,
                                                            const int64_t* hi, int32_t g0, int tile,
                                                            const uint8_t* __restrict__ exps,
                                                            unsigned long long* partial) {
  extern __shared__ __align__(8) unsigned char smem_raw[];
  unsigned* acc = reinterpret_cast<unsigned*>(smem_raw);
  for (int i = threadIdx.x; i < 2 * tile; i += kSumThreads) acc[i] = 0u;
  __syncthreads();
  for_block_entries(idx, val, lo[blockIdx.x], hi[blockIdx.x], [&](int32_t gi, float x) {
    const int32_t g = gi - g0;
    if (static_cast<uint32_t>(g) >= static_cast<uint32_t>(tile) || x == 0.0f || !isfinite(x)) return;
    const int k = grid_shift<kSquares>(__ldg(exps + gi));
    const double scale = __longlong_as_double(static_cast<long long>(1023 + k) << 52);  // 2^k, |k| < 1023
    const double d = static_cast<double>(x);
    gpu::add64(&acc[g], &acc[tile + g], __double2ll_rn(kSquares ? d * d * scale : d * scale));
  });
  __syncthreads();
  unsigned long long* out = partial + static_cast<int64_t>(blockIdx.x) * tile;
  for (int i = threadIdx.x; i < tile; i += kSumThreads) out[i] = (static_cast<unsigned long long>(acc[tile + i]) << 32) | acc[i];
}

// Per gene and bucket: the blocks' integers added into acc (wrap-around: exact in any order).
__global__ void bucket_fixed_finish(const unsigned long long* partial, const int32_t* blk_bucket, int n_blocks,
                                    int tile, int64_t n_genes_total, int32_t g0, unsigned long long* acc) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= tile) return;
  int b = 0;
  while (b < n_blocks) {
    const int32_t bucket = blk_bucket[b];
    unsigned long long s = 0;
    for (; b < n_blocks && blk_bucket[b] == bucket; ++b) s += partial[static_cast<int64_t>(b) * tile + j];
    acc[static_cast<int64_t>(bucket) * n_genes_total + g0 + j] += s;
  }
}

// out = acc 2^-shift in float64, the shift from the gene's exponent byte.
template <bool kSquares>
__global__ void fixed_to_double(const unsigned long long* acc, int64_t n, int64_t n_genes, const uint8_t* exps,
                                double* out) {
  const int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (q >= n) return;
  out[q] = ldexp(static_cast<double>(static_cast<long long>(acc[q])), -grid_shift<kSquares>(exps[q % n_genes]));
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The device seconds between start and stop, added over several intervals (CUDA events).
class EventTimer {
 public:
  EventTimer() {
    SCURRY_CUDA(cudaEventCreate(&a_));
    SCURRY_CUDA(cudaEventCreate(&b_));
  }
  ~EventTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(cudaStream_t s) { SCURRY_CUDA(cudaEventRecord(a_, s)); }
  void stop(cudaStream_t s) {
    SCURRY_CUDA(cudaEventRecord(b_, s));
    SCURRY_CUDA(cudaEventSynchronize(b_));
    float ms = 0;
    SCURRY_CUDA(cudaEventElapsedTime(&ms, a_, b_));
    seconds_ += ms * 1e-3;
  }
  double seconds() const { return seconds_; }

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
  double seconds_ = 0;
};

std::mutex g_times_mutex;
RggGpuTimes g_times;
void add_rgg_gpu_time(double RggGpuTimes::*field, double s) {
  std::lock_guard<std::mutex> lock(g_times_mutex);
  g_times.*field += s;
}

// The matrix in bucket order on the device: whole (resident, uploaded once) or one chunk of rows at
// a time (streamed: each pass over the matrix uploads the chunks again). The rows are gathered into
// bucket order on the host while they are copied into pinned staging buffers, so the device never
// holds the matrix twice.
class BucketRows {
 public:
  struct Chunk {
    int64_t row0 = 0, row1 = 0;  // rows of the bucket order
    int64_t p0 = 0, p1 = 0;      // their entries (offsets in the bucket order)
  };

  // device_gather (one chunk only): upload the rows as they are (the plain staged copy is twice as
  // fast as gathering on the host) and gather them on the device, holding the matrix twice briefly.
  BucketRows(CudaResources& r, const CsrF& x, const std::vector<int64_t>& perm, const std::vector<int64_t>& yptr,
             int64_t chunk_nnz, bool device_gather)
      : r_(r), x_(&x), perm_(perm), yptr_(yptr), device_gather_(device_gather) {
    const int64_t N = x.n_rows;
    for (int64_t r0 = 0; r0 < N || chunks_.empty();) {
      int64_t r1 = r0;
      while (r1 < N && (r1 == r0 || yptr[r1 + 1] - yptr[r0] <= chunk_nnz)) ++r1;
      chunks_.push_back({r0, r1, yptr[r0], yptr[r1]});
      r0 = r1;
      if (N == 0) break;
    }
    int64_t most = 0, most_rows = 0;
    for (const Chunk& c : chunks_) {
      most = std::max(most, c.p1 - c.p0);
      most_rows = std::max(most_rows, c.row1 - c.row0);
    }
    idx_ = DeviceArray<int32_t>(r, std::max<int64_t>(most, 1), "rank_genes_groups: column indices (bucket order)");
    val_ = DeviceArray<float>(r, std::max<int64_t>(most, 1), "rank_genes_groups: values (bucket order)");
    ptr_ = DeviceArray<int64_t>(r, most_rows + 1, "rank_genes_groups: row pointers (bucket order)");
  }
  // The nonzeros of a dense row-major matrix on the device (n_cols columns), rows in the order
  // d_perm (perm on the device), row pointers yptr: one resident chunk, gathered on the device.
  BucketRows(CudaResources& r, const float* d_x, int64_t n_cols, const DeviceArray<int64_t>& d_perm,
             const std::vector<int64_t>& perm, const std::vector<int64_t>& yptr)
      : r_(r), x_(nullptr), perm_(perm), yptr_(yptr) {
    const int64_t N = static_cast<int64_t>(perm.size()), nnz = yptr[N];
    chunks_.push_back({0, N, 0, nnz});
    idx_ = DeviceArray<int32_t>(r, std::max<int64_t>(nnz, 1), "rank_genes_groups: column indices (bucket order)");
    val_ = DeviceArray<float>(r, std::max<int64_t>(nnz, 1), "rank_genes_groups: values (bucket order)");
    ptr_ = DeviceArray<int64_t>(r, N + 1, "rank_genes_groups: row pointers (bucket order)");
    const double t0 = now();
    SCURRY_CUDA(cudaMemcpyAsync(ptr_.data(), yptr.data(), yptr.size() * 8, cudaMemcpyHostToDevice, r.stream));
    if (N > 0) {
      dense_gather_nonzeros<<<static_cast<unsigned>((N * 32 + 255) / 256), 256, 0, r.stream>>>(
          d_x, n_cols, d_perm.data(), N, ptr_.data(), idx_.data(), val_.data());
      SCURRY_CUDA_LAUNCH();
    }
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    loaded_ = 0;
    upload_s_ = now() - t0;
  }
  ~BucketRows() {
    for (int i = 0; i < 2; ++i) {
      if (stage_[i]) cudaFreeHost(stage_[i]);
      if (done_[i]) cudaEventDestroy(done_[i]);
    }
  }
  BucketRows(const BucketRows&) = delete;
  BucketRows& operator=(const BucketRows&) = delete;

  int64_t n_chunks() const { return static_cast<int64_t>(chunks_.size()); }
  bool streamed() const { return chunks_.size() > 1; }
  const Chunk& chunk(int64_t c) const { return chunks_[c]; }
  double upload_seconds() const { return upload_s_; }
  double uploaded_bytes() const { return uploaded_bytes_; }
  // Chunk c on the device (uploaded unless it is the one there); entries relative to its p0.
  const int32_t* idx() const { return idx_.data(); }
  const float* val() const { return val_.data(); }
  const int64_t* ptr() const { return ptr_.data(); }
  void load(int64_t c) {
    if (c == loaded_) return;
    if (!x_) fail("rank_genes_groups (gpu): the device matrix has one chunk only");
    const CsrF& x = *x_;
    const double t0 = now();
    const Chunk& ch = chunks_[c];
    if (device_gather_ && chunks_.size() == 1) {
      DeviceCsr d = upload(r_, x);
      SCURRY_CUDA(cudaMemcpyAsync(ptr_.data(), yptr_.data(), yptr_.size() * 8, cudaMemcpyHostToDevice, r_.stream));
      DeviceArray<int64_t> d_perm(r_, std::max<size_t>(perm_.size(), 1), "rank_genes_groups: row order");
      SCURRY_CUDA(cudaMemcpyAsync(d_perm.data(), perm_.data(), perm_.size() * 8, cudaMemcpyHostToDevice, r_.stream));
      const int64_t n = static_cast<int64_t>(perm_.size());
      if (n > 0) {
        gather_rows<<<static_cast<unsigned>((n * 32 + 255) / 256), 256, 0, r_.stream>>>(
            d.indptr.data(), d.indices.data(), d.data.data(), d_perm.data(), ptr_.data(), idx_.data(), val_.data(), n);
        SCURRY_CUDA_LAUNCH();
      }
      SCURRY_CUDA(cudaStreamSynchronize(r_.stream));
      loaded_ = c;
      upload_s_ += now() - t0;
      uploaded_bytes_ += static_cast<double>(ch.p1 - ch.p0) * 8.0;
      return;
    }
    std::vector<int64_t> lp(static_cast<size_t>(ch.row1 - ch.row0) + 1);
    for (int64_t i = ch.row0; i <= ch.row1; ++i) lp[i - ch.row0] = yptr_[i] - ch.p0;
    SCURRY_CUDA(cudaMemcpyAsync(ptr_.data(), lp.data(), lp.size() * 8, cudaMemcpyHostToDevice, r_.stream));
    if (!stage_[0]) {
      for (int i = 0; i < 2; ++i) {
        SCURRY_CUDA(cudaMallocHost(reinterpret_cast<void**>(&stage_[i]), kStageBytes));
        SCURRY_CUDA(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
      }
    }
    // pieces of rows of at most kStageBytes / 8 entries (indices then values in one buffer)
    const int64_t piece_max = static_cast<int64_t>(kStageBytes / 8);
    int k = 0;
    for (int64_t a = ch.row0; a < ch.row1; ++k) {
      int64_t b = a;
      while (b < ch.row1 && (b == a || yptr_[b + 1] - yptr_[a] <= piece_max)) ++b;
      const int64_t n = yptr_[b] - yptr_[a];
      if (n > piece_max) fail("rank_genes_groups (gpu): a row of ", n, " entries is larger than the staging buffer");
      char* buf = stage_[k % 2];
      if (k >= 2) SCURRY_CUDA(cudaEventSynchronize(done_[k % 2]));
      int32_t* bi = reinterpret_cast<int32_t*>(buf);
      float* bv = reinterpret_cast<float*>(buf + n * 4);
      const int64_t base = yptr_[a];
#pragma omp parallel for schedule(dynamic, 256)
      for (int64_t i = a; i < b; ++i) {
        const int64_t src = x.indptr[perm_[i]], len = x.indptr[perm_[i] + 1] - src, dst = yptr_[i] - base;
        std::memcpy(bi + dst, x.indices.data() + src, static_cast<size_t>(len) * 4);
        std::memcpy(bv + dst, x.data.data() + src, static_cast<size_t>(len) * 4);
      }
      const int64_t off = base - ch.p0;
      if (n > 0) {
        SCURRY_CUDA(cudaMemcpyAsync(idx_.data() + off, bi, n * 4, cudaMemcpyHostToDevice, r_.stream));
        SCURRY_CUDA(cudaMemcpyAsync(val_.data() + off, bv, n * 4, cudaMemcpyHostToDevice, r_.stream));
      }
      SCURRY_CUDA(cudaEventRecord(done_[k % 2], r_.stream));
      a = b;
    }
    SCURRY_CUDA(cudaStreamSynchronize(r_.stream));
    loaded_ = c;
    upload_s_ += now() - t0;
    uploaded_bytes_ += static_cast<double>(ch.p1 - ch.p0) * 8.0;
  }

 private:
  static constexpr size_t kStageBytes = size_t(256) << 20;
  CudaResources& r_;
  const CsrF* x_;  // null: rows gathered from a device matrix at construction
  const std::vector<int64_t>& perm_;
  const std::vector<int64_t>& yptr_;
  std::vector<Chunk> chunks_;
  DeviceArray<int32_t> idx_;
  DeviceArray<float> val_;
  DeviceArray<int64_t> ptr_;
  char* stage_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  bool device_gather_ = false;
  int64_t loaded_ = -1;
  double upload_s_ = 0, uploaded_bytes_ = 0;
};

// Per-bucket sums, sums of squares and nonzero counts over every chunk (pass A over all chunks, then
// the two B passes over all chunks). Returns whether a non-finite value was seen.
bool bucket_stats(CudaResources& r, BucketRows& rows, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& yptr, int64_t B, int64_t G, int64_t ga, int64_t gb, GeneGroupStats& st) {
  if (std::getenv("SCURRY_RGG_TIMES")) std::fprintf(stderr, "[rgg gpu]   sums setup starts at %.4f\n", now());
  int sms = 0;
  SCURRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r.device));
  const int64_t want = std::max<int64_t>(1, int64_t(sms) * 2);
  const int tile_max = static_cast<int>(std::min<int64_t>(std::max<int64_t>(gb - ga, 1), kSumTile));
  const int64_t BG = B * G;
  DeviceArray<unsigned> emax(r, std::max<int64_t>(G, 1), "rank_genes_groups: exponents");
  DeviceArray<uint8_t> exps(r, std::max<int64_t>(G, 1), "rank_genes_groups: grids");
  DeviceArray<unsigned> nonfinite(r, 1, "rank_genes_groups: non-finite flag");
  DeviceArray<int64_t> d_nnz(r, std::max<int64_t>(BG, 1), "rank_genes_groups: counts");
  DeviceArray<unsigned long long> acc_sum(r, std::max<int64_t>(BG, 1), "rank_genes_groups: sums");
  DeviceArray<unsigned long long> acc_sq(r, std::max<int64_t>(BG, 1), "rank_genes_groups: sums of squares");
  SCURRY_CUDA(cudaMemsetAsync(emax.data(), 0, G * 4, r.stream));
  SCURRY_CUDA(cudaMemsetAsync(nonfinite.data(), 0, 4, r.stream));
  SCURRY_CUDA(cudaMemsetAsync(d_nnz.data(), 0, BG * 8, r.stream));
  SCURRY_CUDA(cudaMemsetAsync(acc_sum.data(), 0, BG * 8, r.stream));
  SCURRY_CUDA(cudaMemsetAsync(acc_sq.data(), 0, BG * 8, r.stream));
  // (the attribute is the kernel's, shared by every thread and context: set it to the largest tile,
  // never to this call's, which another device's thread may exceed)
  const size_t smem_max = 2 * static_cast<size_t>(kSumTile) * 4;
  SCURRY_CUDA(cudaFuncSetAttribute(bucket_bounds, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_max)));
  SCURRY_CUDA(cudaFuncSetAttribute(bucket_fixed<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_max)));
  SCURRY_CUDA(cudaFuncSetAttribute(bucket_fixed<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_max)));
  // per chunk: blocks spread over the buckets it holds by their entries
  struct Blocks {
    DeviceArray<int64_t> lo, hi;
    DeviceArray<int32_t> bucket;
    int n = 0;
  };
  std::vector<Blocks> blocks(static_cast<size_t>(rows.n_chunks()));
  int most = 1;
  for (int64_t c = 0; c < rows.n_chunks(); ++c) {
    const auto& ch = rows.chunk(c);
    std::vector<int64_t> lo, hi;
    std::vector<int32_t> bb;
    const int64_t nnz = std::max<int64_t>(1, ch.p1 - ch.p0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t r0 = std::max(start[b], ch.row0), r1 = std::min(start[b + 1], ch.row1);
      if (r1 <= r0) continue;
      const int64_t p0 = yptr[r0] - ch.p0, p1 = yptr[r1] - ch.p0;  // its entries, relative to the chunk
      if (p1 == p0) continue;
      const int64_t nb = std::max<int64_t>(1, (want * (p1 - p0) + nnz - 1) / nnz);
      for (int64_t k = 0; k < nb; ++k) {
        lo.push_back(p0 + (p1 - p0) * k / nb);
        hi.push_back(p0 + (p1 - p0) * (k + 1) / nb);
        bb.push_back(static_cast<int32_t>(b));
      }
    }
    Blocks& bl = blocks[c];
    bl.n = static_cast<int>(lo.size());
    most = std::max(most, bl.n);
    bl.lo = DeviceArray<int64_t>(r, std::max<size_t>(lo.size(), 1), "rank_genes_groups: block ranges");
    bl.hi = DeviceArray<int64_t>(r, std::max<size_t>(lo.size(), 1), "rank_genes_groups: block ranges");
    bl.bucket = DeviceArray<int32_t>(r, std::max<size_t>(lo.size(), 1), "rank_genes_groups: block buckets");
    if (bl.n) {
      SCURRY_CUDA(cudaMemcpyAsync(bl.lo.data(), lo.data(), lo.size() * 8, cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(bl.hi.data(), hi.data(), hi.size() * 8, cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(bl.bucket.data(), bb.data(), bb.size() * 4, cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // (lo, hi, bb leave scope)
    }
  }
  DeviceArray<unsigned long long> partial(r, static_cast<size_t>(most) * tile_max, "rank_genes_groups: partial sums");
  EventTimer timer;
  const bool verbose = std::getenv("SCURRY_RGG_TIMES") != nullptr;
  for (int pass = 0; pass < 2; ++pass) {
    if (verbose) {
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      std::fprintf(stderr, "[rgg gpu]   sums pass %d starts at %.4f\n", pass, now());
    }
    if (pass == 1) {
      bucket_grids<<<static_cast<unsigned>((G + 255) / 256), 256, 0, r.stream>>>(emax.data(), G, exps.data());
      SCURRY_CUDA_LAUNCH();
    }
    // (streamed: the B passes visit the chunks backwards, starting from the one still on the device)
    for (int64_t cc = 0; cc < rows.n_chunks(); ++cc) {
      const int64_t c = pass == 0 ? cc : rows.n_chunks() - 1 - cc;
      const Blocks& bl = blocks[c];
      if (bl.n == 0) continue;
      rows.load(c);
      timer.start(r.stream);
      for (int64_t g0 = ga; g0 < gb; g0 += tile_max) {
        const int tile = static_cast<int>(std::min<int64_t>(tile_max, gb - g0));
        const size_t sm = 2 * static_cast<size_t>(tile) * 4;
        const unsigned fin = static_cast<unsigned>((tile + 255) / 256);
        const int32_t gg = static_cast<int32_t>(g0);
        if (pass == 0) {
          bucket_bounds<<<bl.n, kSumThreads, sm, r.stream>>>(rows.idx(), rows.val(), bl.lo.data(), bl.hi.data(), gg,
                                                             tile, reinterpret_cast<unsigned*>(partial.data()),
                                                             nonfinite.data());
          SCURRY_CUDA_LAUNCH();
          bucket_bounds_finish<<<fin, 256, 0, r.stream>>>(reinterpret_cast<const unsigned*>(partial.data()),
                                                          bl.bucket.data(), bl.n, tile, G, gg, emax.data(), d_nnz.data());
          SCURRY_CUDA_LAUNCH();
        } else {
          bucket_fixed<false><<<bl.n, kSumThreads, sm, r.stream>>>(rows.idx(), rows.val(), bl.lo.data(), bl.hi.data(),
                                                                   gg, tile, exps.data(), partial.data());
          SCURRY_CUDA_LAUNCH();
          bucket_fixed_finish<<<fin, 256, 0, r.stream>>>(partial.data(), bl.bucket.data(), bl.n, tile, G, gg,
                                                         acc_sum.data());
          SCURRY_CUDA_LAUNCH();
          bucket_fixed<true><<<bl.n, kSumThreads, sm, r.stream>>>(rows.idx(), rows.val(), bl.lo.data(), bl.hi.data(),
                                                                  gg, tile, exps.data(), partial.data());
          SCURRY_CUDA_LAUNCH();
          bucket_fixed_finish<<<fin, 256, 0, r.stream>>>(partial.data(), bl.bucket.data(), bl.n, tile, G, gg,
                                                         acc_sq.data());
          SCURRY_CUDA_LAUNCH();
        }
      }
      timer.stop(r.stream);
    }
  }
  add_rgg_gpu_time(&RggGpuTimes::sums_s, timer.seconds());
  add_rgg_gpu_time(&RggGpuTimes::upload_s, rows.upload_seconds());
  if (verbose) {
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    std::fprintf(stderr, "[rgg gpu]   sums passes end at %.4f\n", now());
  }
  DeviceArray<double> out(r, std::max<int64_t>(BG, 1), "rank_genes_groups: sums (float64)");
  const unsigned nb = static_cast<unsigned>((BG + 255) / 256);
  unsigned nf = 0;
  // each bucket's genes [ga, gb) (other devices fill the other genes)
  auto fetch = [&](double* dst_d, int64_t* dst_i, const void* src) {
    for (int64_t b = 0; b < B; ++b) {
      const size_t off = static_cast<size_t>(b * G + ga), len = static_cast<size_t>(gb - ga) * 8;
      void* dst = dst_d ? static_cast<void*>(dst_d + off) : static_cast<void*>(dst_i + off);
      SCURRY_CUDA(cudaMemcpyAsync(dst, static_cast<const char*>(src) + off * 8, len, cudaMemcpyDeviceToHost, r.stream));
    }
  };
  SCURRY_CUDA(cudaMemcpyAsync(&nf, nonfinite.data(), 4, cudaMemcpyDeviceToHost, r.stream));
  if (BG > 0 && gb > ga) {
    fetch(nullptr, st.nnz.data(), d_nnz.data());
    fixed_to_double<false><<<nb, 256, 0, r.stream>>>(acc_sum.data(), BG, G, exps.data(), out.data());
    SCURRY_CUDA_LAUNCH();
    fetch(st.sum.data(), nullptr, out.data());
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    fixed_to_double<true><<<nb, 256, 0, r.stream>>>(acc_sq.data(), BG, G, exps.data(), out.data());
    SCURRY_CUDA_LAUNCH();
    fetch(st.sum_sq.data(), nullptr, out.data());
  }
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return nf != 0;
}

template <class C>
void wilcoxon_batches(CudaResources& r, BucketRows& rows, const std::vector<C>& bucket_of_row,
                      const RankGenesGroupsGpu& res, int64_t N, int64_t G, int64_t ga, int64_t gb,
                      int64_t n_buckets, int32_t ref, const std::vector<int32_t>& fields, std::vector<int64_t>& rank2,
                      std::vector<int64_t>& n_neg, std::vector<double>& ties, int64_t cap, bool verbose) {
  const GeneGroupStats& st = res.st;
  std::vector<int64_t> gene_nnz(static_cast<size_t>(G), 0);
  for (int64_t b = 0; b < n_buckets; ++b)
    for (int64_t j = ga; j < gb; ++j) gene_nnz[j] += st.nnz[b * G + j];
  DeviceArray<C> d_bucket(r, std::max<size_t>(bucket_of_row.size(), 1), "rank_genes_groups: row buckets");
  SCURRY_CUDA(cudaMemcpyAsync(d_bucket.data(), bucket_of_row.data(), bucket_of_row.size() * sizeof(C),
                              cudaMemcpyHostToDevice, r.stream));
  const bool pair = ref >= 0;
  const size_t F = fields.size();
  const int nb_int = static_cast<int>(n_buckets);
  const size_t smem = nb_int <= kMaxWarpBuckets ? static_cast<size_t>(kWarps) * n_buckets * 8 : 0;
  if (smem > 0)
    SCURRY_CUDA(cudaFuncSetAttribute(rank_segments<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  int64_t next_chunk = 0;  // (streamed: start from the chunk still on the device, which the stats left at 0)
  for (int64_t g0 = ga; g0 < gb;) {
    int64_t g1 = g0, items = 0;
    while (g1 < gb && (g1 == g0 || items + gene_nnz[g1] <= cap)) items += gene_nnz[g1++];
    const int64_t Gb = g1 - g0;
    double t_start = now();
    std::vector<int64_t> col_ptr(static_cast<size_t>(Gb) + 1, 0);
    for (int64_t j = 0; j < Gb; ++j) col_ptr[j + 1] = col_ptr[j] + gene_nnz[g0 + j];
    DeviceArray<int64_t> d_ptr(r, Gb + 1, "rank_genes_groups: segments");
    DeviceArray<unsigned> d_cursor(r, Gb, "rank_genes_groups: cursors");
    DeviceArray<uint32_t> keys(r, std::max<int64_t>(items, 1), "rank_genes_groups: keys");
    DeviceArray<C> cats(r, std::max<int64_t>(items, 1), "rank_genes_groups: key buckets");
    SCURRY_CUDA(cudaMemcpyAsync(d_ptr.data(), col_ptr.data(), col_ptr.size() * 8, cudaMemcpyHostToDevice, r.stream));
    SCURRY_CUDA(cudaMemsetAsync(d_cursor.data(), 0, Gb * sizeof(unsigned), r.stream));
    for (int64_t cc = 0; cc < rows.n_chunks(); ++cc) {
      // alternate the direction so the chunk on the device is used first
      const int64_t c = next_chunk == 0 ? cc : rows.n_chunks() - 1 - cc;
      rows.load(c);
      const auto& ch = rows.chunk(c);
      const int64_t nr = ch.row1 - ch.row0;
      if (nr == 0) continue;
      const int64_t threads = nr * 32;
      scatter_gene_major<C><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, r.stream>>>(
          rows.ptr(), rows.idx(), rows.val(), nr, d_bucket.data() + ch.row0, static_cast<int32_t>(g0),
          static_cast<int32_t>(Gb), d_ptr.data(), d_cursor.data(), keys.data(), cats.data());
      SCURRY_CUDA_LAUNCH();
    }
    next_chunk = next_chunk == 0 ? rows.n_chunks() - 1 : 0;
    d_cursor.release();
    {
      DeviceArray<uint32_t> keys2(r, std::max<int64_t>(items, 1), "rank_genes_groups: sorted keys");
      DeviceArray<C> cats2(r, std::max<int64_t>(items, 1), "rank_genes_groups: sorted key buckets");
      size_t tb = 0;
      SCURRY_CUDA(cub::DeviceSegmentedSort::SortPairs(nullptr, tb, keys.data(), keys2.data(), cats.data(), cats2.data(),
                                                      items, Gb, d_ptr.data(), d_ptr.data() + 1, r.stream));
      DeviceArray<unsigned char> temp(r, std::max<size_t>(tb, 1), "rank_genes_groups: sort scratch");
      SCURRY_CUDA(cub::DeviceSegmentedSort::SortPairs(temp.data(), tb, keys.data(), keys2.data(), cats.data(),
                                                      cats2.data(), items, Gb, d_ptr.data(), d_ptr.data() + 1,
                                                      r.stream));
      keys = std::move(keys2);
      cats = std::move(cats2);
    }
    if (verbose) {
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      std::fprintf(stderr, "[rgg gpu] genes %lld-%lld: %lld entries scattered and sorted %.4f s\n",
                   static_cast<long long>(g0), static_cast<long long>(g1), static_cast<long long>(items),
                   now() - t_start);
      t_start = now();
    }
    // The ranks of a segment set: into row `row` of the results (rest: every bucket's row).
    auto rank = [&](const uint32_t* k, const C* c, const int64_t* ptr, int64_t n_cells, int64_t row, int64_t pick) {
      DeviceArray<unsigned long long> d_rank2(r, static_cast<size_t>(n_buckets * Gb), "rank_genes_groups: rank sums");
      DeviceArray<double> d_ties(r, Gb, "rank_genes_groups: ties");
      DeviceArray<long long> d_neg(r, Gb, "rank_genes_groups: negatives");
      SCURRY_CUDA(cudaMemsetAsync(d_rank2.data(), 0, n_buckets * Gb * 8, r.stream));
      rank_segments<C><<<static_cast<unsigned>(Gb), kThreads, smem, r.stream>>>(
          k, c, ptr, n_cells, nb_int, Gb, d_rank2.data(), d_ties.data(), d_neg.data());
      SCURRY_CUDA_LAUNCH();
      std::vector<unsigned long long> h2(static_cast<size_t>(n_buckets * Gb));
      std::vector<double> ht(static_cast<size_t>(Gb));
      std::vector<long long> hn(static_cast<size_t>(Gb));
      SCURRY_CUDA(cudaMemcpyAsync(h2.data(), d_rank2.data(), h2.size() * 8, cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(ht.data(), d_ties.data(), ht.size() * 8, cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(hn.data(), d_neg.data(), hn.size() * 8, cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      for (int64_t jj = 0; jj < Gb; ++jj) {
        ties[row * G + g0 + jj] = ht[jj];
        n_neg[row * G + g0 + jj] = hn[jj];
        if (pick >= 0) {
          rank2[row * G + g0 + jj] = static_cast<int64_t>(h2[pick * Gb + jj]);
        } else {
          for (int64_t b = 0; b < n_buckets; ++b) rank2[b * G + g0 + jj] = static_cast<int64_t>(h2[b * Gb + jj]);
        }
      }
    };
    if (!pair) {
      rank(keys.data(), cats.data(), d_ptr.data(), N, 0, -1);
    } else {
      for (size_t f = 0; f < F; ++f) {
        const int32_t a = fields[f];
        std::vector<int64_t> pptr(static_cast<size_t>(Gb) + 1, 0);
        for (int64_t j = 0; j < Gb; ++j)
          pptr[j + 1] = pptr[j] + st.nnz[a * G + g0 + j] + st.nnz[static_cast<int64_t>(ref) * G + g0 + j];
        const int64_t pitems = pptr[Gb];
        DeviceArray<int64_t> d_pptr(r, Gb + 1, "rank_genes_groups: pair segments");
        DeviceArray<uint32_t> pkeys(r, std::max<int64_t>(pitems, 1), "rank_genes_groups: pair keys");
        DeviceArray<C> pcats(r, std::max<int64_t>(pitems, 1), "rank_genes_groups: pair buckets");
        SCURRY_CUDA(cudaMemcpyAsync(d_pptr.data(), pptr.data(), pptr.size() * 8, cudaMemcpyHostToDevice, r.stream));
        compact_pair<C><<<static_cast<unsigned>(Gb), kThreads, 0, r.stream>>>(
            keys.data(), cats.data(), d_ptr.data(), static_cast<C>(a), static_cast<C>(ref), d_pptr.data(),
            pkeys.data(), pcats.data());
        SCURRY_CUDA_LAUNCH();
        const int64_t M = st.n_cells[a] + st.n_cells[ref];
        rank(pkeys.data(), pcats.data(), d_pptr.data(), M, static_cast<int64_t>(f), a);
      }
    }
    if (verbose)
      std::fprintf(stderr, "[rgg gpu] genes %lld-%lld ranked %.4f s\n", static_cast<long long>(g0),
                   static_cast<long long>(g1), now() - t_start);
    g0 = g1;
  }
}

}  // namespace

namespace {

// One device's share: the genes [ga, gb) of every statistic (res sized by the caller).
// The matrix is the host's CSR x or, with dx (x null), a dense one on this device; for dx, *fits
// is set false (nothing computed) where its nonzeros would not fit, and *not_counts true where a
// value is negative or not an integer.
void rank_genes_groups_range(CudaResources& r, const CsrF* x, const DeviceMatrix* dx, const std::vector<int32_t>& codes,
                             int64_t n_categories, bool ranks, int32_t ref, const std::vector<int32_t>& fields,
                             int64_t ga, int64_t gb, RankGenesGroupsGpu& res, bool& has_nan, bool* fits = nullptr,
                             bool* not_counts = nullptr) {
  SCURRY_CUDA(cudaSetDevice(r.device));
  const bool verbose = std::getenv("SCURRY_RGG_TIMES") != nullptr;
  const int64_t N = x ? x->n_rows : dx->n_rows, G = x ? x->n_cols : dx->n_cols, B = n_categories + 1;
  GeneGroupStats& st = res.st;
  // bucket order (a stable counting sort of the rows)
  std::vector<int64_t> start(static_cast<size_t>(B) + 1, 0);
  for (int64_t i = 0; i < N; ++i) ++start[(codes[i] < 0 ? n_categories : codes[i]) + 1];
  for (int64_t b = 0; b < B; ++b) start[b + 1] += start[b];
  std::vector<int64_t> perm(static_cast<size_t>(N)), pos(start.begin(), start.end() - 1), yptr(static_cast<size_t>(N) + 1, 0);
  for (int64_t i = 0; i < N; ++i) perm[pos[codes[i] < 0 ? n_categories : codes[i]]++] = i;
  const double avail0 = static_cast<double>(available_bytes(r)) * 0.85;
  const double per_item = 3.0 * (4.0 + (B <= 65535 ? 2.0 : 4.0)) + 8.0;  // wilcoxon: keys, sort, pair copy
  std::optional<DeviceArray<int64_t>> d_perm;
  if (x) {
    // (the rows' lengths gathered on the threads: random reads of indptr; the prefix sum serial)
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) yptr[i + 1] = x->row_nnz(perm[i]);
    for (int64_t i = 0; i < N; ++i) yptr[i + 1] += yptr[i];
  } else {  // the rows' nonzeros counted on the device
    const double t0 = now();
    d_perm.emplace(r, std::max<int64_t>(N, 1), "rank_genes_groups: row order");
    DeviceArray<int64_t> d_counts(r, std::max<int64_t>(N, 1), "rank_genes_groups: row counts");
    DeviceArray<unsigned> d_odd(r, 1, "rank_genes_groups: counts flag");
    SCURRY_CUDA(cudaMemcpyAsync(d_perm->data(), perm.data(), N * 8, cudaMemcpyHostToDevice, r.stream));
    SCURRY_CUDA(cudaMemsetAsync(d_odd.data(), 0, 4, r.stream));
    if (N > 0) {
      dense_row_counts<<<static_cast<unsigned>((N * 32 + 255) / 256), 256, 0, r.stream>>>(
          dx->data, G, d_perm->data(), N, d_counts.data(), d_odd.data());
      SCURRY_CUDA_LAUNCH();
    }
    std::vector<int64_t> counts(static_cast<size_t>(N));
    unsigned odd = 0;
    SCURRY_CUDA(cudaMemcpyAsync(counts.data(), d_counts.data(), N * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaMemcpyAsync(&odd, d_odd.data(), 4, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    for (int64_t i = 0; i < N; ++i) yptr[i + 1] = yptr[i] + counts[i];
    if (not_counts) *not_counts = odd != 0;
    const double nz = static_cast<double>(yptr[N]) * 8.0 + static_cast<double>(N) * 16.0;
    if (nz > 0.6 * avail0) {
      if (fits) *fits = false;
      return;
    }
    if (verbose) std::fprintf(stderr, "[rgg gpu] device matrix: %lld nonzeros counted %.4f s\n",
                              static_cast<long long>(yptr[N]), now() - t0);
  }

  // Resident when the matrix and a wilcoxon batch of a fair size fit; else streamed in chunks of a
  // quarter of the free memory (SCURRY_RGG_GPU_CHUNK: entries per chunk, to test the streamed path).
  const double avail = avail0;
  const int64_t nnz = yptr[N];
  const double matrix_bytes = static_cast<double>(nnz) * 8.0 + static_cast<double>(N) * 16.0;
  const double batch_want = ranks ? std::min(static_cast<double>(nnz), 2.0e9) * per_item : 0.0;
  int64_t chunk_nnz = nnz;
  if (matrix_bytes + batch_want > avail)
    chunk_nnz = std::max<int64_t>(1, static_cast<int64_t>(avail / 4.0 / 8.0));
  if (const char* e = std::getenv("SCURRY_RGG_GPU_CHUNK")) chunk_nnz = std::max<int64_t>(1, std::atoll(e));
  const bool device_gather = chunk_nnz >= nnz && 2.0 * matrix_bytes + batch_want <= avail;
  double t0 = now();
  std::optional<BucketRows> rows_store;
  if (x) rows_store.emplace(r, *x, perm, yptr, chunk_nnz, device_gather);
  else rows_store.emplace(r, dx->data, G, *d_perm, perm, yptr);
  d_perm.reset();
  BucketRows& rows = *rows_store;
  if (verbose)
    std::fprintf(stderr, "[rgg gpu] genes %lld-%lld: %lld chunk(s) of at most %lld entries (%s)\n",
                 static_cast<long long>(ga), static_cast<long long>(gb), static_cast<long long>(rows.n_chunks()),
                 static_cast<long long>(chunk_nnz),
                 !x ? "from the device's dense matrix" : rows.streamed() ? "streamed"
                 : device_gather ? "resident, gathered on the device" : "resident");
  has_nan = bucket_stats(r, rows, start, yptr, B, G, ga, gb, st);
  if (verbose) {
    std::fprintf(stderr, "[rgg gpu] per-group sums %.4f s (of it uploads %.4f s, %.2f GB)\n", now() - t0,
                 rows.upload_seconds(), rows.uploaded_bytes() * 1e-9);
    t0 = now();
  }
  if (has_nan || !ranks || gb <= ga) return;
  // wilcoxon batches: what fits beside the matrix (or its chunk), at most 2^31 entries
  int64_t cap = static_cast<int64_t>(static_cast<double>(available_bytes(r)) * 0.8 / per_item);
  if (const char* e = std::getenv("SCURRY_RGG_GPU_BATCH")) cap = std::max<int64_t>(1, std::atoll(e));
  cap = std::min<int64_t>(cap, int64_t(1) << 31);
  const double up0 = rows.upload_seconds();
  if (B <= 65535) {
    std::vector<uint16_t> brow(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = start[b]; i < start[b + 1]; ++i) brow[i] = static_cast<uint16_t>(b);
    wilcoxon_batches<uint16_t>(r, rows, brow, res, N, G, ga, gb, B, ref, fields, res.rank2, res.n_neg, res.ties, cap,
                               verbose);
  } else {
    std::vector<int32_t> brow(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = start[b]; i < start[b + 1]; ++i) brow[i] = static_cast<int32_t>(b);
    wilcoxon_batches<int32_t>(r, rows, brow, res, N, G, ga, gb, B, ref, fields, res.rank2, res.n_neg, res.ties, cap,
                              verbose);
  }
  if (verbose)
    std::fprintf(stderr, "[rgg gpu] wilcoxon %.4f s (of it uploads %.4f s)\n", now() - t0, rows.upload_seconds() - up0);
}

}  // namespace

namespace {

void check_codes(const std::vector<int32_t>& codes, int64_t N, int64_t G, int64_t n_categories) {
  if (static_cast<int64_t>(codes.size()) != N) fail("rank_genes_groups (gpu): ", codes.size(), " codes for ", N, " rows");
  if (G >= (int64_t{1} << 31)) fail("rank_genes_groups (gpu): more than 2^31 genes");
  for (int32_t c : codes)
    if (c >= n_categories) fail("rank_genes_groups (gpu): a category code is out of range");
}

// The result's arrays at their sizes, zero, and the categories' cell counts.
RankGenesGroupsGpu sized_result(const std::vector<int32_t>& codes, int64_t n_categories, int64_t G, bool ranks,
                                int32_t ref, const std::vector<int32_t>& fields) {
  const int64_t B = n_categories + 1;
  RankGenesGroupsGpu res;
  GeneGroupStats& st = res.st;
  st.n_genes = G;
  st.n_categories = B;
  st.n_cells.assign(static_cast<size_t>(B), 0);
  for (int32_t c : codes) ++st.n_cells[c < 0 ? n_categories : c];
  st.sum.assign(static_cast<size_t>(B * G), 0.0);
  st.sum_sq.assign(static_cast<size_t>(B * G), 0.0);
  st.nnz.assign(static_cast<size_t>(B * G), 0);
  if (ranks) {
    const size_t F = fields.size();
    if (ref >= 0) {
      res.rank2.assign(F * G, 0), res.n_neg.assign(F * G, 0), res.ties.assign(F * G, 0.0);
    } else {
      res.rank2.assign(static_cast<size_t>(B * G), 0), res.n_neg.assign(G, 0), res.ties.assign(G, 0.0);
    }
  }
  return res;
}

}  // namespace

namespace {

// p[i] = the two-sided p-value of Student's t (t[i], df[i]): stats_core.hpp's continued fraction, one
// thread per test (a few hundred iterations each where df is large: ~1 us per test on one CPU core).
__global__ void t_pvalues(const double* __restrict__ t, const double* __restrict__ df, int64_t n, double* p) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = stats::core::t_two_sided_p(t[i], df[i]);
}

}  // namespace

void reset_rgg_gpu_times() {
  std::lock_guard<std::mutex> lock(g_times_mutex);
  g_times = RggGpuTimes{};
}

RggGpuTimes rgg_gpu_times() {
  std::lock_guard<std::mutex> lock(g_times_mutex);
  return g_times;
}

std::vector<double> t_pvalues_gpu(const Context& ctx, const std::vector<double>& t, const std::vector<double>& df) {
  if (!ctx.cuda()) fail("t_pvalues_gpu: the context has no CUDA device");
  if (t.size() != df.size()) fail("t_pvalues_gpu: ", t.size(), " t values for ", df.size(), " degrees of freedom");
  CudaResources& r = *ctx.cuda();
  SCURRY_CUDA(cudaSetDevice(r.device));
  const int64_t n = static_cast<int64_t>(t.size());
  std::vector<double> p(t.size());
  if (n == 0) return p;
  DeviceArray<double> d_t(r, n, "t-test: t"), d_df(r, n, "t-test: degrees of freedom"), d_p(r, n, "t-test: p");
  SCURRY_CUDA(cudaMemcpyAsync(d_t.data(), t.data(), n * 8, cudaMemcpyHostToDevice, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(d_df.data(), df.data(), n * 8, cudaMemcpyHostToDevice, r.stream));
  EventTimer timer;
  timer.start(r.stream);
  t_pvalues<<<static_cast<unsigned>((n + 127) / 128), 128, 0, r.stream>>>(d_t.data(), d_df.data(), n, d_p.data());
  SCURRY_CUDA_LAUNCH();
  timer.stop(r.stream);
  add_rgg_gpu_time(&RggGpuTimes::pvalues_s, timer.seconds());
  SCURRY_CUDA(cudaMemcpyAsync(p.data(), d_p.data(), n * 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return p;
}

std::shared_ptr<const DeviceMatrix> device_matrix(const Context& ctx, const DenseF& x) {
  if (!ctx.cuda()) fail("device_matrix: the context has no CUDA device");
  CudaResources& r = *ctx.cuda();
  SCURRY_CUDA(cudaSetDevice(r.device));
  auto a = std::make_shared<DeviceArray<float>>(r, std::max<size_t>(x.data.size(), 1), "a matrix on the device");
  if (!x.data.empty())
    SCURRY_CUDA(cudaMemcpyAsync(a->data(), x.data.data(), x.data.size() * 4, cudaMemcpyHostToDevice, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  auto m = std::make_shared<DeviceMatrix>();
  m->data = a->data(), m->n_rows = x.n_rows, m->n_cols = x.n_cols, m->device = r.device, m->keep = a;
  return m;
}

namespace {

// score_genes' per-cell step: per row (one warp), the sums of its values of the set's genes
// (flags 1) and of the control genes (flags 2), each lane's float64 partials combined by a fixed
// xor tree; out[row] = s1 / n_list - s2 / n_ctrl, as the CPU path (no NaN here).
__global__ void set_scores(const int64_t* __restrict__ ptr, const int32_t* __restrict__ idx,
                           const float* __restrict__ val, int64_t n_rows, const uint8_t* __restrict__ flags,
                           double n_list, double n_ctrl, double* __restrict__ out) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  double s1 = 0, s2 = 0;
  for (int64_t p = ptr[w] + lane; p < ptr[w + 1]; p += 32) {
    const uint8_t f = flags[idx[p]];
    if (f == 1) s1 += static_cast<double>(val[p]);
    else if (f == 2) s2 += static_cast<double>(val[p]);
  }
  for (int o = 16; o > 0; o >>= 1) {
    s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    s2 += __shfl_xor_sync(0xffffffffu, s2, o);
  }
  if (lane == 0) out[w] = s1 / n_list - s2 / n_ctrl;
}

}  // namespace

bool score_genes_gpu(const std::vector<const Context*>& devices, const CsrF& x,
                     const std::function<std::vector<uint8_t>(const std::vector<double>& gene_sums)>& controls,
                     std::vector<double>& score) {
  if (devices.empty()) fail("score_genes (gpu): no device");
  for (const Context* c : devices)
    if (!c || !c->cuda()) fail("score_genes (gpu): a context has no CUDA device");
  const size_t D = devices.size();
  const int64_t N = x.n_rows, G = x.n_cols, nnz = x.nnz();
  // one category: the rows in their own order, the statistics' passes over them
  std::vector<int64_t> perm(static_cast<size_t>(N)), yptr(x.indptr.begin(), x.indptr.end()), start{0, N};
  std::iota(perm.begin(), perm.end(), int64_t{0});
  GeneGroupStats st;
  st.n_genes = G, st.n_categories = 1, st.n_cells = {N};
  st.sum.assign(static_cast<size_t>(G), 0.0), st.sum_sq.assign(static_cast<size_t>(G), 0.0);
  st.nnz.assign(static_cast<size_t>(G), 0);
  // Device k: every row (its own upload, or chunks of rows where the matrix does not fit), the gene
  // sums of genes [G k / D, G (k + 1) / D) (exact fixed-point sums, so the same bits for any D), then
  // the scores of rows [N k / D, N (k + 1) / D) (a warp per row: the same bits for any D).
  std::vector<std::unique_ptr<BucketRows>> rows(D);
  // Whatever is left of a device's rows (an early return or an error) is freed with its device current.
  struct FreeOnOwnDevice {
    std::vector<std::unique_ptr<BucketRows>>& rows;
    const std::vector<const Context*>& devices;
    ~FreeOnOwnDevice() {
      for (size_t k = 0; k < rows.size(); ++k)
        if (rows[k]) {
          cudaSetDevice(devices[k]->cuda()->device);
          rows[k].reset();
        }
      cudaSetDevice(devices[0]->cuda()->device);
    }
  } free_rows{rows, devices};
  std::vector<uint8_t> nan(D, 0);
  const int64_t Dn = static_cast<int64_t>(D);
  on_each_device(devices, [&](size_t k) {
    CudaResources& r = *devices[k]->cuda();
    const double avail = static_cast<double>(available_bytes(r)) * 0.85;
    const double matrix_bytes = static_cast<double>(nnz) * 8.0 + static_cast<double>(N) * 24.0;
    int64_t chunk_nnz = matrix_bytes <= 0.8 * avail ? nnz : std::max<int64_t>(1, static_cast<int64_t>(avail / 4.0 / 8.0));
    if (const char* e = std::getenv("SCURRY_RGG_GPU_CHUNK")) chunk_nnz = std::max<int64_t>(1, std::atoll(e));
    rows[k] = std::make_unique<BucketRows>(r, x, perm, yptr, chunk_nnz, false);
    const int64_t kk = static_cast<int64_t>(k);
    nan[k] = bucket_stats(r, *rows[k], start, yptr, 1, G, G * kk / Dn, G * (kk + 1) / Dn, st) ? 1 : 0;
  });
  for (uint8_t h : nan)
    if (h) return false;
  const std::vector<uint8_t> flags = controls(st.sum);
  if (static_cast<int64_t>(flags.size()) != G) fail("score_genes (gpu): ", flags.size(), " gene flags for ", G, " genes");
  int64_t n_list = 0, n_ctrl = 0;
  for (uint8_t f : flags) n_list += f == 1, n_ctrl += f == 2;
  score.resize(static_cast<size_t>(N));
  on_each_device(devices, [&](size_t k) {
    CudaResources& r = *devices[k]->cuda();
    BucketRows& rw = *rows[k];
    const int64_t kk = static_cast<int64_t>(k), R0 = N * kk / Dn, R1 = N * (kk + 1) / Dn;
    DeviceArray<uint8_t> d_flags(r, std::max<int64_t>(G, 1), "score_genes: gene flags");
    DeviceArray<double> d_score(r, std::max<int64_t>(R1 - R0, 1), "score_genes: scores");
    SCURRY_CUDA(cudaMemcpyAsync(d_flags.data(), flags.data(), static_cast<size_t>(G), cudaMemcpyHostToDevice, r.stream));
    for (int64_t c = 0; c < rw.n_chunks(); ++c) {  // (the statistics' last pass, backwards, leaves chunk 0 on the device)
      const auto& ch = rw.chunk(c);
      const int64_t a = std::max(ch.row0, R0), b = std::min(ch.row1, R1);
      if (b <= a) continue;
      rw.load(c);
      set_scores<<<static_cast<unsigned>(((b - a) * 32 + 255) / 256), 256, 0, r.stream>>>(
          rw.ptr() + (a - ch.row0), rw.idx(), rw.val(), b - a, d_flags.data(), static_cast<double>(n_list),
          static_cast<double>(n_ctrl), d_score.data() + (a - R0));
      SCURRY_CUDA_LAUNCH();
    }
    if (R1 > R0)
      SCURRY_CUDA(cudaMemcpyAsync(score.data() + R0, d_score.data(), (R1 - R0) * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    rows[k].reset();  // (freed on its own device)
  });
  return true;
}

bool score_genes_gpu(const Context& ctx, const CsrF& x,
                     const std::function<std::vector<uint8_t>(const std::vector<double>& gene_sums)>& controls,
                     std::vector<double>& score) {
  return score_genes_gpu(std::vector<const Context*>{&ctx}, x, controls, score);
}

bool rank_genes_groups_gpu(const Context& ctx, const DeviceMatrix& x, const std::vector<int32_t>& codes,
                           int64_t n_categories, bool ranks, int32_t ref, const std::vector<int32_t>& fields,
                           RankGenesGroupsGpu& out, bool& looks_like_counts) {
  if (!ctx.cuda()) fail("rank_genes_groups (gpu): the context has no CUDA device");
  CudaResources& r = *ctx.cuda();
  if (!x.data || x.device != r.device) return false;  // (not on this context's device)
  const int64_t N = x.n_rows, G = x.n_cols;
  check_codes(codes, N, G, n_categories);
  RankGenesGroupsGpu res = sized_result(codes, n_categories, G, ranks, ref, fields);
  bool has_nan = false, fits = true, not_counts = true;
  rank_genes_groups_range(r, nullptr, &x, codes, n_categories, ranks, ref, fields, 0, G, res, has_nan, &fits,
                          &not_counts);
  if (!fits) return false;
  res.has_nan = has_nan;
  looks_like_counts = !not_counts && N > 0 && G > 0;
  out = std::move(res);
  return true;
}

RankGenesGroupsGpu rank_genes_groups_gpu(const std::vector<const Context*>& devices, const CsrF& x,
                                         const std::vector<int32_t>& codes, int64_t n_categories, bool ranks,
                                         int32_t ref, const std::vector<int32_t>& fields) {
  if (devices.empty()) fail("rank_genes_groups (gpu): no device");
  for (const Context* c : devices)
    if (!c || !c->cuda()) fail("rank_genes_groups (gpu): a context has no CUDA device");
  const int64_t N = x.n_rows, G = x.n_cols;
  check_codes(codes, N, G, n_categories);
  RankGenesGroupsGpu res = sized_result(codes, n_categories, G, ranks, ref, fields);
  // the genes split evenly over the devices; each reads every row (its own upload or stream) and
  // computes its genes alone: the results do not depend on the number of devices
  const size_t D = devices.size();
  std::vector<uint8_t> nan(D, 0);
  on_each_device(devices, [&](size_t k) {
    bool h = false;
    rank_genes_groups_range(*devices[k]->cuda(), &x, nullptr, codes, n_categories, ranks, ref, fields,
                            G * static_cast<int64_t>(k) / static_cast<int64_t>(D),
                            G * static_cast<int64_t>(k + 1) / static_cast<int64_t>(D), res, h);
    nan[k] = h;
  });
  for (uint8_t h : nan) res.has_nan = res.has_nan || h;
  return res;
}

RankGenesGroupsGpu rank_genes_groups_gpu(const Context& ctx, const CsrF& x, const std::vector<int32_t>& codes,
                                         int64_t n_categories, bool ranks, int32_t ref,
                                         const std::vector<int32_t>& fields) {
  return rank_genes_groups_gpu(std::vector<const Context*>{&ctx}, x, codes, n_categories, ranks, ref, fields);
}

}  // namespace scurry
