// Built only when CUDA is off: the CUDA entry points report that there is no CUDA.
#include "exec/context.hpp"
#include "exec/device_release.hpp"

namespace scurry {
struct CudaResources {};
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_description(int) { return "none"; }
std::shared_ptr<CudaResources> make_cuda_resources(const CudaOptions&) { return nullptr; }
size_t cuda_peak_bytes(const CudaResources*) { return 0; }
MemoryMode cuda_memory_mode(const CudaResources*) { return MemoryMode::pool; }
void start_cuda_driver_early() {}
void release_cached_device_memory(const Context&) {}
}  // namespace scurry
