// Exact-kNN candidates with raw TF32 mma.sync (m16n8k8): the same contract as knn_fused.cu's
// fused_candidates (TF32 scores, per-query top-W lists sorted by (score, id)), fewer instructions.
//
// A block takes kMQ = 128 queries, 16 per warp; each warp keeps its queries' A fragments in registers
// for the whole run (loaded once) and, for every database tile of kMR = 128 rows staged in shared
// memory by the block, multiplies 32 columns at a time (four m16n8 tiles over the depth) and folds
// the 16 x 32 scores straight from the accumulators: a score that beats its query's current W-th
// candidate goes to the query's buffer (at most 32 a chunk, so the buffer of W >= 32 never
// overflows), and buffers are merged into the lists (WarpTopK::flush) after the chunk. No score tile
// in shared memory. Fragment layouts: PTX ISA, mma.m16n8k8 with .tf32.
//
// Status (2026-11-30, session 3): the default (SCURRY_KNN_KERNEL=wmma selects the WMMA kernel).
// test_knn_gpu passes with it (exact equals a float64 brute force); 1.3M x 50 on an H200: 4.05 s
// against WMMA's 4.77 s. Far from the ~4x fewer instructions expected: the fold, not the MMAs, still
// sets the pace (next: Nsight Compute on this kernel).
#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "graph/knn_fused.cuh"
#include "graph/topk.cuh"

namespace scurry::gpu::knn {

namespace {

constexpr int kMQ = 128;        // queries per block
constexpr int kMR = 128;        // database rows per tile
constexpr int kMThreads = 256;  // 8 warps x 16 queries
constexpr int kQW = 16;         // queries per warp
constexpr int kChunk = 32;      // columns folded at a time (four n8 tiles)
constexpr int kMaxSlots = 8;    // float4 per thread of the next tile held in registers

struct MmaParams {
  const float* A;  // n x kp, TF32-rounded, zero padding
  const float* sqn;
  int64_t n;
  int w;
  float* best_d;
  int32_t* best_i;
};

__host__ __device__ constexpr int mma_stride(int kp) { return kp + 4; }  // conflict-free fragment reads

size_t mma_smem_bytes(int kp, int w) {
  return sizeof(float) * (static_cast<size_t>(kMR) * mma_stride(kp) + kMR) +
         static_cast<size_t>(kMQ) * static_cast<size_t>(warp_topk_smem_bytes(w)) + sizeof(int) * kMQ;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int KP>
__global__ void __launch_bounds__(kMThreads, 2) mma_knn_kernel(MmaParams P) {
  constexpr int ks = mma_stride(KP), kSteps = KP / 8, vec = KP / 4;
  constexpr int kSlots = (kMR * vec + kMThreads - 1) / kMThreads;
  static_assert(kSlots <= kMaxSlots, "database tile too deep for the register prefetch");
  extern __shared__ __align__(16) float smem[];
  float* rs = smem;                                  // kMR x ks
  float* rsq = rs + kMR * ks;                        // kMR
  char* lists = reinterpret_cast<char*>(rsq + kMR);  // kMQ x warp_topk_smem_bytes(w)
  int* counts = reinterpret_cast<int*>(lists + static_cast<size_t>(kMQ) * warp_topk_smem_bytes(P.w));
  const int w = P.w;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x & (kWarp - 1);
  const int g = lane >> 2, t4 = lane & 3;  // fragment row group and thread-in-group
  const int64_t qw0 = static_cast<int64_t>(blockIdx.x) * kMQ + warp * kQW;  // this warp's first query
  const bool cosine = P.sqn == nullptr;

  // A fragments of the warp's 16 queries, all k-steps, kept for the whole run.
  uint32_t a[kSteps][4];
  {
    const int64_t r_lo = qw0 + g, r_hi = qw0 + g + 8;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int c = 8 * s + t4;
      a[s][0] = r_lo < P.n ? __float_as_uint(P.A[r_lo * KP + c]) : 0u;
      a[s][1] = r_hi < P.n ? __float_as_uint(P.A[r_hi * KP + c]) : 0u;
      a[s][2] = r_lo < P.n ? __float_as_uint(P.A[r_lo * KP + c + 4]) : 0u;
      a[s][3] = r_hi < P.n ? __float_as_uint(P.A[r_hi * KP + c + 4]) : 0u;
    }
  }
  char* my_lists = lists + static_cast<size_t>(warp * kQW) * warp_topk_smem_bytes(w);
  auto list_of = [&](int q) { return my_lists + static_cast<size_t>(q) * warp_topk_smem_bytes(w); };
  for (int q = 0; q < kQW; ++q) {
    WarpTopK top(list_of(q), w);
    top.reset();
  }
  if (lane < kQW) counts[warp * kQW + lane] = 0;
  __syncwarp();
  // The thread's two query rows (g and g + 8): their current W-th candidate.
  float thr_d[2];
  int32_t thr_i[2];
  auto read_thr = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const WarpTopK top(list_of(g + 8 * h), w);
      thr_d[h] = top.list_d[w - 1];
      thr_i[h] = top.list_i[w - 1];
    }
  };
  read_thr();
  const int64_t qid[2] = {qw0 + g, qw0 + g + 8};

  float4 pre[kSlots];
  float pre_sq = 0.f;
  auto fetch = [&](int64_t r0) {
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      const int e = threadIdx.x + t * kMThreads, row = e / vec, col = e - row * vec;
      pre[t] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (e < kMR * vec && r0 + row < P.n) pre[t] = __ldg(reinterpret_cast<const float4*>(P.A + (r0 + row) * KP) + col);
    }
    if (threadIdx.x < kMR) {
      const int64_t r = r0 + threadIdx.x;
      pre_sq = cosine || r >= P.n ? 0.f : __ldg(P.sqn + r);
    }
  };
  fetch(0);

  for (int64_t r0 = 0; r0 < P.n; r0 += kMR) {
    __syncthreads();  // every warp is done with the previous tile
    stage_tile<kMR, vec, kMThreads, kSlots>(rs, ks, pre, rsq, pre_sq);
    __syncthreads();
    if (r0 + kMR < P.n) fetch(r0 + kMR);
    if (qw0 >= P.n) continue;  // warp-uniform: no queries (still takes part in the block's barriers)
#pragma unroll 1
    for (int c0 = 0; c0 < kMR; c0 += kChunk) {
      float acc[4][4];
#pragma unroll
      for (int t = 0; t < 4; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
#pragma unroll
      for (int s = 0; s < kSteps; ++s)
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const float* b = rs + (c0 + 8 * t + g) * ks + 8 * s + t4;
          mma_tf32(acc[t], a[s], __float_as_uint(b[0]), __float_as_uint(b[4]));
        }
      // Fold: accumulator (t, v) is row g + 8 (v / 2), column c0 + 8 t + 2 t4 + (v % 2).
      bool any = false;
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int h = v >> 1, col = c0 + 8 * t + 2 * t4 + (v & 1);
          const int64_t id = r0 + col;
          const float sc = cosine ? -acc[t][v] : rsq[col] - 2.f * acc[t][v];
          if (id < P.n && id != qid[h] && qid[h] < P.n && cand_less(sc, static_cast<int32_t>(id), thr_d[h], thr_i[h])) {
            const int qrow = warp * kQW + g + 8 * h;
            const int slot = atomicAdd(&counts[qrow], 1);  // < kChunk <= w: the buffer was empty
            WarpTopK top(list_of(g + 8 * h), w);
            top.buf_d[slot] = sc;
            top.buf_i[slot] = static_cast<int32_t>(id);
            any = true;
          }
        }
      unsigned pending = __ballot_sync(kFullMask, any);
      if (!pending) continue;
      __syncwarp();
      // Merge every query with buffered candidates (lanes 0..15 hold the counts).
      const int cnt = lane < kQW ? counts[warp * kQW + lane] : 0;
      unsigned todo = __ballot_sync(kFullMask, cnt > 0);
      while (todo) {
        const int q = __ffs(todo) - 1;
        todo &= todo - 1;
        WarpTopK top(list_of(q), w);
        top.count = __shfl_sync(kFullMask, cnt, q);
        top.flush();
        if (lane == 0) counts[warp * kQW + q] = 0;
      }
      __syncwarp();
      read_thr();
    }
  }
  // The lists out (buffers are empty after every chunk).
  for (int q = 0; q < kQW; ++q) {
    const int64_t qg = qw0 + q;
    if (qg >= P.n) break;
    WarpTopK top(list_of(q), w);
    top.count = 0;
    top.store(P.best_d + qg * w, P.best_i + qg * w);
  }
}

}  // namespace

bool mma_supported(int64_t kp, int w) {
  return kp % 8 == 0 && kp >= 8 && kp <= 64 && w >= kChunk && w <= 64 &&
         mma_smem_bytes(static_cast<int>(kp), w) <= 113 * 1024;
}

void mma_candidates(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t kp, int w, float* best_d,
                    int32_t* best_i) {
  if (!mma_supported(kp, w)) fail("mma kNN: unsupported depth ", kp, " or width ", w);
  if (n == 0) return;
  const size_t smem = mma_smem_bytes(static_cast<int>(kp), w);
  MmaParams P{A, sqn, n, w, best_d, best_i};
  const unsigned blocks = static_cast<unsigned>((n + kMQ - 1) / kMQ);
  auto launch = [&](auto kernel) {
    SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<blocks, kMThreads, smem, r.stream>>>(P);
    SCURRY_CUDA_LAUNCH();
  };
  switch (kp) {
    case 8: launch(mma_knn_kernel<8>); break;
    case 16: launch(mma_knn_kernel<16>); break;
    case 24: launch(mma_knn_kernel<24>); break;
    case 32: launch(mma_knn_kernel<32>); break;
    case 40: launch(mma_knn_kernel<40>); break;
    case 48: launch(mma_knn_kernel<48>); break;
    case 56: launch(mma_knn_kernel<56>); break;
    case 64: launch(mma_knn_kernel<64>); break;
    default: fail("mma kNN: unsupported depth ", kp);
  }
}

}  // namespace scurry::gpu::knn
