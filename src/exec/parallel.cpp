#include "exec/parallel.hpp"

#include "core/cancel.hpp"

#include <exception>
#include <mutex>

namespace scurry {

namespace {
thread_local int t_depth = 0;  // parallel_for nesting on this thread (the work meter counts depth 0)
struct Depth {
  bool outer;
  Depth() : outer(t_depth++ == 0) {}
  ~Depth() { --t_depth; }
};
}  // namespace

void parallel_for(int threads, int64_t n_blocks, const std::function<void(int64_t)>& fn) {
  if (threads <= 1 || n_blocks <= 1) {
    Depth depth;
    if (depth.outer) work_begin(n_blocks);
    for (int64_t b = 0; b < n_blocks; ++b) {
      cancel_check();
      fn(b);
      if (depth.outer) work_done(1);
    }
    return;
  }
  const bool outer = t_depth == 0;
  if (outer) work_begin(n_blocks);
  std::exception_ptr err;
  std::mutex mu;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t b = 0; b < n_blocks; ++b) {
    try {
      cancel_check();  // a cancelled step skips its remaining blocks (Cancelled rethrown below)
      ++t_depth;  // the OpenMP worker's own nesting: a parallel_for inside fn is not counted
      struct Leave {
        ~Leave() { --t_depth; }
      } leave;
      fn(b);
      if (outer) work_done(1);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace scurry

#include <algorithm>

namespace scurry {

void reduce_blocks(int threads, int64_t n_blocks, size_t width, std::vector<double>& acc,
                   const std::function<void(int64_t, double*)>& body) {
  acc.assign(width, 0.0);
  std::vector<double> buf;
  for (int64_t w0 = 0; w0 < n_blocks; w0 += kReduceWave) {
    const int64_t nw = std::min(kReduceWave, n_blocks - w0);
    buf.assign(static_cast<size_t>(nw) * width, 0.0);
    parallel_for(threads, nw, [&](int64_t i) { body(w0 + i, buf.data() + static_cast<size_t>(i) * width); });
    for (int64_t i = 0; i < nw; ++i) {
      const double* p = buf.data() + static_cast<size_t>(i) * width;
      for (size_t j = 0; j < width; ++j) acc[j] += p[j];
    }
  }
}

}  // namespace scurry
