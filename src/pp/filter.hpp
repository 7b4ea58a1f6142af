// scurry: cell and gene filters, as scanpy 1.9.6's `sc.pp.filter_cells` / `sc.pp.filter_genes`.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

// scanpy allows exactly one criterion per call; here several may be given and a cell must pass all
// of them (with one criterion the result is scanpy's). At least one is required (InputError).
// "genes" criteria count entries > 0 in the row; "counts" criteria use the row sum.
struct FilterCellsOptions {
  std::optional<double> min_counts;   // keep cells with total >= min_counts
  std::optional<int64_t> min_genes;   // keep cells with at least min_genes expressed genes
  std::optional<double> max_counts;   // keep cells with total <= max_counts
  std::optional<int64_t> max_genes;   // keep cells with at most max_genes expressed genes
};
struct FilterCellsResult {
  std::vector<uint8_t> keep;     // per input cell: passes every criterion
  std::vector<int64_t> kept;     // indices of the kept cells, increasing
  std::vector<int64_t> n_genes;  // per input cell: entries > 0 (filled when a genes criterion is given)
  std::vector<double> n_counts;  // per input cell: row sum (filled when a counts criterion is given)
};

// "cells" criteria count entries > 0 in the column; "counts" criteria use the column sum.
struct FilterGenesOptions {
  std::optional<double> min_counts;   // keep genes with total >= min_counts
  std::optional<int64_t> min_cells;   // keep genes expressed (> 0) in at least min_cells cells
  std::optional<double> max_counts;   // keep genes with total <= max_counts
  std::optional<int64_t> max_cells;   // keep genes expressed in at most max_cells cells
};
struct FilterGenesResult {
  std::vector<uint8_t> keep;     // per input gene
  std::vector<int64_t> kept;     // indices of the kept genes, increasing
  std::vector<int64_t> n_cells;  // per input gene: entries > 0 (when a cells criterion is given)
  std::vector<double> n_counts;  // per input gene: column sum (when a counts criterion is given)
};

// Low level: compute the per-cell / per-gene numbers and the keep masks; nothing is removed.
FilterCellsResult filter_cells(const Context& ctx, const CsrF& X, const FilterCellsOptions& opt);
FilterCellsResult filter_cells(const Context& ctx, const DenseF& X, const FilterCellsOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const CsrF& X, const FilterGenesOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const DenseF& X, const FilterGenesOptions& opt);

// Dataset level (on X): writes obs 'n_genes' (int64) and/or 'n_counts' (float32, float64 for
// float64 data) for all cells, then keeps the passing cells in every obs-indexed slot (and in raw.X
// when present, as anndata subsets raw with obs). Throws InputError naming the threshold when no
// cell would be left. Logs how many cells were removed.
FilterCellsResult filter_cells(const Context& ctx, Dataset& d, const FilterCellsOptions& opt);
// Dataset level: writes var 'n_cells' (int64) and/or 'n_counts', keeps the passing genes (X, layers,
// var, varm, varp; raw is left whole, as in scanpy). InputError when no gene would be left.
FilterGenesResult filter_genes(const Context& ctx, Dataset& d, const FilterGenesOptions& opt);

// The writing half of the Dataset overloads, shared with the GPU path: the obs/var count columns
// (float32 when `single`), then the subset of every slot (X, layers, obs/var, obsm/varm/obsp/varp;
// raw.X rows for cells).
void apply_filter_cells(Dataset& d, const FilterCellsResult& r, bool single);
void apply_filter_genes(Dataset& d, const FilterGenesResult& r, bool single);

// Keep masks from per-cell / per-gene statistics (what the Dataset overloads compute first);
// InputError naming the threshold when nothing passes. The cells may be this rank's share of the
// cells of several ranks: pass the communicator so that "nothing passes" is decided over all of them
// (every rank must then call this collectively).
FilterCellsResult filter_cells_from_stats(std::vector<int64_t> n_genes, std::vector<double> n_counts,
                                          const FilterCellsOptions& opt, Comm* comm = nullptr);
FilterGenesResult filter_genes_from_stats(std::vector<int64_t> n_cells, std::vector<double> n_counts,
                                          const FilterGenesOptions& opt);

}  // namespace scurry
