// NcclComm (comm_nccl.hpp). Built with NCCL when CMake defines SCURRY_HAVE_NCCL; otherwise every
// entry point says that NCCL is not built in. The one place NCCL status codes become scurry::Error.
// Floor: an allreduce of B bytes between 2 H200s over NVLink (~450 GB/s a direction) is about
// B / 450 GB/s (the 2000 x 2000 float64 Gram: 32 MB, ~0.07 ms + launch latency).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "exec/comm_nccl.hpp"
#include "exec/cuda_check.hpp"

#ifdef SCURRY_HAVE_NCCL
#include <nccl.h>
#endif

namespace scurry {

#ifdef SCURRY_HAVE_NCCL

#define SCURRY_NCCL(call)                                                                                     \
  do {                                                                                                        \
    ncclResult_t scurry_nr_ = (call);                                                                         \
    if (scurry_nr_ != ncclSuccess)                                                                            \
      ::scurry::fail("NCCL error in ", #call, " (", __FILE__, ":", __LINE__, "): ", ncclGetErrorString(scurry_nr_)); \
  } while (0)

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;  // host-buffer sums
};

bool nccl_built() { return true; }

NcclComm::NcclComm(std::unique_ptr<Impl> impl, std::shared_ptr<Comm> host, int rank, int size)
    : impl_(std::move(impl)), host_(std::move(host)), rank_(rank), size_(size) {}

NcclComm::~NcclComm() {
  close(true);
  if (impl_ && impl_->stream) {
    int here = 0;
    const bool known = cudaGetDevice(&here) == cudaSuccess;
    cudaSetDevice(impl_->device);
    cudaStreamDestroy(impl_->stream);
    if (known) cudaSetDevice(here);
  }
}

void NcclComm::close(bool abort) {
  if (!impl_ || !impl_->comm) return;
  ncclComm_t c = impl_->comm;
  impl_->comm = nullptr;
  if (abort) ncclCommAbort(c);  // (in a destructor or after a failure: its status is of no use)
  else SCURRY_NCCL(ncclCommDestroy(c));
}

int NcclComm::device() const { return impl_->device; }

std::string NcclComm::describe() const { return detail::concat("NCCL, ", size_, " GPUs"); }

void NcclComm::abort(int code) {
  close(true);
  host_->abort(code);
  std::exit(code);  // (host_->abort does not return)
}

template <class T>
void NcclComm::host_sum(T* data, size_t n, int nccl_type) {
  if (!impl_->comm) fail("internal: NcclComm used after close()");
  SCURRY_CUDA(cudaSetDevice(impl_->device));
  const size_t bytes = n * sizeof(T);
  void* d = nullptr;
  if (bytes) SCURRY_CUDA(cudaMallocAsync(&d, bytes, impl_->stream));
  if (bytes) SCURRY_CUDA(cudaMemcpyAsync(d, data, bytes, cudaMemcpyHostToDevice, impl_->stream));
  SCURRY_NCCL(ncclAllReduce(d, d, n, static_cast<ncclDataType_t>(nccl_type), ncclSum, impl_->comm, impl_->stream));
  if (bytes) SCURRY_CUDA(cudaMemcpyAsync(data, d, bytes, cudaMemcpyDeviceToHost, impl_->stream));
  if (bytes) SCURRY_CUDA(cudaFreeAsync(d, impl_->stream));
  SCURRY_CUDA(cudaStreamSynchronize(impl_->stream));
}

void NcclComm::allreduce_sum(double* data, size_t n) { host_sum(data, n, ncclFloat64); }
void NcclComm::allreduce_sum(int64_t* data, size_t n) { host_sum(data, n, ncclInt64); }

void NcclComm::allreduce_sum_device(double* data, size_t n, void* stream) {
  if (!impl_->comm) fail("internal: NcclComm used after close()");
  SCURRY_NCCL(ncclAllReduce(data, data, n, ncclFloat64, ncclSum, impl_->comm, static_cast<cudaStream_t>(stream)));
}

std::vector<std::shared_ptr<NcclComm>> make_nccl_comms(const std::vector<int>& devices,
                                                       const std::vector<std::shared_ptr<Comm>>& host) {
  const int n = static_cast<int>(devices.size());
  if (n < 1 || host.size() != devices.size()) fail("internal: make_nccl_comms: ", n, " devices, ", host.size(), " host comms");
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j)
      if (devices[i] == devices[j]) fail("NCCL: device ", devices[i], " is listed twice; NCCL needs one rank per GPU");
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast (NVLS) off before NCCL reads its environment
  int previous = 0;
  SCURRY_CUDA(cudaGetDevice(&previous));
  std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
  SCURRY_NCCL(ncclCommInitAll(comms.data(), n, devices.data()));
  std::vector<std::shared_ptr<NcclComm>> out;
  try {
    for (int i = 0; i < n; ++i) {
      auto impl = std::make_unique<NcclComm::Impl>();
      impl->comm = comms[static_cast<size_t>(i)];
      comms[static_cast<size_t>(i)] = nullptr;  // owned by impl from here
      impl->device = devices[static_cast<size_t>(i)];
      SCURRY_CUDA(cudaSetDevice(impl->device));
      SCURRY_CUDA(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
      out.push_back(std::make_shared<NcclComm>(std::move(impl), host[static_cast<size_t>(i)], i, n));
    }
  } catch (...) {
    for (ncclComm_t c : comms)
      if (c) ncclCommAbort(c);
    cudaSetDevice(previous);
    throw;
  }
  SCURRY_CUDA(cudaSetDevice(previous));
  return out;
}

std::shared_ptr<NcclComm> make_nccl_comm_ranks(const std::shared_ptr<Comm>& host, int device) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast (NVLS) off before NCCL reads its environment
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (host->rank() == 0) SCURRY_NCCL(ncclGetUniqueId(&id));
  host->broadcast(&id, sizeof id, 0);
  int previous = 0;
  SCURRY_CUDA(cudaGetDevice(&previous));
  SCURRY_CUDA(cudaSetDevice(device));
  auto impl = std::make_unique<NcclComm::Impl>();
  impl->device = device;
  SCURRY_NCCL(ncclCommInitRank(&impl->comm, host->size(), id, host->rank()));
  SCURRY_CUDA(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  SCURRY_CUDA(cudaSetDevice(previous));
  return std::make_shared<NcclComm>(std::move(impl), host, host->rank(), host->size());
}

#else  // built without NCCL
#define SCURRY_NO_NCCL_WHY "this scurry was built without NCCL (CMake did not find nccl.h and libnccl)"
#include "exec/comm_nccl_stub.inl"
#endif

}  // namespace scurry
