// scurry: per-gene scaling to unit variance (and zero mean), as scanpy 1.9.6's `sc.pp.scale`.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "core/matrix_view.hpp"
#include "exec/context.hpp"

namespace scurry {

struct ScaleOptions {
  // Subtract each gene's mean. The output is then dense (a sparse input is densified, as in scanpy);
  // without centring a sparse input stays sparse (only its stored values are divided).
  bool zero_center = true;
  // Clip scaled values above max_value (> 0; none: no clipping). scanpy 1.9.6 clips only from above, also
  // when centred; set clip_below too for scanpy >= 1.10's behaviour (clip to [-max_value, max_value]
  // when zero_center).
  std::optional<double> max_value;
  bool clip_below = false;
  std::string layer;  // scale layers[layer] instead of X ("" = X)
};

struct ScaleResult {
  // Per gene, float64: mean, and std with ddof=1 (sample standard deviation: var * n / (n - 1)) as
  // scanpy 1.9.6 computes them; std = 1 where it is 0 (constant genes come out as 0 when centred).
  std::vector<double> mean, std;
  // The scaled matrix (float32): DenseF when zero_center, else CsrF for CSR input. Empty when the
  // Dataset overload moved it into the dataset.
  Matrix X;
};

ScaleResult scale(const Context& ctx, const CsrF& X, const ScaleOptions& opt);
ScaleResult scale(const Context& ctx, const DenseF& X, const ScaleOptions& opt);
// In place on a dense matrix (no copy); returns mean/std (X left empty in the result).
ScaleResult scale_inplace(const Context& ctx, DenseF& X, const ScaleOptions& opt);
// The same on buffers the caller owns (the Python package's numpy/scipy arrays), float32 values:
// a dense matrix scaled in place; a CSR matrix centred into a new dense result (st.X), or not
// centred, its stored values scaled in place. Row pointers int64, column indices int32 or int64.
// The owning overloads above are these on a view of themselves.
ScaleResult scale_inplace(const Context& ctx, const DenseView<float>& X, const ScaleOptions& opt);
ScaleResult scale(const Context& ctx, const CsrView<const float, int32_t, int64_t>& X, const ScaleOptions& opt);
ScaleResult scale(const Context& ctx, const CsrView<const float, int64_t, int64_t>& X, const ScaleOptions& opt);
ScaleResult scale_inplace(const Context& ctx, const CsrView<float, int32_t, int64_t>& X, const ScaleOptions& opt);
ScaleResult scale_inplace(const Context& ctx, const CsrView<float, int64_t, int64_t>& X, const ScaleOptions& opt);
// The checks of the options alone (max_value > 0); `scurry run` calls it before its first step.
void validate_scale_options(const ScaleOptions& opt);
// The Dataset overload's var columns: var['mean'], var['std'] (float64).
void write_scale(Dataset& d, const ScaleResult& st);
// Dataset level: replaces X (or the layer) with the scaled float32 matrix; writes var['mean'] and
// var['std'] (float64). CsrD/DenseD inputs are converted to float32 first. At least 2 cells needed.
ScaleResult scale(const Context& ctx, Dataset& d, const ScaleOptions& opt);

}  // namespace scurry
