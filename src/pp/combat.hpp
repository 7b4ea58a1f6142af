// scurry: ComBat batch correction (Johnson, Li & Rabinovic 2007, Biostatistics 8:118; the
// parametric empirical-Bayes location/scale model), as scanpy 1.9.6's `sc.pp.combat` (its port of
// Pedersen's combat.py): per gene, a least-squares fit of [batch one-hot, covariates], the pooled
// variance (ddof 0), standardised data, per-batch additive (gamma) and multiplicative (delta)
// effects shrunk to normal / inverse-gamma priors fitted across genes (the iterative posterior
// means, convergence 1e-4), and the adjusted data.
//
// Every statistic comes from per-batch, per-gene sums over fixed row blocks (D^T Y, the residuals'
// sums and sums of squares), added in block order: three passes over X, results identical for any
// thread count. The iteration reads the per-batch sums of the standardised data and of their
// squares instead of the data (sum (s - g)^2 = sum s^2 - 2 g sum s + n g^2, float64).
#pragma once
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct CombatOptions {
  std::string key = "batch";            // categorical obs column of batches
  std::vector<std::string> covariates;  // extra obs columns kept in the model (biology to protect)
  // inplace: the Python layer's (here the Dataset's X is always replaced).
};

struct CombatResult {
  std::vector<std::string> batches;     // in pandas' order
  std::vector<double> gamma_star;       // batches x genes, row-major: additive effects
  std::vector<double> delta_star;       // batches x genes: multiplicative effects
  std::vector<double> var_pooled;       // genes
  std::vector<int> iterations;          // per batch, of the posterior-mean iteration
};

// Kernel, in place on dense float32 cells x genes. codes: batch of each cell in [0, n_batches);
// covariates: n x c (float64, row-major; may be 0 columns), numeric columns of the model (a
// categorical covariate enters as indicator columns of its levels but the first).
CombatResult combat_dense(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes, int32_t n_batches,
                          const DenseD& covariates);

// The same on ctx's GPU (combat_gpu.cu): the three passes over the matrix as device kernels
// (per-batch and per-covariate sums in float64, fixed chunks added in a fixed order), the small
// gene x batch math on the host with the CPU path's code (detail:: below). Throws scurry::Error
// without a CUDA build or device.
CombatResult combat_dense_gpu(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes, int32_t n_batches,
                              const DenseD& covariates);

namespace detail {
// The host math between the passes, shared by the CPU and GPU paths. acc = [D^T Y (p x g), D^T D
// (p x p)] -> B_hat (p x g), the grand mean per gene and the scale of each gene's fitted values; rs
// = per-batch residual sums and sums of squares ([2 b g + j], [(2 b + 1) g + j]) -> var_pooled
// (0 for a gene constant up to rounding: residual sd <= 1e-10 of its scale), gamma*, delta*,
// iterations.
void combat_fit(const std::vector<double>& acc, const std::vector<double>& nbatch, int64_t n, int64_t g, int64_t p,
                std::vector<double>& B, std::vector<double>& grand, std::vector<double>& scale);
CombatResult combat_eb(const std::vector<double>& rs, const std::vector<double>& B, const std::vector<double>& grand,
                       const std::vector<double>& scale, const std::vector<double>& nbatch, int64_t n, int64_t g);
}  // namespace detail

// Dataset level (CPU or GPU by ctx.backend()): X becomes the corrected dense float32 matrix (sparse X is densified, as scanpy).
// Throws InputError for a missing key or covariate (named), a covariate equal to the key,
// repeated covariates, or a batch of fewer than 2 cells.
CombatResult combat(const Context& ctx, Dataset& d, const CombatOptions& opt);

}  // namespace scurry
