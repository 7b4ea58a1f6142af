// scurry: starCAT (Kotliar et al. 2024, github immunogenomics/starCAT starcat.py): the usages of a
// reference's gene expression programs fitted on new counts with the spectra fixed.
//
// As starCAT's fit_transform: reference spectra as float32, genes with NaN in any program dropped;
// the genes shared by the reference and the query, sorted by name; the query restricted to them and
// scaled to unit variance without centring (sklearn preprocessing.scale(with_mean=False): population
// std, 0 -> 1); then per cell the non-negative least squares min ||x - w H||^2, w >= 0. starCAT runs
// sklearn's multiplicative updates (tol 1e-4, max_iter 1000) towards that minimum; scurry solves it
// exactly by default (Lawson & Hanson 1974's active-set NNLS on the k x k Gram H H^T, per cell in
// fixed row blocks over the threads; on the GPU a thread per cell, the same bits), or with starCAT's
// own solver (solver = mu; on the GPU through nmf_fit_gpu).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct StarcatOptions {
  bool scale = true;             // scale the query genes to unit variance (starCAT does)
  bool exact = true;             // exact NNLS; false: starCAT's mu iterations
  bool normalize = true;         // write usages normalised to sum 1 per cell (starCAT's default output)
  int64_t rows_per_block = 1024;
  int64_t gpu_rows_per_block = 1 << 20;  // GPU: cells uploaded, fitted and downloaded per block
};

// Exact NNLS per row of X (n x g CSR): argmin_w ||x_i - w H||^2, w >= 0 (H: k x g). n x k.
DenseF nnls_fixed_spectra(const Context& ctx, const CsrF& X, const DenseD& H, int64_t rows_per_block = 1024);

// The same on the device of ctx (a CUDA context; nmf/starcat_gpu.cu, a stub that throws without
// CUDA): a thread per cell runs the one active-set implementation (nmf/nnls_active_set.hpp) with
// unfused products, so the usages equal the CPU's bit for bit. X is uploaded in blocks of
// rows_per_block cells (the device holds one block, the spectra and the Gram).
DenseF nnls_fixed_spectra_gpu(const Context& ctx, const CsrF& X, const DenseD& H, int64_t rows_per_block = 1 << 20);

// G = H H^T (k x k, float64).
DenseD spectra_gram(const DenseD& H);

// One NNLS in normal-equation form: min_w w^T G w - 2 b^T w, w >= 0 (G = H H^T, b = H x). Active set.
std::vector<double> nnls_gram(const DenseD& G, const std::vector<double>& b);

struct StarcatResult {
  std::vector<std::string> genes;  // the shared genes, sorted
  DenseF usages;                   // cells x programs (raw, not normalised)
  double solve_seconds = 0;        // the fit itself (NNLS or mu), after the overlap and scaling
};
StarcatResult starcat_fit(const Context& ctx, const CsrF& query, const std::vector<std::string>& query_genes,
                          const DenseD& reference, const std::vector<std::string>& reference_genes,
                          const StarcatOptions& opt, const std::string& where);

// The command: REF (starcat_spectra .txt/.tsv or .df.npz), QUERY (any scurry input) -> OUT (usages,
// cells x programs: a TSV, or a .df.npz when OUT ends in .npz).
void starcat_project_files(const Context& ctx, const std::string& reference, const std::string& query,
                           const std::string& out, const StarcatOptions& opt);

}  // namespace scurry
