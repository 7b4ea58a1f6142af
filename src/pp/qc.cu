// Per-cell QC sums on the GPU: one block per row. The top-n sums sort the row in shared memory
// (bitonic sort) when it fits; longer rows find the n-th largest value by radix selection over the
// float bit patterns (non-negative values order as unsigned integers) in global memory.
#include <cfloat>

#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

constexpr int kQcThreads = 256;
constexpr int kSortCap = 4096;  // row entries sorted in shared memory (16 KB)
constexpr int kMaxSets = 8;
constexpr int kMaxTop = 8;

struct QcParams {
  const int64_t* indptr;
  const int32_t* idx;
  const float* val;
  int64_t n_rows;
  const uint8_t* sets;
  int n_sets;
  int n_top;
  int top[kMaxTop];
  double* total;
  double* nnz;
  double* set_total;  // [set * n_rows + row]
  double* top_sum;    // [i * n_rows + row]
};

template <class T>
__device__ T block_sum(T v, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T s = T(0);
  if (threadIdx.x == 0)
    for (int w = 0; w < kQcThreads / 32; ++w) s += scratch[w];
  return s;  // valid in thread 0
}

// n-th largest (1-based) of the row's values, by 4 rounds of 8-bit radix selection on the bits.
__device__ float kth_largest_global(const float* v, int64_t len, int n, unsigned* hist, unsigned* shared_prefix,
                                    int* shared_k) {
  if (threadIdx.x == 0) {
    *shared_prefix = 0u;
    *shared_k = n;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    const unsigned prefix = *shared_prefix;
    const unsigned mask_hi = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    for (int64_t p = threadIdx.x; p < len; p += blockDim.x) {
      const unsigned b = __float_as_uint(fmaxf(v[p], 0.f));
      if ((b & mask_hi) == (prefix & mask_hi)) atomicAdd(&hist[(b >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int k = *shared_k;
      int bin = 255;
      for (; bin > 0; --bin) {
        if (static_cast<int>(hist[bin]) >= k) break;
        k -= static_cast<int>(hist[bin]);
      }
      *shared_prefix = prefix | (static_cast<unsigned>(bin) << shift);
      *shared_k = k;
    }
    __syncthreads();
  }
  return __uint_as_float(*shared_prefix);
}

__global__ void __launch_bounds__(kQcThreads) row_qc_kernel(QcParams P) {
  __shared__ float buf[kSortCap];
  __shared__ double dscratch[kQcThreads / 32];
  __shared__ unsigned hist[256];
  __shared__ unsigned sel_prefix;
  __shared__ int sel_k;
  __shared__ float s_thresh;
  const int64_t row = blockIdx.x;
  const int64_t s = P.indptr[row], e = P.indptr[row + 1], len = e - s;
  const float* v = P.val + s;
  const bool fits = len <= kSortCap;
  double tot = 0, cnt = 0, st[kMaxSets] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t p = threadIdx.x; p < len; p += kQcThreads) {
    const float x = v[p];
    tot += x;
    cnt += x != 0.f;
    if (P.n_sets) {
      const uint8_t bits = P.sets[P.idx[s + p]];
#pragma unroll
      for (int k = 0; k < kMaxSets; ++k)
        if (bits & (1u << k)) st[k] += x;
    }
    if (fits) buf[p] = x;
  }
  double r = block_sum(tot, dscratch);
  if (threadIdx.x == 0) P.total[row] = r;
  r = block_sum(cnt, dscratch);
  if (threadIdx.x == 0) P.nnz[row] = r;
  for (int k = 0; k < P.n_sets; ++k) {
    r = block_sum(st[k], dscratch);
    if (threadIdx.x == 0) P.set_total[k * P.n_rows + row] = r;
  }
  if (P.n_top == 0) return;
  if (fits) {
    // Bitonic sort, descending, over the next power of two (padding = -inf).
    int m = 1;
    while (m < len) m <<= 1;
    for (int64_t p = len + threadIdx.x; p < m; p += kQcThreads) buf[p] = -FLT_MAX;
    __syncthreads();
    for (int k = 2; k <= m; k <<= 1)
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int i = threadIdx.x; i < m; i += kQcThreads) {
          const int l = i ^ j;
          if (l > i) {
            const bool desc = (i & k) == 0;
            const float a = buf[i], b = buf[l];
            if (desc ? a < b : a > b) buf[i] = b, buf[l] = a;
          }
        }
        __syncthreads();
      }
    for (int t = 0; t < P.n_top; ++t) {
      const int n = P.top[t];
      double acc = 0;
      for (int i = threadIdx.x; i < n && i < len; i += kQcThreads) acc += buf[i];
      r = block_sum(acc, dscratch);
      if (threadIdx.x == 0) P.top_sum[t * P.n_rows + row] = r;
    }
  } else {
    for (int t = 0; t < P.n_top; ++t) {
      const int n = P.top[t];
      if (n >= len) {  // all values
        if (threadIdx.x == 0) P.top_sum[t * P.n_rows + row] = P.total[row];
        continue;
      }
      const float th = kth_largest_global(v, len, n, hist, &sel_prefix, &sel_k);
      if (threadIdx.x == 0) s_thresh = th;
      __syncthreads();
      double acc = 0, above = 0;
      for (int64_t p = threadIdx.x; p < len; p += kQcThreads)
        if (v[p] > s_thresh) acc += v[p], above += 1;
      const double sum_above = block_sum(acc, dscratch);
      const double n_above = block_sum(above, dscratch);
      if (threadIdx.x == 0) P.top_sum[t * P.n_rows + row] = sum_above + (n - n_above) * static_cast<double>(s_thresh);
    }
  }
}

}  // namespace

RowQc row_qc(CudaResources& r, const DeviceCsr& m, const uint8_t* gene_sets, int n_sets, const std::vector<int>& top_n) {
  if (n_sets > kMaxSets) fail("at most ", kMaxSets, " qc_vars sets are supported on the GPU");
  if (static_cast<int>(top_n.size()) > kMaxTop) fail("at most ", kMaxTop, " percent_top values are supported on the GPU");
  const int64_t n = m.n_rows;
  DeviceArray<double> out(r, static_cast<size_t>(n) * (2 + n_sets + top_n.size()), "QC per-cell sums");
  QcParams P{};
  P.indptr = m.indptr.data(), P.idx = m.indices.data(), P.val = m.data.data(), P.n_rows = n;
  P.sets = gene_sets, P.n_sets = gene_sets ? n_sets : 0, P.n_top = static_cast<int>(top_n.size());
  for (size_t i = 0; i < top_n.size(); ++i) P.top[i] = top_n[i];
  P.total = out.data(), P.nnz = out.data() + n, P.set_total = out.data() + 2 * n;
  P.top_sum = out.data() + (2 + P.n_sets) * n;
  // Grid: one block per row, in launches of at most 2^31-1 blocks.
  if (n > 0) {
    if (n > 0x7fffffffLL) fail("row_qc: more than 2^31 rows in one device matrix; split in row blocks");
    row_qc_kernel<<<static_cast<unsigned>(n), kQcThreads, 0, r.stream>>>(P);
    SCURRY_CUDA_LAUNCH();
  }
  std::vector<double> h(out.size());
  SCURRY_CUDA(cudaMemcpyAsync(h.data(), out.data(), h.size() * 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  RowQc q;
  auto slice = [&](size_t k) { return std::vector<double>(h.begin() + k * n, h.begin() + (k + 1) * n); };
  q.total = slice(0);
  q.n_genes = slice(1);
  for (int k = 0; k < P.n_sets; ++k) q.set_total.push_back(slice(2 + k));
  for (size_t t = 0; t < top_n.size(); ++t) q.top_sum.push_back(slice(2 + P.n_sets + t));
  return q;
}

}  // namespace scurry::gpu
