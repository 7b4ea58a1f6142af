// scurry: pseudobulk, as scanpy 1.10's `sc.get.aggregate(adata, by, func, mask=, dof=, layer=)`
// along the cells (axis 0): one row per observed combination of the `by` columns' categories, one
// dense layer per function (sum, mean, count_nonzero, var), var copied from the input, no X.
//
// Computed in one pass over the rows of X (or the layer) in fixed blocks: per group and gene the
// float64 sum, sum of squares and nonzero count, combined in block order (the same bits for any
// thread count; the shape a GPU kernel reproduces with per-group reductions).
//
// Differences from scanpy 1.10.x, on purpose:
// - groups of 3 or more `by` columns are numbered with the product of the category counts (scanpy
//   1.10's _combine_categories uses their cumulative sum, which mixes groups up for 3+ columns).
// - cells with a missing category in a `by` column are left out (scanpy fails on them).
// - count_nonzero is written as int64, sum in the input's float type, mean and var as float64.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "exec/context.hpp"

namespace scurry {

struct AggregateOptions {
  std::vector<std::string> by;        // obs columns (categorical, string or bool); at least one
  std::vector<std::string> func;      // sum | mean | count_nonzero | var; at least one
  std::string mask;                   // boolean obs column: only those cells ("" = all)
  int dof = 1;                        // var: delta degrees of freedom
  std::string layer;                  // aggregate this layer instead of X ("" = X)
};

// The pseudobulk AnnData. Throws InputError naming the problem (an unknown column or function, a
// mask that is not boolean, ...).
Dataset aggregate(const Dataset& d, const AggregateOptions& opt, const Context& ctx);
// On a GPU context (float32 data) the per-group reductions run on the device; `gpus` (--gpus): several
// GPU contexts sharing the genes (ctx is the first). The results do not depend on their number.
Dataset aggregate(const Dataset& d, const AggregateOptions& opt, const Context& ctx, const std::vector<Context*>& gpus);

}  // namespace scurry
