#include "exec/context.hpp"

#include <omp.h>

#include <thread>

#include "core/error.hpp"

namespace scurry {

Context Context::cpu(int threads) {
  Context c;
  c.backend_ = Backend::cpu;
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  c.threads_ = threads > 0 ? threads : (hw > 0 ? hw : 1);
  c.comm_ = make_local_comm();
  return c;
}

Context Context::create(const ContextOptions& opt) {
  Context c = cpu(opt.threads);
  if (opt.device == "cpu") return c;
  if (opt.device != "gpu" && opt.device != "auto")
    throw InputError("--device must be cpu, gpu or auto, not '" + opt.device + "'");
  const bool want = opt.device == "gpu";
  if (!cuda_built()) {
    if (want) throw InputError("--device gpu: this scurry was built without CUDA; rebuild with nvcc present or use --device cpu");
    return c;
  }
  const int n = cuda_device_count();
  if (n <= 0) {
    if (want) throw InputError("--device gpu: no CUDA device is visible; use --device cpu");
    return c;
  }
  if (opt.cuda.device < 0 || opt.cuda.device >= n)
    throw InputError(detail::concat("GPU ", opt.cuda.device, " asked for, but only ", n, " CUDA device(s) are visible"));
  c.backend_ = Backend::cuda;
  c.cuda_ = make_cuda_resources(opt.cuda);
  return c;
}

MemoryMode parse_memory_mode(const std::string& s) {
  if (s == "pool") return MemoryMode::pool;
  if (s == "managed") return MemoryMode::managed;
  if (s == "managed-pool") return MemoryMode::managed_pool;
  if (s == "plain") return MemoryMode::plain;
  throw InputError("--memory must be pool, managed, managed-pool or plain, not '" + s + "'");
}

std::string Context::describe() const {
  if (backend_ == Backend::cpu) return detail::concat("cpu, ", threads_, " thread", threads_ == 1 ? "" : "s");
  return detail::concat("cuda, ", cuda_device_description(0), ", ", threads_, " host threads");
}

}  // namespace scurry
