// NcclComm in builds without CUDA: NCCL is never available (comm_nccl.hpp).
#include <cstdlib>

#include "core/error.hpp"
#include "exec/comm_nccl.hpp"

namespace scurry {

struct NcclComm::Impl {};

bool nccl_built() { return false; }

NcclComm::NcclComm(std::unique_ptr<Impl> impl, std::shared_ptr<Comm> host, int rank, int size)
    : impl_(std::move(impl)), host_(std::move(host)), rank_(rank), size_(size) {}
NcclComm::~NcclComm() = default;
void NcclComm::close(bool) {}
int NcclComm::device() const { return -1; }
std::string NcclComm::describe() const { return "NCCL (not built in)"; }
void NcclComm::abort(int code) {
  host_->abort(code);
  std::exit(code);  // (host_->abort does not return)
}
void NcclComm::allreduce_sum(double*, size_t) { fail("this scurry was built without CUDA (no NCCL)"); }
void NcclComm::allreduce_sum(int64_t*, size_t) { fail("this scurry was built without CUDA (no NCCL)"); }
void NcclComm::allreduce_sum_device(double*, size_t, void*) { fail("this scurry was built without CUDA (no NCCL)"); }
std::vector<std::shared_ptr<NcclComm>> make_nccl_comms(const std::vector<int>&, const std::vector<std::shared_ptr<Comm>>&) {
  fail("this scurry was built without CUDA (no NCCL)");
}

}  // namespace scurry
