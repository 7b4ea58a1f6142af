// Built without CUDA: Scrublet's neighbour count runs on the CPU only.
#include "core/error.hpp"
#include "pp/scrublet_knn_gpu.hpp"

namespace scurry {

std::vector<int32_t> scrublet_sim_neighbor_counts_gpu(const Context&, const DenseF&, int64_t, int64_t,
                                                      const ScrubletKnnOptions&, ScrubletKnnStats*) {
  fail_input("scrublet (gpu)", "this scurry was built without CUDA; use --device cpu");
}

}  // namespace scurry
