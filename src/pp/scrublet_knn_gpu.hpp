// scurry: Scrublet's neighbour count on the GPU (host-visible API, no CUDA types). Scrublet's score
// (Wolock, Lopez & Klein 2019) needs, for every observed or simulated cell, only the number of
// simulated cells among its k_adj nearest neighbours, never the neighbour list (at 1.3M cells,
// k_adj = 1,713 over 3.9M points: 27 GB of indices). This search returns that count directly, for
// any k (no top-k list is kept), euclidean.
//
// IVF lists (k-means on a seeded sample, Lloyd with fp32 cuBLAS assignments; every point in the list
// of its nearest centroid). The queries of one list share one candidate set: the lists nearest to
// the list's centroid (its own first), taken until they hold `candidates_per_k` x k points (the CPU
// IVF's kIvfCandidatesPerK rule), or every list (exact). Per chunk of queries (a buffer of a few GB),
// a tiled kernel writes every (query, candidate) squared distance (float32, difference form) as a
// sortable 32-bit key; then one block per query finds the (k - 1)-th smallest key (three radix
// passes over the row, held in shared memory when it fits) and counts the simulated candidates
// below it. The candidates within a relative 1e-5 of that distance (far above the float32 error of
// the 30-term sum, ~2e-6) are re-ranked by float64 distance, ties by index, so that the count is
// that of the k - 1 nearest by (float64 distance, index), as the CPU's exact search orders them
// (exact mode: identical to a float64 brute force). Integer atomics only: the same bits every run.
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct ScrubletKnnOptions {
  bool exact = false;              // every list is a candidate of every query
  double candidates_per_k = 16.0;  // approximate: lists are added until they hold this x k points
  int64_t n_lists = 0;             // 0: round(sqrt(n))
  uint64_t seed = 0;               // k-means sample and re-seeding
  int kmeans_iterations = 8;
  int64_t kmeans_points_per_list = 64;
  int64_t buffer_entries = int64_t{1} << 30;  // distance keys per chunk (4 bytes each)
};

struct ScrubletKnnStats {
  int64_t lists = 0, chunks = 0, boundary_overflow = 0;
  double mean_candidates = 0;  // per query
};

// The number of rows >= n_obs (the simulated ones) among the k - 1 nearest other rows of every row of
// X (n x d, float32; euclidean; nearest by float64 distance over the float32 rows, ties by index):
// the k_adj - 1 neighbours the CPU's Scrublet counts from a k_adj search (self first). Needs a CUDA
// context (InputError otherwise; builds without CUDA throw InputError); 2 <= k < n, d <= 64.
std::vector<int32_t> scrublet_sim_neighbor_counts_gpu(const Context& ctx, const DenseF& X, int64_t n_obs, int64_t k,
                                                      const ScrubletKnnOptions& opt = {},
                                                      ScrubletKnnStats* stats = nullptr);

// The largest point dimension the GPU count search takes.
constexpr int64_t kScrubletKnnMaxDims = 64;

}  // namespace scurry
