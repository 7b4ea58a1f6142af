#include "exec/parallel.hpp"

#include <exception>
#include <mutex>

namespace scurry {

void parallel_for(int threads, int64_t n_blocks, const std::function<void(int64_t)>& fn) {
  if (threads <= 1 || n_blocks <= 1) {
    for (int64_t b = 0; b < n_blocks; ++b) fn(b);
    return;
  }
  std::exception_ptr err;
  std::mutex mu;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t b = 0; b < n_blocks; ++b) {
    try {
      fn(b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace scurry
