// scurry: the MPI communicator (many processes, one host or many: `mpirun -np R scurry run ...`).
// Compiled with MPI only when CMake found it (SCURRY_HAVE_MPI); otherwise make_mpi_comm() returns a
// LocalComm. MPI status codes are converted into scurry::Error here and nowhere else.
//
// Every collective moves at most kChunk bytes per MPI call (MPI counts are int), so any size works.
// allreduce_sum is deterministic: rank 0 receives the partials and adds them in rank order, then
// broadcasts the sum (every rank gets the same bits, whatever MPI's reduction algorithm would do).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/comm.hpp"

#ifdef SCURRY_HAVE_MPI
#include <mpi.h>
#endif

namespace scurry {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

#ifndef SCURRY_HAVE_MPI

bool mpi_built() { return false; }
std::shared_ptr<Comm> make_mpi_comm() { return make_local_comm(); }

#else

bool mpi_built() { return true; }

namespace {

constexpr size_t kChunk = size_t{1} << 30;  // bytes per MPI call
constexpr int kTag = 7177;

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI: ", call, " failed: ", std::string(msg, static_cast<size_t>(len)));
}

void finalize_at_exit() {
  int init = 0, done = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&done);
  if (init && !done) MPI_Finalize();
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    // Errors come back as codes (converted by check()) rather than killing the job silently.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(double* data, size_t n) override { reduce(data, n, MPI_DOUBLE); }
  void allreduce_sum(int64_t* data, size_t n) override { reduce(data, n, MPI_INT64_T); }

  void broadcast(void* data, size_t bytes, int root) override {
    char* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kChunk)
      check(MPI_Bcast(p + off, static_cast<int>(std::min(kChunk, bytes - off)), MPI_BYTE, root, MPI_COMM_WORLD),
            "MPI_Bcast");
  }

  void allgather(const void* send, size_t bytes, void* recv) override {
    allgatherv(send, std::vector<size_t>(static_cast<size_t>(size_), bytes), recv);
  }

  // One broadcast per rank (chunked): simple, and exact for any sizes.
  void allgatherv(const void* send, const std::vector<size_t>& counts, void* recv) override {
    check_counts(counts);
    char* out = static_cast<char*>(recv);
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const size_t n = counts[static_cast<size_t>(r)];
      if (r == rank_ && n && send != out + off) std::memcpy(out + off, send, n);
      broadcast(out + off, n, r);
      off += n;
    }
  }

  void gatherv(const void* send, const std::vector<size_t>& counts, void* recv, int root) override {
    check_counts(counts);
    if (rank_ != root) {
      send_bytes(send, counts[static_cast<size_t>(rank_)], root);
      return;
    }
    char* out = static_cast<char*>(recv);
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      const size_t n = counts[static_cast<size_t>(r)];
      if (r == rank_) {
        if (n && send != out + off) std::memcpy(out + off, send, n);
      } else {
        recv_bytes(out + off, n, r);
      }
      off += n;
    }
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  std::string describe() const override {
    return detail::concat("MPI, ", size_, " rank", size_ == 1 ? "" : "s", " (this is rank ", rank_, ")");
  }

 private:
  int rank_ = 0, size_ = 1;

  void check_counts(const std::vector<size_t>& counts) const {
    if (counts.size() != static_cast<size_t>(size_))
      fail("internal: a gather got ", counts.size(), " counts for ", size_, " ranks");
  }
  void send_bytes(const void* data, size_t bytes, int to) {
    const char* p = static_cast<const char*>(data);
    for (size_t off = 0; off < bytes; off += kChunk)
      check(MPI_Send(p + off, static_cast<int>(std::min(kChunk, bytes - off)), MPI_BYTE, to, kTag, MPI_COMM_WORLD),
            "MPI_Send");
  }
  void recv_bytes(void* data, size_t bytes, int from) {
    char* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kChunk)
      check(MPI_Recv(p + off, static_cast<int>(std::min(kChunk, bytes - off)), MPI_BYTE, from, kTag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
  }
  // Sum in rank order on rank 0, then broadcast.
  template <class T>
  void reduce(T* data, size_t n, MPI_Datatype) {
    if (size_ == 1 || n == 0) return;
    const size_t bytes = n * sizeof(T);
    if (rank_ == 0) {
      std::vector<T> part(n);
      for (int r = 1; r < size_; ++r) {
        recv_bytes(part.data(), bytes, r);
        for (size_t i = 0; i < n; ++i) data[i] += part[i];
      }
    } else {
      send_bytes(data, bytes, 0);
    }
    broadcast(data, bytes, 0);
  }
};

}  // namespace

std::shared_ptr<Comm> make_mpi_comm() {
  static std::shared_ptr<Comm> comm;
  if (comm) return comm;
  if (!launched_by_mpi()) return comm = make_local_comm();
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  }
  comm = std::make_shared<MpiComm>();
  return comm;
}

#endif

}  // namespace scurry
