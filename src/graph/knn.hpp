// scurry: k-nearest-neighbour search on a dense embedding (cells x dims, e.g. X_pca), as the input
// of scanpy's `sc.pp.neighbors`. Every cell is its own neighbour 0 (distance 0), as umap's
// nearest_neighbors returns it; the other k - 1 follow by increasing distance (ties by cell index).
//
// - exact: blocked float32 GEMM (cblas_sgemm) gives candidate distances ||x||^2 + ||y||^2 - 2 x.y;
//   a partial sort keeps the k + margin best candidates per cell, which are re-ranked with exact
//   float64 distances, so the neighbour sets equal a float64 brute force (ties aside). Query rows
//   are processed in fixed blocks with parallel_for and single-threaded BLAS: results are
//   bit-identical for any thread count.
// - ivf: IVF-Flat over BLAS (knn_ivf.cpp): k-means lists, each block of queries of one list scans,
//   with one sgemm a list, every list that any of its queries probes; candidates re-ranked in float64.
//   Deterministic for any thread count (fixed blocks, no shared state between them).
// - hnsw: hnswlib's HierarchicalNSW (approximate). The index is built single-threaded in cell order
//   (seeded by random_state), so it does not depend on the thread count; queries run in parallel
//   blocks; returned distances are recomputed exactly in float64.
//
// Metrics: "euclidean" (distance = ||x - y||) and "cosine" (1 - x.y / (||x|| ||y||); a row of zeros
// is at distance 1 from every other row).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

// k neighbours per cell, row-major n x k; column 0 is the cell itself at distance 0.
struct Knn {
  int64_t n = 0;
  int64_t k = 0;
  std::vector<int32_t> indices;  // n * k
  std::vector<float> distances;  // n * k, non-decreasing along each row

  int32_t index(int64_t i, int64_t j) const { return indices[static_cast<size_t>(i * k + j)]; }
  float distance(int64_t i, int64_t j) const { return distances[static_cast<size_t>(i * k + j)]; }
};

// The rows of several parts of a search in cell order (several GPUs, MPI ranks): row t of parts[p] is
// cell cells[p][t]. The parts' cells must hold every cell of 0..n-1 exactly once (Error otherwise).
Knn join_rows(int64_t n, int64_t k, const std::vector<std::vector<int32_t>>& cells, const std::vector<Knn>& parts);

// Sorted candidate lists, w a row, keyed in float64 (a part of a search whose index is split, e.g. one
// GPU's share of the rows): row i holds (key, index) pairs in increasing (key, index) order; empty
// slots hold index -1 and key +inf and come last.
struct TopkLists {
  int64_t n = 0;
  int64_t w = 0;
  std::vector<int32_t> indices;  // n * w
  std::vector<double> keys;      // n * w
};
// The top-k merge of parts that split the index (several GPUs, each holding a share of the rows):
// per row, the w smallest (key, index) pairs over all parts' row, ties by index, a pair held by
// several parts counted once; missing slots -1 / +inf. The parts' rows must be sorted (as
// TopkLists says) and the parts have the same n (Error otherwise); their widths may differ. Rows are merged in parallel over `threads` (the result
// does not depend on it). When every part holds its own top-w (or more) of a disjoint share of the
// rows, the result is the top-w of the whole.
TopkLists merge_topk(const std::vector<TopkLists>& parts, int64_t w, int threads = 1);
// A Knn (knn.hpp's convention) from merged neighbour lists that exclude the cell itself: row i is
// cell i at distance 0, then the first k - 1 entries of lists' row i with distance float(max(0, key))
// (missing: -1 / +inf). lists.w >= k - 1.
Knn knn_from_lists(const TopkLists& lists, int64_t k);

enum class KnnMetric { euclidean, cosine };

// "euclidean" | "cosine"; InputError otherwise (naming `where`).
KnnMetric parse_knn_metric(const std::string& s, const std::string& where);
const char* knn_metric_name(KnnMetric m);

struct HnswOptions {
  int64_t M = 16;                 // graph degree (hnswlib M)
  int64_t ef_construction = 200;  // candidate list while building
  int64_t ef = 0;                 // candidate list while searching; 0 = max(4 k, 64)
  uint64_t random_state = 0;      // seeds hnswlib's level generator
};

// CPU IVF-Flat (inverted lists; Jegou, Douze & Schmid 2011, "Product quantization for nearest
// neighbor search", its IVF stage without quantization, as FAISS's IndexIVFFlat).
struct IvfCpuOptions {
  // Inverted lists (k-means centroids); 0 = round(sqrt(n_cells) * lists_per_sqrt_n), at least 1.
  int64_t n_lists = 0;
  double lists_per_sqrt_n = 1.0;
  // Lists every query scans (its nearest centroids); 0 = auto (knn_ivf_cpu.cpp: round(sqrt(n_lists)),
  // at least 8, for recall@15 >= 0.98 against the exact search on clustered embeddings). At most n_lists.
  int64_t n_probes = 0;
  // Seeds the k-means sample, its initial centroids and the re-seeding of small clusters.
  uint64_t seed = 0;
  // k-means (Lloyd) iterations on the sample.
  int kmeans_iterations = 8;
  // k-means sample size = min(n_cells, kmeans_points_per_list * n_lists).
  int64_t kmeans_points_per_list = 64;
  // Score the lists with sgemm and a scan of its output even where the fused AVX2/FMA scan runs
  // (knn_ivf_cpu.cpp; the choice where the CPU lacks AVX2 or FMA).
  bool blas_scan = false;
};

// Exact search. X: n x d float32; 1 <= k <= n (InputError otherwise); non-finite values are an
// InputError.
Knn knn_exact(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric);
// Approximate search with IVF-Flat (same conventions; a row whose probed lists hold fewer than k - 1
// other cells gets -1 / +inf in the missing columns).
// Tests: the fused scan's instruction set, -1 (default) the best the CPU has, 0 AVX2 and FMA only (the
// AVX-512 form gives the same bits).
void knn_ivf_scan_isa(int isa);
Knn knn_ivf(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfCpuOptions& opt = {});
Knn knn_ivf(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const IvfCpuOptions& opt,
            int64_t row_begin, int64_t row_end);
// Approximate search with hnswlib (same conventions).
Knn knn_hnsw(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const HnswOptions& opt = {});
// The same searches for the query cells [row_begin, row_end) only, against all rows of X (one rank's
// share of the cells): the result has row_end - row_begin rows (neighbour indices into X), each equal
// to that cell's row of the full search.
Knn knn_exact(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, int64_t row_begin, int64_t row_end);
Knn knn_hnsw(const Context& ctx, const DenseF& X, int64_t k, KnnMetric metric, const HnswOptions& opt,
             int64_t row_begin, int64_t row_end);
// Float64 brute force, O(n^2 d) single-threaded: the oracle for tests.
Knn knn_brute_force(const DenseF& X, int64_t k, KnnMetric metric);

}  // namespace scurry
