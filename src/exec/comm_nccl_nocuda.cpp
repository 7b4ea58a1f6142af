// NcclComm in builds without CUDA: NCCL is never available (comm_nccl.hpp).
#include <cstdlib>

#include "core/error.hpp"
#include "exec/comm_nccl.hpp"

namespace scurry {

#define SCURRY_NO_NCCL_WHY "this scurry was built without CUDA (no NCCL)"
#include "exec/comm_nccl_stub.inl"

}  // namespace scurry
