// scurry: t-SNE (van der Maaten & Hinton 2008), as scanpy 1.9.6's `sc.tl.tsne` runs it: scikit-learn
// 1.2.1's TSNE(perplexity, early_exaggeration, learning_rate, random_state) on the representation
// (X_pca, n_pcs), everything else sklearn's defaults:
// - affinities: the 3 * perplexity + 1 nearest neighbours of each cell (squared euclidean
//   distances), per-cell precision by sklearn's binary search on the entropy (log(perplexity),
//   tolerance 1e-5, 100 steps), P = (P + P^T) / sum;
// - init 'pca' (sklearn 1.2's default): the first two principal components of the representation,
//   signs as sklearn's svd_flip (the largest |score| of each component positive), scaled so that the
//   first has standard deviation 1e-4 ('random': 1e-4 N(0, 1), our own stream);
// - gradient descent with gains (+0.2 / x0.8, at least 0.01), momentum 0.5 for the first 250
//   iterations with P x early_exaggeration, then momentum 0.8 up to n_iter = 1000; learning_rate as
//   given (scanpy passes 1000).
// The gradient 4 [sum_j p_ij w_ij (y_i - y_j) - (1/Z) sum_j w_ij^2 (y_i - y_j)], w = 1 / (1 + d^2),
// Z = sum_{i != j} w_ij: the attractive term is exact over the kNN affinities; the repulsive term is
// FFT-accelerated interpolation (FIt-SNE: Linderman, Rachh, Hoskins, Steinerberger & Kluger 2019,
// "Fast interpolation-based t-SNE for improved visualization of single-cell RNA-seq data", Nat.
// Methods 16): the charges 1, y_1, y_2, |y|^2 are spread to a regular grid of boxes (3 Lagrange nodes
// per box per dimension, boxes of width 1, at least 50 and at most 128 a side, wider beyond), the kernel w^2 applied on the
// grid as a circular convolution by FFT (FFTW, single precision, ESTIMATE plans reused across
// iterations), and the potentials interpolated back; method "exact" sums all pairs (O(n^2), the
// oracle), and "auto" (the default) takes it below exact_below cells, where it costs less than a
// grid whose size follows the layout's extent, not n. Where sklearn stops early (no progress for 300 iterations,
// gradient norm below 1e-7) this runs all n_iter iterations.
//
// Differences from sklearn: the repulsion is FIt-SNE's, not Barnes-Hut's (angle 0.5); both are
// approximations of the same exact gradient. Random streams are our own. Deterministic: the same
// seed gives the same bits for any thread count (fixed blocks, fixed-order sums).
//
// A CUDA Context runs the same algorithm on the GPU (tsne_gpu.hpp): tsne(ctx, ...) dispatches on
// ctx.backend(), so `scurry --device gpu tsne`, `run --tsne` and the Python package follow it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct TsneOptions {
  std::optional<int64_t> n_pcs;  // first n_pcs columns of the representation (default: all)
  std::string use_rep;           // obsm key or "X"; "" = X_pca when present (scanpy's None)
  double perplexity = 30;
  double early_exaggeration = 12;
  double learning_rate = 1000;   // scanpy's default (sklearn's own is 'auto')
  uint64_t random_state = 0;
  int n_jobs = 0;                // threads; 0 = the Context's
  std::string metric = "euclidean";  // "euclidean" | "cosine" (the kNN distances)
  // sklearn's fixed settings, exposed for tests and experiments.
  int64_t n_iter = 1000;
  int64_t exaggeration_iter = 250;  // sklearn's _EXPLORATION_N_ITER
  std::string init = "pca";         // "pca" | "random"
  // "auto": "exact" below exact_below cells (all pairs cost less there than the grid, whose size
  // does not shrink with n), else "fft" (FIt-SNE) | "fft" | "exact" (all pairs).
  std::string method = "auto";
  int64_t exact_below = 2000;
  // FIt-SNE grid: Lagrange nodes per box and dimension, the least boxes a side, boxes per unit length.
  int64_t n_interpolation_points = 3;
  int64_t min_num_intervals = 50;
  int64_t max_num_intervals = 128;  // past this the boxes widen (bounds the grid at 768^2)
  double intervals_per_integer = 1;
  std::string key_added = "X_tsne";  // obsm key written
  // The affinities' kNN: "exact" (sklearn's), "ivf" (IVF-Flat: the CPU's knn_ivf, the GPU's
  // knn_ivf_gpu) or "auto": exact on the CPU; on the GPU exact below knn_ivf_from cells, IVF-Flat
  // from there (k = 3 perplexity + 1 = 91 is past the GPU's fused exact kernels, whose candidate
  // lists hold at most 64: the exact search then runs the cuBLAS tile path, O(n^2) selections).
  std::string knn = "auto";
  int64_t knn_ivf_from = 100000;
};

struct TsneResult {
  DenseF embedding;              // n x 2 (obsm X_tsne)
  double kl_divergence = 0;      // KL(P || Q) at the end (exact over the kNN pairs, Z from the grid)
  double affinity_seconds = 0, optimize_seconds = 0;
  // The GPU path only: its kNN's share of affinity_seconds (host clock) and device seconds per phase
  // of the iterations (CUDA events, summed): the attraction over P; the grid (the points sorted by
  // box, charges spread); the FFT (cuFFT R2C, times the kernel's spectrum, C2R); the interpolation
  // (potentials back at the points, Z); the gradient step; and the host's share (the layout's
  // bounds read back each iteration, plans and kernel spectra made when the grid changes).
  double knn_seconds = 0, attraction_seconds = 0, grid_seconds = 0, fft_seconds = 0, interpolation_seconds = 0,
         update_seconds = 0, host_seconds = 0;
  std::string knn_used;  // "exact" | "ivf"
  int64_t p_nnz = 0;      // stored entries of P (both triangles)
  int64_t grid_size = 0;  // the GPU path: the last FFT grid's M (0 for all pairs)
};

// Low level: t-SNE of the rows of X (n x d; n >= 4, perplexity < n - 1 as sklearn requires).
TsneResult tsne(const Context& ctx, const DenseF& X, const TsneOptions& opt);
// Dataset level: the representation (use_rep, n_pcs), writes obsm[key_added] (float32) and
// uns['tsne'] = {params: {perplexity, early_exaggeration, learning_rate, n_jobs, metric, use_rep}}.
TsneResult tsne(const Context& ctx, Dataset& d, const TsneOptions& opt);

// Pieces, exposed for tests.
// The symmetric joint affinities P (n x n CSR, both triangles, sum 1) of sklearn's
// _joint_probabilities_nn from each row's k nearest neighbours (self excluded), distances squared.
CsrD tsne_affinities(const std::vector<int32_t>& nbr, const std::vector<double>& sqdist, int64_t n, int64_t k,
                     double perplexity, int threads);
// The repulsive sums of every point: rep[2i..2i+1] = sum_j w_ij^2 (y_i - y_j) and returns Z =
// sum_{i != j} w_ij, for y (n x 2, row-major), by the grid (method "fft") or all pairs ("exact").
double tsne_repulsion(const std::vector<double>& y, int64_t n, const TsneOptions& opt, int threads,
                      std::vector<double>& rep);

// Fraction of each row's k nearest neighbours in `high` (its own row excluded) that are among its k
// nearest in `low` (exact searches; the mean over rows): the neighbour preservation of an embedding.
double knn_preservation(const Context& ctx, const DenseF& high, const DenseF& low, int64_t k);

}  // namespace scurry
