// Fused TF32 candidate search of the exact kNN and of IVF-Flat (knn_fused.cu).
#pragma once
#include <cstdint>

#include "exec/cuda_resources.cuh"

namespace scurry::gpu::knn {

// Queries per block of the fused kernel (the IVF form's query blocks hold at most this many).
constexpr int kFusedQueries = 64;

// Whether the fused kernel takes rows of kp floats (padded depth) and W candidates.
bool fused_supported(int64_t kp, int w);

// best_d/best_i (n x w): for every row of A (n x kp, TF32-rounded, zero-padded), the w best other rows
// by TF32 score ||y||^2 - 2 x.y (sqn = ||y||^2 per row) or -x.y (sqn null), sorted ascending, ties by
// index; empty slots +inf / -1.
void fused_candidates(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t kp, int w, float* best_d,
                      int32_t* best_i);

// The IVF form (device arrays): block b searches the queries = rows [query_range[2b], query_range[2b+1])
// of A (at most kFusedQueries) against the rows of its n_ranges[b] database ranges
// ranges[(b * range_cap + j) * 2 + {0, 1}] = [begin, end) of A (disjoint; any order). Rows of A are
// positions; ids[p] is the original index of position p: candidates are written as original indices,
// and the list of query position q goes to row ids[q] of best_d/best_i (rows of A no block queries are
// left untouched). Same scores, order and empty slots as fused_candidates.
struct FusedBlocks {
  int64_t n_blocks = 0;
  const int64_t* query_range = nullptr;  // n_blocks x 2
  const int64_t* ranges = nullptr;       // n_blocks x range_cap x 2
  const int32_t* n_ranges = nullptr;     // n_blocks, each <= range_cap
  int range_cap = 0;
  const int32_t* ids = nullptr;          // n
  // Start from the lists already in best_d/best_i (row ids[q]) instead of empty ones: a second pass
  // over more ranges (the exact search through the lists) that also begins with tight thresholds.
  bool seeded = false;
};
void fused_candidates_ranges(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t kp, int w,
                             const FusedBlocks& blocks, float* best_d, int32_t* best_i);

// The database tiles a block of the fused or mma kernel walks: rows [r0, min(r0 + kRows, r_end)) of
// its ranges (IVF: the block's probed ranges, walked from the one holding the block's first query q0,
// its own list, so the thresholds tighten early, wrapping around; exact: the one range [lo, n), lo = 0
// unless the database is a share of the rows). Block-uniform. next() moves to the next non-empty
// tile; false when none is left.
template <int kRows, bool kIvf>
struct TileWalk {
  const int64_t* rg;  // kIvf: 2 per range, [begin, end)
  int n_rg;
  int64_t n;
  int64_t lo;
  int j0 = 0;
  int t = -1;  // ranges visited, counted from j0
  int64_t r0 = 0, r_end = 0;

  __device__ TileWalk(const int64_t* rg_, int n_rg_, int64_t n_, int64_t q0, int64_t lo_ = 0)
      : rg(rg_), n_rg(n_rg_), n(n_), lo(lo_) {
    if (kIvf)
      for (int j = 0; j < n_rg; ++j)
        if (begin(j) <= q0 && q0 < end(j)) {
          j0 = j;
          break;
        }
  }
  __device__ int64_t begin(int j) const { return kIvf ? rg[2 * j] : lo; }
  __device__ int64_t end(int j) const { return kIvf ? rg[2 * j + 1] : n; }
  __device__ bool next() {
    if (t >= 0 && r0 + kRows < r_end) {
      r0 += kRows;
      return true;
    }
    while (++t < n_rg) {
      const int j = t + j0 < n_rg ? t + j0 : t + j0 - n_rg;
      r0 = begin(j);
      r_end = end(j);
      if (r0 < r_end) return true;
    }
    return false;
  }
};

// The raw mma.sync kernels (knn_mma.cu), the default (SCURRY_KNN_KERNEL=wmma: the WMMA kernels above).
// They take two operands made from a fused operand A (n x ka, TF32-rounded, zero past column d) and
// sqn (null: cosine) by mma_operands: Q and D, n x mma_depth(d, sqn != null) floats each, in fragment
// order, whose product is the score itself (||y||^2 - 2 x.y, or -x.y). Either output may be null (not
// written): an index split over GPUs makes Q for every row and D for a share of them.
int64_t mma_depth(int64_t d, bool euclidean);
bool mma_supported(int64_t kp, int w);
// The IVF form (mma_candidates_ranges) also takes wide lists: W up to kShortMaxW (256) with a short buffer.
bool mma_ivf_supported(int64_t kp, int w);
bool mma_enabled();  // not SCURRY_KNN_KERNEL=wmma
void mma_operands(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t ka, int64_t d, int64_t kp,
                  float* Q, float* D);
// fused_candidates for the queries [q_begin, q_end) against the database rows [db_begin, db_end)
// (db_end < 0: n): the list of query q goes to row q - q_begin of best_d/best_i ((q_end - q_begin) x
// w); candidate ids are row numbers in [0, n). Q holds all n rows, D only rows db_begin .. db_end - 1
// (D's row 0 is row db_begin).
void mma_candidates(CudaResources& r, const float* Q, const float* D, int64_t n, int64_t kp, int64_t d, int w,
                    int64_t q_begin, int64_t q_end, float* best_d, int32_t* best_i, int64_t db_begin = 0,
                    int64_t db_end = -1);
// fused_candidates_ranges on the mma operands. D's row 0 is position db0 (an index split over GPUs:
// this GPU's positions [db0, db0 + rows of D); every range must lie there); Q holds all n positions.
void mma_candidates_ranges(CudaResources& r, const float* Q, const float* D, int64_t n, int64_t kp, int64_t d, int w,
                           const FusedBlocks& blocks, float* best_d, int32_t* best_i, int64_t db0 = 0);

}  // namespace scurry::gpu::knn
