// Per-cell QC sums on the GPU: one block per row, one pass over the row for the total, the number of
// nonzero entries and the qc-set sums.
//
// The sums of the n largest values (percent_top) take one of two routes, chosen per row:
//  - counts (every value an integer in [0, 2^24)), the usual input: the same first pass builds a
//    histogram of the values below kHistBins in shared memory (the values 1, 2 and 3, which make
//    most of a count row, in per-thread registers first, so the shared-memory atomics do not
//    collide), and keeps the few larger values apart, sorted afterwards. One warp then scans the
//    histogram from the top and reads every top-n sum off it: no second pass over the row.
//  - anything else (non-integer or negative values, or more than kCandCap large values): radix
//    selection of the largest n's threshold T (four 8-bit rounds over the float bit patterns, which
//    order non-negative values as unsigned integers; histogram increments aggregated per warp with
//    __match_any_sync), a bitonic sort of the fewer-than-n values above T, and prefix sums; the
//    ranks between are all equal to T. Rows up to kRowCap entries are held in shared memory.
// Floor at 2.6e9 entries: one read of indices and values, 21 GB / 4.3 TB/s = 4.9 ms.
//
// Templated on the value type V and the column-index type I (kernels.cuh; instantiations at the end).
// The radix keys are the bit patterns of V (32-bit keys and four rounds for float, 64-bit keys and
// eight rounds for double); the shared memory for V = double is 41 KB (keys 32 KB, candidates 8 KB).
#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "core/memory.hpp"
#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

constexpr int kQcThreads = 128;
constexpr int kRowCap = 4096;   // row values held in shared memory (16 KB)
constexpr int kCandCap = 1024;  // values above the threshold, sorted in shared memory
constexpr int kMaxSets = 8;
constexpr int kMaxTop = 8;
constexpr int kHistBins = 256;  // count values below this go to the histogram (route 1)

template <class V, class I>
struct QcParams {
  const int64_t* indptr;
  const I* idx;
  const V* val;
  int64_t n_rows;
  const uint8_t* sets;
  int n_sets;
  int n_top;
  int top[kMaxTop];  // ascending
  double* total;
  double* nnz;
  double* set_total;  // [set * n_rows + row]
  double* top_sum;    // [i * n_rows + row]
};

// Radix keys: the bit pattern of max(v, 0), which orders non-negative values as unsigned integers.
template <class V>
using KeyOf = std::conditional_t<sizeof(V) == 4, unsigned, unsigned long long>;
__device__ __forceinline__ unsigned key_of(float v) { return __float_as_uint(fmaxf(v, 0.f)); }
__device__ __forceinline__ unsigned long long key_of(double v) {
  return static_cast<unsigned long long>(__double_as_longlong(fmax(v, 0.0)));
}
template <class V>
__device__ __forceinline__ V value_of(KeyOf<V> k) {
  if constexpr (sizeof(V) == 4) return __uint_as_float(k);
  else return __longlong_as_double(static_cast<long long>(k));
}
template <class V>
__device__ __forceinline__ V trunc_v(V x) {
  if constexpr (sizeof(V) == 4) return truncf(x);
  else return trunc(x);
}
template <class V>
__device__ __forceinline__ V lowest() {
  if constexpr (sizeof(V) == 4) return -FLT_MAX;
  else return -DBL_MAX;
}

template <class T>
__device__ T block_sum(T v, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T s = T(0);
  for (int w = 0; w < kQcThreads / 32; ++w) s += scratch[w];
  return s;  // the same in every thread
}

// hist[bin] += 1 for every active lane, one atomic per distinct bin in the warp.
__device__ __forceinline__ void hist_add(unsigned* hist, unsigned bin, bool active) {
  const unsigned mask = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(mask, bin);
  if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], static_cast<unsigned>(__popc(peers)));
}

// Sorts cand[0, n) descending (bitonic, padded with the lowest V to a power of two <= kCandCap);
// called by the whole block, n the same in every thread.
template <class V>
__device__ void block_sort_descending(V* cand, int n) {
  if (n < 2) return;
  int m = 1;
  while (m < n) m <<= 1;
  for (int i = n + threadIdx.x; i < m; i += kQcThreads) cand[i] = lowest<V>();
  __syncthreads();
  for (int k = 2; k <= m; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < m; i += kQcThreads) {
        const int l = i ^ j;
        if (l > i) {
          const bool desc = (i & k) == 0;
          const V a = cand[i], b = cand[l];
          if (desc ? a < b : a > b) cand[i] = b, cand[l] = a;
        }
      }
      __syncthreads();
    }
}

// Route 1's reading of the histogram: warp 0 scans the bins from the top (each lane holds 8
// consecutive bins), after the `nb` large values sorted in descending order in `big`.
template <class V, class I>
__device__ void top_sums_from_histogram(const QcParams<V, I>& P, int64_t row, int64_t len, double total,
                                        const unsigned* hist, const V* big, int nb) {
  const int lane = threadIdx.x & 31;
  // lane l holds bins [255 - 8l - 7, 255 - 8l], read from the top
  unsigned c[8];
  unsigned cnt = 0;
  double sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int bin = kHistBins - 1 - 8 * lane - j;
    c[j] = hist[bin];
    cnt += c[j];
    sum += static_cast<double>(c[j]) * bin;
  }
  // exclusive prefix over lanes (descending values)
  unsigned ccnt = cnt;
  double csum = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned uc = __shfl_up_sync(0xffffffffu, ccnt, o);
    const double us = __shfl_up_sync(0xffffffffu, csum, o);
    if (lane >= o) ccnt += uc, csum += us;
  }
  const unsigned before_cnt = ccnt - cnt;
  const double before_sum = csum - sum;
  double big_prefix = 0;
  int bi = 0;
  for (int t = 0; t < P.n_top; ++t) {
    const int n = P.top[t];
    double out;
    if (n >= len) {
      out = total;
    } else {
      for (; bi < n && bi < nb; ++bi) big_prefix += big[bi];
      if (n <= nb) {
        out = big_prefix;
      } else {
        const unsigned need = static_cast<unsigned>(n - nb);  // taken from the histogram, from the top
        // the lane where the running count reaches `need`
        const unsigned ballot = __ballot_sync(0xffffffffu, ccnt >= need);
        const int owner = ballot ? __ffs(ballot) - 1 : 31;
        double part = 0;
        if (lane == owner) {
          unsigned k = need - before_cnt;
          part = before_sum;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const unsigned take = min(k, c[j]);
            part += static_cast<double>(take) * (kHistBins - 1 - 8 * lane - j);
            k -= take;
          }
        }
        out = big_prefix + __shfl_sync(0xffffffffu, part, owner);
      }
    }
    if (lane == 0) P.top_sum[t * P.n_rows + row] = out;
  }
}

template <class V, class I>
__global__ void __launch_bounds__(kQcThreads) row_qc_kernel(QcParams<V, I> P) {
  using Key = KeyOf<V>;
  constexpr int kKeyBits = 8 * sizeof(Key);
  constexpr V kCountMax = V(16777216);  // 2^24: route 1 takes integers below (exact in float)
  __shared__ Key keys[kRowCap];
  __shared__ V cand[kCandCap];
  __shared__ unsigned hist[256];
  __shared__ double dscratch[kQcThreads / 32];
  __shared__ Key s_prefix;
  __shared__ unsigned s_ncand;
  __shared__ int s_k;
  const int64_t row = blockIdx.x;
  const int64_t s = P.indptr[row], len = P.indptr[row + 1] - s;
  const V* v = P.val + s;
  const bool in_smem = len <= kRowCap;
  const bool want_top = P.n_top > 0;
  for (int i = threadIdx.x; i < kHistBins; i += kQcThreads) hist[i] = 0u;
  if (threadIdx.x == 0) s_ncand = 0u;
  __syncthreads();
  double tot = 0, cnt = 0, st[kMaxSets] = {0, 0, 0, 0, 0, 0, 0, 0};
  unsigned c1 = 0, c2 = 0, c3 = 0;
  bool counts = true;  // route 1 still possible for this thread's values
  for (int64_t p = threadIdx.x; p < len; p += kQcThreads) {
    const V x = v[p];
    tot += x;
    cnt += x != V(0);
    if (P.n_sets) {
      const uint8_t bits = P.sets[P.idx[s + p]];
#pragma unroll
      for (int k = 0; k < kMaxSets; ++k)
        if (bits & (1u << k)) st[k] += x;
    }
    if (!want_top) continue;
    if (in_smem) keys[p] = key_of(x);
    if (counts) {
      if (x == V(1)) ++c1;
      else if (x == V(2)) ++c2;
      else if (x == V(3)) ++c3;
      else if (x >= V(0) && x < static_cast<V>(kHistBins) && x == trunc_v(x)) atomicAdd(&hist[static_cast<int>(x)], 1u);
      else if (x >= static_cast<V>(kHistBins) && x < kCountMax && x == trunc_v(x)) {
        const unsigned slot = atomicAdd(&s_ncand, 1u);
        if (slot < kCandCap) cand[slot] = x;
        else counts = false;
      } else {
        counts = false;
      }
    }
  }
  const double total = block_sum(tot, dscratch);
  const double count = block_sum(cnt, dscratch);
  if (threadIdx.x == 0) P.total[row] = total, P.nnz[row] = count;
  for (int k = 0; k < P.n_sets; ++k) {
    const double r = block_sum(st[k], dscratch);
    if (threadIdx.x == 0) P.set_total[k * P.n_rows + row] = r;
  }
  if (P.n_top == 0) return;
  // The largest n below the row length: its threshold serves every smaller n.
  int n_sel = 0;
  for (int t = 0; t < P.n_top; ++t)
    if (P.top[t] < len) n_sel = P.top[t];
  if (n_sel == 0) {  // every n covers the whole row
    if (threadIdx.x == 0)
      for (int t = 0; t < P.n_top; ++t) P.top_sum[t * P.n_rows + row] = total;
    return;
  }
  // Route 1 when every value of the row is a count (block-wide decision).
  for (int o = 16; o > 0; o >>= 1) {
    c1 += __shfl_down_sync(0xffffffffu, c1, o);
    c2 += __shfl_down_sync(0xffffffffu, c2, o);
    c3 += __shfl_down_sync(0xffffffffu, c3, o);
  }
  if ((threadIdx.x & 31) == 0) {
    if (c1) atomicAdd(&hist[1], c1);
    if (c2) atomicAdd(&hist[2], c2);
    if (c3) atomicAdd(&hist[3], c3);
  }
  if (__syncthreads_and(counts)) {
    const int nb = static_cast<int>(s_ncand);
    block_sort_descending(cand, nb);  // the large values
    if (threadIdx.x < 32) top_sums_from_histogram(P, row, len, total, hist, cand, nb);
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) s_prefix = 0u, s_k = n_sel, s_ncand = 0u;
  for (int shift = kKeyBits - 8; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kQcThreads) hist[i] = 0u;
    __syncthreads();
    const Key prefix = s_prefix;
    const Key mask_hi = shift == kKeyBits - 8 ? Key(0) : (~Key(0) << (shift + 8));
    for (int64_t base = 0; base < len; base += kQcThreads) {
      const int64_t p = base + threadIdx.x;
      Key key = 0u;
      bool active = false;
      if (p < len) {
        key = in_smem ? keys[p] : key_of(v[p]);
        active = (key & mask_hi) == (prefix & mask_hi);
      }
      hist_add(hist, static_cast<unsigned>(key >> shift) & 0xffu, active);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int k = s_k, bin = 255;
      for (; bin > 0; --bin) {
        if (static_cast<int>(hist[bin]) >= k) break;
        k -= static_cast<int>(hist[bin]);
      }
      s_prefix = prefix | (static_cast<Key>(bin) << shift);
      s_k = k;
    }
    __syncthreads();
  }
  const Key T = s_prefix;  // the n_sel-th largest value's bits
  for (int64_t p = threadIdx.x; p < len; p += kQcThreads) {
    const Key key = in_smem ? keys[p] : key_of(v[p]);
    if (key > T) cand[atomicAdd(&s_ncand, 1u)] = value_of<V>(key);  // fewer than n_sel <= kCandCap
  }
  __syncthreads();
  const int nc = static_cast<int>(s_ncand);
  block_sort_descending(cand, nc);
  if (threadIdx.x == 0) {
    const double tv = static_cast<double>(value_of<V>(T));
    double acc = 0;
    int i = 0;
    for (int t = 0; t < P.n_top; ++t) {
      const int n = P.top[t];
      if (n >= len) {
        P.top_sum[t * P.n_rows + row] = total;
        continue;
      }
      for (; i < n && i < nc; ++i) acc += cand[i];
      P.top_sum[t * P.n_rows + row] = acc + (n > nc ? (n - nc) * tv : 0.0);
    }
  }
}

}  // namespace

template <class V, class I>
RowQc row_qc(CudaResources& r, const CsrView<V, I>& m, const uint8_t* gene_sets, int n_sets, const std::vector<int>& top_n) {
  if (n_sets > kMaxSets) throw InputError(detail::concat("--device gpu: at most ", kMaxSets, " qc_vars sets"));
  if (static_cast<int>(top_n.size()) > kMaxTop)
    throw InputError(detail::concat("--device gpu: at most ", kMaxTop, " percent_top values"));
  std::vector<int> top = top_n;
  std::sort(top.begin(), top.end());
  if (!top.empty() && top.back() > kCandCap)
    throw InputError(detail::concat("--device gpu: percent_top values up to ", kCandCap, " (got ", top.back(),
                                    "); use --device cpu"));
  const int64_t n = m.n_rows;
  DeviceArray<double> out(r, static_cast<size_t>(n) * (2 + n_sets + top.size()), "QC per-cell sums");
  QcParams<V, I> P{};
  P.indptr = m.indptr, P.idx = m.indices, P.val = m.data, P.n_rows = n;
  P.sets = gene_sets, P.n_sets = gene_sets ? n_sets : 0, P.n_top = static_cast<int>(top.size());
  for (size_t i = 0; i < top.size(); ++i) P.top[i] = top[i];
  P.total = out.data(), P.nnz = out.data() + n, P.set_total = out.data() + 2 * n;
  P.top_sum = out.data() + (2 + P.n_sets) * n;
  if (n > 0) {
    if (n > 0x7fffffffLL) fail("row_qc: more than 2^31 rows in one device matrix; split in row blocks");
    row_qc_kernel<V, I><<<static_cast<unsigned>(n), kQcThreads, 0, r.stream>>>(P);
    SCURRY_CUDA_LAUNCH();
  }
  // Straight into the result's vectors (no staging copy).
  RowQc q;
  auto fetch = [&](std::vector<double>& dst, size_t k) {
    resize_large(dst, static_cast<size_t>(n));
    if (n > 0) copy_to_host(r, dst.data(), out.data() + k * n, static_cast<size_t>(n) * 8);
  };
  fetch(q.total, 0);
  fetch(q.n_genes, 1);
  q.set_total.resize(P.n_sets);
  for (int k = 0; k < P.n_sets; ++k) fetch(q.set_total[k], 2 + k);
  // back in the caller's order of top_n
  q.top_sum.resize(top_n.size());
  for (size_t i = 0; i < top_n.size(); ++i) {
    const size_t t = static_cast<size_t>(std::find(top.begin(), top.end(), top_n[i]) - top.begin());
    fetch(q.top_sum[i], 2 + P.n_sets + t);
  }
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return q;
}

#define SCURRY_ROW_QC(V, I)                                                                             \
  template RowQc row_qc<V, I>(CudaResources&, const CsrView<V, I>&, const uint8_t*, int, const std::vector<int>&);
SCURRY_ROW_QC(float, int32_t)
SCURRY_ROW_QC(double, int32_t)
SCURRY_ROW_QC(float, int64_t)
SCURRY_ROW_QC(double, int64_t)
#undef SCURRY_ROW_QC

}  // namespace scurry::gpu
