// scurry: natural (or base-b) log(1 + x), in place, as scanpy 1.9.6's `sc.pp.log1p`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct Log1pOptions {
  std::optional<double> base;  // none: natural log; else log(1 + x) / log(base) (base > 0, != 1)
  std::string layer;           // transform layers[layer] instead of X ("" = X)
};

// Element maps, in place (CSR: only the stored values; log1p(0) = 0). Results are float32 for float
// input (computed in float64, rounded once).
void log1p(const Context& ctx, CsrF& X, const Log1pOptions& opt);
void log1p(const Context& ctx, DenseF& X, const Log1pOptions& opt);
// The same on `n` values the caller owns (a CSR matrix's stored values, a dense array), in place.
void log1p(const Context& ctx, float* values, int64_t n, const Log1pOptions& opt);
void log1p(const Context& ctx, double* values, int64_t n, const Log1pOptions& opt);
// The Dataset overload's metadata: uns['log1p'] ({} or {'base': b}), warning when it exists already.
void write_log1p(Dataset& d, const Log1pOptions& opt);
// Dataset level: transforms X (or the layer; any of CsrF, CsrD, DenseF, DenseD; the slot's dtype
// becomes float32/float64) and sets uns['log1p'] = {} (base none: anndata writes no 'base' key for
// None) or {'base': b}. Warns when uns['log1p'] already exists, as scanpy does.
void log1p(const Context& ctx, Dataset& d, const Log1pOptions& opt);

// Checks opt.base; throws InputError naming the bad value. Used by the fused normalize_log1p too.
void validate_log1p_options(const Log1pOptions& opt);

}  // namespace scurry
