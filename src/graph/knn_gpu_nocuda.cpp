// Built without CUDA: the GPU neighbour search is not there.
#include "core/error.hpp"
#include "graph/knn_gpu.hpp"

namespace scurry {

Knn knn_exact_gpu(const Context&, const DenseF&, int64_t, KnnMetric, const KnnExactGpuOptions&) {
  throw InputError("neighbors: this scurry was built without CUDA; use --device cpu");
}

Knn knn_ivf_gpu(const Context&, const DenseF&, int64_t, KnnMetric, const IvfOptions&) {
  throw InputError("neighbors: this scurry was built without CUDA; use --device cpu");
}

Knn knn_ivf_gpus(const std::vector<Context*>&, const DenseF&, int64_t, KnnMetric, const IvfOptions&) {
  throw InputError("neighbors: this scurry was built without CUDA; use --device cpu");
}

Knn knn_exact_gpu_rows(const Context&, const DenseF&, int64_t, KnnMetric, int64_t, int64_t) {
  throw InputError("neighbors: this scurry was built without CUDA; use --device cpu");
}

Knn knn_ivf_gpu_shard(const Context&, const DenseF&, int64_t, KnnMetric, const IvfOptions&, std::vector<int32_t>&) {
  throw InputError("neighbors: this scurry was built without CUDA; use --device cpu");
}

Knn knn_exact_gpus(const std::vector<Context*>&, const DenseF&, int64_t, KnnMetric, const KnnExactGpuOptions&) {
  throw InputError("neighbors: this scurry was built without CUDA; use --device cpu");
}

}  // namespace scurry
