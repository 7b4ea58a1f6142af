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
  // GPU: cells uploaded, fitted and downloaded per block; 0: the whole query at once when it (8
  // bytes a nonzero, its usages) takes at most 3/4 of the device memory free, else blocks of 2^20.
  int64_t gpu_rows_per_block = 0;
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
  // The exact fit on the GPU (starcat_fit_gpu): its phases, within solve_seconds' sum with them.
  double upload_seconds = 0;  // the raw query to the device
  double prep_seconds = 0;    // the value check, the per-gene sums and the sd (on the device: device_prep)
  bool device_prep = false;   // the check and the sums ran on the device (else on the host threads)
};
// The pieces starcat_fit is made of, shared by its CPU and GPU paths. `map` sends a query column to
// its fit column (the shared genes in the query's column order) or -1; a row's mapped entries in the
// query's order are the fit's row (no compacted copy of the query is made for the exact solver).
//
// The first value p (by position) with !(v >= 0), or nnz: fixed blocks over the threads.
int64_t starcat_first_bad_value(const Context& ctx, const CsrF& query);
// The error for it, naming the value and the file.
[[noreturn]] void starcat_bad_value(const std::string& where, float v);
// Per fit column: sums (0..h) and sums of squares (h..2h) of the mapped entries, in float64: per
// block of kStarcatStatRows cells in entry order (each partial from 0), the blocks' partials added in
// block order (reduce_blocks), so the same bits for any thread count, and on the device.
constexpr int64_t kStarcatStatRows = 16384;
std::vector<double> starcat_gene_sums(const Context& ctx, const CsrF& query, const std::vector<int32_t>& map, int64_t h);
// sklearn's scale(with_mean=False): the population sd per fit column from those sums (0 -> 1, warned).
std::vector<double> starcat_sd(const std::vector<double>& sums, int64_t h, int64_t n_cells);
// The exact NNLS per cell over the mapped entries, scaled when sd is not empty: the value the solver
// reads is float(double(v) / sd[j]) (as scale()'s float32 result), widened to double.
DenseF nnls_fixed_spectra_mapped(const Context& ctx, const CsrF& query, const std::vector<int32_t>& map,
                                 const std::vector<double>& sd, const DenseD& H, int64_t rows_per_block = 1024);
// The same on the GPU from the raw query (nmf/starcat_gpu.cu; without CUDA a stub that throws): a
// query of at most rows_per_block cells (0: see StarcatOptions) is uploaded once and checked, summed (the same partials and
// order as starcat_gene_sums) and fitted on the device; a larger one is checked and summed on the
// host threads and uploaded and fitted in blocks of rows_per_block cells (as is a query with a
// repeated column in a row, whose sums the device cannot order: summed on the host). The phases'
// seconds go to r (upload_seconds, prep_seconds, solve_seconds, device_prep). Equal to
// nnls_fixed_spectra_mapped bit for bit.
DenseF starcat_fit_gpu(const Context& ctx, const CsrF& query, const std::vector<int32_t>& map, int64_t h,
                       const DenseD& H, bool scale, int64_t rows_per_block, const std::string& where, StarcatResult& r);

// Makes the device's pinned staging buffers (cudaMallocHost of 512 MiB: ~0.1 s, once a process) with
// a small copy, so that the command can do it while it reads the query; nothing without CUDA.
void starcat_gpu_warm_up(const Context& ctx);

StarcatResult starcat_fit(const Context& ctx, const CsrF& query, const std::vector<std::string>& query_genes,
                          const DenseD& reference, const std::vector<std::string>& reference_genes,
                          const StarcatOptions& opt, const std::string& where);

// The command: REF (starcat_spectra .txt/.tsv or .df.npz), QUERY (any scurry input) -> OUT (usages,
// cells x programs: a TSV, or a .df.npz when OUT ends in .npz).
void starcat_project_files(const Context& ctx, const std::string& reference, const std::string& query,
                           const std::string& out, const StarcatOptions& opt);

}  // namespace scurry
