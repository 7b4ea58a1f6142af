// scurry: k-nearest-neighbour search on the GPU (host-visible API, no CUDA types), the CUDA
// counterpart of knn.hpp with the same result (Knn: self first at distance 0, then k - 1 neighbours
// by increasing exact float64 distance, ties by cell index) and the same metrics.
//
// - exact (knn_exact.cu, knn_mma.cu): candidate scores ||y||^2 - 2 x.y (euclidean, on column-centred
//   data) or -x.y (cosine, unit rows) from TF32 mma.sync tiles that never leave the multiprocessor,
//   folded into per-query top-W lists (W = k - 1 + margin, a power of two); the W candidates are then
//   re-ranked with exact float64 distances, and a per-query certificate from the TF32 error bound
//   sends the few queries without it to a split-TF32 search, so the neighbour sets equal a float64
//   brute force (ties aside). (The cuBLAS tile path remains for the other precisions.)
// - IVF-Flat (knn_ivf.cu): k-means (seeded sample, balanced) on the GPU gives n_lists centroids; every
//   cell goes to the list of its nearest centroid; each cell picks its n_probes nearest lists; blocks
//   of up to 64 cells of one list scan the union of their lists (the most-probed 2 x n_probes) with the
//   same mma kernel, then the same float64 re-rank.
// - Several GPUs of one host (knn_exact_gpus, knn_ivf_gpus), two modes (KnnShard):
//   queries (default): every GPU holds the whole index and searches a share of the queries; the rows
//     are joined (join_rows, no merge).
//   index: every GPU holds a share of the index (exact: equal row ranges of the candidate operand;
//     IVF: whole lists, balanced by size) and searches every query against it; the per-query lists
//     are merged on the host (merge_topk). The embedding itself stays whole on every GPU (self-kNN:
//     every row is a query).
//   Both give one GPU's result (see knn_exact_gpus, knn_ivf_gpus). MPI ranks (knn_exact_gpu_rows,
//   knn_ivf_gpu_shard) split the queries only.
//
// Both need a CUDA Context (InputError otherwise) and return results that do not depend on timing
// (no atomics on floating-point values). Builds without CUDA have stubs that throw InputError.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/knn.hpp"

namespace scurry {

// Arithmetic of the candidate GEMM of the exact search (the final distances are float64 either way).
//  fp32    plain float32 SGEMM (CUDA cores): as exact as the CPU search, the slowest.
//  tf32x3  split TF32 on tensor cores: x = hi + lo, x.y ~ hi.hi + hi.lo + lo.hi (one GEMM over 3d
//          columns): float32-level accuracy at three TF32 passes.
//  tf32    one TF32 pass (10-bit mantissa): fastest; candidates may miss a neighbour whose score is
//          within TF32 rounding of the W-th candidate (the re-rank cannot recover it).
//  fused   (default) one TF32 pass fused with the top-W selection (knn_fused.cu; scores never
//          leave the multiprocessor), then a per-query certificate from the TF32 error bound: queries
//          whose (k-1)-th exact distance is not clear of the W-th candidate by that bound are searched
//          again with tf32x3. Exact like tf32x3, several times faster.
enum class KnnGemmPrecision { fp32, tf32x3, tf32, fused };

// How the fused exact search visits the database (euclidean; cosine is always brute force):
//  brute      every query block against every row (n^2 scores).
//  lists      through IVF lists with a certificate (knn_ivf.cu, ivf_exact_candidates): the probed
//             lists first, then every list whose Voronoi-cell lower bound does not clear the query's
//             k-th distance; the same result as brute, far fewer scores on clustered data.
//             It pays only where the Voronoi bounds are tight (low intrinsic dimension): on the
//             synthetic 1.3M benchmark (10 near-isotropic blobs in 50 PCs) every query block still
//             needs ~all lists and it takes 5.3 s against brute's 4.1-4.7 s (bench/RESULTS.md).
//  automatic  brute (SCURRY_KNN_EXACT=brute|lists overrides it).
enum class KnnExactStrategy { automatic, brute, lists };

// How knn_exact_gpus / knn_ivf_gpus share a search among several GPUs (`--knn-shard`):
//  queries  every GPU holds the whole index and searches an equal share of the queries (the rows are
//           joined); the least host work, the default.
//  index    every GPU holds a share of the index and searches all queries against it; the per-query
//           top-k lists are merged on the host (merge_topk, float64 keys, ties by index).
enum class KnnShard { queries, index };

// "queries" | "index"; InputError otherwise (naming `where`).
KnnShard parse_knn_shard(const std::string& s, const std::string& where);
const char* knn_shard_name(KnnShard s);

struct KnnExactGpuOptions {
  KnnGemmPrecision precision = KnnGemmPrecision::fused;
  int64_t* redo_count = nullptr;  // fused: when set, receives the number of queries searched again
  KnnExactStrategy strategy = KnnExactStrategy::automatic;
  int64_t list_probes = 0;        // lists: first-stage probes per query (0: IVF-Flat's default)
  std::string* report = nullptr;  // when set, receives a line on what the search did (lists: its stages)
  KnnShard sharding = KnnShard::queries;  // several GPUs (knn_exact_gpus)
};

struct IvfOptions {
  // Number of inverted lists (k-means centroids); 0 = round(sqrt(n_cells)). 1 <= n_lists <= n_cells.
  int64_t n_lists = 0;
  // Lists scanned per query; 0 = min(n_lists, max(16, n_lists / 32)) (recall@15 >= 0.95 on clustered
  // data; a block of up to 64 queries of one list scans the union of its queries' lists, up to
  // 2 x n_probes of them). At most n_lists and 1024.
  int64_t n_probes = 0;
  // Seeds the k-means sample, its initial centroids and the re-seeding of small clusters.
  uint64_t seed = 0;
  // k-means (Lloyd) iterations on the sample.
  int kmeans_iterations = 10;
  // k-means sample size = min(n_cells, kmeans_points_per_list * n_lists).
  int64_t kmeans_points_per_list = 256;
  // Balance: after each iteration, a centroid with fewer than this fraction of the mean cluster size
  // moves onto a random sample point of a cluster larger than the mean (splitting it).
  double kmeans_min_cluster_fraction = 0.25;
  // Several GPUs (knn_ivf_gpus sets these): this call searches only the query blocks of part `shard`
  // of `n_shards` (contiguous in list order, balanced by cells); every other row of its result is the
  // cell itself and no neighbours (-1). Every part builds the same lists (same seed, same arithmetic).
  int shard = 0;
  int n_shards = 1;
  // Several GPUs (knn_ivf_gpus): split the query blocks (queries) or the lists (index).
  KnnShard sharding = KnnShard::queries;
};

// Exact k nearest neighbours of every row of X (n x d float32, host) among all rows, self included as
// neighbour 0. 1 <= k < n and k <= 513 (InputError otherwise), finite values.
Knn knn_exact_gpu(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric,
                  const KnnExactGpuOptions& opt = {});
// Approximate (IVF-Flat) search, same conventions. Rows for which the probed lists hold fewer than
// k - 1 other cells get index -1 and distance +inf in the missing columns (as knn_hnsw does).
Knn knn_ivf_gpu(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfOptions& opt = {});

// IVF-Flat over several GPUs (ctxs: one CUDA context each, the first the main one), each on its own
// thread; every GPU builds the same lists (the same seed and arithmetic; the index is small: n x d
// floats, 2.3 GB at 11.4M x 50). opt.sharding:
//  queries  every GPU searches its share of the query blocks; the rows are joined on the host.
//  index    the lists are dealt to the GPUs (largest first, each to the GPU with the fewest rows so
//           far); GPU s keeps the operand of its lists' rows only and, for every query block, scans
//           those of the block's probed lists it owns, giving per query its best W TF32 candidates
//           (W = the re-rank width, candidate_width). The W-lists are merged on the host by (score,
//           index) (merge_topk: the TF32 scores are the same arithmetic on every GPU) and re-ranked in
//           float64 on ctxs[0]. Merging the candidates before the re-rank is what makes the result
//           equal one GPU's: a merge of per-GPU re-ranked top k - 1 lists would re-rank a superset of
//           one GPU's candidates (up to S x W), at least as good but not the same.
// Either way equal to knn_ivf_gpu on one GPU (ties of TF32 scores at the W-th candidate aside: the
// kernel keeps the first seen).
Knn knn_ivf_gpus(const std::vector<Context*>& ctxs, const DenseF& X, int64_t k, KnnMetric metric,
                 const IvfOptions& opt = {});
// The exact search over several GPUs of this host (the first is ctxs[0]), opt.sharding:
//  queries  every GPU holds the whole embedding and searches an equal share of the queries (rows in
//           order) against all rows; the parts are joined on the host (each query's search is the
//           same arithmetic on any GPU).
//  index    GPU s holds the candidate operand of rows [n s / S, n (s + 1) / S) only, and searches
//           every query against them: TF32 candidates, float64 re-rank, the certificate and the
//           split-TF32 redo all restricted to its rows, giving each query's exact k - 1 nearest rows
//           of the share with float64 distances; these are merged on the host by (distance, index).
// The same result as knn_exact_gpu either way. Only the default search splits (fused precision, every
// row, the mma kernel); otherwise, or with one context, it is knn_exact_gpu on ctxs[0].
Knn knn_exact_gpus(const std::vector<Context*>& ctxs, const DenseF& X, int64_t k, KnnMetric metric,
                   const KnnExactGpuOptions& opt = {});
// One rank's part (MPI, one GPU per rank): the exact neighbours of rows [begin, end) of X among all
// rows, a Knn of end - begin rows (the default search; the same rows as knn_exact_gpu's). MPI splits
// the queries only (no index sharding over ranks).
Knn knn_exact_gpu_rows(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, int64_t begin, int64_t end);
// One shard of the IVF-Flat search (opt.shard of opt.n_shards): a Knn of the cells it searched, row t
// being cell cells[t] (the shards' cells partition the rows).
Knn knn_ivf_gpu_shard(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfOptions& opt,
                      std::vector<int32_t>& cells);

// Conveniences with the metric by name ("euclidean" | "cosine").
inline Knn knn_exact_gpu(const Context& ctx, const DenseF& X, int64_t k, const std::string& metric) {
  return knn_exact_gpu(ctx, X, k, parse_knn_metric(metric, "neighbors"));
}
inline Knn knn_ivf_gpu(const Context& ctx, const DenseF& X, int64_t k, const std::string& metric, int64_t n_lists,
                       int64_t n_probes, uint64_t seed) {
  IvfOptions o;
  o.n_lists = n_lists;
  o.n_probes = n_probes;
  o.seed = seed;
  return knn_ivf_gpu(ctx, X, k, parse_knn_metric(metric, "neighbors"), o);
}

}  // namespace scurry
