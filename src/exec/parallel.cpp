#include "exec/parallel.hpp"

#include "core/cancel.hpp"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace scurry {

namespace {
thread_local int t_depth = 0;  // parallel_for nesting on this thread (the work meter counts depth 0)
thread_local int t_worker = 0;  // parallel_worker(): 0 on the calling thread, 1.. on the helpers
struct AsWorker {
  int saved;
  explicit AsWorker(int id) : saved(t_worker) { t_worker = id; }
  ~AsWorker() { t_worker = saved; }
};
struct Depth {
  bool outer;
  Depth() : outer(t_depth++ == 0) {}
  ~Depth() { --t_depth; }
};

// One block of a parallel_for split over threads: cancellation checked first (a cancelled step skips
// its remaining blocks; Cancelled is rethrown by the caller), a parallel_for inside fn runs on this
// thread alone, the work meter counts it; an exception is kept in err (the first one) for the caller.
void run_block(const std::function<void(int64_t)>& fn, int64_t b, std::mutex& mu, std::exception_ptr& err) {
  try {
    cancel_check();
    ++t_depth;
    struct Leave {
      ~Leave() { --t_depth; }
    } leave;
    fn(b);
    work_done(1);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    if (!err) err = std::current_exception();
  }
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The threads of parallel_for. Why not an OpenMP team: every thread of a team must reach the
// region's closing barrier, and libgomp's idle threads spin ~300,000 iterations before they sleep
// (read from OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when libgomp loads). On cores shared with other
// busy processes a region then waits for whichever team thread is off its core: UMAP's 1,600
// regions of ~0.8 ms at 20k took 4.1-12.7 s of epochs beside two busy processes on two cores,
// 2.2-2.9 s with OMP_WAIT_POLICY=passive (1.3 s idle; bench/RESULTS.md section 56). Here a job's
// blocks are claimed one at a time from one atomic ticket by the caller and by whichever helpers are
// awake, and the job ends when its blocks are done: a helper that never woke for it is not waited
// for. Helpers spin ~50 us after a job (UMAP's next region comes within microseconds), then sleep.
//
// The ticket: the job's generation in the top 24 bits, the next block in the low 40 (kClosed once
// the caller ends the job). A claim is a compare-and-swap of (g, i) to (g, i + 1), so it succeeds
// only while job g is open, and job g's fields (fn_, n_) stay put until every successful claim of it
// has been counted: done_ for a block below n_, acks_ for one past the end.
class Pool {
 public:
  static Pool& get() {
    [[maybe_unused]] static const bool made = [] {
      pthread_atfork(nullptr, nullptr, [] { fresh_after_fork(); });
      slot() = new Pool;  // never destroyed: its helpers sleep until the process ends
      return true;
    }();
    return *slot();
  }
  // Runs fn(b), b in [0, n), on the caller and up to `helpers` pool threads; false (nothing run)
  // when another thread's job holds the pool.
  bool run(int helpers, int64_t n, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    grow(helpers);
    fn_ = &fn;
    n_ = n;
    helpers_.store(helpers, std::memory_order_relaxed);
    done_.store(0);
    acks_.store(0);
    err_ = nullptr;
    gen_ = gen_ == kGenMask ? 1 : gen_ + 1;  // 0 is the closed ticket's before the first job
    const uint64_t g = gen_;
    ticket_.store(g << kIdxBits);
    if (sleeping_.load() > 0) {
      { std::lock_guard<std::mutex> lk(mu_); }
      cv_.notify_all();
    }
    participate(g, 0);
    // Close the job: no claim succeeds after this; then wait for the claims made.
    uint64_t s = ticket_.load();
    while (!ticket_.compare_exchange_weak(s, (g << kIdxBits) | kClosed)) {
    }
    const int64_t over = static_cast<int64_t>(s & kClosed) - n;  // claims past the end (the caller's own among them)
    for (int spins = 0; done_.load() != n || acks_.load() != over; ++spins) {
      if (spins < 4096) cpu_relax();
      else std::this_thread::yield();
    }
    fn_ = nullptr;
    if (err_) std::rethrow_exception(err_);
    return true;
  }

 private:
  static constexpr int kIdxBits = 40;
  static constexpr uint64_t kClosed = (uint64_t{1} << kIdxBits) - 1;
  static constexpr uint64_t kGenMask = (uint64_t{1} << (64 - kIdxBits)) - 1;
  static constexpr auto kSpin = std::chrono::microseconds(50);

  static Pool*& slot() {
    static Pool* p = nullptr;
    return p;
  }
  // In a forked child the helpers do not exist (only the forking thread is copied): a new pool,
  // the old one left as it is.
  static void fresh_after_fork() { slot() = new Pool; }

  void grow(int helpers) {
    while (static_cast<int>(threads_.size()) < helpers) {
      const int index = static_cast<int>(threads_.size());
      threads_.emplace_back([this, index] { helper(index); });
      threads_.back().detach();
    }
  }

  // Claims and runs blocks of job g until none is left.
  void participate(uint64_t g, int worker) {
    AsWorker as(worker);
    uint64_t s = ticket_.load();
    for (;;) {
      if ((s >> kIdxBits) != g || (s & kClosed) == kClosed) return;
      if (!ticket_.compare_exchange_weak(s, s + 1)) continue;
      const int64_t b = static_cast<int64_t>(s & kClosed);
      if (b >= n_) {
        acks_.fetch_add(1);
        return;
      }
      run_block(*fn_, b, err_mu_, err_);
      done_.fetch_add(1);
      s = ticket_.load();
    }
  }

  void helper(int index) {
    uint64_t seen = 0;
    for (;;) {
      auto fresh = [&] {
        const uint64_t s = ticket_.load();
        return (s >> kIdxBits) != seen && (s & kClosed) != kClosed;
      };
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int i = 0; !fresh(); ++i) {
        cpu_relax();
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) {
          std::unique_lock<std::mutex> lk(mu_);
          sleeping_.fetch_add(1);
          cv_.wait(lk, fresh);
          sleeping_.fetch_sub(1);
          break;
        }
      }
      const uint64_t g = ticket_.load() >> kIdxBits;
      seen = g;
      if (index < helpers_.load(std::memory_order_relaxed)) participate(g, index + 1);
    }
  }

  std::mutex busy_;  // one job at a time
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> ticket_{kClosed};
  uint64_t gen_ = 0;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int> helpers_{0};
  std::atomic<int64_t> done_{0}, acks_{0};
  std::mutex err_mu_;
  std::exception_ptr err_;
  std::mutex mu_;  // helpers' sleep
  std::condition_variable cv_;
  std::atomic<int> sleeping_{0};
};
}  // namespace

int parallel_worker() { return t_worker; }

void parallel_for(int threads, int64_t n_blocks, const std::function<void(int64_t)>& fn) {
  if (threads <= 1 || n_blocks <= 1 || t_depth > 0) {
    Depth depth;
    if (depth.outer) work_begin(n_blocks);
    for (int64_t b = 0; b < n_blocks; ++b) {
      cancel_check();
      fn(b);
      if (depth.outer) work_done(1);
    }
    return;
  }
  work_begin(n_blocks);
  if (Pool::get().run(threads - 1, n_blocks, fn)) return;
  // Another thread's job holds the pool (e.g. a reader's prefetch beside the main thread's step):
  // an OpenMP team of its own.
  std::exception_ptr err;
  std::mutex mu;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t b = 0; b < n_blocks; ++b) {
    AsWorker as(omp_get_thread_num());
    run_block(fn, b, mu, err);
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace scurry

#include <algorithm>

namespace scurry {

void reduce_blocks(int threads, int64_t n_blocks, size_t width, std::vector<double>& acc,
                   const std::function<void(int64_t, double*)>& body) {
  acc.assign(width, 0.0);
  // The wave: kReduceWave blocks, or as many whole rounds of the threads as fit kReduceWaveBytes.
  // The partials are added in block order whatever the wave: the same bits.
  const int64_t t = std::max(1, threads);
  const int64_t fit = static_cast<int64_t>(kReduceWaveBytes / std::max<size_t>(1, width * sizeof(double)));
  const int64_t wave = std::min(kReduceWave, std::max(t, fit / t * t));
  std::vector<double> buf;
  for (int64_t w0 = 0; w0 < n_blocks; w0 += wave) {
    const int64_t nw = std::min(wave, n_blocks - w0);
    buf.assign(static_cast<size_t>(nw) * width, 0.0);
    parallel_for(threads, nw, [&](int64_t i) { body(w0 + i, buf.data() + static_cast<size_t>(i) * width); });
    for (int64_t i = 0; i < nw; ++i) {
      const double* p = buf.data() + static_cast<size_t>(i) * width;
      for (size_t j = 0; j < width; ++j) acc[j] += p[j];
    }
  }
}

}  // namespace scurry
