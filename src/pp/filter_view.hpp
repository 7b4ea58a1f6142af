// scurry: filter_cells / filter_genes statistics over views of buffers the caller owns
// (core/matrix_view.hpp: the Python package's scipy/numpy matrices, read in place, no copy); the
// keep masks and numbers, nothing removed. The owning overloads of pp/filter.hpp delegate to these.
// A header of its own so that pp/filter.hpp, which much of the tree includes, does not pull in the
// views.
#pragma once
#include <cstdint>

#include "core/matrix_view.hpp"
#include "pp/filter.hpp"

namespace scurry {

FilterCellsResult filter_cells(const Context& ctx, const CsrView<const float, int32_t, int64_t>& X, const FilterCellsOptions& opt);
FilterCellsResult filter_cells(const Context& ctx, const CsrView<const float, int64_t, int64_t>& X, const FilterCellsOptions& opt);
FilterCellsResult filter_cells(const Context& ctx, const CsrView<const double, int32_t, int64_t>& X, const FilterCellsOptions& opt);
FilterCellsResult filter_cells(const Context& ctx, const CsrView<const double, int64_t, int64_t>& X, const FilterCellsOptions& opt);
FilterCellsResult filter_cells(const Context& ctx, const DenseView<const float>& X, const FilterCellsOptions& opt);
FilterCellsResult filter_cells(const Context& ctx, const DenseView<const double>& X, const FilterCellsOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const CsrView<const float, int32_t, int64_t>& X, const FilterGenesOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const CsrView<const float, int64_t, int64_t>& X, const FilterGenesOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const CsrView<const double, int32_t, int64_t>& X, const FilterGenesOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const CsrView<const double, int64_t, int64_t>& X, const FilterGenesOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const DenseView<const float>& X, const FilterGenesOptions& opt);
FilterGenesResult filter_genes(const Context& ctx, const DenseView<const double>& X, const FilterGenesOptions& opt);

}  // namespace scurry
