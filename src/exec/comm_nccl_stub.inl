// NcclComm where NCCL is not available: every collective fails with SCURRY_NO_NCCL_WHY. Included
// inside namespace scurry by comm_nccl.cu (CUDA without NCCL) and comm_nccl_nocuda.cpp (no CUDA),
// after <cstdlib>, core/error.hpp and exec/comm_nccl.hpp.

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
void NcclComm::allreduce_sum(double*, size_t) { fail(SCURRY_NO_NCCL_WHY); }
void NcclComm::allreduce_sum(int64_t*, size_t) { fail(SCURRY_NO_NCCL_WHY); }
void NcclComm::allreduce_sum_device(double*, size_t, void*) { fail(SCURRY_NO_NCCL_WHY); }
std::vector<std::shared_ptr<NcclComm>> make_nccl_comms(const std::vector<int>&, const std::vector<std::shared_ptr<Comm>>&) {
  fail(SCURRY_NO_NCCL_WHY);
}
std::shared_ptr<NcclComm> make_nccl_comm_ranks(const std::shared_ptr<Comm>&, int) { fail(SCURRY_NO_NCCL_WHY); }
