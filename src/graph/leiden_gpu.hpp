// scurry: Leiden clustering on the GPU (modularity with a resolution, as leiden.hpp), with our own
// kernels; the CPU path (scurry's own Leiden, leiden.hpp) is the oracle. Same options, result and
// Dataset slots as leiden().
//
// One Leiden iteration, per level of the graph (level 0: the cells):
//  1. Local moving, in parallel sweeps: every node finds the neighbouring community with the best
//     modularity gain and moves there when that beats staying by more than rounding. The weights
//     from a node to each neighbouring community are summed per node over its CSR row (a group of
//     8 lanes or a warp holds the row; nodes of degree > 256, upper levels' hubs, by sort +
//     reduce-by-key of their (node, community) pairs). Against oscillation sweeps alternate between
//     moves to a community of higher id only and of lower id only (cuGraph's up/down rule), and
//     only a pseudo-random half of the nodes may move in a sweep (SCURRY_LEIDEN_SUBSET=s: 1 / 2^s;
//     0: all). Sweeps stop when a pair of sweeps raises the modularity by less than 1e-6, after two
//     sweeps without moves, or after 64; the best partition seen is kept.
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
// Determinism: every sum is taken in a fixed order (per node over its row, per block, then over
// the blocks; the sorts are stable), community weights are 64-bit fixed-point integers (2m scaled
// to 2^61; integer atomics give the same sum in any order) and candidates are compared by integer
// max, so the same graph and options give the same labels on the same GPU, run after run.
//
// Differences from the CPU path: beta and random_state are not used (the moves are greedy and
// deterministic in their rules). The partition differs from the CPU path's; its modularity is
// comparable. The graph must be symmetric (both triangles stored, as obsp['connectivities']); the
// CPU path reads the upper triangle. SCURRY_PROFILE=1 prints each level's sweeps, refinement
// rounds and phase times on stderr; SCURRY_LEIDEN_SORT_ABOVE=d (0..256, default 256; a test knob)
// sends the nodes of degree > d to the sort path.
#pragma once
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/leiden.hpp"

namespace scurry {

// Needs a CUDA context (InputError otherwise).
LeidenResult leiden_gpu(const Context& ctx, const CsrF& graph, const LeidenOptions& opt);

// The same over the GPUs of one host (one CUDA context each; several contexts may share a device):
// the same labels and modularity as leiden_gpu on ctxs[0], bit for bit. Every GPU runs the whole
// algorithm on its own copy of the graph, except the per-node candidate searches of the local
// moving and the refinement (most of the time): GPU q searches the q-th slice of each degree
// class's nodes (the sort path, for nodes of degree > 256, stays on the first GPU), and the
// results are exchanged by peer copies before every GPU applies the same moves. Levels of fewer
// than 100,000 nodes (SCURRY_LEIDEN_SPREAD_BELOW=n, a test knob) search every class on every GPU
// and exchange only the sort path's results. Each level's aggregation is made on the first GPU
// and copied to the others. Memory: every GPU holds what leiden_gpu holds, plus 24 B per node.
// One context: leiden_gpu.
LeidenResult leiden_gpus(const std::vector<Context*>& ctxs, const CsrF& graph, const LeidenOptions& opt);
// Dataset level: leiden(ctx, d, opt) (leiden.hpp) calls leiden_gpu when ctx is a CUDA context.

}  // namespace scurry
