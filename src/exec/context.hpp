// scurry: Context, the one resources handle passed to every step: backend, thread count,
// communicator, and (CUDA builds) the device, streams, library handles and memory resource.
// Nothing of this lives in globals.
#pragma once
#include <memory>
#include <string>

#include "exec/comm.hpp"

namespace scurry {

enum class Backend { cpu, cuda };
enum class MemoryMode { pool, managed, managed_pool, plain };

struct CudaResources;  // defined in exec/cuda_context.cu (CUDA builds only)
class NcclComm;        // exec/comm_nccl.hpp

struct CudaOptions {
  int device = 0;                        // CUDA device ordinal
  MemoryMode memory = MemoryMode::pool;  // --memory pool|managed|managed-pool|plain
  size_t pool_size = 0;                  // --pool-size: bytes pre-reserved in the pool (0 = none)
  size_t max_pool_size = 0;              // --max-pool-size: most bytes held at once (0 = no cap)
};

struct ContextOptions {
  std::string device = "cpu";  // cpu | gpu | auto
  int threads = 0;             // CPU threads; 0 = all hardware threads
  CudaOptions cuda;
};

// "pool" | "managed" | "managed-pool" | "plain"; throws InputError otherwise.
MemoryMode parse_memory_mode(const std::string& s);

class Context {
 public:
  // Builds a context; `auto` picks the GPU when one is present. Throws scurry::Error when a GPU is
  // asked for and none is usable, saying why.
  static Context create(const ContextOptions& opt = {});
  static Context cpu(int threads = 0);

  Backend backend() const { return backend_; }
  int threads() const { return threads_; }
  Comm& comm() const { return *comm_; }
  void set_comm(std::shared_ptr<Comm> c) { comm_ = std::move(c); }
  // Optional: the NCCL communicator between the ranks' GPUs (MPI ranks with distinct GPUs) that the
  // large device-resident sums use (the PCA Gram); null otherwise. Its ranks are comm()'s.
  const std::shared_ptr<NcclComm>& device_comm() const { return device_comm_; }
  void set_device_comm(std::shared_ptr<NcclComm> c) { device_comm_ = std::move(c); }
  CudaResources* cuda() const { return cuda_.get(); }
  std::string describe() const;  // "cpu, 2 threads" / "cuda device 0 (NVIDIA H200, 139.8 GiB)"

 private:
  Backend backend_ = Backend::cpu;
  int threads_ = 1;
  std::shared_ptr<Comm> comm_;
  std::shared_ptr<NcclComm> device_comm_;
  std::shared_ptr<CudaResources> cuda_;
};

// CUDA availability (false in builds without CUDA, or when no device is visible).
bool cuda_built();
int cuda_device_count();
std::string cuda_device_description(int ordinal);
std::shared_ptr<CudaResources> make_cuda_resources(const CudaOptions& opt);
size_t cuda_peak_bytes(const CudaResources* r);  // peak device bytes held through the Context
MemoryMode cuda_memory_mode(const CudaResources* r);  // pool when r is null

}  // namespace scurry
