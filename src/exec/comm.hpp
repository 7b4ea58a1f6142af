// scurry: collectives across ranks (processes, GPUs or hosts). Every reduce step combines its
// per-rank partial statistics through this interface, so one code path serves one rank, the GPUs of
// a host (NCCL) and many hosts (MPI). Buffers are host memory here; device-memory variants belong to
// the NCCL implementation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

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
  virtual void barrier() = 0;
};

// One rank: every collective is the identity (allgather copies).
class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(double*, size_t) override {}
  void allreduce_sum(int64_t*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void allgather(const void* send, size_t bytes, void* recv) override;
  void barrier() override {}
};

std::shared_ptr<Comm> make_local_comm();

}  // namespace scurry
