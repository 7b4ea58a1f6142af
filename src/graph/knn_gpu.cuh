// scurry: GPU kNN internals shared by knn_exact.cu and knn_ivf.cu (included by .cu files only).
// The primitives are defined in knn_exact.cu.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/matrix.hpp"
#include "exec/cuda_resources.cuh"
#include "graph/knn.hpp"
#include "graph/knn_gpu.hpp"

namespace scurry::gpu::knn {

// The CUDA resources of ctx; InputError naming `where` when the Context is not a CUDA one.
CudaResources& require_cuda(const Context& ctx, const char* where);
// Validates X and k as knn_exact does, plus k < n (InputError).
void check_input(const Context& ctx, const DenseF& X, int64_t k, const char* where);
// Candidates kept per query before the float64 re-rank: the power of two >= (k - 1) + max(8, k - 1),
// at least 32.
int candidate_width(int64_t k);
// Candidates kept per query by the IVF search: candidate_width(k) up to k = 33 (W <= 64); past that a
// margin of a quarter, (k - 1) + max(8, (k - 1) / 4) rounded up to a power of two (k = 92: 128, not
// 256), so that the mma kernel's lists fit in shared memory. The margin covers TF32 rounding of the
// scores near the (k - 1)-th (a relative 2^-11 of the norms); the search itself is approximate.
int ivf_candidate_width(int64_t k);
// Smallest power of two >= max(v, 32).
int pow2_width(int64_t v);

// Per row of dX (n x d): nrm[i] = ||x_i|| in float64; when sqn is given, sqn[i] = ||x_i - mean||^2
// (mean may be null: zero) computed in float64 over the float32 centred values, rounded to float.
void row_stats(CudaResources& r, const float* dX, int64_t n, int64_t d, const float* mean, double* nrm, float* sqn);
// Column means of dX in float64, rounded to float (deterministic).
void column_means(CudaResources& r, const float* dX, int64_t n, int64_t d, float* mean);
// out[i, c] = float(x[i, c] / nrm[i]) (0 for zero rows): cosine works on unit rows.
void unit_rows(CudaResources& r, const float* dX, const double* nrm, int64_t n, int64_t d, float* out);
// Sets count entries to (+inf, -1).
void fill_empty(CudaResources& r, float* d, int32_t* i, int64_t count);

// Merges a score tile into running sorted top-w lists. tile: nq x nr row-major (ld nr), the score of
// (query q, column r) being tile[q, r] + (col_add ? col_add[r] : 0) with id id0 + r; self0 >= 0
// excludes id == self0 + q (the query itself); self_ids (device, nq) instead when given. best_d/best_i:
// nq x w (sorted, from fill_empty or an earlier call).
void select_tile(CudaResources& r, const float* tile, int64_t nq, int64_t nr, const float* col_add, int64_t id0,
                 int64_t self0, float* best_d, int32_t* best_i, int w, const int32_t* self_ids = nullptr);

// Final result: per row i, self first, then the k - 1 best of cand[i, 0..w) (ids, -1 = none) by exact
// float64 distance over dX (raw rows; nrm from row_stats for cosine), written to out_idx/out_dist
// (n x k; missing: -1 / +inf). With rows (device, n entries): cand holds the candidates of the rows
// rows[0..n) (a subset), and each result goes to its row's place in out_idx/out_dist. Without rows the
// rows are row0 .. row0 + n - 1. The result of row i goes to output row i - row0, or to row t (the
// t-th searched) when compact. cand_at_cell: the candidates of cell i are row i of cand (n_cells x w)
// instead of row t. out_dist64 (optional, n x k like out_dist): the same distances in float64, before
// the float rounding and the clamp at 0 (the keys of a top-k merge over GPUs; missing: +inf).
void rerank(CudaResources& r, const float* dX, const double* nrm, int64_t n, int64_t d, KnnMetric metric,
            const int32_t* cand, int w, int64_t k, int32_t* out_idx, float* out_dist, const int32_t* rows = nullptr,
            int64_t row0 = 0, bool compact = false, bool cand_at_cell = false, double* out_dist64 = nullptr);

// The exact search through the IVF lists (knn_ivf.cu), euclidean: stage 1 = the IVF search (P probes
// per query, block unions), re-ranked into out_idx/out_dist; then per query the Voronoi-cell bound of
// every list its block did not scan against its k-th distance; the lists that do not clear it are
// scanned in stage 2 (per block, all of them while the range table fits 1 GiB, else at least 8P: more
// and the block's queries get redo = 1), starting from stage 1's lists, into best_d/best_i (n x w,
// original order, TF32 scores of rows
// centred on their means, whose squared norms go to sqn_orig). redo[i] = 1 marks queries the caller
// must search whole. With the caller's TF32 certificate the result equals a brute-force search.
struct IvfExactStats {
  int64_t lists = 0, probes = 0, blocks = 0, stage2_blocks = 0, stage2_ranges = 0, overflow_blocks = 0;
  double e_abs = 0;  // the assignment rounding margin used by the bound
};
void ivf_exact_candidates(CudaResources& r, const float* dX, const double* nrm, int64_t n, int64_t d, int64_t k,
                          const IvfOptions& opt, int w, float* best_d, int32_t* best_i, int32_t* out_idx,
                          float* out_dist, float* sqn_orig, uint8_t* redo, IvfExactStats* stats);

// Runs fn(s) for every context on a thread of its own (its device made current), then rethrows the
// first error (several GPUs of one host: knn_exact_gpus, knn_ivf_gpus).
void on_each_gpu(const std::vector<Context*>& ctxs, const std::function<void(int)>& fn);

// Copies device results into a host Knn.
Knn download(CudaResources& r, const int32_t* d_idx, const float* d_dist, int64_t n, int64_t k);

}  // namespace scurry::gpu::knn
