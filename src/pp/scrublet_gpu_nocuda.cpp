// Built without CUDA: Scrublet runs on the host only.
#include "core/error.hpp"
#include "pp/scrublet_gpu.hpp"

namespace scurry {

ScrubletBatchResult scrublet_counts_gpu(const Context&, const CsrF&, const ScrubletOptions&, uint64_t) {
  fail_input("scrublet (gpu)", "this scurry was built without CUDA; use --device cpu");
}

}  // namespace scurry
