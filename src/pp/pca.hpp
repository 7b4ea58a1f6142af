// scurry: principal component analysis, scanpy 1.9.6's `sc.pp.pca` (scikit-learn's PCA /
// TruncatedSVD underneath) with implicit centring: sparse X is never densified to subtract a mean.
//
// Solvers:
// - "gram" (exact): the g x g Gram matrix of the centred rows from float32 products over fixed
//   blocks of rows summed in float64 (gram_float32; or float64 products with the centring folded in,
//   C - n mu mu^T), LAPACK dsyevr for the top eigenpairs, then one float64 Rayleigh-Ritz pass over X
//   (gram_refine). Cost O(n g^2) + O(g^3); memory g^2 doubles (x 4 partials). "arpack" is accepted as an alias (scanpy's default solver: also exact).
// - "randomized": randomized subspace iteration (Halko, Martinsson & Tropp 2011) on the centred
//   covariance operator, every product (X - 1 mu^T) Q = XQ - 1 (mu^T Q) computed without densifying,
//   QR re-orthonormalisation after every pass, Rayleigh-Ritz at the end; seeded by random_state.
//   Cost O(nnz (k + p) (n_iter + 2)); memory O(g (k + p)).
// - "auto": gram for g <= 4000 genes, randomized above.
// Results do not depend on the thread count (fixed block partition, block-ordered reductions,
// single-threaded BLAS inside blocks). Component signs follow scikit-learn's svd_flip
// (u_based_decision=True): in each column of X_pca the entry of largest magnitude is positive.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct PcaOptions {
  // Number of principal components. Unset: scanpy's default, 50, or min(n_cells, n_genes) - 1 if
  // that is smaller. Must be in [1, min(n_cells, n_genes) - 1] (InputError otherwise).
  std::optional<int64_t> n_comps;
  // true: PCA of the column-centred matrix (scikit-learn PCA). false: no centring (TruncatedSVD):
  // variance = variance (ddof 0) of each X_pca column, ratio over the total per-gene variance
  // (ddof 0), as scikit-learn's TruncatedSVD.
  bool zero_center = true;
  // "auto" | "gram" | "randomized" | "arpack" (alias of "gram": exact).
  std::string svd_solver = "auto";
  // Genes above which "auto" switches from the exact gram solver to the randomized one.
  int64_t auto_gram_max_genes = 4000;
  // gram solver: the Gram matrix from float32 products (ssyrk over fixed blocks of 1,024 centred rows,
  // summed in float64), 2x the float64 rate; false: float64 products (dgemm), the solver of
  // session 8 and before.
  bool gram_float32 = true;
  // gram solver with gram_float32: passes of float64 subspace iteration over X itself started from
  // the float32 Gram's top n_comps + n_oversamples eigenvectors, then Rayleigh-Ritz (each pass one
  // read of X and 4 n g (n_comps + n_oversamples) flops): the variances as exact as a float64
  // Gram's. 0: none (the float32 Gram's own eigenpairs).
  int gram_refine = 1;
  // Seed of the randomized solver's starting block.
  uint64_t random_state = 0;
  // Randomized solver: extra vectors beyond n_comps (clipped to min(n_cells, n_genes)).
  int64_t n_oversamples = 20;
  // Randomized solver: subspace iterations (each one pass over X), QR after each. 7 (the top of
  // scikit-learn's 4..7): on scaled scRNA-seq data (flat spectrum tail) fewer leave the components
  // past ~10 visibly unconverged; raise it for more accuracy in the tail.
  int n_iter = 7;
  // Dataset level only: restrict to var['highly_variable'] genes. Unset: use them when that column
  // exists (scanpy 1.9.6). true without the column is an InputError.
  std::optional<bool> use_highly_variable;
  // Type of obsm['X_pca']: f32 (scanpy's default "float32") or f64.
  DType dtype = DType::f32;
};

struct PcaResult {
  Matrix x_pca;                 // n_cells x n_comps, DenseF (dtype f32) or DenseD (f64)
  DenseD components;            // n_genes_used x n_comps (varm['PCs'] layout: loadings per gene)
  std::vector<double> variance;        // n_comps: explained variance (eigenvalues / (n - 1))
  std::vector<double> variance_ratio;  // n_comps: variance / total variance
  double total_variance = 0;           // sum of per-gene variances (ddof 1; ddof 0 if !zero_center)
  std::string solver;                  // the solver that ran: "gram" or "randomized"
  bool use_highly_variable = false;    // Dataset level: whether the HVG mask was applied
  std::vector<int64_t> genes;          // Dataset level: the genes used (indices into var), in order
};

// Low level: PCA of all columns of X. Throws InputError on too few cells/genes, bad n_comps,
// non-finite values or zero total variance.
PcaResult pca(const Context& ctx, const CsrF& X, const PcaOptions& opt);
PcaResult pca(const Context& ctx, const DenseF& X, const PcaOptions& opt);

// Dataset level: reads X (CsrF, DenseF; CsrD/DenseD are converted to float32) and
// var['highly_variable']; writes obsm['X_pca'] (float32), varm['PCs'] (n_vars x n_comps: float32, or
// float64 with zero rows for genes outside the HVG mask, as scanpy 1.9.6 writes it) and
// uns['pca'] = {variance, variance_ratio (float32 arrays), params: {zero_center, use_highly_variable}}.
// The checks of the options alone (no data): n_comps >= 1, dtype, svd_solver. `scurry run` calls
// it before its first step.
void validate_pca_options(const PcaOptions& opt);
PcaResult pca(const Context& ctx, Dataset& d, const PcaOptions& opt);
// The writing half of the Dataset overload (shared with the GPU path): obsm['X_pca'], varm['PCs']
// (res.genes = the rows of var the components belong to) and uns['pca'].
void write_pca(Dataset& d, const PcaResult& res, const PcaOptions& opt);

}  // namespace scurry
