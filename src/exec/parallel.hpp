// scurry: deterministic CPU parallelism. Work is split into a fixed set of blocks that does not
// depend on the thread count; per-block partial results are combined in block order, so results
// are identical for any number of threads.
#pragma once
#include <cstdint>
#include <functional>

namespace scurry {

// Calls fn(b) for b in [0, n_blocks) on up to `threads` threads (dynamic schedule).
void parallel_for(int threads, int64_t n_blocks, const std::function<void(int64_t)>& fn);
// Inside a block of parallel_for(threads, ...): the number, in [0, threads), of the thread running
// it, for per-thread scratch (0 on the calling thread and outside parallel_for; a parallel_for
// nested in a block runs on that block's thread and keeps its number).
int parallel_worker();

}  // namespace scurry

#include <vector>

namespace scurry {

// Blocks whose per-block partials are held at once by reduce_blocks (bounds its memory to
// kReduceWave * width doubles), fewer where that would pass kReduceWaveBytes (a multiple of the
// thread count then, at least the thread count): the partials' buffer is reused wave after wave, so
// wide partials (rank_genes_groups' statistics: 3 x groups x genes doubles) are not 16 fresh copies.
constexpr int64_t kReduceWave = 16;
constexpr size_t kReduceWaveBytes = size_t(32) << 20;

// Calls body(b, partial) for every block b in [0, n_blocks), `partial` pointing at `width` zeroed
// doubles private to that block, and adds the partials into `acc` (resized to width) in block order:
// per-gene sums that are bit-identical for any thread count.
void reduce_blocks(int threads, int64_t n_blocks, size_t width, std::vector<double>& acc,
                   const std::function<void(int64_t, double*)>& body);

}  // namespace scurry
