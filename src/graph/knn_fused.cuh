// Fused TF32 candidate search of the exact kNN (knn_fused.cu).
#pragma once
#include <cstdint>

#include "exec/cuda_resources.cuh"

namespace scurry::gpu::knn {

// Whether the fused kernel takes rows of kp floats (padded depth) and W candidates.
bool fused_supported(int64_t kp, int w);

// best_d/best_i (n x w): for every row of A (n x kp, TF32-rounded, zero-padded), the w best other rows
// by TF32 score ||y||^2 - 2 x.y (sqn = ||y||^2 per row) or -x.y (sqn null), sorted ascending, ties by
// index; empty slots +inf / -1.
void fused_candidates(CudaResources& r, const float* A, const float* sqn, int64_t n, int64_t kp, int w, float* best_d,
                      int32_t* best_i);

}  // namespace scurry::gpu::knn
