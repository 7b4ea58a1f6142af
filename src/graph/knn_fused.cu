// Fused exact-kNN candidate search on the GPU: the score tiles never leave the multiprocessor.
//
// A block takes kFQ queries and walks every database tile of kFR rows: the tile's scores
// (||y||^2 - 2 x.y on column-centred rows, or -x.y on unit rows) come from TF32 tensor-core MMAs
// (WMMA m16n16k8) into shared memory, and each warp folds the rows of its kFQ / 8 queries into their
// running top-W lists (WarpTopK: ballot against the current W-th score, buffer, bitonic merge), so
// after the first tiles almost every score is one compare. Operands are rounded to TF32 once
// beforehand, so the MMA sees exactly the values the error bound below assumes.
//
// One TF32 pass is not exact by itself: a score is off by at most
//   |s~ - s| <= 2 * (2 * 2^-11 + 2^-22) * ||x|| ||y|| (+ float32 accumulation, d 2^-24 ||x|| ||y||),
// which knn_exact.cu's check turns into a per-query certificate: when the exact (k-1)-th distance of
// the re-ranked candidates is below the W-th candidate's TF32 score minus that bound, no cell
// outside the candidates can be nearer, and the result equals a float64 brute force. Queries without
// the certificate are searched again with the split-TF32 GEMM path.
//
// The IVF form (knn_ivf.cu) is the same kernel over a given set of database row ranges per block
// (tiles of kFR rows within each range, the last one partial) for a given block of queries, with
// positions mapped to original cell indices; the exact search is the one range [0, n).
//
// Floor on one H200 at 1,306,127 x 50 (d padded to 56): 2 n^2 d = 1.9e14 TF32 FLOPs, 0.42 s at 452
// TFLOP/s; database tiles re-read from L2 once per block, n / kFQ * n * 56 * 4 bytes = 6 TB at
// ~10 TB/s L2: 0.6 s; the select costs ~1 compare per score.
#include <mma.h>

#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "graph/knn_fused.cuh"
#include "graph/topk.cuh"

namespace scurry::gpu::knn {

namespace {

using namespace nvcuda;

constexpr int kFQ = kFusedQueries;  // queries per block
constexpr int kFR = 128;           // database rows per tile
constexpr int kFThreads = 256;     // 8 warps
constexpr int kFWarps = kFThreads / kWarp;
constexpr int kQPerWarp = kFQ / kFWarps;  // 8 query rows folded by each warp
constexpr int kScoreLd = kFR + 4;  // shared-memory leading dimension of the score tile (floats)

struct FusedParams {
  const float* A;      // n x kp, TF32-rounded rows (centred or unit), zero padding
  const float* sqn;    // n: ||row||^2 (euclidean) or null (cosine)
  int64_t n;
  int kp;
  int w;
  float* best_d;       // n x w, sorted ascending
  int32_t* best_i;
  FusedBlocks ivf;     // the IVF form (kIvf): per-block queries, database ranges, original ids
};

constexpr int kMaxPrefetch = 8;  // float4 per thread of the next database tile held in registers (kp <= 64)

// Shared-memory row stride of the operand tiles: kp + 4 floats, so that 8 consecutive rows of 4
// floats (a WMMA fragment's access) fall in 32 distinct banks.
__host__ __device__ constexpr int smem_stride(int kp) { return kp + 4; }

size_t fused_smem_bytes(int kp, int w) {
  const int ks = smem_stride(kp);
  return sizeof(float) * (static_cast<size_t>(kFQ) * ks + static_cast<size_t>(kFR) * ks +
                          static_cast<size_t>(kFQ) * kScoreLd + kFR) +
         static_cast<size_t>(kFQ) * static_cast<size_t>(warp_topk_smem_bytes(w)) + sizeof(int) * kFQ;
}

// KP: padded depth, a multiple of 8 up to 64 (constant index arithmetic). kIvf: the block's queries,
// database ranges and ids come from P.ivf; otherwise block b takes rows [kFQ b, kFQ b + kFQ) against
// the one range [0, n) with ids = positions (the exact search; the range logic folds away).
template <int KP, bool kIvf>
__global__ void __launch_bounds__(kFThreads, 2) fused_knn_kernel(FusedParams P) {
  extern __shared__ __align__(16) float smem[];
  constexpr int kp = KP, ks = smem_stride(KP);
  const int w = P.w;
  float* qs = smem;                                   // kFQ x ks
  float* rs = qs + kFQ * ks;                          // kFR x ks
  float* sc = rs + kFR * ks;                          // kFQ x kScoreLd
  float* rsq = sc + kFQ * kScoreLd;                   // kFR
  char* lists = reinterpret_cast<char*>(rsq + kFR);   // kFQ x warp_topk_smem_bytes(w)
  int* counts = reinterpret_cast<int*>(lists + static_cast<size_t>(kFQ) * warp_topk_smem_bytes(w));

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x & (kWarp - 1);
  const int64_t blk = blockIdx.x;
  // This block's queries: rows [q0, q_end) of A (at most kFQ).
  const int64_t q0 = kIvf ? P.ivf.query_range[2 * blk] : blk * kFQ;
  const int64_t q_end = kIvf ? P.ivf.query_range[2 * blk + 1] : (P.n - q0 < kFQ ? P.n : q0 + kFQ);
  // Its database ranges (TileWalk).
  const int64_t* rg = kIvf ? P.ivf.ranges + blk * P.ivf.range_cap * 2 : nullptr;
  const int n_rg = kIvf ? P.ivf.n_ranges[blk] : 1;
  auto original_id = [&](int64_t pos) -> int32_t {
    return kIvf ? __ldg(P.ivf.ids + pos) : static_cast<int32_t>(pos);
  };
  constexpr int vec = kp / 4;  // float4 per row

  // The query tile, and empty lists.
  for (int e = threadIdx.x; e < kFQ * vec; e += kFThreads) {
    const int row = e / vec, c = e - row * vec;
    const int64_t q = q0 + row;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (q < q_end) v = reinterpret_cast<const float4*>(P.A + q * kp)[c];
    reinterpret_cast<float4*>(qs + row * ks)[c] = v;
  }
  for (int i = 0; i < kQPerWarp; ++i) {
    WarpTopK top(lists + static_cast<size_t>(warp * kQPerWarp + i) * warp_topk_smem_bytes(w), w);
    const int64_t q = q0 + warp * kQPerWarp + i;
    if (kIvf && P.ivf.seeded && q < q_end) {
      const int64_t o = static_cast<int64_t>(original_id(q)) * w;
      top.load(P.best_d + o, P.best_i + o);
    } else {
      top.reset();
    }
  }
  if (threadIdx.x < kFQ) counts[threadIdx.x] = 0;

  // The next database tile travels in registers while this one is multiplied and folded. Each
  // thread's slots of the tile (row, float4 column) are fixed. A tile is rows [r0, min(r0 + kFR, r_end))
  // of one range (the last tile of a range partial).
  float4 pre[kMaxPrefetch];
  float pre_sq = 0.f;
  const bool cosine = P.sqn == nullptr;
  constexpr int kSlots = (kFR * vec + kFThreads - 1) / kFThreads;  // float4 per thread per tile
  static_assert(kSlots <= kMaxPrefetch, "database tile too deep for the register prefetch");
  auto fetch = [&](int64_t r0, int64_t r_end) {
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      const int e = threadIdx.x + t * kFThreads, row = e / vec, col = e - row * vec;
      pre[t] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (e < kFR * vec && r0 + row < r_end) pre[t] = __ldg(reinterpret_cast<const float4*>(P.A + (r0 + row) * kp) + col);
    }
    if (threadIdx.x < kFR) {
      const int64_t r = r0 + threadIdx.x;
      pre_sq = cosine || r >= r_end ? 0.f : __ldg(P.sqn + r);
    }
  };
  // The tiles, from the block's own list on (TileWalk).
  TileWalk<kFR, kIvf> tile(rg, n_rg, P.n, q0);
  bool have = tile.next();
  if (have) fetch(tile.r0, tile.r_end);

  // This warp's 16 x 64 part of the 64 x 128 score tile: fragment row fr, columns fc .. fc + 63.
  const int fr = (warp >> 1) * 16, fc = (warp & 1) * 64;
  while (have) {
    __syncthreads();  // the previous tile's scores are folded in; rs and sc are free
    stage_tile<kFR, vec, kFThreads, kSlots>(rs, ks, pre, rsq, pre_sq);
    __syncthreads();
    TileWalk<kFR, kIvf> nt = tile;
    const bool next = nt.next();
    if (next) fetch(nt.r0, nt.r_end);
    const int64_t r0 = tile.r0, r_end = tile.r_end;
    {
      wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[j], 0.f);
#pragma unroll 1
      for (int kk = 0; kk < kp; kk += 8) {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
        wmma::load_matrix_sync(a, qs + fr * ks + kk, ks);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b;
          wmma::load_matrix_sync(b, rs + (fc + 16 * j) * ks + kk, ks);
          wmma::mma_sync(acc[j], a, b, acc[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
        wmma::store_matrix_sync(sc + fr * kScoreLd + fc + 16 * j, acc[j], kScoreLd, wmma::mem_row_major);
    }
    __syncthreads();
    {
      // Fold: each warp its kQPerWarp query rows, 4 scores per lane per row; a row none of whose
      // scores beats the current W-th candidate costs one vote.
      float rq[kFR / kWarp];
#pragma unroll
      for (int t = 0; t < kFR / kWarp; ++t) rq[t] = rsq[t * kWarp + lane];
      for (int i = 0; i < kQPerWarp; ++i) {
        const int qrow = warp * kQPerWarp + i;
        const int64_t q = q0 + qrow;
        if (q >= q_end) break;  // warp-uniform
        char* lp = lists + static_cast<size_t>(qrow) * warp_topk_smem_bytes(w);
        const float thr = reinterpret_cast<const float*>(lp)[w - 1];
        const float* row = sc + qrow * kScoreLd;
        float sv[kFR / kWarp];
        bool any = false;
#pragma unroll
        for (int t = 0; t < kFR / kWarp; ++t) {
          const int c = t * kWarp + lane;
          sv[t] = cosine ? -row[c] : rq[t] - 2.f * row[c];
          any |= sv[t] <= thr;  // (ties on the score are settled by index inside push)
        }
        if (!__any_sync(kFullMask, any)) continue;
        WarpTopK top(lp, w);
        top.count = counts[qrow];
        top.thr_d = top.list_d[w - 1];
        top.thr_i = top.list_i[w - 1];
#pragma unroll
        for (int t = 0; t < kFR / kWarp; ++t) {
          const int64_t pos = r0 + t * kWarp + lane;
          const bool valid = pos < r_end && pos != q;
          top.push(sv[t], valid ? original_id(pos) : -1, valid);
        }
        __syncwarp();
        if (lane == 0) counts[qrow] = top.count;
        __syncwarp();
      }
    }
    tile = nt;
    have = next;
  }
  __syncthreads();
  for (int i = 0; i < kQPerWarp; ++i) {
    const int qrow = warp * kQPerWarp + i;
    const int64_t q = q0 + qrow;
    if (q >= q_end) break;
    WarpTopK top(lists + static_cast<size_t>(qrow) * warp_topk_smem_bytes(w), w);
    top.count = counts[qrow];
    top.thr_d = top.list_d[w - 1];
    top.thr_i = top.list_i[w - 1];
    const int64_t out = kIvf ? static_cast<int64_t>(original_id(q)) : q;
    top.store(P.best_d + out * w, P.best_i + out * w);
  }
}

template <bool kIvf>
void launch_fused(CudaResources& r, const FusedParams& P, unsigned blocks) {
  const size_t smem = fused_smem_bytes(P.kp, P.w);
  auto launch = [&](auto kernel) {
    SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<blocks, kFThreads, smem, r.stream>>>(P);
    SCURRY_CUDA_LAUNCH();
  };
  switch (P.kp) {
    case 8: launch(fused_knn_kernel<8, kIvf>); break;
    case 16: launch(fused_knn_kernel<16, kIvf>); break;
    case 24: launch(fused_knn_kernel<24, kIvf>); break;
    case 32: launch(fused_knn_kernel<32, kIvf>); break;
    case 40: launch(fused_knn_kernel<40, kIvf>); break;
    case 48: launch(fused_knn_kernel<48, kIvf>); break;
    case 56: launch(fused_knn_kernel<56, kIvf>); break;
    case 64: launch(fused_knn_kernel<64, kIvf>); break;
    default: fail("fused kNN: unsupported depth ", P.kp);
  }
}


}  // namespace

bool fused_supported(int64_t kp, int w) {
  return kp % 8 == 0 && kp >= 8 && kp <= 64 && w <= 64 &&
         fused_smem_bytes(static_cast<int>(kp), w) <= 113 * 1024;
}

void fused_candidates(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t kp, int w, float* best_d,
                      int32_t* best_i) {
  if (!fused_supported(kp, w)) fail("fused kNN: unsupported depth ", kp, " or width ", w);
  if (n == 0) return;
  FusedParams P{A, sqn, n, static_cast<int>(kp), w, best_d, best_i, FusedBlocks{}};
  launch_fused<false>(r, P, static_cast<unsigned>((n + kFQ - 1) / kFQ));
}

void fused_candidates_ranges(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t kp, int w,
                             const FusedBlocks& blocks, float* best_d, int32_t* best_i) {
  if (!fused_supported(kp, w)) fail("fused kNN: unsupported depth ", kp, " or width ", w);
  if (blocks.n_blocks == 0 || n == 0) return;
  if (blocks.n_blocks > INT32_MAX || blocks.range_cap < 1 || !blocks.query_range || !blocks.ranges ||
      !blocks.n_ranges || !blocks.ids)
    fail("fused kNN: invalid IVF block description (", blocks.n_blocks, " blocks, range capacity ",
         blocks.range_cap, ")");
  FusedParams P{A, sqn, n, static_cast<int>(kp), w, best_d, best_i, blocks};
  launch_fused<true>(r, P, static_cast<unsigned>(blocks.n_blocks));
}

}  // namespace scurry::gpu::knn
