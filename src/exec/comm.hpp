// scurry: collectives across ranks (processes, GPUs or hosts). Every reduce step combines its
// per-rank partial statistics through this interface, so one code path serves one rank, the GPUs of
// a host (NCCL) and many hosts (MPI). Buffers are host memory here; device-memory variants belong to
// the NCCL implementation.
//
// Determinism: allreduce_sum adds the ranks' partials in rank order (rank 0 + rank 1 + ...), so a
// result never depends on timing; with one rank every collective is the identity.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"

namespace scurry {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place elementwise sum over ranks.
  virtual void allreduce_sum(double* data, size_t n) = 0;
  virtual void allreduce_sum(int64_t* data, size_t n) = 0;
  // Root's `bytes` bytes copied to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Each rank's `bytes` bytes gathered into recv (size() * bytes), in rank order.
  virtual void allgather(const void* send, size_t bytes, void* recv) = 0;
  // Variable-size gathers: rank r sends counts[r] bytes (every rank passes the same `counts`, size()
  // entries); recv receives their concatenation in rank order (sum of counts bytes): on every rank
  // (allgatherv) or on `root` only (gatherv; recv is not touched on the other ranks).
  virtual void allgatherv(const void* send, const std::vector<size_t>& counts, void* recv) = 0;
  virtual void gatherv(const void* send, const std::vector<size_t>& counts, void* recv, int root) = 0;
  virtual void barrier() = 0;
  // Ends the processes of every rank with exit code `code`: an error on one rank must never leave
  // the others waiting in a collective.
  [[noreturn]] virtual void abort(int code) = 0;
  // "1 rank" / "MPI, 2 ranks".
  virtual std::string describe() const = 0;
};

// One rank: every collective is the identity (the gathers copy).
class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(double*, size_t) override {}
  void allreduce_sum(int64_t*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void allgather(const void* send, size_t bytes, void* recv) override;
  void allgatherv(const void* send, const std::vector<size_t>& counts, void* recv) override {
    if (!counts.empty() && counts[0] && send != recv) std::memcpy(recv, send, counts[0]);
  }
  void gatherv(const void* send, const std::vector<size_t>& counts, void* recv, int) override {
    allgatherv(send, counts, recv);
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  std::string describe() const override { return "1 rank"; }
};

std::shared_ptr<Comm> make_local_comm();

// MPI (src/exec/comm_mpi.cpp). True when scurry was built with MPI (CMake found it).
bool mpi_built();
// True when this process was started by an MPI launcher (mpirun/mpiexec/srun set OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK).
bool launched_by_mpi();
// The communicator of all ranks (MPI_COMM_WORLD) when launched by an MPI launcher in a build with MPI,
// else a LocalComm. The first call initialises MPI (MPI_Finalize runs at exit); later calls return the
// same communicator. Throws scurry::Error when MPI cannot be initialised.
std::shared_ptr<Comm> make_mpi_comm();

// ---- typed helpers over the byte collectives ------------------------------------------------------

// Sums over the ranks, in place or returned (the identity with one rank, without a call).
inline void sum_ranks(Comm& c, std::vector<double>& v) {
  if (c.size() > 1) c.allreduce_sum(v.data(), v.size());
}
inline int64_t sum_ranks(Comm& c, int64_t x) {
  if (c.size() > 1) c.allreduce_sum(&x, 1);
  return x;
}

// Every rank's element count, in rank order.
inline std::vector<int64_t> allgather_count(Comm& c, int64_t n) {
  std::vector<int64_t> all(static_cast<size_t>(c.size()));
  c.allgather(&n, sizeof n, all.data());
  return all;
}

// The concatenation of every rank's `local` (trivially copyable T), in rank order, on every rank.
template <class T>
std::vector<T> allgatherv(Comm& c, const std::vector<T>& local) {
  const std::vector<int64_t> n = allgather_count(c, static_cast<int64_t>(local.size()));
  std::vector<size_t> bytes(n.size());
  size_t total = 0;
  for (size_t r = 0; r < n.size(); ++r) {
    bytes[r] = static_cast<size_t>(n[r]) * sizeof(T);
    total += static_cast<size_t>(n[r]);
  }
  std::vector<T> out;
  resize_large(out, total);  // (huge pages where the kernel gives them: far fewer page faults)
  c.allgatherv(local.data(), bytes, out.data());
  return out;
}

// The concatenation of every rank's `local`, in rank order, on `root` (empty on the other ranks).
template <class T>
std::vector<T> gatherv(Comm& c, const std::vector<T>& local, int root) {
  const std::vector<int64_t> n = allgather_count(c, static_cast<int64_t>(local.size()));
  std::vector<size_t> bytes(n.size());
  size_t total = 0;
  for (size_t r = 0; r < n.size(); ++r) {
    bytes[r] = static_cast<size_t>(n[r]) * sizeof(T);
    total += static_cast<size_t>(n[r]);
  }
  std::vector<T> out;
  resize_large(out, c.rank() == root ? total : 0);  // (huge pages: a gathered X_pca of 1.3M cells
                                                     // is 65,000 fewer page faults)
  c.gatherv(local.data(), bytes, out.data(), root);
  return out;
}

// Strings: every rank's list concatenated in rank order, on `root` (allgatherv_strings: on every
// rank). Sent length-prefixed ([int64 length][bytes] per string).
namespace detail {
inline std::vector<char> pack_strings(const std::vector<std::string>& s) {
  size_t total = 0;
  for (const auto& x : s) total += sizeof(int64_t) + x.size();
  std::vector<char> out(total);
  char* p = out.data();
  for (const auto& x : s) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::memcpy(p, &n, sizeof n);
    p += sizeof n;
    if (n) std::memcpy(p, x.data(), x.size());
    p += x.size();
  }
  return out;
}
inline std::vector<std::string> unpack_strings(const std::vector<char>& b) {
  size_t count = 0;  // first the number of strings (no regrowth of the vector: cell names are millions)
  for (size_t i = 0; i < b.size(); ++count) {
    int64_t n = 0;
    std::memcpy(&n, b.data() + i, sizeof n);
    i += sizeof n + static_cast<size_t>(n);
  }
  std::vector<std::string> out;
  out.reserve(count);
  size_t i = 0;
  while (i < b.size()) {
    int64_t n = 0;
    std::memcpy(&n, b.data() + i, sizeof n);
    i += sizeof n;
    out.emplace_back(b.data() + i, static_cast<size_t>(n));
    i += static_cast<size_t>(n);
  }
  return out;
}
}  // namespace detail
inline std::vector<std::string> gatherv_strings(Comm& c, const std::vector<std::string>& local, int root) {
  if (c.size() == 1) return local;
  return detail::unpack_strings(gatherv(c, detail::pack_strings(local), root));
}
inline std::vector<std::string> allgatherv_strings(Comm& c, const std::vector<std::string>& local) {
  if (c.size() == 1) return local;
  return detail::unpack_strings(allgatherv(c, detail::pack_strings(local)));
}

}  // namespace scurry
