// scurry: regress out observation covariates per gene, as scanpy 1.9.6's `sc.pp.regress_out`.
// Per gene, scanpy fits an ordinary least-squares model (statsmodels GLM, Gaussian family, identity
// link: one IRLS step is OLS) and keeps the residuals:
// - numeric keys: the design is [1, obs[key_1], ..., obs[key_p]] shared by every gene;
// - one categorical key: the design of gene j is [1, m_j] where m_j(i) is the mean of gene j over
//   the cells of cell i's category (scanpy's float32 "regressors").
// Genes whose values are all equal are returned unchanged (as scanpy). Here the shared design is
// orthonormalised once (modified Gram-Schmidt, twice, in float64; a column in the span of the
// previous ones is dropped, as statsmodels' pseudo-inverse does), after which the residuals are
// Y - Q (Q^T Y): two float64 GEMM passes over row blocks (OpenBLAS), Q^T Y reduced in block order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct RegressOutOptions {
  // obs columns to regress on: numeric (or bool) columns, or exactly one categorical (or string)
  // column.
  std::vector<std::string> keys;
  std::string layer;  // regress layers[layer] instead of X ("" = X)
  // n_jobs: scanpy's joblib workers; here the Context's threads do the work (results identical
  // for any count). copy: the Python layer's.
};

// Kernels, in place on a dense float32 cells x genes matrix.
// design: n x p (float64, row-major), the first column usually the intercept.
void regress_out_design(const Context& ctx, DenseF& Y, const DenseD& design);
// codes: each cell's category in [0, n_categories).
void regress_out_categorical(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes, int32_t n_categories);

// The same on ctx's GPU (regress_out_gpu.cu): Y uploaded once, Q^T Y (or the per-category sums)
// and the residuals by device kernels (float64 sums over fixed chunks of rows added in a fixed
// order), the small fits on the host with the CPU path's code. device_seconds (optional): the time
// of the device work between the upload and the download, by CUDA events. Throws scurry::Error
// without a CUDA build or device.
void regress_out_design_gpu(const Context& ctx, DenseF& Y, const DenseD& design, double* device_seconds = nullptr);
void regress_out_categorical_gpu(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes,
                                 int32_t n_categories, double* device_seconds = nullptr);

namespace detail {
// Shared by the CPU and GPU paths. The design's orthonormal basis (n x q, q <= p: modified
// Gram-Schmidt twice, dependent columns dropped); the categorical fit: from the per-category sums S
// (k x g) and counts, the fitted value of every (category, gene) (zero for genes not varying).
DenseD orthonormal_basis(const DenseD& design);
std::vector<double> categorical_fit(const std::vector<double>& S, const std::vector<double>& counts,
                                    const std::vector<uint8_t>& vary, int64_t n, int32_t k, int64_t g);
}  // namespace detail

// Dataset level (CPU or GPU by ctx.backend()): X (or the layer) becomes the dense float32 residuals (a sparse input is
// densified, as scanpy does). Throws InputError naming a missing or non-numeric key.
void regress_out(const Context& ctx, Dataset& d, const RegressOutOptions& opt);

}  // namespace scurry
