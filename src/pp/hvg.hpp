// scurry: highly variable genes, as scanpy 1.9.6's `sc.pp.highly_variable_genes` (flavours seurat,
// cell_ranger, seurat_v3) and `sc.experimental.pp.highly_variable_genes` (pearson_residuals), with
// batch_key. Per-gene statistics are one pass over the nonzeros in fixed row blocks (float64
// partials combined in block order: identical results for any thread count), then small host math.
//
// Known differences from scanpy (all documented where they arise):
// - mean/variance per gene are one pass (sum, sum of squares) instead of scanpy's two-pass sparse
//   kernel: differences are rounding (~1e-15 relative).
// - seurat_v3 / pearson_residuals ranks: scanpy ranks with np.argsort, which is not stable (and on
//   AVX-512 machines a vectorized sort), so genes with exactly equal scores (e.g. genes seen once
//   with the same count) at the n_top_genes cutoff are picked in an order that cannot be reproduced;
//   here equal scores rank in gene order. On pbmc3k this is the whole seurat_v3 difference
//   (variances_norm agree to 1e-12; 12 of 2000 genes differ inside a 44-gene tie; Jaccard 0.994).
// - seurat_v3's LOESS is computed with loess.hpp (skmisc's interpolated surface reproduced).
// - pearson_residuals: computed in float64 (scanpy computes in the matrix's dtype, float32 for
//   float32 counts). As in scanpy, `clip` left unset becomes sqrt(n_cells of the FIRST batch) and
//   that value is used for every batch.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct HvgOptions {
  // "seurat" | "cell_ranger" (log data), "seurat_v3" | "pearson_residuals" (counts).
  std::string flavor = "seurat";
  // Number of genes to select. seurat/cell_ranger: optional (unset = cutoffs below);
  // seurat_v3: unset means 2000 (scanpy's default); pearson_residuals: required.
  std::optional<int64_t> n_top_genes;
  // seurat/cell_ranger without n_top_genes: mean in (min_mean, max_mean) and normalized dispersion in
  // (min_disp, max_disp). Mean is log1p(mean) for seurat, the plain mean for cell_ranger.
  double min_mean = 0.0125;
  double max_mean = 3;
  double min_disp = 0.5;
  double max_disp = std::numeric_limits<double>::infinity();
  int n_bins = 20;     // seurat: number of equal-width bins of the mean
  double span = 0.3;   // seurat_v3: LOESS span (fraction of genes)
  // obs column holding batches (categorical, string, bool or numeric); "" = one batch.
  std::string batch_key;
  // Read the matrix from this layer instead of X (e.g. "counts" for seurat_v3 / pearson_residuals).
  std::string layer;
  double theta = 100;           // pearson_residuals: negative binomial overdispersion (> 0; inf = Poisson)
  std::optional<double> clip;   // pearson_residuals: clip residuals to [-clip, clip]; unset = sqrt(n_cells)
  bool subset = false;          // keep only the selected genes in the Dataset
  bool check_values = true;     // seurat_v3 / pearson_residuals: warn when the counts are not integers
  // Prefix of the var columns written (e.g. "hvg_seurat_"); "" = scanpy's names.
  std::string key_prefix;
  // seurat: base of the logarithm of the data (scanpy reads uns['log1p']['base']); 0 = natural log.
  // The Dataset overload fills it from uns["log1p"]["base"] when present.
  double log1p_base = 0;
};

struct HvgResult {
  std::string flavor;
  std::vector<uint8_t> highly_variable;  // 0/1 per gene
  std::vector<double> means;             // seurat: log1p(mean of expm1(X)); others: mean
  // seurat / cell_ranger
  std::vector<double> dispersions;       // seurat: log(var/mean); cell_ranger: var/mean
  std::vector<double> dispersions_norm;  // NaN where undefined (0 when selecting by cutoffs, as scanpy)
  std::vector<int32_t> mean_bin;         // single batch: code into mean_bin_categories (-1 = none)
  std::vector<std::string> mean_bin_categories;  // pandas interval labels "(a, b]" of the bins used
  // seurat_v3 / pearson_residuals
  std::vector<double> variances;         // variance per gene (ddof = 1) over all cells
  std::vector<double> variances_norm;    // seurat_v3: mean over batches of the normalized variance
  std::vector<double> residual_variances;  // pearson_residuals: mean over batches
  std::vector<double> highly_variable_rank;  // median rank over batches; NaN = not in any batch's top
  // batch_key given (seurat_v3: always filled, written only with batch_key, as scanpy)
  std::vector<int64_t> highly_variable_nbatches;
  std::vector<uint8_t> highly_variable_intersection;
  int64_t n_batches = 1;
};

// Low level. `batch` gives each cell's batch code in [0, n_batches) (empty = one batch; batches are
// processed in code order); `gene_names` break ties as scanpy's sort by gene name does for
// seurat/cell_ranger with batches (empty = gene order).
HvgResult highly_variable_genes(const Context& ctx, const CsrF& X, const HvgOptions& opt,
                                const std::vector<int32_t>& batch = {},
                                const std::vector<std::string>& gene_names = {});
HvgResult highly_variable_genes(const Context& ctx, const DenseF& X, const HvgOptions& opt,
                                const std::vector<int32_t>& batch = {},
                                const std::vector<std::string>& gene_names = {});

// Dataset level: reads X (or layers[opt.layer]) and obs[opt.batch_key]; writes var columns
// (prefixed by key_prefix) as scanpy does in place:
//   seurat/cell_ranger: highly_variable (bool), means, dispersions (float64), dispersions_norm
//     (float32), mean_bin (categorical, single batch only; categories in anndata's natural-sort
//     order, as a file written by anndata holds them), with a batch: highly_variable_nbatches
//     (int64), highly_variable_intersection (bool);
//   seurat_v3: highly_variable, highly_variable_rank (float32), means, variances, variances_norm
//     (float64), with a batch: highly_variable_nbatches;
//   pearson_residuals: means, variances, residual_variances, highly_variable_rank (float32),
//     highly_variable, with a batch: highly_variable_nbatches, highly_variable_intersection;
// and uns["hvg"] = {"flavor": flavor}. With opt.subset, keeps only the selected genes.
HvgResult highly_variable_genes(const Context& ctx, Dataset& d, const HvgOptions& opt);

// scanpy's _get_mean_var from per-gene sums over n cells: mean = sum / n, var = (sumsq / n - mean^2)
// * n / (n - 1), clamped at 0 (the CPU moments and the GPU chains' gene sums).
void mean_var_from_sums(const std::vector<double>& sum, const std::vector<double>& sumsq, double n,
                        std::vector<double>& mean, std::vector<double>& var);

// Shared with the GPU path. seurat / cell_ranger on one batch, from the per-gene mean and variance
// (ddof 1) of expm1(X) (seurat) or X (cell_ranger), as scanpy's _get_mean_var gives them.
HvgResult hvg_dispersion_from_moments(const std::vector<double>& mean, const std::vector<double>& var,
                                      const HvgOptions& opt);
// Writes a result into var (and uns['hvg']) under scanpy's names with opt.key_prefix; subsets when
// opt.subset.
void write_hvg(Dataset& d, const HvgResult& r, const HvgOptions& opt);

}  // namespace scurry
