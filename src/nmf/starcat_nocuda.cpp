// Built without CUDA: starCAT's GPU fit is not there.
#include "core/error.hpp"
#include "nmf/starcat.hpp"

namespace scurry {
DenseF nnls_fixed_spectra_gpu(const Context&, const CsrF&, const DenseD&, int64_t) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
DenseF starcat_fit_gpu(const Context&, const CsrF&, const std::vector<int32_t>&, int64_t, const DenseD&, bool, int64_t,
                       const std::string&, StarcatResult&) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
void starcat_gpu_warm_up(const Context&) {}
}  // namespace scurry
