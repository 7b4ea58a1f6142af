#pragma once
// The CUDA driver's start and a context's cached device memory, moved off a run's critical path.

namespace scurry {

class Context;

// Starts the CUDA driver (cudaGetDeviceCount: ~0.2 s on the H200 machine) on a detached thread, so
// that the command line's parsing and checks run beside it; the first CUDA call then waits only for
// what is left. No context is made. A no-op without CUDA.
void start_cuda_driver_early();

// Gives the memory that the pool of ctx's device caches (freed, kept for reuse: the release threshold
// is unlimited) back to the driver, after ctx's stream's work so far. For the end of a run, on a
// thread beside its last host-side work: the exit, which releases all device memory left, then has
// less to do. Safe while other threads allocate (they may cache memory again). A no-op without CUDA
// or in the managed memory modes.
void release_cached_device_memory(const Context& ctx);

}  // namespace scurry
