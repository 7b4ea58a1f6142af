// CUDA side of the Context: device selection, a stream, and the memory resource.
#include <cuda_runtime.h>

#include "exec/context.hpp"
#include "exec/cuda_check.hpp"

namespace scurry {

struct CudaResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  MemoryMode memory = MemoryMode::pool;
  ~CudaResources() {
    if (stream) cudaStreamDestroy(stream);
  }
};

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string cuda_device_description(int ordinal) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) return "unavailable";
  return detail::concat("device ", ordinal, " (", p.name, ", ", static_cast<double>(p.totalGlobalMem) / (1ull << 30),
                        " GiB, sm_", p.major, p.minor, ")");
}

std::shared_ptr<CudaResources> make_cuda_resources(int ordinal, MemoryMode mode) {
  auto r = std::make_shared<CudaResources>();
  r->device = ordinal;
  r->memory = mode;
  SCURRY_CUDA(cudaSetDevice(ordinal));
  SCURRY_CUDA(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
  return r;
}

}  // namespace scurry
