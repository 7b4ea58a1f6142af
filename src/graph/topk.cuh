// scurry: device top-k helpers for the GPU kNN (one warp per query).
//
// WarpTopK keeps the W best (score, id) pairs of a query (W a power of two, 32..kMaxTopK) sorted
// ascending in shared memory, with a W-entry buffer: the warp offers 32 candidates a step, those
// better than the current W-th enter the buffer (ballot + prefix count), and a full buffer is merged
// in (bitonic sort of the buffer, min against the reversed list, bitonic merge). Order is
// lexicographic on (score, id as unsigned): ties go to the smaller id, empty slots (id -1) sort last;
// the result does not depend on the order the candidates came in.
#pragma once
#include <cstdint>

namespace scurry::gpu {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxTopK = 1024;  // largest W

template <class K>
__device__ __forceinline__ bool cand_less(K da, int32_t ia, K db, int32_t ib) {
  return da < db || (da == db && static_cast<uint32_t>(ia) < static_cast<uint32_t>(ib));
}

// Sorts n (a power of two >= 2) pairs ascending; called by all 32 lanes of a warp.
template <class K>
__device__ void warp_bitonic_sort(K* key, int32_t* id, int n) {
  const int lane = threadIdx.x & (kWarp - 1);
  __syncwarp();
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = lane; t < n / 2; t += kWarp) {
        const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
        const bool ascending = (lo & size) == 0;
        const K a = key[lo], b = key[hi];
        const int32_t ia = id[lo], ib = id[hi];
        if (cand_less(b, ib, a, ia) == ascending) {
          key[lo] = b, id[lo] = ib;
          key[hi] = a, id[hi] = ia;
        }
      }
      __syncwarp();
    }
  }
}

// Sorts a bitonic sequence of n (power of two) pairs ascending.
template <class K>
__device__ void warp_bitonic_merge(K* key, int32_t* id, int n) {
  const int lane = threadIdx.x & (kWarp - 1);
  __syncwarp();
  for (int stride = n >> 1; stride > 0; stride >>= 1) {
    for (int t = lane; t < n / 2; t += kWarp) {
      const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
      const K a = key[lo], b = key[hi];
      const int32_t ia = id[lo], ib = id[hi];
      if (cand_less(b, ib, a, ia)) {
        key[lo] = b, id[lo] = ib;
        key[hi] = a, id[hi] = ia;
      }
    }
    __syncwarp();
  }
}

// Shared memory one warp needs for WarpTopK of width w.
__host__ __device__ constexpr int64_t warp_topk_smem_bytes(int w) { return 4 * static_cast<int64_t>(w) * 4; }

struct WarpTopK {
  float* list_d;   // W, sorted ascending
  int32_t* list_i;
  float* buf_d;    // W, the first `count` filled
  int32_t* buf_i;
  int w = 0;
  int count = 0;      // warp-uniform
  float thr_d = 0;    // the current W-th entry (warp-uniform)
  int32_t thr_i = -1;

  // `smem`: warp_topk_smem_bytes(w) bytes private to this warp (4-byte aligned).
  __device__ WarpTopK(void* smem, int w_) : w(w_) {
    float* base = static_cast<float*>(smem);
    list_d = base;
    list_i = reinterpret_cast<int32_t*>(base + w);
    buf_d = base + 2 * w;
    buf_i = reinterpret_cast<int32_t*>(base + 3 * w);
  }

  // Starts from a stored sorted list (global memory, w entries), e.g. the result of earlier tiles.
  __device__ void load(const float* gd, const int32_t* gi) {
    const int lane = threadIdx.x & (kWarp - 1);
    for (int t = lane; t < w; t += kWarp) list_d[t] = gd[t], list_i[t] = gi[t];
    __syncwarp();
    thr_d = list_d[w - 1];
    thr_i = list_i[w - 1];
    count = 0;
  }

  // Starts empty (+inf, -1).
  __device__ void reset() {
    const int lane = threadIdx.x & (kWarp - 1);
    for (int t = lane; t < w; t += kWarp) list_d[t] = __int_as_float(0x7f800000), list_i[t] = -1;
    __syncwarp();
    thr_d = list_d[w - 1];
    thr_i = -1;
    count = 0;
  }

  __device__ void flush() {
    const int lane = threadIdx.x & (kWarp - 1);
    for (int t = count + lane; t < w; t += kWarp) buf_d[t] = __int_as_float(0x7f800000), buf_i[t] = -1;
    warp_bitonic_sort(buf_d, buf_i, w);  // syncs first
    for (int t = lane; t < w; t += kWarp) {
      const float b = buf_d[w - 1 - t];
      const int32_t bi = buf_i[w - 1 - t];
      if (cand_less(b, bi, list_d[t], list_i[t])) list_d[t] = b, list_i[t] = bi;
    }
    warp_bitonic_merge(list_d, list_i, w);  // syncs first and after every stage
    thr_d = list_d[w - 1];
    thr_i = list_i[w - 1];
    count = 0;
    __syncwarp();
  }

  // Merges the `count` buffered candidates like flush(), cheaper for a few: with w = 32 the list is one
  // entry per lane and each candidate goes in by one vote and one shuffle (its place is the number of
  // entries before it; the entries from there move up one), about a dozen instructions a candidate
  // against the fixed cost of flush()'s sorts. Same result as flush() (the best w of list and buffer,
  // sorted by (score, id)). Called by all 32 lanes together.
  __device__ void merge_buffer() {
    if (w != kWarp) {
      flush();
      return;
    }
    const int lane = threadIdx.x & (kWarp - 1);
    __syncwarp();
    float d = list_d[lane];
    int32_t id = list_i[lane];
    for (int c = 0; c < count; ++c) {
      const float cd = buf_d[c];
      const int32_t ci = buf_i[c];
      const int pos = __popc(__ballot_sync(kFullMask, cand_less(d, id, cd, ci)));  // entries before it
      const float pd = __shfl_up_sync(kFullMask, d, 1);
      const int32_t pi = __shfl_up_sync(kFullMask, id, 1);
      if (lane == pos) {
        d = cd, id = ci;
      } else if (lane > pos) {
        d = pd, id = pi;
      }
    }
    list_d[lane] = d;
    list_i[lane] = id;
    __syncwarp();
    thr_d = list_d[w - 1];
    thr_i = list_i[w - 1];
    count = 0;
    __syncwarp();
  }

  // Called by all 32 lanes together; lanes with valid == false offer nothing.
  __device__ void push(float s, int32_t id, bool valid) {
    bool take = valid && cand_less(s, id, thr_d, thr_i);
    unsigned mask = __ballot_sync(kFullMask, take);
    if (mask == 0) return;
    if (count + __popc(mask) > w) {
      flush();
      take = valid && cand_less(s, id, thr_d, thr_i);
      mask = __ballot_sync(kFullMask, take);
    }
    const int lane = threadIdx.x & (kWarp - 1);
    if (take) {
      const int pos = count + __popc(mask & ((1u << lane) - 1u));
      buf_d[pos] = s;
      buf_i[pos] = id;
    }
    count += __popc(mask);
  }

  // Merges what is buffered and writes the sorted list (w entries) to global memory.
  __device__ void store(float* gd, int32_t* gi) {
    if (count > 0) flush();
    __syncwarp();
    const int lane = threadIdx.x & (kWarp - 1);
    for (int t = lane; t < w; t += kWarp) gd[t] = list_d[t], gi[t] = list_i[t];
  }
};

// Stores a database tile staged in registers into shared memory (knn_fused.cu, knn_mma.cu): pre[t] holds
// float4 number threadIdx.x + t * kThreads of the kRows x kVec (float4) tile, written to row stride ks
// floats; the first kRows threads store their row's squared norm pre_sq into rsq.
template <int kRows, int kVec, int kThreads, int kUsed, int N>
__device__ __forceinline__ void stage_tile(float* rs, int ks, const float4 (&pre)[N], float* rsq, float pre_sq) {
  static_assert(kUsed <= N, "more slots than staged");
#pragma unroll
  for (int t = 0; t < kUsed; ++t) {
    const int e = threadIdx.x + t * kThreads, row = e / kVec, col = e - row * kVec;
    if (e < kRows * kVec) reinterpret_cast<float4*>(rs + row * ks)[col] = pre[t];
  }
  if (threadIdx.x < kRows) rsq[threadIdx.x] = pre_sq;
}

}  // namespace scurry::gpu
