// kNN candidates with raw TF32 mma.sync (m16n8k8): the exact search (every row against every row, or
// a range of query rows or of database rows: one GPU's share of the queries or of the index) and the
// IVF form (blocks of queries against their probed lists' row ranges; with the index sharded, the
// database operand holds one GPU's lists only). The contract is knn_fused.cu's: per-query top-W lists of TF32 scores sorted by
// (score, id), every row left out scoring at least the W-th.
//
// What makes it cheap is that the score needs no arithmetic after the MMA:
//  - the operands carry the norm (mma_operands): a query row is [x, 1, 1, 0...], a database row
//    [-2 y, hi, lo, 0...] with hi + lo = ||y||^2 split into two TF32 numbers, so the accumulator is
//    ||y||^2 - 2 x.y itself (cosine: [x, 1, 0...] and [-y, 0, 0...]: -x.y). Every product is exact in
//    float32 (TF32 x TF32, or x 1), so the only new error is the float32 accumulation, which
//    knn_exact.cu's certificate bounds (its 2^-16 (|x|^2 + |y|^2) term);
//  - the fold on the accumulators is a min over each query row's 8 scores of the 16 x 32 chunk
//    against the row's current W-th score, and one vote: only a chunk with a score that beats a
//    threshold (strictly: a tie with the W-th cannot matter to the certificate) goes down the slow
//    path, which checks the row range, the query itself, and appends to the query's buffer in shared
//    memory (at most 32 per chunk, so a buffer of W >= 32 never overflows); the buffers are merged
//    into the lists after the chunk (WarpTopK::flush). Rows past the end of a range are staged with a
//    huge value in the "1" column, so they never reach the slow path;
//  - the operands are stored in fragment order (frag_pos): the B fragment of two k-steps of a column
//    is one 16-byte shared-memory load (the tile's row stride is 16 mod 32 floats: conflict-free),
//    the A fragments (16 queries per warp) are loaded once and stay in registers.
// A block of W warps takes 16 W queries and walks the database in tiles of 16 W rows, staged through
// registers (the next tile's loads are in flight while this one is multiplied), 32 columns a chunk.
// Exact: 8 warps (128 queries, 128-row tiles); IVF: 4 warps (64 queries: knn_ivf.cu's blocks).
//
// Measured (H200, 1,306,127 x 50, k = 15): see bench/RESULTS.md (issue 5). The previous version of
// this kernel (scores as rsq - 2 acc with 64-bit id tests per score) ran 851 warp instructions per
// 28 MMAs (Nsight Compute, bench/results/ncu_mma_knn_200k_session4.txt): 4.0 s.
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "graph/knn_fused.cuh"
#include "graph/topk.cuh"

namespace scurry::gpu::knn {

namespace {

constexpr int kChunk = 32;        // columns folded at a time (four n8 tiles)
constexpr int kExactWarps = 8;    // exact search: 128 queries per block, 128-row tiles
constexpr int kIvfWarps = 4;      // IVF: 64 queries per block (kFusedQueries), 64-row tiles
static_assert(16 * kIvfWarps == kFusedQueries, "IVF query blocks hold kFusedQueries queries");
constexpr float kBig = 0x1p100f;  // staged in the "1" column of rows past a range's end (TF32-exact)

__host__ __device__ constexpr int full_groups(int kp) { return kp / 16 * 16; }

// Position of column k in a row stored in fragment order (kp a multiple of 8): within a group of 16
// columns (two k-steps), k = 8 e + 4 h + t4 goes to 4 t4 + 2 e + h; in a last group of 8 (kp % 16 == 8),
// k = 4 h + t4 goes to 2 t4 + h.
__host__ __device__ constexpr int frag_pos(int k, int kp) {
  const int full = full_groups(kp);
  if (k < full) {
    const int r = k % 16, e = r / 8, h = (r % 8) / 4, t4 = r % 4;
    return k - r + 4 * t4 + 2 * e + h;
  }
  const int r = k - full, h = r / 4, t4 = r % 4;
  return full + 2 * t4 + h;
}
__host__ __device__ constexpr int frag_col(int pos, int kp) {  // the inverse of frag_pos
  const int full = full_groups(kp);
  if (pos < full) {
    const int r = pos % 16, t4 = r / 4, e = (r / 2) % 2, h = r % 2;
    return pos - r + 8 * e + 4 * h + t4;
  }
  const int r = pos - full, t4 = r / 2, h = r % 2;
  return full + 4 * h + t4;
}

// Shared-memory row stride: >= kp and 16 mod 32 floats, so that the 16-byte B loads of a quarter warp
// (two rows x four t4) hit 32 distinct banks.
__host__ __device__ constexpr int mma_stride(int kp) { return (kp + 15) / 32 * 32 + 16; }

struct MmaParams {
  const float* Q;  // n x kp, fragment order: [x, 1, (1), 0...]
  const float* D;  // n x kp, fragment order: [-2y, hi, lo, 0...] or [-y, 0...]
  int64_t n;  // exact: the end of the database rows
  int64_t db0;  // D's row 0 is position db0 (exact: the first database row)
  int w;
  int pos_one;  // fragment position of column d (the "1" column)
  int64_t q_begin, q_end;  // exact: the queries; their lists go to rows q - q_begin
  float* best_d;
  int32_t* best_i;
  FusedBlocks ivf;  // the IVF form
  bool sort_merge;  // SCURRY_KNN_MERGE=sort: merge buffers by sorting (WarpTopK::flush), not insertion
};

// The lists' buffer capacity: w up to 64 (the merge by insertion or by sorting, as before), a short
// buffer of kChunk entries past that (a chunk adds at most kChunk candidates to a query: WarpTopK's
// merge_short), so that the wide lists of large k (t-SNE's 3 perplexity + 1 = 91 neighbours: W = 128)
// fit in shared memory with two blocks per multiprocessor.
__host__ __device__ constexpr int topk_cap(int w) { return w <= 64 ? w : kChunk; }

size_t mma_smem_bytes(int kp, int w, int warps) {
  const int rows = 16 * warps;
  return sizeof(float) * static_cast<size_t>(rows) * mma_stride(kp) +
         static_cast<size_t>(rows) * static_cast<size_t>(warp_topk_smem_bytes(w, topk_cap(w))) + sizeof(int) * rows;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int KP, int kWarps, bool kIvf>
__global__ void __launch_bounds__(32 * kWarps, kIvf ? 4 : 2) mma_knn_kernel(MmaParams P) {
  constexpr int kThreads = 32 * kWarps, kQ = 16 * kWarps, kRows = 16 * kWarps;
  constexpr int ks = mma_stride(KP), kSteps = KP / 8, vec = KP / 4, kPairs = KP / 16;
  constexpr bool kTail = KP % 16 == 8;
  constexpr int kSlots = kRows * vec / kThreads;  // = KP / 8 float4 per thread per tile
  static_assert(kRows * vec % kThreads == 0, "tile slots");
  extern __shared__ __align__(16) float smem[];
  float* rs = smem;                                                     // kRows x ks
  const int w = P.w, cap = topk_cap(w);
  const size_t tk_bytes = static_cast<size_t>(warp_topk_smem_bytes(w, cap));
  char* lists = reinterpret_cast<char*>(rs + kRows * ks);  // kQ x tk_bytes
  int* counts = reinterpret_cast<int*>(lists + static_cast<size_t>(kQ) * tk_bytes);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x & (kWarp - 1);
  const int g = lane >> 2, t4 = lane & 3;  // fragment row group and thread-in-group
  const int64_t blk = blockIdx.x;

  // The block's queries [q0, q_end) (positions) and database ranges.
  const int64_t q0 = kIvf ? P.ivf.query_range[2 * blk] : P.q_begin + blk * kQ;
  const int64_t q_end = kIvf ? P.ivf.query_range[2 * blk + 1] : (P.q_end - q0 < kQ ? P.q_end : q0 + kQ);
  const int64_t* rg = kIvf ? P.ivf.ranges + blk * P.ivf.range_cap * 2 : nullptr;
  const int n_rg = kIvf ? P.ivf.n_ranges[blk] : 1;
  auto original_id = [&](int64_t pos) -> int32_t { return kIvf ? __ldg(P.ivf.ids + pos) : static_cast<int32_t>(pos); };
  auto out_row = [&](int64_t q) -> int64_t { return kIvf ? static_cast<int64_t>(original_id(q)) : q - P.q_begin; };

  const int64_t qw0 = q0 + warp * 16;  // this warp's first query
  const int64_t qpos[2] = {qw0 + g, qw0 + g + 8};
  // A fragments of the warp's 16 queries, every k-step, for the whole run.
  uint32_t a[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int p = (8 * s < full_groups(KP)) ? 16 * (s / 2) + 4 * t4 + 2 * (s % 2) : full_groups(KP) + 2 * t4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool ok = qpos[h] < q_end;
      const float* row = P.Q + qpos[h] * KP;
      a[s][h] = ok ? __float_as_uint(__ldg(row + p)) : 0u;          // k = 8s + t4
      a[s][h + 2] = ok ? __float_as_uint(__ldg(row + p + 1)) : 0u;  // k = 8s + t4 + 4
    }
  }
  char* my_lists = lists + static_cast<size_t>(warp * 16) * tk_bytes;
  auto list_of = [&](int q) { return my_lists + static_cast<size_t>(q) * tk_bytes; };
  for (int q = 0; q < 16; ++q) {
    WarpTopK top(list_of(q), w, cap);
    const int64_t qg = qw0 + q;
    if (kIvf && P.ivf.seeded && qg < q_end) {
      const int64_t o = out_row(qg) * w;
      top.load(P.best_d + o, P.best_i + o);
    } else {
      top.reset();
    }
  }
  if (lane < 16) counts[warp * 16 + lane] = 0;
  __syncwarp();
  // The thread's two query rows' current W-th score; -inf for rows past the block's queries.
  float thr[2];
  auto read_thr = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      thr[h] = qpos[h] < q_end ? WarpTopK(list_of(g + 8 * h), w, cap).list_d[w - 1] : -__int_as_float(0x7f800000);
  };
  read_thr();

  float4 pre[kSlots];
  auto fetch = [&](int64_t r0, int64_t r_end) {
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      const int e = threadIdx.x + t * kThreads, row = e / vec, col = e - row * vec;
      if (r0 + row < r_end) {
        pre[t] = __ldg(reinterpret_cast<const float4*>(P.D + (r0 + row - P.db0) * KP) + col);
      } else {
        pre[t] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (col == P.pos_one / 4) {
          const int c = P.pos_one % 4;
          if (c == 0) pre[t].x = kBig;
          if (c == 1) pre[t].y = kBig;
          if (c == 2) pre[t].z = kBig;
          if (c == 3) pre[t].w = kBig;
        }
      }
    }
  };
  TileWalk<kRows, kIvf> tile(rg, n_rg, P.n, q0, P.db0);
  bool have = tile.next();
  if (have) fetch(tile.r0, tile.r_end);
  const bool warp_live = qw0 < q_end;

  while (have) {
    __syncthreads();  // every warp is done with the previous tile
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      const int e = threadIdx.x + t * kThreads, row = e / vec, col = e - row * vec;
      reinterpret_cast<float4*>(rs + row * ks)[col] = pre[t];
    }
    __syncthreads();
    TileWalk<kRows, kIvf> nt = tile;
    const bool next = nt.next();
    if (next) fetch(nt.r0, nt.r_end);
    const int64_t r0 = tile.r0, r_end = tile.r_end;
    if (warp_live) {
#pragma unroll 1
      for (int c0 = 0; c0 < kRows; c0 += kChunk) {
        float acc[4][4];
#pragma unroll
        for (int t = 0; t < 4; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const float* b = rs + (c0 + 8 * t + g) * ks + 4 * t4;
#pragma unroll
          for (int p = 0; p < kPairs; ++p) {
            const float4 v = *reinterpret_cast<const float4*>(b + 16 * p);
            mma_tf32(acc[t], a[2 * p], __float_as_uint(v.x), __float_as_uint(v.y));
            mma_tf32(acc[t], a[2 * p + 1], __float_as_uint(v.z), __float_as_uint(v.w));
          }
          if constexpr (kTail) {
            const float2 v = *reinterpret_cast<const float2*>(rs + (c0 + 8 * t + g) * ks + full_groups(KP) + 2 * t4);
            mma_tf32(acc[t], a[kSteps - 1], __float_as_uint(v.x), __float_as_uint(v.y));
          }
        }
        // Accumulator (t, v) is query row g + 8 (v / 2), column c0 + 8 t + 2 t4 + (v % 2).
        float m0 = acc[0][0], m1 = acc[0][2];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          m0 = fminf(m0, fminf(acc[t][0], acc[t][1]));
          m1 = fminf(m1, fminf(acc[t][2], acc[t][3]));
        }
        if (!__any_sync(kFullMask, m0 < thr[0] || m1 < thr[1])) continue;
        // Slow path: append the winners to their queries' buffers, then merge.
#pragma unroll
        for (int t = 0; t < 4; ++t)
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const int h = v >> 1;
            const int64_t pos = r0 + c0 + 8 * t + 2 * t4 + (v & 1);
            if (acc[t][v] < thr[h] && pos < r_end && pos != qpos[h]) {
              const int slot = atomicAdd(&counts[warp * 16 + g + 8 * h], 1);  // < kChunk <= w
              WarpTopK top(list_of(g + 8 * h), w, cap);
              top.buf_d[slot] = acc[t][v];
              top.buf_i[slot] = original_id(pos);
            }
          }
        __syncwarp();
        const int cnt = lane < 16 ? counts[warp * 16 + lane] : 0;
        unsigned todo = __ballot_sync(kFullMask, cnt > 0);
        while (todo) {
          const int q = __ffs(todo) - 1;
          todo &= todo - 1;
          WarpTopK top(list_of(q), w, cap);
          top.count = __shfl_sync(kFullMask, cnt, q);
          if (P.sort_merge)
            top.flush();
          else
            top.merge_buffer();
          if (lane == 0) counts[warp * 16 + q] = 0;
        }
        __syncwarp();
        read_thr();
      }
    }
    tile = nt;
    have = next;
  }
  // The lists out (the buffers are empty after every chunk).
  for (int q = 0; q < 16; ++q) {
    const int64_t qg = qw0 + q;
    if (qg >= q_end) break;
    WarpTopK top(list_of(q), w, cap);
    top.count = 0;
    const int64_t o = out_row(qg) * w;
    top.store(P.best_d + o, P.best_i + o);
  }
}

// Q and D (n x kp, fragment order) from the fused operand A (n x ka, TF32-rounded, zero past d) and
// sqn (euclidean; null: cosine).
__global__ void mma_operands_kernel(const float* A, const float* sqn, int64_t n, int ka, int d, int kp, float* Q,
                                    float* D) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * kp) return;
  const int64_t i = e / kp;
  const int pos = static_cast<int>(e - i * kp);
  const int k = frag_col(pos, kp);
  float q = 0.f, y = 0.f;
  if (k < d) {
    const float x = A[i * ka + k];
    q = x;
    y = sqn ? -2.f * x : -x;  // exact: powers of two
  } else if (k == d) {
    q = 1.f;
    if (sqn) {
      const float s = sqn[i];
      uint32_t u = __float_as_uint(s);  // TF32 round to nearest (ties away), as prepare_operands
      if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
      y = __uint_as_float(u);
    }
  } else if (k == d + 1 && sqn) {
    q = 1.f;
    const float s = sqn[i];
    uint32_t u = __float_as_uint(s);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    const float hi = __uint_as_float(u), lo = s - hi;  // exact in float32
    uint32_t v = __float_as_uint(lo);
    if ((v & 0x7f800000u) != 0x7f800000u) v = (v + 0x1000u) & 0xffffe000u;
    y = __uint_as_float(v);
  }
  if (Q) Q[e] = q;
  if (D) D[e] = y;
}

template <int kWarps, bool kIvf>
void launch_mma(CudaResources& r, const MmaParams& P, int kp, unsigned blocks) {
  const size_t smem = mma_smem_bytes(kp, P.w, kWarps);
  auto launch = [&](auto kernel) {
    SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<blocks, 32 * kWarps, smem, r.stream>>>(P);
    SCURRY_CUDA_LAUNCH();
  };
  switch (kp) {
    case 8: launch(mma_knn_kernel<8, kWarps, kIvf>); break;
    case 16: launch(mma_knn_kernel<16, kWarps, kIvf>); break;
    case 24: launch(mma_knn_kernel<24, kWarps, kIvf>); break;
    case 32: launch(mma_knn_kernel<32, kWarps, kIvf>); break;
    case 40: launch(mma_knn_kernel<40, kWarps, kIvf>); break;
    case 48: launch(mma_knn_kernel<48, kWarps, kIvf>); break;
    case 56: launch(mma_knn_kernel<56, kWarps, kIvf>); break;
    case 64: launch(mma_knn_kernel<64, kWarps, kIvf>); break;
    default: fail("mma kNN: unsupported depth ", kp);
  }
}

bool sort_merge() {
  const char* e = std::getenv("SCURRY_KNN_MERGE");
  return e && std::string(e) == "sort";
}

}  // namespace

int64_t mma_depth(int64_t d, bool euclidean) { return (d + (euclidean ? 2 : 1) + 7) / 8 * 8; }

bool mma_supported(int64_t kp, int w) {
  return kp % 8 == 0 && kp >= 8 && kp <= 64 && w >= kChunk && w <= 64 &&
         mma_smem_bytes(static_cast<int>(kp), w, kExactWarps) <= 113 * 1024 &&
         mma_smem_bytes(static_cast<int>(kp), w, kIvfWarps) <= 113 * 1024;
}

bool mma_ivf_supported(int64_t kp, int w) {
  if (w <= 64) return mma_supported(kp, w);  // as before (W = 64 stays on the WMMA kernel: the same results)
  return kp % 8 == 0 && kp >= 8 && kp <= 64 && w <= kShortMaxW && (w & (w - 1)) == 0 &&
         mma_smem_bytes(static_cast<int>(kp), w, kIvfWarps) <= 113 * 1024;
}

bool mma_enabled() {
  const char* e = std::getenv("SCURRY_KNN_KERNEL");
  return !(e && std::string(e) == "wmma");
}

void mma_operands(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t ka, int64_t d, int64_t kp,
                  float* Q, float* D) {
  if (kp != mma_depth(d, sqn != nullptr) || ka < d) fail("mma kNN: operand depth ", kp, " for ", d, " columns");
  if (n == 0) return;
  const int64_t total = n * kp;
  mma_operands_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, r.stream>>>(
      A, sqn, n, static_cast<int>(ka), static_cast<int>(d), static_cast<int>(kp), Q, D);
  SCURRY_CUDA_LAUNCH();
}

void mma_candidates(CudaResources& r, const float* Q, const float* D, int64_t n, int64_t kp, int64_t d, int w,
                    int64_t q_begin, int64_t q_end, float* best_d, int32_t* best_i, int64_t db_begin,
                    int64_t db_end) {
  if (!mma_supported(kp, w)) fail("mma kNN: unsupported depth ", kp, " or width ", w);
  if (q_begin < 0 || q_end > n || q_begin > q_end) fail("mma kNN: query range [", q_begin, ", ", q_end, ") of ", n);
  if (db_end < 0) db_end = n;
  if (db_begin < 0 || db_end > n || db_begin > db_end)
    fail("mma kNN: database range [", db_begin, ", ", db_end, ") of ", n);
  if (q_end == q_begin) return;
  MmaParams P{Q, D, db_end, db_begin, w, frag_pos(static_cast<int>(d), static_cast<int>(kp)), q_begin, q_end, best_d,
              best_i, FusedBlocks{}, sort_merge()};
  const int64_t blocks = (q_end - q_begin + 16 * kExactWarps - 1) / (16 * kExactWarps);
  launch_mma<kExactWarps, false>(r, P, static_cast<int>(kp), static_cast<unsigned>(blocks));
}

void mma_candidates_ranges(CudaResources& r, const float* Q, const float* D, int64_t n, int64_t kp, int64_t d, int w,
                           const FusedBlocks& blocks, float* best_d, int32_t* best_i, int64_t db0) {
  if (!mma_ivf_supported(kp, w)) fail("mma kNN: unsupported depth ", kp, " or width ", w);
  if (blocks.n_blocks == 0 || n == 0) return;
  if (blocks.n_blocks > INT32_MAX || blocks.range_cap < 1 || !blocks.query_range || !blocks.ranges ||
      !blocks.n_ranges || !blocks.ids)
    fail("mma kNN: invalid IVF block description (", blocks.n_blocks, " blocks, range capacity ", blocks.range_cap,
         ")");
  MmaParams P{Q, D, n, db0, w, frag_pos(static_cast<int>(d), static_cast<int>(kp)), 0, n, best_d, best_i, blocks,
              sort_merge()};
  launch_mma<kIvfWarps, true>(r, P, static_cast<int>(kp), static_cast<unsigned>(blocks.n_blocks));
}

}  // namespace scurry::gpu::knn
