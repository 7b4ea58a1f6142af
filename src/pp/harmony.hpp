// scurry: Harmony batch integration of an embedding (Korsunsky et al. 2019, "Fast, sensitive and
// accurate integration of single-cell data with Harmony", Nat Methods 16:1289), as harmonypy 0.0.9
// (the package behind scanpy.external.pp.harmony_integrate): cosine-normalised embedding, soft
// k-means with a diversity penalty (per-cluster sigma, theta per batch variable), R updated in
// blocks of cells in a seeded random order, and the mixture-of-experts ridge correction per
// cluster (moe_correct_ridge), until the objective's relative decrease is below epsilon_harmony.
//
// Differences from harmonypy, all within its algorithm: the initial centroids come from our own
// seeded k-means++ and Lloyd iterations (sklearn's KMeans(n_init=10, max_iter=25) on the cosine
// embedding in harmonypy; same settings here, our RNG), and the shuffles use our RNG (numpy's
// global one in harmonypy), so results agree statistically, not bit for bit. Harmony itself is
// float64 as in harmonypy; the initial k-means ranks distances in float32 (its restarts run in
// lockstep, one GEMM per pass for all of them). Every product over cells runs on fixed blocks of cells with float64 partials
// added in block order, so results are identical for any thread count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct HarmonyOptions {
  std::vector<std::string> keys;             // scanpy's key: one or several categorical obs columns
  std::string basis = "X_pca";               // obsm input
  std::string adjusted_basis = "X_pca_harmony";  // obsm output
  // harmonypy's run_harmony parameters. theta and lamb: one value for every batch variable or one
  // per key; harmonypy 0.0.9's default (None) is 1 for both.
  std::vector<double> theta = {1.0};
  std::vector<double> lamb = {1.0};
  double sigma = 0.1;
  int nclust = 0;                 // 0: harmonypy's min(round(N / 30), 100)
  double tau = 0;                 // > 0 scales theta down for small batches
  double block_size = 0.05;       // share of cells per R-update block (ceil(1 / block_size) blocks)
  int max_iter_harmony = 10;
  int max_iter_kmeans = 20;
  double epsilon_cluster = 1e-5;
  double epsilon_harmony = 1e-4;
  uint64_t random_state = 0;
  // The initial k-means (sklearn's KMeans in harmonypy): k-means++ restarts and Lloyd iterations.
  int kmeans_n_init = 10;
  int kmeans_max_iter = 25;
};

struct HarmonyResult {
  DenseD Z_corr;                          // N x d corrected embedding
  std::vector<double> objective_harmony;  // initial, then one per harmony iteration
  std::vector<int> kmeans_rounds;         // per harmony iteration: harmonypy's last k-means index
  int iterations = 0;                     // harmony iterations run
  bool converged = false;
};

// Kernel: Z (N x d, cells in rows), codes[v][i] = batch of cell i in variable v, n_levels[v] its
// number of levels (each level with at least one cell).
HarmonyResult harmony(const Context& ctx, const DenseD& Z, const std::vector<std::vector<int32_t>>& codes,
                      const std::vector<int32_t>& n_levels, const HarmonyOptions& opt);

namespace detail {
// What harmony() checks and derives from its inputs, shared by the CPU and GPU paths: sizes (K from
// nclust), each cell's one-hot column per batch variable (N x V), and per one-hot column the batch
// share Pr, theta (tau applied) and lamb. Throws InputError for a bad parameter.
struct HarmonySetup {
  int64_t N = 0, d = 0, K = 0, B = 0, V = 0;  // cells, dims, clusters, one-hot columns, variables
  std::vector<int32_t> col;
  std::vector<double> Pr, theta, lamb;
};
HarmonySetup harmony_setup(const DenseD& Z, const std::vector<std::vector<int32_t>>& codes,
                           const std::vector<int32_t>& n_levels, const HarmonyOptions& opt);
// The same from the embedding's shape and whether all its values are finite.
HarmonySetup harmony_setup(int64_t N, int64_t d, bool finite, const std::vector<std::vector<int32_t>>& codes,
                           const std::vector<int32_t>& n_levels, const HarmonyOptions& opt);
// Whether all n values are finite (checked in pieces on the threads).
bool all_finite(const float* x, int64_t n, int threads);
}  // namespace detail

// Dataset level (CPU or GPU by ctx.backend()): reads obsm[basis] and obs[keys], writes obsm[adjusted_basis] (float32, as the
// basis is stored). Throws InputError naming a missing key or basis, or a bad parameter.
HarmonyResult harmony_integrate(const Context& ctx, Dataset& d, const HarmonyOptions& opt);
// The same over several GPUs of this host (harmony_gpus, harmony_gpu.hpp; ctxs[0] the main context,
// every one a CUDA context; one context: harmony_integrate(*ctxs[0], d, opt)).
HarmonyResult harmony_integrate(const std::vector<Context*>& ctxs, Dataset& d, const HarmonyOptions& opt);

}  // namespace scurry
