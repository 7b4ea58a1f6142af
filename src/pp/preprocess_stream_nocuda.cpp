// Built without CUDA: the streamed GPU chain is not there (its host-side pieces are, in
// preprocess_stream.cpp).
#include "core/error.hpp"
#include "pp/preprocess_stream.hpp"

namespace scurry {
void preprocess_stream(Context&, RowSource&, Dataset&, const PreprocessOptions&, const StreamOptions&, Timings*) {
  throw InputError("this scurry was built without CUDA; --stream needs --device gpu");
}
size_t stream_device_budget(Context&) { return 0; }
double measure_h2d_gbps(Context&, size_t, int) { return 0; }
}  // namespace scurry
