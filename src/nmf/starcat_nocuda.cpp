// Built without CUDA: starCAT's GPU fit is not there.
#include "core/error.hpp"
#include "nmf/starcat.hpp"

namespace scurry {
DenseF nnls_fixed_spectra_gpu(const Context&, const CsrF&, const DenseD&, int64_t) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
}  // namespace scurry
