// Built without CUDA: logreg's data term runs on the CPU only.
#include "core/error.hpp"
#include "tl/logreg_gpu.hpp"

namespace scurry {

struct LogregGpu::Impl {};

LogregGpu::LogregGpu(const std::vector<const Context*>&, const CsrF&, const std::vector<int32_t>&, int, int64_t) {
  fail_input("rank_genes_groups logreg (gpu)", "this scurry was built without CUDA; use --device cpu");
}
LogregGpu::~LogregGpu() = default;
double LogregGpu::operator()(const std::vector<double>&, std::vector<double>&) { return 0; }
int LogregGpu::streamed_devices() const { return 0; }

}  // namespace scurry
