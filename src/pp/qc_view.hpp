// scurry: calculate_qc_metrics over views of buffers the caller owns (core/matrix_view.hpp: the
// Python package's scipy/numpy matrices, read in place, no copy). The owning overloads of
// pp/qc.hpp delegate to these. A header of its own so that pp/qc.hpp, which much of the tree
// includes, does not pull in the views.
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix_view.hpp"
#include "pp/qc.hpp"

namespace scurry {

QcResult calculate_qc_metrics(const Context& ctx, const CsrView<const float, int32_t, int64_t>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});
QcResult calculate_qc_metrics(const Context& ctx, const CsrView<const float, int64_t, int64_t>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});
QcResult calculate_qc_metrics(const Context& ctx, const CsrView<const double, int32_t, int64_t>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});
QcResult calculate_qc_metrics(const Context& ctx, const CsrView<const double, int64_t, int64_t>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});
QcResult calculate_qc_metrics(const Context& ctx, const DenseView<const float>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});
QcResult calculate_qc_metrics(const Context& ctx, const DenseView<const double>& X, const QcOptions& opt,
                              const std::vector<std::vector<uint8_t>>& qc_masks = {});

}  // namespace scurry
