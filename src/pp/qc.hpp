// scurry: quality-control metrics per cell and per gene, as scanpy 1.9.6's
// `sc.pp.calculate_qc_metrics` computes them (one pass over the nonzeros for all obs and var sums).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct QcOptions {
  // Names of boolean var columns (e.g. "mt", made by mark_gene_prefix); for each one the obs columns
  // total_<expr>_<v>, log1p_total_<expr>_<v>, pct_<expr>_<v> are written. Empty: none (scanpy's default).
  std::vector<std::string> qc_vars;
  // Ranks n for pct_<expr>_in_top_<n>_<var_type>: the percentage of a cell's total in its n highest
  // genes (a cell with at most n expressed genes gets 100). Sorted ascending, as scanpy does. Every n
  // must be in [1, n_genes] (scanpy raises IndexError otherwise; here InputError). Empty: no columns.
  std::vector<int64_t> percent_top{50, 100, 200, 500};
  bool log1p = true;                 // also write the log1p_* columns
  std::string layer;                 // compute on layers[layer] instead of X ("" = X)
  std::string expr_type = "counts";  // name part for the kind of values
  std::string var_type = "genes";    // name part for the kind of variables
};

// All values are float64 (exact sums of the values in float64); the Dataset overload rounds to the
// dtypes scanpy writes. Cells with a total of 0 get pct_* = 0 (scanpy would give NaN: 0/0).
struct QcResult {
  std::vector<int64_t> percent_top;  // the ranks used, sorted ascending
  // Per cell (n_obs).
  std::vector<int64_t> n_genes_by_counts;              // nonzero entries in the row
  std::vector<double> total_counts;                    // row sum
  std::vector<std::vector<double>> pct_counts_in_top;  // [k][cell], k over percent_top
  std::vector<std::vector<double>> total_counts_qc;    // [q][cell], q over qc_vars
  std::vector<std::vector<double>> pct_counts_qc;      // [q][cell]
  // Per gene (n_vars).
  std::vector<int64_t> n_cells_by_counts;        // nonzero entries in the column
  std::vector<double> mean_counts;               // column sum / n_obs
  std::vector<double> pct_dropout_by_counts;     // (1 - n_cells_by_counts / n_obs) * 100
  std::vector<double> var_total_counts;          // column sum
};

// Low level: `qc_masks[q]` (size n_cols, 0/1) marks the genes of opt.qc_vars[q] (one mask per name).
QcResult calculate_qc_metrics(const Context& ctx, const CsrF& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});
QcResult calculate_qc_metrics(const Context& ctx, const DenseF& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});
// Dataset level: reads X (or the layer; CsrF, CsrD, DenseF or DenseD) and var[qc_vars] (bool
// columns; InputError if absent or not bool); writes obs columns n_<var>_by_<expr> (int32),
// log1p_n_<var>_by_<expr> (float64), total_<expr> (float32), log1p_total_<expr> (float32),
// pct_<expr>_in_top_<n>_<var> (float64), total_<expr>_<v>, log1p_total_<expr>_<v>, pct_<expr>_<v>
// (float32) and var columns n_cells_by_<expr> (int64), mean_<expr> (float32), log1p_mean_<expr>
// (float32), pct_dropout_by_<expr> (float64), total_<expr> (float32), log1p_total_<expr> (float32),
// in scanpy's column order (float32 columns are rounded to float32 as scanpy holds them).
void calculate_qc_metrics(const Context& ctx, Dataset& d, const QcOptions& opt);
// The pieces of the Dataset overload, shared with the GPU path: the qc_vars masks read from var (bool
// columns; InputError otherwise), the sorted and checked percent_top ranks, and the writing of a
// result into obs/var (`single`: the matrix holds float32 values, so sums are written as float32).
std::vector<std::vector<uint8_t>> qc_var_masks(const Dataset& d, const QcOptions& opt);
std::vector<int64_t> qc_percent_top(const QcOptions& opt, int64_t n_genes);
// (res's vectors are moved into the columns: no copy of a column)
void write_qc_metrics(Dataset& d, QcResult&& res, const QcOptions& opt, bool single);

// Marks var[column] = true for genes whose name (var index) starts with any of `prefixes`
// (e.g. column "mt", prefixes {"MT-", "mt-"}). If no gene matches, warns (log::warn) and writes an
// all-false column: the QC columns for it are then all 0, as scanpy users would get.
// Returns the number of genes marked.
int64_t mark_gene_prefix(Dataset& d, const std::string& column, const std::vector<std::string>& prefixes);

}  // namespace scurry
