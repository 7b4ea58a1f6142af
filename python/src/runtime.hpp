// scurry Python binding: the resources handle of the package and the runner of a step (worker
// thread, GIL released, Ctrl-C polling, progress bar), shared by the binding's files.
#pragma once
#include <cstdlib>
#include <pybind11/pybind11.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "core/cancel.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "exec/context.hpp"

namespace scurry::py_binding {

namespace py = pybind11;

// The package's resources handle (settings.n_jobs): rebuilt when the thread count changes. The GPU
// context (settings.device = 'gpu', the resident X of resident.cpp) is made on first use and shared
// by every Resident, so that it outlives them.
struct State {
  int threads = 0;
  bool device_gpu = false;  // settings.device == 'gpu'
  std::unique_ptr<Context> ctx;
  std::shared_ptr<Context> gpu;
  const Context& context() {
    if (!ctx) ctx = std::make_unique<Context>(Context::cpu(threads));
    return *ctx;
  }
  std::shared_ptr<Context> gpu_context() {
    if (!gpu) {
      ContextOptions o;
      o.device = "gpu";
      o.threads = threads;
      gpu = std::make_shared<Context>(Context::create(o));
    }
    return gpu;
  }
  // The graph steps' context (neighbors, umap, leiden: they read obsm/obsp, not X): the GPU's with
  // settings.device = 'gpu', as the CLI's --device gpu runs them.
  const Context& graph_context() { return device_gpu ? *gpu_context() : context(); }
};
State& state();  // module.cpp

// Runs f() on a worker thread with the GIL released; polls Python's signal handlers every 50 ms
// from the calling thread. On Ctrl-C: requests cancellation, waits for the step to unwind and
// raises KeyboardInterrupt (the step writes nothing: its Dataset is the wrapper's scratch copy).
// A step that runs longer than kBarAfter shows a progress bar on stderr (core/progress: only on a
// terminal and when settings.verbosity > 0), fed by the work meter of core/cancel (parallel blocks
// done of those started).
constexpr auto kPoll = std::chrono::milliseconds(50);
// (SCURRY_PROGRESS_AFTER_MS overrides the second: the tests ask for 0, a step's length being the
// machine's business)
inline std::chrono::milliseconds bar_after() {
  const char* e = std::getenv("SCURRY_PROGRESS_AFTER_MS");
  return std::chrono::milliseconds(e ? std::atoll(e) : 1000);
}

template <class F>
auto run_step(const char* label, F&& f) -> decltype(f()) {
  using R = decltype(f());
  cancel_reset();
  std::packaged_task<R()> task(std::forward<F>(f));
  std::future<R> fut = task.get_future();
  bool interrupted = false;
  {
    py::gil_scoped_release release;
    std::thread worker(std::move(task));
    const auto start = std::chrono::steady_clock::now();
    std::unique_ptr<Progress> bar;
    int64_t shown = 0;
    while (fut.wait_for(kPoll) != std::future_status::ready) {
      if (!bar && std::chrono::steady_clock::now() - start > bar_after() && !log::quiet())
        bar = std::make_unique<Progress>(label, work_total());
      if (bar) {
        bar->set_total(work_total());
        const int64_t now = work_completed();
        if (now > shown) bar->advance(now - shown);
        shown = now;
      }
      if (interrupted) continue;
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) {
        interrupted = true;
        cancel_request();
      }
    }
    worker.join();
    if (bar && !interrupted) {
      bar->set_total(work_total());
      bar->advance(work_completed() - shown);
    }
  }
  if (interrupted) {
    cancel_reset();
    throw py::error_already_set();  // the KeyboardInterrupt PyErr_CheckSignals raised
  }
  return fut.get();
}

}  // namespace scurry::py_binding
