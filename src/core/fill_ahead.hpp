// scurry: filling a large output buffer on one thread while others already write into it.
//
// std::vector value-initialises what resize() adds: for a 10 GB read buffer that is a serial zero
// fill of ~1.5 s (with its page faults) before the first byte can be read into it. Here the caller's
// thread resizes the vector in steps (the capacity is reserved first, so nothing moves and resize
// touches only elements past the old size) while `threads` workers take items 0, 1, 2, ... in order
// and run each once the elements below its end exist. Reads and decodes that each fill their own
// range of the output then cost nothing beside the fill. The result does not depend on the thread
// count or the order the workers finish in: each item writes only its own elements.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/memory.hpp"

namespace scurry {

// Resizes out to n elements (zero / value-initialised) and runs work(i) for i in [0, items) on
// `threads` threads, item i once out's elements [0, end_of(i)) exist. end_of must not decrease with
// i and must be at most n. The first exception a worker throws is rethrown here after every thread
// stopped (the items not yet taken are skipped). The fill advances step_bytes at a time.
template <class T, class EndOf, class Work>
void fill_ahead_for(std::vector<T>& out, size_t n, int threads, int64_t items, EndOf end_of, Work work,
                    size_t step_bytes = size_t(256) << 20) {
  static_assert(std::is_trivially_copyable_v<T>, "fill_ahead_for: trivial element types only");
  out.clear();
  out.reserve(n);
  advise_huge_pages(out.data(), n * sizeof(T));
  std::atomic<size_t> ready{0};
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      for (int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < items;) {
        const size_t need = static_cast<size_t>(end_of(i));
        while (ready.load(std::memory_order_acquire) < need) {
          if (failed.load(std::memory_order_relaxed)) return;  // (never runs an item before its elements exist)
          std::this_thread::yield();
        }
        work(i);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  const int workers = static_cast<int>(std::clamp<int64_t>(items, 0, std::max(threads, 1)));
  const size_t step = std::max<size_t>(step_bytes / sizeof(T), 1);
  if (n <= step) {
    // One step: there is no fill to overlap. Sized at once, and one item (or one thread) runs here:
    // no thread is started for the many small arrays of a store (obs columns, a fuzzer's inputs).
    out.resize(n);
    ready.store(n, std::memory_order_release);
    if (workers <= 1) {
      worker();
    } else {
      std::vector<std::thread> pool;
      pool.reserve(static_cast<size_t>(workers - 1));
      for (int t = 1; t < workers; ++t) pool.emplace_back(worker);
      worker();
      for (auto& t : pool) t.join();
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
  for (int t = 0; t < workers; ++t) pool.emplace_back(worker);
  // The pages of each step are faulted in (the kernel zeroing them) by a team of threads a step ahead
  // of this thread's fill, which then runs at memory speed. Left to the fill, the faults halved its
  // rate, and this one thread bounded a 16-thread zstd zarr read: a 1.3M-cell X (21 GB) took 6 s.
  // (The storage is reserved: its pages are written before the elements exist, as resize_large does;
  // each range is touched before the fill reaches it, never after.)
  std::atomic<size_t> touched{threads > 1 ? 0 : n};
  std::thread toucher;
  if (threads > 1)
    toucher = std::thread([&] {
      for (size_t a = 0; a < n; a += step) {
        const size_t b = std::min(n, a + step);
        touch_pages(out.data() + a, (b - a) * sizeof(T));
        touched.store(b, std::memory_order_release);
      }
    });
  for (size_t have = 0; have < n;) {
    have = std::min(n, have + step);
    while (touched.load(std::memory_order_acquire) < have) std::this_thread::yield();
    out.resize(have);
    ready.store(have, std::memory_order_release);
  }
  if (toucher.joinable()) toucher.join();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace scurry
