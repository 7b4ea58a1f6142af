// Built without CUDA: the GPU NMF is not there.
#include "core/error.hpp"
#include "nmf/nmf.hpp"

namespace scurry {
NmfResult nmf_fit_gpu(const Context&, const CsrF&, NmfBatch, const NmfOptions&) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
}  // namespace scurry
