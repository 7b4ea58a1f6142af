// Built without CUDA: the GPU NMF and the GPU cNMF benchmark are not there.
#include "core/error.hpp"
#include "nmf/cnmf_bench.hpp"
#include "nmf/nmf.hpp"

namespace scurry {
NmfResult nmf_fit_gpu(const Context&, const CsrF&, NmfBatch, const NmfOptions&) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
NmfResult nmf_fit_gpu_on(CudaResources&, const CsrF&, NmfBatch, const NmfOptions&) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
void nmf_fit_gpu_batches(const Context&, const CsrF&, int, int64_t, const std::function<NmfBatch(int, std::vector<float>&)>&,
                         const NmfOptions&, const std::function<void(int, NmfResult&)>&, bool) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
struct NmfGpuRefits::Impl {};
NmfGpuRefits::NmfGpuRefits(const Context&, const CsrF&, NmfOptions, int) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
NmfGpuRefits::~NmfGpuRefits() = default;
DenseF NmfGpuRefits::refit(const DenseF&, double*) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
CnmfBenchResult cnmf_bench_gpu(const CnmfBenchOptions&, const CudaOptions&) {
  throw InputError("this scurry was built without CUDA; use --device cpu");
}
}  // namespace scurry
