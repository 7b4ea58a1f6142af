// scurry: Scrublet's neighbour count on rows already on the device (scrublet_knn_gpu.hpp explains
// the search). Included by .cu files only.
#pragma once
#include <cstdint>
#include <vector>

#include "exec/cuda_resources.cuh"
#include "pp/scrublet_knn_gpu.hpp"

namespace scurry::gpu {

// dY: n x d float32 rows on r's device (row-major), observed rows first (rows < n_obs). Returns per
// row the number of rows >= n_obs among its k - 1 nearest other rows (scrublet_sim_neighbor_counts_gpu).
std::vector<int32_t> scrublet_sim_neighbor_counts(CudaResources& r, const float* dY, int64_t n, int64_t d,
                                                  int64_t n_obs, int64_t k, const ScrubletKnnOptions& opt,
                                                  ScrubletKnnStats* stats);

}  // namespace scurry::gpu
