// scurry: what a CUDA Context holds (included by .cu files only): the device, one stream, the
// cuBLAS handle, and the device memory resource in the mode the user chose.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "exec/context.hpp"
#include "exec/cuda_check.hpp"

namespace scurry {

// The device memory resource. Modes (what rapids-singlecell users set up through RMM):
//  pool         cudaMallocAsync from the device's stream-ordered pool (default); the pool keeps
//               freed memory for reuse (release threshold = unlimited); `pool_size` pre-reserves.
//  managed      cudaMallocManaged: data larger than the GPU spills to host RAM. Never asks for more
//               than the device has free at the time (over-subscription can hang a shared GPU).
//  managed_pool managed allocations kept in a free list for reuse.
//  plain        cudaMalloc / cudaFree.
// `max_bytes` (--max-pool-size) caps what scurry holds at once in every mode.
class DeviceMemory {
 public:
  DeviceMemory(int device, cudaStream_t stream, MemoryMode mode, size_t pool_size, size_t max_bytes);
  ~DeviceMemory();
  void* allocate(size_t bytes, const char* what);
  void deallocate(void* p, size_t bytes);
  // Bytes held on the device (managed: those placed on the device) and their peak.
  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }
  void reset_peak() { peak_ = in_use_.load(), host_peak_ = host_in_use_.load(); }
  // Managed modes: bytes placed in host memory (over the device budget; the GPU reads and writes them
  // in place over PCIe) and their peak. Zero in the other modes.
  size_t host_in_use() const { return host_in_use_; }
  size_t host_peak() const { return host_peak_; }
  MemoryMode mode() const { return mode_; }
  size_t max_bytes() const { return max_bytes_; }  // --max-pool-size (0: no cap)

 private:
  [[noreturn]] void out_of_memory(size_t bytes, const char* what, cudaError_t err);
  int device_;
  cudaStream_t stream_;
  MemoryMode mode_;
  size_t max_bytes_;
  std::atomic<size_t> in_use_{0}, peak_{0}, host_in_use_{0}, host_peak_{0};
  size_t device_budget_ = 0;  // managed: bytes that may live on the device (set at the first allocation)
  struct FreeList;
  FreeList* free_ = nullptr;  // managed_pool only
  struct Placement;
  Placement* placed_ = nullptr;  // managed modes: which allocations live in host memory
};

struct CudaResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceMemory* memory = nullptr;
  ~CudaResources();
};

// RAII device array from the Context's memory resource.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(CudaResources& r, size_t n, const char* what) : mem_(r.memory), n_(n) {
    if (n) p_ = static_cast<T*>(mem_->allocate(n * sizeof(T), what));
  }
  DeviceArray(DeviceArray&& o) noexcept : mem_(o.mem_), p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      release();
      mem_ = o.mem_, p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { release(); }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  void release() {
    if (p_) mem_->deallocate(p_, n_ * sizeof(T));
    p_ = nullptr, n_ = 0;
  }

 private:
  DeviceMemory* mem_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0;
};

// SCURRY_PROFILE=1: mark(what) prints the wall time since the previous mark (the stream synchronised
// first) as "  <tag> <what> <ms>" on stderr; without it, nothing (no synchronisation).
class PhaseClock {
 public:
  PhaseClock(CudaResources& r, const char* tag);
  void mark(const char* what);
  bool on() const { return on_; }

 private:
  CudaResources& r_;
  const char* tag_;
  bool on_;
  double last_;
  double last_cpu_ = 0;  // the process's user + system CPU ms, its minor page faults and involuntary
  long last_faults_ = 0, last_ivcsw_ = 0;  // context switches at the last mark (getrusage)
};

#define SCURRY_CUBLAS(call)                                                                  \
  do {                                                                                       \
    cublasStatus_t scurry_st_ = (call);                                                      \
    if (scurry_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::scurry::fail("cuBLAS error ", static_cast<int>(scurry_st_), " in ", #call, " (", __FILE__, ":", \
                     __LINE__, ")");                                                         \
  } while (0)

}  // namespace scurry
