// Built without CUDA: the GPU chain is not there.
#include "core/error.hpp"
#include "pp/preprocess.hpp"

namespace scurry {
void preprocess_gpu(Context&, Dataset&, const PreprocessOptions&, Timings*) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
void preprocess_simulated(Context&, DeviceSimulated&, Dataset&, const PreprocessOptions&, Timings*, bool) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
}  // namespace scurry
