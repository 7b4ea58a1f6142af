// scurry: NcclComm, NCCL between the GPUs of this process (one rank per GPU, one host thread per rank;
// src/exec/comm_nccl.cu, built when CMake finds NCCL next to CUDA).
//
// Its sums run on the GPUs (allreduce_sum of host buffers: copy in, ncclAllReduce, copy out;
// allreduce_sum_device on device buffers, the PCA Gram matrix); every other collective goes through
// the host communicator it is given (a ThreadComm). NCCL does not promise the order of the additions
// across ranks, so statistics that decide something (filters, HVG) are reduced through a ThreadComm
// (rank order, every rank the same bits); NCCL carries the large device-resident Gram sum.
// NCCL needs distinct devices: two ranks on one GPU cannot share a NCCL communicator.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "exec/comm.hpp"

namespace scurry {

// True when scurry was built with NCCL.
bool nccl_built();

class NcclComm final : public Comm {
 public:
  struct Impl;  // ncclComm_t, device, stream (comm_nccl.cu)
  NcclComm(std::unique_ptr<Impl> impl, std::shared_ptr<Comm> host, int rank, int size);
  ~NcclComm() override;  // aborts the NCCL communicator if close() was not called
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Through the GPU (synchronous); call from the rank's thread.
  void allreduce_sum(double* data, size_t n) override;
  void allreduce_sum(int64_t* data, size_t n) override;
  // In-place sum over ranks of n doubles in this rank's device memory, ordered on `stream` (a
  // cudaStream_t of this rank's device); not synchronised. Every rank must call it.
  void allreduce_sum_device(double* data, size_t n, void* stream);
  void broadcast(void* data, size_t bytes, int root) override { host_->broadcast(data, bytes, root); }
  void allgather(const void* send, size_t bytes, void* recv) override { host_->allgather(send, bytes, recv); }
  void allgatherv(const void* send, const std::vector<size_t>& counts, void* recv) override {
    host_->allgatherv(send, counts, recv);
  }
  void gatherv(const void* send, const std::vector<size_t>& counts, void* recv, int root) override {
    host_->gatherv(send, counts, recv, root);
  }
  void barrier() override { host_->barrier(); }
  [[noreturn]] void abort(int code) override;
  std::string describe() const override;  // "NCCL, 2 GPUs"
  int device() const;
  // Releases the NCCL communicator: ncclCommDestroy (every rank's thread, after its last collective),
  // or ncclCommAbort with `abort` (after a failure: never waits for the other ranks). Idempotent.
  void close(bool abort);

 private:
  template <class T>
  void host_sum(T* data, size_t n, int nccl_type);
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<Comm> host_;
  int rank_, size_;
};

// One NcclComm per entry of `devices` (distinct ordinals), rank r on devices[r], its other collectives
// through host[r] (host.size() == devices.size()); ncclCommInitAll, with NCCL_NVLS_ENABLE=0 set in
// the environment first (NVLink multicast off). Throws Error when NCCL is not built in, a device
// repeats, or NCCL fails.
std::vector<std::shared_ptr<NcclComm>> make_nccl_comms(const std::vector<int>& devices,
                                                       const std::vector<std::shared_ptr<Comm>>& host);

// One rank's NcclComm over the ranks of `host` (MPI: one process per GPU, possibly on several hosts):
// rank 0 makes the NCCL id, `host` broadcasts it, every rank joins with ncclCommInitRank on `device`
// (NVLink multicast off first). Every rank calls it; the ranks' GPUs must be distinct. Throws Error
// when NCCL is not built in or fails.
std::shared_ptr<NcclComm> make_nccl_comm_ranks(const std::shared_ptr<Comm>& host, int device);

}  // namespace scurry
