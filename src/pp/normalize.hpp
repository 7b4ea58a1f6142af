// scurry: per-cell total-count normalisation, as scanpy 1.9.6's `sc.pp.normalize_total`, and the
// fused normalize_total + log1p map (one pass over the values).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "core/matrix_view.hpp"
#include "exec/context.hpp"
#include "pp/log1p.hpp"

namespace scurry {

struct NormalizeTotalOptions {
  // Every cell's total after normalisation. None: the median of the totals of the cells whose total
  // is > 0 (scanpy's default). Must be > 0 (InputError otherwise).
  std::optional<double> target_sum;
  // Leave genes out of the totals that exceed max_fraction of their cell's total in at least one cell.
  bool exclude_highly_expressed = false;
  double max_fraction = 0.05;  // in [0, 1]; only with exclude_highly_expressed
  std::string key_added;       // when not empty: obs[key_added] = the totals used (float32)
  std::string layer;           // normalise layers[layer] instead of X ("" = X)
};

struct NormalizeTotalResult {
  std::vector<double> counts_per_cell;  // per cell: the total used (over the included genes)
  double target_sum = 0;                // the target used (given, or the median)
  std::vector<uint8_t> gene_included;   // per gene, only with exclude_highly_expressed: counted in totals
  int64_t n_zero_cells = 0;             // cells whose total is 0: left unscaled (all their values stay)
};

// In place. Numerics follow scanpy's float32 sequence exactly: per cell c = float(total) (1 when 0),
// c /= float(target), CSR values *= 1/c, dense values /= c; totals are summed in float64.
// Cells whose total is 0 keep their values (zeros; with exclude_highly_expressed their excluded genes
// are multiplied by target_sum, as in scanpy). scanpy warns about zero cells; so does this.
NormalizeTotalResult normalize_total(const Context& ctx, CsrF& X, const NormalizeTotalOptions& opt);
NormalizeTotalResult normalize_total(const Context& ctx, DenseF& X, const NormalizeTotalOptions& opt);
// The checks of the options alone (target_sum > 0, max_fraction in [0, 1]); `scurry run` calls it
// before its first step.
void validate_normalize_total_options(const NormalizeTotalOptions& opt);
// The same in place on buffers the caller owns (the Python package's scipy/numpy arrays): CSR of
// float or double values with int32 or int64 column indices and row pointers, or C-contiguous dense.
// The owning overloads above are these on a view of themselves.
#define SCURRY_NORMALIZE_VIEW_DECL(T, I, P) \
  NormalizeTotalResult normalize_total(const Context& ctx, const CsrView<T, I, P>& X, const NormalizeTotalOptions& opt);
SCURRY_NORMALIZE_VIEW_DECL(float, int32_t, int32_t)
SCURRY_NORMALIZE_VIEW_DECL(float, int32_t, int64_t)
SCURRY_NORMALIZE_VIEW_DECL(float, int64_t, int32_t)
SCURRY_NORMALIZE_VIEW_DECL(float, int64_t, int64_t)
SCURRY_NORMALIZE_VIEW_DECL(double, int32_t, int32_t)
SCURRY_NORMALIZE_VIEW_DECL(double, int32_t, int64_t)
SCURRY_NORMALIZE_VIEW_DECL(double, int64_t, int32_t)
SCURRY_NORMALIZE_VIEW_DECL(double, int64_t, int64_t)
#undef SCURRY_NORMALIZE_VIEW_DECL
NormalizeTotalResult normalize_total(const Context& ctx, const DenseView<float>& X, const NormalizeTotalOptions& opt);
NormalizeTotalResult normalize_total(const Context& ctx, const DenseView<double>& X, const NormalizeTotalOptions& opt);
// The Dataset overload's writing half: obs[key_added] (float32 when `single`, the matrix holding
// float32 values) and, with `lg` (normalize_log1p), uns['log1p'].
void write_normalize_total(Dataset& d, const NormalizeTotalResult& res, const NormalizeTotalOptions& opt, bool single,
                           const Log1pOptions* lg = nullptr);
// Dataset level: normalises X (or the layer; CsrF, CsrD, DenseF, DenseD; integer dtypes become
// float32 as in scanpy), writes obs[key_added] when asked.
NormalizeTotalResult normalize_total(const Context& ctx, Dataset& d, const NormalizeTotalOptions& opt);

// normalize_total then log1p in one pass over the values: the same values as the two steps.
NormalizeTotalResult normalize_log1p(const Context& ctx, CsrF& X, const NormalizeTotalOptions& opt,
                                     const Log1pOptions& log_opt = {});
NormalizeTotalResult normalize_log1p(const Context& ctx, DenseF& X, const NormalizeTotalOptions& opt,
                                     const Log1pOptions& log_opt = {});
// Dataset level: as normalize_total then log1p (uns['log1p'] set; log_opt.layer is ignored, the
// layer is opt.layer).
NormalizeTotalResult normalize_log1p(const Context& ctx, Dataset& d, const NormalizeTotalOptions& opt,
                                     const Log1pOptions& log_opt = {});

}  // namespace scurry
