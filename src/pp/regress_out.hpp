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

// Dataset level: X (or the layer) becomes the dense float32 residuals (a sparse input is
// densified, as scanpy does). Throws InputError naming a missing or non-numeric key.
void regress_out(const Context& ctx, Dataset& d, const RegressOutOptions& opt);

}  // namespace scurry
