// Built without CUDA: the GPU t-SNE is not there.
#include "core/error.hpp"
#include "tl/tsne_gpu.hpp"

namespace scurry {

TsneResult tsne_gpu(const Context&, const DenseF&, const TsneOptions&) {
  throw InputError("tsne: this scurry was built without CUDA; use --device cpu");
}

double tsne_repulsion_gpu(const Context&, const std::vector<double>&, int64_t, const TsneOptions&,
                          std::vector<double>&) {
  throw InputError("tsne: this scurry was built without CUDA; use --device cpu");
}

}  // namespace scurry
