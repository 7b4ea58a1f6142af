// scurry: Harmony on the GPU (issue 21 point 1): the algorithm of harmony() (harmony.hpp:
// harmonypy 0.0.9's; Korsunsky et al. 2019) with the N x d embedding, the N x K distances and soft
// assignments resident on one device in float64:
// - the initial centroids: sklearn's k-means++ (greedy, 2 + ln K trials) and Lloyd iterations,
//   n_init restarts in lockstep, float32 distances by one cuBLAS SGEMM per pass, as the CPU path
//   (the same host RNG streams choose the same candidates where the float32 sums agree);
// - the cluster step: centroids Y = normalize(R^T Zcos) and distances 2 (1 - Zcos Y^T) by cuBLAS
//   DGEMM; the R update in ceil(1 / block_size) blocks of a random order (a seeded counter hash per
//   cell sorted by cub's radix sort: a different stream than the CPU's Fisher-Yates shuffle), the
//   softmax with the diversity penalty one warp per cell, E and O kept on the device;
// - the ridge correction: the per-cluster (B+1) x (B+1) systems and right-hand sides as per-batch
//   DGEMMs over the cells gathered in batch order, the small solves on the host in float64, the
//   correction as per-batch DGEMMs.
// Every sum over cells is a fixed partition with float64 partials added in a fixed order (no
// floating-point atomics), so two runs give the same bits. Results agree with the CPU path
// statistically (different shuffles and summation orders), not bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "pp/harmony.hpp"

namespace scurry {

// As harmony(), on ctx's GPU. Throws scurry::Error without a CUDA build or device.
HarmonyResult harmony_gpu(const Context& ctx, const DenseD& Z, const std::vector<std::vector<int32_t>>& codes,
                          const std::vector<int32_t>& n_levels, const HarmonyOptions& opt);
// The same from a float32 embedding (X_pca as anndata stores it), widened to float64 on the device;
// the result is narrowed to float32 on the device into Z_corr (the returned Z_corr stays empty).
// Equal to harmony_gpu on the widened embedding, narrowed.
HarmonyResult harmony_gpu(const Context& ctx, const DenseF& Z, const std::vector<std::vector<int32_t>>& codes,
                          const std::vector<int32_t>& n_levels, const HarmonyOptions& opt, DenseF& Z_corr);

}  // namespace scurry
