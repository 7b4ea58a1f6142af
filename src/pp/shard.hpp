// scurry: a Dataset's cells sharded over the ranks of the Context's communicator (MPI runs). Each
// rank holds one contiguous range of cells (rows), the ranges in rank order and balanced by
// nonzeros; the per-gene slots (var, varm, varp, uns) are whole and the same on every rank. Every
// step of the CPU chain (src/pp) works on such a shard: maps touch only the rank's rows, reductions
// allreduce their per-gene partials. With one rank every function here is a no-op.
#pragma once
#include <cstdint>

#include "core/dataset.hpp"
#include "exec/context.hpp"

namespace scurry {

struct RowRange {
  int64_t begin = 0, end = 0;
};

// Rank `rank` of `size`'s rows of X: contiguous ranges of near-equal nonzeros (CSR; RowBlocks::split_nnz)
// or near-equal rows (dense).
RowRange shard_range(const Matrix& X, int rank, int size);

// Keeps this rank's range of cells (shard_range of X) in every obs-indexed slot: X, layers, obs,
// obsm and raw.X. obsp (cells x cells) cannot be split by rows and is dropped with a warning.
// Returns the range kept.
RowRange shard_rows(const Context& ctx, Dataset& d);

// The inverse: gathers every rank's cells of X, layers, obs, obsm and raw.X on `root`, in rank order
// (categorical obs columns whose categories differ between ranks get the union, in order of first
// appearance). The other ranks keep their shard. Collective. Throws scurry::Error when obsp is set
// (a cells x cells slot cannot be gathered by rows) or the ranks' slots do not match.
void gather_rows(const Context& ctx, Dataset& d, int root = 0);

}  // namespace scurry
