// scurry: ThreadComm, a communicator for R ranks that are threads of one process (the GPUs of one
// host, one host thread per GPU). Every collective posts each rank's buffer, meets at a barrier, reads
// what it needs from the others' buffers and meets again, so no buffer dies while another rank reads
// it. Reductions add the partials in rank order (rank 0 + rank 1 + ...) on every rank: every rank
// gets the same bits, whatever the timing of the threads.
//
// Failure: a rank that fails calls fail_all() (the multi-GPU drivers do it for every exception); from
// then on every rank waiting in, or later entering, a collective throws ThreadCommAborted instead of
// waiting forever for the failed rank.
#pragma once
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/comm.hpp"

namespace scurry {

// Thrown by a collective of a ThreadComm group in which another rank has failed.
class ThreadCommAborted : public Error {
 public:
  explicit ThreadCommAborted(const std::string& msg) : Error(msg) {}
};

class ThreadComm final : public Comm {
 public:
  struct Shared;  // the group's state (comm_thread.cpp)
  ThreadComm(std::shared_ptr<Shared> s, int rank);
  int rank() const override { return rank_; }
  int size() const override;
  void allreduce_sum(double* data, size_t n) override;
  void allreduce_sum(int64_t* data, size_t n) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void allgather(const void* send, size_t bytes, void* recv) override;
  void allgatherv(const void* send, const std::vector<size_t>& counts, void* recv) override;
  void gatherv(const void* send, const std::vector<size_t>& counts, void* recv, int root) override;
  void barrier() override;
  // Marks the group failed, then ends the process with `code` (the Comm contract: no rank is left
  // waiting). The drivers use fail_all() and exceptions instead.
  [[noreturn]] void abort(int code) override;
  std::string describe() const override;  // "2 threads"
  // Marks the group failed (idempotent): the other ranks' collectives throw ThreadCommAborted.
  void fail_all();

 private:
  void wait();  // the barrier; throws ThreadCommAborted when the group has failed
  void post(const void* p, size_t n);
  void check_sizes(const char* what) const;
  template <class T>
  void reduce(T* data, size_t n);
  void gather_into(const void* send, const std::vector<size_t>& counts, void* recv, bool want);
  std::shared_ptr<Shared> s_;
  int rank_;
};

// `size` communicators of one group, rank r at index r; each is used by one thread.
std::vector<std::shared_ptr<ThreadComm>> make_thread_comms(int size);

// After the ranks' threads, with each rank's error (null: none): rethrows the first that is not
// another rank's "a rank failed" (ThreadCommAborted), else the first of those; returns when none failed.
void rethrow_rank_errors(const std::vector<std::exception_ptr>& errors);

}  // namespace scurry
