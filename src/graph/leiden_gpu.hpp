// scurry: Leiden clustering on the GPU (modularity with a resolution, as leiden.hpp), with our own
// kernels; the CPU path (igraph) is the oracle. Same options, result and Dataset slots as leiden().
//
// One Leiden iteration, per level of the graph (level 0: the cells):
//  1. Local moving, in parallel sweeps: every node finds the neighbouring community with the best
//     modularity gain (weights to each neighbouring community by sort + reduce-by-key of
//     (node, community of neighbour) pairs) and moves there when that beats staying by more than
//     rounding. Against oscillation (two nodes swapping) sweeps alternate between moves to a
//     community of higher id only and of lower id only (cuGraph's up/down rule). Sweeps stop when a
//     pair of sweeps raises the modularity by less than 1e-6 or after 64; the best partition seen
//     is kept.
//  2. Refinement (Leiden's well-connectedness): every node starts alone; in rounds, a node that is
//     still alone and well connected to its community S (E(v, S - v) >= gamma k_v (K_S - k_v) / 2m)
//     joins the refined community R inside S, R well connected to S, with the largest gain >= 0
//     (greedy: leidenalg draws R at random with probability ~ exp(gain / beta)); to avoid cycles a
//     node joins only an R of lower id than its own.
//  3. Aggregation: refined communities become the nodes of the next level (edges by sort +
//     reduce-by-key), starting in the community of the local moving they belong to.
// Levels repeat until the local moving leaves every node alone. "Until stable" (n_iterations < 0)
// repeats iterations, each from the previous partition, until one raises the modularity by less
// than 1e-7 (at most 20); n_iterations >= 0 runs that many. Labels renumbered by decreasing size,
// ties by first cell, as the CPU path.
//
// Differences from the CPU path: beta and random_state are not used (the moves are greedy and
// deterministic in their rules), but float64 atomics make the sums' rounding, and so possibly
// near-tie decisions, vary run to run: results are not bit-reproducible. The partition differs from
// igraph's; its modularity is comparable. The graph must be symmetric (both triangles stored, as
// obsp['connectivities']); the CPU path reads the upper triangle.
#pragma once
#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/leiden.hpp"

namespace scurry {

// Needs a CUDA context (InputError otherwise).
LeidenResult leiden_gpu(const Context& ctx, const CsrF& graph, const LeidenOptions& opt);
// Dataset level: leiden(ctx, d, opt) (leiden.hpp) calls leiden_gpu when ctx is a CUDA context.

}  // namespace scurry
