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
constexpr int kShortMaxW = 256;  // largest W with a short (kWarp-entry) buffer (WarpTopK::merge_short)

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

// Shared memory one warp needs for WarpTopK of width w with a buffer of cap entries (cap = w: the
// general form; cap = kWarp: the short buffer of callers that add at most 32 candidates between
// merges, e.g. the mma kernel's chunks, which keeps wide lists small enough for shared memory).
__host__ __device__ constexpr int64_t warp_topk_smem_bytes(int w, int cap = 0) {
  return 8 * (static_cast<int64_t>(w) + (cap > 0 ? cap : w));
}

struct WarpTopK {
  float* list_d;   // W, sorted ascending
  int32_t* list_i;
  float* buf_d;    // cap, the first `count` filled
  int32_t* buf_i;
  int w = 0;
  int cap = 0;        // buffer capacity: w, or kWarp (then at most kWarp entries between merges)
  int count = 0;      // warp-uniform
  float thr_d = 0;    // the current W-th entry (warp-uniform)
  int32_t thr_i = -1;

  // `smem`: warp_topk_smem_bytes(w, cap) bytes private to this warp (4-byte aligned).
  __device__ WarpTopK(void* smem, int w_, int cap_ = 0) : w(w_), cap(cap_ > 0 ? cap_ : w_) {
    float* base = static_cast<float*>(smem);
    list_d = base;
    list_i = reinterpret_cast<int32_t*>(base + w);
    buf_d = base + 2 * w;
    buf_i = reinterpret_cast<int32_t*>(base + 2 * w + cap);
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
    if (cap < w) {
      merge_short();
      return;
    }
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

  // flush() for a short buffer (cap = kWarp < w, count <= kWarp): the buffer is sorted across the
  // lanes (one entry a lane, bitonic by shuffles), then every list entry moves up by the number of
  // buffered entries before it and every buffered entry goes to its rank among both (binary searches;
  // (score, id) pairs are distinct apart from the empty (+inf, -1) slots, whose places do not matter):
  // the best w of list and buffer, sorted, as flush() gives. w <= kShortMaxW. Called by all 32 lanes
  // together.
  __device__ void merge_short() {
    const int lane = threadIdx.x & (kWarp - 1);
    __syncwarp();
    const int nb = count;
    float cd = lane < nb ? buf_d[lane] : __int_as_float(0x7f800000);
    int32_t ci = lane < nb ? buf_i[lane] : -1;
    for (int size = 2; size <= kWarp; size <<= 1)
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        const float od = __shfl_xor_sync(kFullMask, cd, stride);
        const int32_t oi = __shfl_xor_sync(kFullMask, ci, stride);
        const bool keep_min = ((lane & size) == 0) == ((lane & stride) == 0);
        if (keep_min ? cand_less(od, oi, cd, ci) : cand_less(cd, ci, od, oi)) cd = od, ci = oi;
      }
    buf_d[lane] = cd;  // sorted; entries past nb are empty
    buf_i[lane] = ci;
    __syncwarp();
    // This lane's buffered entry: its rank in the list (entries before it).
    int pos_b = -1;
    if (lane < nb) {
      int lo = 0, hi = w;
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (cand_less(list_d[mid], list_i[mid], cd, ci)) lo = mid + 1; else hi = mid;
      }
      pos_b = lo + lane;
    }
    // This lane's list entries t = lane + 32 j: their new places.
    constexpr int kMaxSeg = kShortMaxW / kWarp;
    float ld[kMaxSeg];
    int32_t li[kMaxSeg];
    int pos_l[kMaxSeg];
    const int segs = w / kWarp;
#pragma unroll
    for (int j = 0; j < kMaxSeg; ++j) {
      if (j >= segs) break;
      const int t = lane + kWarp * j;
      ld[j] = list_d[t];
      li[j] = list_i[t];
      int lo = 0, hi = nb;
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (cand_less(buf_d[mid], buf_i[mid], ld[j], li[j])) lo = mid + 1; else hi = mid;
      }
      pos_l[j] = t + lo;
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kMaxSeg; ++j) {
      if (j >= segs) break;
      if (pos_l[j] < w) list_d[pos_l[j]] = ld[j], list_i[pos_l[j]] = li[j];
    }
    if (pos_b >= 0 && pos_b < w) list_d[pos_b] = cd, list_i[pos_b] = ci;
    __syncwarp();
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
    if (count + __popc(mask) > cap) {
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
