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
//
// Several GPUs of one host (harmony_gpus, issue 21 point 5): the cells split into contiguous balanced
// ranges, one per context (several contexts may share a device), one host thread each. Each rank
// keeps its cells' Z, Z_cos, R, distances and corrections on its device; every per-iteration sum over
// cells (the centroids' R^T Z_cos, K x d; the block sums of R and R Phi^T behind E and O, K + K B per
// R-update block; the objective's three terms; the ridge systems and right-hand sides, K (B+1)^2 and
// K (B+1) d) is taken on each rank as on one GPU, then added across the ranks in rank order through
// a ThreadComm on the host (small buffers; NCCL is not used: its order of additions is not
// promised), so every rank holds the same bits and two runs with the same number of ranks give the
// same bits. The R update keeps one GPU's global seeded order: every rank sorts the keys of all N
// cells and updates its own cells of each block in that order; the block's new sums and the next
// block's old sums cross in one exchange (ceil(1 / block_size) + 1 a k-means round). The initial
// k-means: its tolerance and k-means++ on rank 0 over all cells (the whole embedding uploaded there a
// second time: one GPU's candidates and centres), broadcast; then Lloyd over every rank's own cells,
// the inertias and the n_init x K x (d + 1) centre sums added across the ranks, an empty cluster
// taking the farthest cell of all (the distances gathered). With one context it is harmony_gpu;
// with R > 1 the results differ from one GPU's by the summation order only.
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

// Over the CUDA contexts ctxs (one or more, distinct objects; several may be on one device;
// InputError for none, a context without CUDA, one given twice, or fewer cells than contexts). One
// context: harmony_gpu. Z_corr: as harmony_gpu's float32 form.
HarmonyResult harmony_gpus(const std::vector<Context*>& ctxs, const DenseF& Z,
                           const std::vector<std::vector<int32_t>>& codes, const std::vector<int32_t>& n_levels,
                           const HarmonyOptions& opt, DenseF& Z_corr);
// The float64 form (the result in the returned Z_corr).
HarmonyResult harmony_gpus(const std::vector<Context*>& ctxs, const DenseD& Z,
                           const std::vector<std::vector<int32_t>>& codes, const std::vector<int32_t>& n_levels,
                           const HarmonyOptions& opt);

class Comm;
namespace detail {
// One rank of Harmony on the GPU: the cells [lo, lo + n) of st.N, its sums added across `comm`'s ranks
// (null: one GPU, all cells). fail: a test knob (SCURRY_HARMONY_GPUS_FAIL_RANK), throw at the first
// Harmony iteration.
struct HarmonyRank {
  int64_t lo = 0, n = 0;
  Comm* comm = nullptr;
  bool fail = false;
};
// The embedding (all st.N x st.d cells) as float64 Zd or float32 Zf; this rank's corrected rows go to
// rows [lo, lo + n) of outd (float64) or outf (float32), host arrays of st.N x st.d. Returns the
// objective and iteration counts (the same on every rank); Z_corr stays empty.
HarmonyResult harmony_gpu_rank(const Context& ctx, const HarmonySetup& st, const std::vector<int32_t>& n_levels,
                               const double* Zd, const float* Zf, const HarmonyOptions& opt, const HarmonyRank& part,
                               double* outd, float* outf);
}  // namespace detail

}  // namespace scurry
