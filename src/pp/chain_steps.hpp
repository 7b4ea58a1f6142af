// scurry: the host halves of the preprocessing steps that every GPU schedule composes (issue 17
// point 9). A step is a device half (statistics per cell and per gene: pp/kernels.cuh's row_qc,
// gene_sums, row_totals over one block of rows) and this host half (decide, write the Dataset's
// slots). The resident steps (resident_gpu.cu: the in-memory chain, the chain over several GPUs and
// the Python package) run the device half once over the whole matrix; the streamed chain
// (preprocess_stream.cu) runs it block by block and adds the blocks' statistics; both then call the
// same decision here, so a threshold, a median or an HVG choice is written once. Every statistic
// passed in is already summed over the ranks (sum_ranks, exec/comm.hpp) unless said otherwise.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace scurry {

class Comm;
struct Dataset;
struct HvgOptions;

namespace chain {

// filter_cells' inputs from a row pass over this rank's cells: per cell the stored entries and the
// total as the float32 obs column holds it (what filter_cells_from_stats decides on).
struct CellStats {
  std::vector<int64_t> n_genes;
  std::vector<double> total_f32;
};
CellStats cell_stats(const std::vector<double>& n_genes, const std::vector<double>& total);

// After filter_cells over several ranks: InputError unless every rank keeps a cell (the device steps
// after the filter assume rows). Collective.
void check_every_rank_keeps(Comm& comm, int64_t kept_here);

// The median of the positive values (numpy's: the mean of the two middle ones for an even count);
// InputError when none is positive (every cell's total is 0).
double median_of_positive(const std::vector<double>& v);

// normalize_total's target: target_sum (InputError unless > 0), or the median of the positive
// per-cell totals over every rank's cells: `totals()` (this rank's, any order) is called only then.
double normalize_target(Comm& comm, const std::optional<double>& target_sum,
                        const std::function<std::vector<double>()>& totals);

// normalize_total's key_added: the per-cell totals (this rank's cells in order) as a float32 obs column.
void write_totals(Dataset& d, const std::string& key, const std::vector<double>& totals);

// highly_variable_genes (seurat, cell_ranger; one batch) from per-gene sums and sums of squares of
// expm1(X) (seurat) or X over n cells: var columns and uns['hvg'] as the CPU step (o.subset ignored:
// the caller subsets X and d). Returns the selected genes, ascending; InputError when none is.
std::vector<int64_t> choose_hvg(Dataset& d, const HvgOptions& o, const std::vector<double>& sum,
                                const std::vector<double>& sumsq, int64_t n);

// scale's statistics from per-gene sums and sums of squares over n cells, restricted to `genes` (empty:
// every gene): the mean and the standard deviation (ddof 1; 1 where it is 0), written as var 'mean'
// and 'std' (float64, as the CPU step).
struct ScaleStats {
  std::vector<double> mean, sd;
};
ScaleStats scale_stats(Dataset& d, const std::vector<double>& sum, const std::vector<double>& sumsq, int64_t n,
                       const std::vector<int64_t>& genes = {});

}  // namespace chain
}  // namespace scurry
