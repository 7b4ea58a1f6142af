// Built without CUDA: the multi-GPU chain is not there.
#include "core/error.hpp"
#include "pp/preprocess.hpp"
#include "pp/preprocess_stream.hpp"

namespace scurry {
void preprocess_gpu_sharded(const std::vector<Context*>&, Dataset&, const PreprocessOptions&, Timings*) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
void preprocess_simulated_sharded(const std::vector<Context*>&, DeviceSimulated&, Dataset&, const PreprocessOptions&,
                                  Timings*, bool) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
void preprocess_stream_sharded(const std::vector<Context*>&, RowSource&, Dataset&, const PreprocessOptions&,
                               const StreamOptions&, Timings*) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
}  // namespace scurry
