// scurry: helpers of the steps that split work over several devices (or use a device's memory to the
// full): included by .cu files only.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "exec/context.hpp"
#include "exec/cuda_resources.cuh"

namespace scurry {

// Device bytes a call may use on r's device: the free memory, plus what the stream-ordered pool holds
// unused (pool mode keeps freed memory, which cudaMemGetInfo counts as used), within --max-pool-size.
size_t available_bytes(CudaResources& r);

// Runs f(k) for every device k, each on a thread of its own with its device current (one device: on
// this thread), then rethrows the first error; device 0 is current afterwards.
void on_each_device(const std::vector<const Context*>& devices, const std::function<void(size_t)>& f);

}  // namespace scurry
