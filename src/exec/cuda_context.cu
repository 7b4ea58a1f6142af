// CUDA side of the Context: device selection, a stream, cuBLAS, and the device memory resource.
#include <sys/resource.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "exec/cuda_resources.cuh"
#include "exec/device_release.hpp"
#include "exec/multi_device.cuh"

namespace scurry {

namespace {
const char* mode_name(MemoryMode m) {
  switch (m) {
    case MemoryMode::pool: return "pool";
    case MemoryMode::managed: return "managed";
    case MemoryMode::managed_pool: return "managed-pool";
    case MemoryMode::plain: return "plain";
  }
  return "?";
}
double gib(size_t b) { return static_cast<double>(b) / (1ull << 30); }

// MemAvailable of /proc/meminfo (bytes the host can still give without swapping); 0 when unknown.
size_t host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

void raise_peak(std::atomic<size_t>& peak, size_t now) {
  size_t prev = peak;
  while (now > prev && !peak.compare_exchange_weak(prev, now)) {}
}

cudaMemLocation location(bool host, int device) {
  cudaMemLocation l{};
  l.type = host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  l.id = host ? 0 : device;
  return l;
}
}  // namespace

// Managed modes: the allocations placed in host memory. The device budget is --max-pool-size, else
// what the device has free at the first allocation less a margin. An allocation that fits what is
// left of the budget prefers the device (it migrates there on first touch and stays); one that does
// not prefers the host, with the GPU mapped onto it (cudaMemAdviseSetAccessedBy), so kernels read and
// write it in place over PCIe instead of faulting pages back and forth (the oversubscription pattern
// of the CUDA C++ Best Practices' unified-memory section). The first allocations are the largest
// (the input matrix), so the input spills and the working arrays stay on the device.
struct DeviceMemory::Placement {
  std::mutex mu;
  std::unordered_set<void*> host;
};

struct DeviceMemory::FreeList {
  std::mutex mu;
  std::multimap<size_t, void*> blocks;  // size -> pointer
};

DeviceMemory::DeviceMemory(int device, cudaStream_t stream, MemoryMode mode, size_t pool_size, size_t max_bytes)
    : device_(device), stream_(stream), mode_(mode), max_bytes_(max_bytes) {
  if (mode_ == MemoryMode::pool) {
    cudaMemPool_t pool;
    SCURRY_CUDA(cudaDeviceGetDefaultMemPool(&pool, device_));
    uint64_t threshold = UINT64_MAX;  // keep freed memory for reuse
    SCURRY_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    if (pool_size > 0) {  // pre-reserve: one allocation freed back into the pool
      void* p = nullptr;
      if (cudaMallocAsync(&p, pool_size, stream_) != cudaSuccess) out_of_memory(pool_size, "--pool-size reservation", cudaErrorMemoryAllocation);
      SCURRY_CUDA(cudaFreeAsync(p, stream_));
      SCURRY_CUDA(cudaStreamSynchronize(stream_));
    }
  }
  if (mode_ == MemoryMode::managed_pool) free_ = new FreeList;
  if (mode_ == MemoryMode::managed || mode_ == MemoryMode::managed_pool) placed_ = new Placement;
}

DeviceMemory::~DeviceMemory() {
  delete placed_;
  if (free_) {
    for (auto& [n, p] : free_->blocks) cudaFree(p);
    delete free_;
  }
}

void DeviceMemory::out_of_memory(size_t bytes, const char* what, cudaError_t err) {
  cudaGetLastError();
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  std::string advice;
  switch (mode_) {
    case MemoryMode::pool:
    case MemoryMode::plain:
      advice = "use --memory managed to spill to host memory, or process in smaller row blocks";
      break;
    case MemoryMode::managed:
    case MemoryMode::managed_pool:
      advice = "the data does not fit even with managed memory; use a machine with more GPU memory or more GPUs";
      break;
  }
  fail("GPU out of memory: ", what, " needs ", gib(bytes), " GiB; scurry holds ", gib(in_use_), " GiB, the device has ",
       gib(free_b), " GiB free of ", gib(total_b), " GiB (memory mode ", mode_name(mode_),
       max_bytes_ ? detail::concat(", --max-pool-size ", gib(max_bytes_), " GiB") : std::string(), "; ",
       cudaGetErrorString(err), "): ", advice);
}

void* DeviceMemory::allocate(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  const bool managed = placed_ != nullptr;
  if (!managed && max_bytes_ && in_use_ + bytes > max_bytes_) out_of_memory(bytes, what, cudaErrorMemoryAllocation);
  void* p = nullptr;
  cudaError_t err = cudaSuccess;
  switch (mode_) {
    case MemoryMode::pool: err = cudaMallocAsync(&p, bytes, stream_); break;
    case MemoryMode::plain: err = cudaMalloc(&p, bytes); break;
    case MemoryMode::managed_pool: {
      std::lock_guard<std::mutex> lock(free_->mu);
      auto it = free_->blocks.lower_bound(bytes);
      if (it != free_->blocks.end() && it->first == bytes) {
        p = it->second;
        free_->blocks.erase(it);
        break;
      }
    }
      [[fallthrough]];
    case MemoryMode::managed: {
      if (p) break;  // reused (managed-pool): keeps its placement
      std::lock_guard<std::mutex> lock(placed_->mu);
      if (!device_budget_) {
        size_t free_b = 0, total_b = 0;
        SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
        const size_t margin = std::min<size_t>(free_b / 20, size_t{2} << 30);  // CUDA's own needs
        device_budget_ = max_bytes_ ? std::min(max_bytes_, free_b) : free_b - margin;
      }
      const bool host = in_use_ + bytes > device_budget_;
      if (host) {
        const size_t avail = host_available_bytes();
        if (avail && bytes > avail)
          fail("out of memory: ", what, " needs ", gib(bytes), " GiB; over the device budget of ", gib(device_budget_),
               " GiB it goes to host memory (--memory ", mode_name(mode_), "), which has ", gib(avail),
               " GiB available: use more GPUs, --stream, or a machine with more memory");
      }
      err = cudaMallocManaged(&p, bytes);
      if (err != cudaSuccess) break;
      if (host) {
        SCURRY_CUDA(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, location(true, device_)));
        SCURRY_CUDA(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, location(false, device_)));
        placed_->host.insert(p);
      } else {
        SCURRY_CUDA(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, location(false, device_)));
      }
      break;
    }
  }
  if (err != cudaSuccess) out_of_memory(bytes, what, err);
  bool host = false;
  if (managed) {
    std::lock_guard<std::mutex> lock(placed_->mu);
    host = placed_->host.count(p) > 0;
  }
  if (host)
    raise_peak(host_peak_, host_in_use_ += bytes);
  else
    raise_peak(peak_, in_use_ += bytes);
  return p;
}

void DeviceMemory::deallocate(void* p, size_t bytes) {
  if (!p) return;
  bool host = false;
  if (placed_) {
    std::lock_guard<std::mutex> lock(placed_->mu);
    host = placed_->host.count(p) > 0;
    if (host && mode_ == MemoryMode::managed) placed_->host.erase(p);
  }
  (host ? host_in_use_ : in_use_) -= bytes;
  switch (mode_) {
    case MemoryMode::pool: cudaFreeAsync(p, stream_); break;
    case MemoryMode::plain:
    case MemoryMode::managed: cudaFree(p); break;
    case MemoryMode::managed_pool: {
      std::lock_guard<std::mutex> lock(free_->mu);
      free_->blocks.emplace(bytes, p);
      break;
    }
  }
}

CudaResources::~CudaResources() {
  if (stream) cudaStreamSynchronize(stream);
  delete memory;
  if (cublas) cublasDestroy(cublas);
  if (stream) cudaStreamDestroy(stream);
}

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the "no device" error
    return 0;
  }
  return n;
}

std::string cuda_device_description(int ordinal) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) return "unavailable";
  return detail::concat("device ", ordinal, " (", p.name, ", ", gib(p.totalGlobalMem), " GiB, sm_", p.major, p.minor, ")");
}

std::shared_ptr<CudaResources> make_cuda_resources(const CudaOptions& opt) {
  auto r = std::make_shared<CudaResources>();
  r->device = opt.device;
  SCURRY_CUDA(cudaSetDevice(opt.device));
  SCURRY_CUDA(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
  SCURRY_CUBLAS(cublasCreate(&r->cublas));
  SCURRY_CUBLAS(cublasSetStream(r->cublas, r->stream));
  r->memory = new DeviceMemory(opt.device, r->stream, opt.memory, opt.pool_size, opt.max_pool_size);
  return r;
}

void start_cuda_driver_early() {
  std::thread([] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) cudaGetLastError();
  }).detach();
}

void release_cached_device_memory(const Context& ctx) {
  CudaResources* r = ctx.cuda();
  if (!r || !r->memory || r->memory->mode() != MemoryMode::pool) return;
  SCURRY_CUDA(cudaSetDevice(r->device));
  SCURRY_CUDA(cudaStreamSynchronize(r->stream));
  cudaMemPool_t pool;
  SCURRY_CUDA(cudaDeviceGetDefaultMemPool(&pool, r->device));
  SCURRY_CUDA(cudaMemPoolTrimTo(pool, 0));
}

size_t cuda_peak_bytes(const CudaResources* r) { return r && r->memory ? r->memory->peak() : 0; }
MemoryMode cuda_memory_mode(const CudaResources* r) { return r && r->memory ? r->memory->mode() : MemoryMode::pool; }

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

namespace {
struct Usage {
  double cpu_ms;
  long faults, ivcsw;
};
Usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto ms = [](const timeval& v) { return v.tv_sec * 1e3 + v.tv_usec * 1e-3; };
  return {ms(u.ru_utime) + ms(u.ru_stime), u.ru_minflt, u.ru_nivcsw};
}
}  // namespace

PhaseClock::PhaseClock(CudaResources& r, const char* tag)
    : r_(r), tag_(tag), on_(std::getenv("SCURRY_PROFILE") != nullptr), last_(now_ms()) {
  if (!on_) return;
  const Usage u = usage_now();
  last_cpu_ = u.cpu_ms, last_faults_ = u.faults, last_ivcsw_ = u.ivcsw;
}

void PhaseClock::mark(const char* what) {
  if (!on_) return;
  SCURRY_CUDA(cudaStreamSynchronize(r_.stream));
  const double t = now_ms();
  const Usage u = usage_now();
  // Wall, then the whole process's CPU time, minor page faults and involuntary context switches over
  // the phase (a host phase slower in one process than another: which of the three moved).
  std::fprintf(stderr, "  %s %-24s %9.3f ms  (cpu %.1f ms, %ld faults, %ld ivcsw)\n", tag_, what, t - last_,
               u.cpu_ms - last_cpu_, u.faults - last_faults_, u.ivcsw - last_ivcsw_);
  last_ = t, last_cpu_ = u.cpu_ms, last_faults_ = u.faults, last_ivcsw_ = u.ivcsw;
}

size_t available_bytes(CudaResources& r) {
  size_t free_b = 0, total_b = 0;
  SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
  size_t avail = free_b;
  if (r.memory->mode() == MemoryMode::pool) {
    cudaMemPool_t pool = nullptr;
    uint64_t reserved = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, r.device) == cudaSuccess &&
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess &&
        reserved > r.memory->in_use())
      avail += static_cast<size_t>(reserved - r.memory->in_use());
    cudaGetLastError();
  }
  const size_t cap = r.memory->max_bytes();
  if (cap) avail = std::min(avail, cap > r.memory->in_use() ? cap - r.memory->in_use() : size_t{0});
  return std::min(avail, total_b);
}

void on_each_device(const std::vector<const Context*>& devices, const std::function<void(size_t)>& f) {
  const size_t D = devices.size();
  std::vector<std::exception_ptr> err(D);
  auto work = [&](size_t k) {
    try {
      SCURRY_CUDA(cudaSetDevice(devices[k]->cuda()->device));
      f(k);
    } catch (...) {
      err[k] = std::current_exception();
    }
  };
  if (D == 1) {
    work(0);
  } else {
    std::vector<std::thread> th;
    for (size_t k = 0; k < D; ++k) th.emplace_back(work, k);
    for (auto& t : th) t.join();
    SCURRY_CUDA(cudaSetDevice(devices[0]->cuda()->device));
  }
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
}

}  // namespace scurry
