#include "exec/comm_thread.hpp"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace scurry {

struct ThreadComm::Shared {
  explicit Shared(int n) : size(n), posted(static_cast<size_t>(n), nullptr), sizes(static_cast<size_t>(n), 0) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;          // ranks at the current barrier
  uint64_t generation = 0;  // barriers completed
  bool failed = false;
  std::vector<const void*> posted;  // each rank's buffer in the current collective
  std::vector<size_t> sizes;        // each rank's element count (reductions, broadcasts): must agree
  void* root_recv = nullptr;        // gatherv: the root's receive buffer, which every rank fills
};

ThreadComm::ThreadComm(std::shared_ptr<Shared> s, int rank) : s_(std::move(s)), rank_(rank) {
  if (!s_ || rank < 0 || rank >= s_->size) fail("internal: ThreadComm rank ", rank, " out of range");
}

int ThreadComm::size() const { return s_->size; }

std::string ThreadComm::describe() const { return detail::concat(s_->size, s_->size == 1 ? " thread" : " threads"); }

void ThreadComm::wait() {
  std::unique_lock<std::mutex> lock(s_->mu);
  if (s_->failed) throw ThreadCommAborted("another rank (thread) failed; this rank stopped at a collective");
  const uint64_t gen = s_->generation;
  if (++s_->arrived == s_->size) {
    s_->arrived = 0;
    ++s_->generation;
    s_->cv.notify_all();
    return;
  }
  s_->cv.wait(lock, [&] { return s_->generation != gen || s_->failed; });
  if (s_->generation == gen) throw ThreadCommAborted("another rank (thread) failed; this rank stopped at a collective");
}

void ThreadComm::fail_all() {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->failed = true;
  s_->cv.notify_all();
}

void ThreadComm::abort(int code) {
  fail_all();
  std::fflush(nullptr);
  std::exit(code);
}

void ThreadComm::barrier() { wait(); }

void ThreadComm::post(const void* p, size_t n) {
  s_->posted[static_cast<size_t>(rank_)] = p;  // each rank writes its own slot; the barrier publishes it
  s_->sizes[static_cast<size_t>(rank_)] = n;
  wait();
}

void ThreadComm::check_sizes(const char* what) const {
  // Every rank sees the same sizes, so every rank throws here or none does.
  for (size_t n : s_->sizes)
    if (n != s_->sizes[0])
      fail("internal: ranks disagree on the size of a ", what, " (", s_->sizes[0], " vs ", n, ")");
}

template <class T>
void ThreadComm::reduce(T* data, size_t n) {
  post(data, n);
  check_sizes("reduction");
  // Every rank adds all partials in rank order into a private buffer (the same bits on every rank),
  // then waits until every rank has read every buffer before overwriting its own.
  std::vector<T> sum(n);
  if (n) std::memcpy(sum.data(), s_->posted[0], n * sizeof(T));
  for (int r = 1; r < s_->size; ++r) {
    const T* p = static_cast<const T*>(s_->posted[static_cast<size_t>(r)]);
    for (size_t i = 0; i < n; ++i) sum[i] += p[i];
  }
  wait();
  if (n) std::memcpy(data, sum.data(), n * sizeof(T));
}

void ThreadComm::allreduce_sum(double* data, size_t n) { reduce(data, n); }
void ThreadComm::allreduce_sum(int64_t* data, size_t n) { reduce(data, n); }

void ThreadComm::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= s_->size) fail("internal: broadcast from rank ", root, " of ", s_->size);
  post(data, bytes);
  check_sizes("broadcast");
  if (rank_ != root && bytes) std::memcpy(data, s_->posted[static_cast<size_t>(root)], bytes);
  wait();
}

void ThreadComm::allgather(const void* send, size_t bytes, void* recv) {
  allgatherv(send, std::vector<size_t>(static_cast<size_t>(s_->size), bytes), recv);
}

void ThreadComm::allgatherv(const void* send, const std::vector<size_t>& counts, void* recv) {
  gather_into(send, counts, recv, true);
}

// Every rank copies its own part into the root's buffer at once (the copies run on all the group's
// threads, and first touches of the root's fresh pages are spread over them too).
void ThreadComm::gatherv(const void* send, const std::vector<size_t>& counts, void* recv, int root) {
  if (counts.size() != static_cast<size_t>(s_->size))
    fail("internal: a gather got ", counts.size(), " counts for ", s_->size, " ranks");
  if (root < 0 || root >= s_->size) fail("internal: gatherv to rank ", root, " of ", s_->size);
  if (rank_ == root) s_->root_recv = recv;  // published by the barrier in post()
  post(send, 0);
  size_t off = 0;
  for (int r = 0; r < rank_; ++r) off += counts[static_cast<size_t>(r)];
  const size_t c = counts[static_cast<size_t>(rank_)];
  if (c) std::memcpy(static_cast<char*>(s_->root_recv) + off, send, c);
  wait();
}

void ThreadComm::gather_into(const void* send, const std::vector<size_t>& counts, void* recv, bool want) {
  if (counts.size() != static_cast<size_t>(s_->size))
    fail("internal: a gather got ", counts.size(), " counts for ", s_->size, " ranks");
  post(send, 0);
  if (want) {
    size_t off = 0;
    for (int r = 0; r < s_->size; ++r) {
      const size_t c = counts[static_cast<size_t>(r)];
      if (c) std::memcpy(static_cast<char*>(recv) + off, s_->posted[static_cast<size_t>(r)], c);
      off += c;
    }
  }
  wait();
}

std::vector<std::shared_ptr<ThreadComm>> make_thread_comms(int size) {
  if (size < 1) fail("internal: make_thread_comms(", size, ")");
  auto shared = std::make_shared<ThreadComm::Shared>(size);
  std::vector<std::shared_ptr<ThreadComm>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<ThreadComm>(shared, r));
  return out;
}

void rethrow_rank_errors(const std::vector<std::exception_ptr>& errors) {
  std::exception_ptr first;
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const ThreadCommAborted&) {
      if (!first) first = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace scurry
