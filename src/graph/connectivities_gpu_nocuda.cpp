// Built without CUDA: the GPU connectivities are not there.
#include "core/error.hpp"
#include "graph/connectivities_gpu.hpp"

namespace scurry {

CsrF fuzzy_simplicial_set_gpu(const Context&, const Knn&, const ConnectivitiesOptions&) {
  throw InputError("connectivities (gpu): this scurry was built without CUDA; use --device cpu");
}

}  // namespace scurry
