// scurry: the pieces of Scrublet (scrublet.hpp) that the host pipeline (scrublet.cpp) and the device
// one (scrublet_gpu.cu) share: the doublet pairs, k and k_adj, the count search's settings, and the
// scores, threshold and predictions from the neighbour counts.
#pragma once
#include <cstdint>
#include <vector>

#include "pp/scrublet.hpp"
#include "pp/scrublet_knn_gpu.hpp"

namespace scurry::scrublet_detail {

constexpr int64_t kIvfMinCells = 8192;       // observed cells above which the search is IVF (unset option)
constexpr double kIvfCandidatesPerK = 16.0;  // IVF probes: about this many candidates per neighbour
constexpr double kGpuExactPairs = 68719476736.0;  // 2^36 point pairs (~262k points): the GPU count is exact

// round-down n * sim_doublet_ratio, checked (InputError when none or more than n^2).
int64_t n_simulated(int64_t n, const ScrubletOptions& opt);
// n_sim distinct ordered pairs of [0, n)^2 as scanpy 1.10 draws them (numpy's legacy MT19937
// RandomState(seed) and sklearn's sample_without_replacement, tracking selection): 2 n_sim parents.
std::vector<int64_t> draw_parents(int64_t n, int64_t n_sim, uint64_t seed);
// k = n_neighbors or round(0.5 sqrt(n)) (InputError below 1); k_adj = round(k (1 + n_sim / n)), at
// most n + n_sim.
int neighbours_k(int64_t n, const ScrubletOptions& opt);
int64_t k_adjusted(int k, int64_t n, int64_t n_sim);
// The GPU count search's settings: exact when use_approx_neighbors is set (false), up to
// kIvfMinCells observed cells, or up to kGpuExactPairs point pairs; else IVF with kIvfCandidatesPerK
// candidates per k_adj (SCURRY_SCRUBLET_KNN=exact|ivf overrides).
ScrubletKnnOptions count_options(const ScrubletOptions& opt, int64_t n, uint64_t seed);
// From n_dbl (per observed then simulated point, the simulated among its k_adj - 1 nearest others):
// the Bayesian scores, doublet_scores_sim, the threshold (opt's or threshold_minimum) and the
// per-cell scores and predictions of the kept cells (kept: the batch's cells left by the filters,
// all n_in when the size is n_in).
void finish(ScrubletBatchResult& res, const std::vector<int32_t>& n_dbl, int64_t n, int64_t n_sim, int64_t k_adj,
            const ScrubletOptions& opt, const std::vector<int64_t>& kept, int64_t n_in);

}  // namespace scurry::scrublet_detail
