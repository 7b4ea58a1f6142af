// scurry: Scrublet doublet detection (Wolock, Lopez & Klein 2019, "Scrublet: computational
// identification of cell doublets in single-cell transcriptomic data", Cell Systems 8:281), as
// scanpy 1.10's `sc.pp.scrublet` (scanpy/preprocessing/_scrublet/): per batch, filter_genes
// (min_cells=3) and filter_cells (min_genes=3); normalize_total (median), log1p and seurat HVGs
// (scanpy's defaults) to choose genes; doublets simulated by adding the raw counts of random pairs
// of observed cells (pairs drawn without replacement from the n^2 ordered pairs, as sklearn's
// sample_without_replacement); both normalised to 1e6; z-scored with the observed cells' gene means
// and standard deviations (ddof 1); PCA fitted on the observed cells (exact, pca.hpp) and applied to
// both; the k_adj = round(k (1 + n_sim / n_obs)) nearest neighbours of every cell among observed
// and simulated ones (the cell itself not counted among them); the Bayesian
// doublet score from the share of simulated neighbours; the threshold at the minimum between the
// two modes of the simulated scores' histogram (skimage's threshold_minimum, implemented here).
//
// The doublet pairs are drawn as scanpy draws them (numpy's legacy MT19937 RandomState(random_state)
// and sklearn's sample_without_replacement, reproduced), so the simulated doublets are scanpy's own;
// the UMI subsampling (synthetic_doublet_umi_subsampling < 1) uses our own RNG.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct ScrubletOptions {
  std::string batch_key;                        // "" = one batch
  double sim_doublet_ratio = 2.0;
  double expected_doublet_rate = 0.05;
  double stdev_doublet_rate = 0.02;
  double synthetic_doublet_umi_subsampling = 1.0;  // < 1: binomial thinning of the simulated counts
  std::string knn_dist_metric = "euclidean";    // "euclidean" | "cosine"
  bool normalize_variance = true;
  bool log_transform = false;
  bool mean_center = true;
  int n_prin_comps = 30;
  // true: approximate search (hnsw); false: exact search (a blocked GEMM, or the GPU's); unset:
  // exact up to 8,192 observed cells, above that IVF-Flat on the CPU (as scanpy picks pynndescent
  // above 8,192 cells) or the GPU count search's IVF lists on a GPU context.
  std::optional<bool> use_approx_neighbors;
  bool get_doublet_neighbor_parents = false;    // not supported yet (InputError if set)
  std::optional<int> n_neighbors;               // unset: round(0.5 sqrt(n_obs)) per batch
  std::optional<double> threshold;              // unset: automatic (threshold_minimum)
  uint64_t random_state = 0;
};

// One batch's outcome (cells filtered out by min_genes get NaN scores and are not predicted).
struct ScrubletBatchResult {
  std::vector<double> doublet_scores_obs;   // per cell of the batch (input order)
  std::vector<uint8_t> predicted_doublets;  // per cell
  std::vector<double> doublet_scores_sim;   // per simulated doublet
  std::vector<int64_t> doublet_parents;     // n_sim x 2: parents, positions among the kept cells
  std::optional<double> threshold;          // unset when the automatic threshold failed
  int n_neighbors = 0;
  int64_t n_genes_used = 0;                 // HVGs
};

// skimage.filters.threshold_minimum(values) (nbins=256; histogram over [min, max]; repeated 3-point
// mean smoothing, mode 'reflect', until at most two maxima; the bin centre of the lowest point
// between them). Unset when two maxima are never found.
std::optional<double> threshold_minimum(const std::vector<double>& values, int nbins = 256, int max_iter = 10000);

// Kernel: counts of one batch (cells x genes, raw counts). With a CUDA ctx the neighbour count (the
// dominant cost) runs on the GPU, for any k_adj (scrublet_knn_gpu.hpp; euclidean, up to 64 PCs;
// cosine keeps knn_exact_gpu, k_adj <= 513); every other step on the host.
ScrubletBatchResult scrublet_counts(const Context& ctx, const CsrF& counts, const ScrubletOptions& opt, uint64_t seed);

// Dataset level on the raw counts in X: writes obs['doublet_score'] (float64) and
// obs['predicted_doublet'] (bool), and uns['scrublet'] as scanpy 1.10: {doublet_scores_sim,
// doublet_parents, parameters: {expected_doublet_rate, sim_doublet_ratio, n_neighbors,
// random_state}, threshold}; with batch_key: {batches: {<batch>: that dict}, batched_by: key}.
// Every batch is seeded with random_state, as scanpy 1.10 does.
void scrublet(const Context& ctx, Dataset& d, const ScrubletOptions& opt);

}  // namespace scurry
