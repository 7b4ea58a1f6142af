// scurry: deterministic CPU parallelism. Work is split into a fixed set of blocks that does not
// depend on the thread count; per-block partial results are combined in block order, so results
// are identical for any number of threads.
#pragma once
#include <cstdint>
#include <functional>

namespace scurry {

// Calls fn(b) for b in [0, n_blocks) on up to `threads` threads (dynamic schedule).
void parallel_for(int threads, int64_t n_blocks, const std::function<void(int64_t)>& fn);

}  // namespace scurry
