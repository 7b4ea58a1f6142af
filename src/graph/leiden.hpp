// scurry: Leiden clustering, scanpy 1.9.6's `sc.tl.leiden` (leidenalg's
// RBConfigurationVertexPartition: modularity with a resolution, Q = sum_ij [A_ij - resolution k_i
// k_j / 2m] delta(c_i, c_j), modularity() below up to the 1/2m), by scurry's own implementation of
// the Leiden algorithm (Traag, Waltman & van Eck 2019, "From Louvain to Leiden: guaranteeing
// well-connected communities", Sci. Rep. 9:5233) on the CPU, as leidenalg's Optimiser runs it.
// One iteration, from the current partition (the singletons at first), level after level:
//  1. fast local moving: every node queued once in random order; a node popped moves to the
//     neighbouring community, or to an empty one when it is not alone, with the largest gain
//     w(v, C) - gamma k_v K_C (gamma = resolution / 2m) when that beats staying; the neighbours of
//     a moved node outside its new community are queued again;
//  2. refinement: every node starts alone inside its community S; in random order a node still
//     alone and well connected to S (E(v, S - v) >= gamma k_v (K_S - k_v)) joins a refined
//     community R of S that is well connected to S (or stays alone), drawn with probability ~
//     exp(gain / beta) over the gains >= 0 (the paper's refinement, as igraph implements it;
//     leidenalg's merge_nodes_constrained takes the best gain, beta -> 0);
//  3. aggregation by the refined partition (a counting sort of the nodes, each aggregate's edges
//     summed in a sparse accumulator), the aggregate nodes starting in their community of step 1;
// until the local moving leaves every community one node (or the refinement, then the partition
// itself, as igraph, no longer shrinks the graph). The communities found are connected (the
// paper's guarantee; checked on every graph of the tests).
// n_iterations >= 0: that many iterations (0: every cell alone); negative ("until stable",
// leidenalg's rule): iterations until one no longer raises the modularity by a relative 1e-12 (one
// that lowers it is undone; at most 10,000). Each iteration after the first restarts at level 0
// from the partition, so it costs one local-moving pass, the refinement and the aggregations.
// Data: level 0 is the upper triangle mirrored (diagonal entries: self-loops, in the strengths),
// its nodes renumbered breadth-first (a community's rows near each other in memory; the labels
// are mapped back); CSR with int64 offsets and int32 node ids (fewer than 2^31 nodes, else
// InputError), the input's float weights at level 0 and float64 sums above, float64 community
// totals, sparse accumulators (a dense vector and a touched list). Seeded by random_state through SplitMix64 with
// scurry's own bounded draws (not leidenalg's or igraph's RNG: the partitions differ from theirs;
// their modularity is comparable, tested). Threads (the Context's): the local moving runs on one
// (each move depends on those before); the communities are refined in parallel, each with a random
// stream of its own; the aggregation and the modularity sum fixed blocks in parallel, joined in
// block order: the same seed gives the same labels for any thread count. SCURRY_LEIDEN_TIMES=1
// prints each iteration's seconds, levels, clusters and modularity on stderr;
// SCURRY_LEIDEN_IGRAPH_LOOP=1 (for comparisons) runs instead the CPU path before issue 19,
// detail::leiden_igraph_loop below. 100,000 cells (k = 15 connectivities, 2.4M entries), 2 cores:
// ~0.3 s the first iteration, ~0.1 s each after; 6 iterations, 0.85-0.93 s in `scurry run`
// (the igraph loop: 2.9-3.5 s).
//
// As users call it now (issue 22 point 4):
// - flavor "leidenalg" (scanpy 1.9's and 1.10's default, above) or "igraph" (scanpy 1.10's
//   flavor='igraph', its announced future default with n_iterations=2): python-igraph's
//   Graph.community_leiden(objective_function='modularity', ...) = the igraph C library's
//   igraph_community_leiden (resolution_parameter = resolution / 2m, node weights = strengths,
//   edge weights from the upper triangle, beta, igraph's RNG seeded by random_state) with
//   n_iterations handed to igraph as given (negative: igraph's own rule) and igraph's membership
//   numbers kept as igraph returns them; directed must be false (scanpy raises otherwise). On the
//   GPU (`--device gpu`) both flavors run scurry's own kernels (labels by size, as leidenalg);
// - several resolutions in one call (`resolutions`): the graph is read and its level-0 (or
//   igraph) copy built once, each resolution written to obs[key_added + "_" + repr(resolution)]
//   (rapids-singlecell's pattern, e.g. leiden_0.5, leiden_1.0) with its own uns entry;
// - restrict_to (restrict_key, restrict_categories): only the cells of those categories are
//   clustered, on the graph restricted to them; scanpy's rename_groups labels them
//   "<cat1-cat2...>,<new>" and every other cell keeps its label; the key becomes <key_added>_R when
//   key_added is the default 'leiden' (scanpy); categories in natsort order;
// - obsp: the graph of obsp[obsp] instead of the neighbours' connectivities.
//
// Differences from scanpy: scanpy 1.9.6 hands leidenalg a directed graph holding both directions of
// every edge; for a symmetric graph its quality function is the same modularity, but the search
// (and so the partition found) differs. Labels are renumbered by decreasing cluster size, ties by
// the first cell of the cluster ("0" = largest), as leidenalg numbers them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct LeidenOptions {
  double resolution = 1.0;    // higher: more, smaller clusters
  uint64_t random_state = 0;  // seeds the RNG (scurry's; igraph's for flavor igraph)
  int64_t n_iterations = -1;  // Leiden iterations; negative: until the partition is stable
  bool use_weights = true;    // false: every edge weighs 1
  double beta = 0.01;         // randomness of the refinement step (leidenalg's default)
  std::string key_added = "leiden";
  std::string neighbors_key = "neighbors";  // Dataset level: which neighbours' connectivities
  std::string flavor = "leidenalg";          // "leidenalg" | "igraph" (see above)
  std::optional<bool> directed;              // scanpy's None: true for leidenalg, false for igraph
  std::vector<double> resolutions;           // Dataset level: several at once (empty: `resolution`)
  std::string restrict_key;                  // Dataset level: restrict_to's obs key ("" = all cells)
  std::vector<std::string> restrict_categories;  // ... and its categories
  std::string obsp;                          // Dataset level: obsp key of the graph ("" = neighbours')
};

struct LeidenResult {
  std::vector<int32_t> labels;  // per cell, 0 = largest cluster
  int64_t n_clusters = 0;
  double modularity = 0;        // of `labels` at opt.resolution (modularity() below)
};

// Low level: clusters of a symmetric weighted graph (n x n CSR; obsp['connectivities']; the upper
// triangle is read, diagonal entries are self-loops).
LeidenResult leiden(const Context& ctx, const CsrF& graph, const LeidenOptions& opt);
// The same at each of `resolutions` (opt.resolution ignored), the graph built once.
std::vector<LeidenResult> leiden(const Context& ctx, const CsrF& graph, const LeidenOptions& opt,
                                 const std::vector<double>& resolutions);
// Dataset level: reads the connectivities of uns[neighbors_key] or obsp[obsp] (InputError when
// missing: run neighbors first); writes obs[key_added] (categorical, categories "0", "1", ...) and
// uns[key_added] = {params: {resolution, random_state, n_iterations}}; with restrict_to and
// several resolutions as above. Returns the (first resolution's) result on the clustered cells.
// The checks of the options alone (no data): InputError naming the bad value. `scurry run` calls it
// before its first step; leiden() calls it too.
void validate_leiden_options(const LeidenOptions& opt);
LeidenResult leiden(const Context& ctx, Dataset& d, const LeidenOptions& opt);
void write_leiden(Dataset& d, const LeidenResult& res, const LeidenOptions& opt);
// The obs key of one of several resolutions: key_added + "_" + Python's repr of the float.
std::string leiden_resolution_key(const std::string& key_added, double resolution);
// natsort's default order of strings (digit runs compared as integers), as scanpy sorts categories.
bool natural_less(const std::string& a, const std::string& b);

// Modularity of a partition of a symmetric weighted graph (both triangles stored, as
// connectivities): Q = 1/(2m) sum_ij [A_ij - resolution k_i k_j / (2m)] delta(c_i, c_j),
// 2m = sum_ij A_ij, k_i = sum_j A_ij. Labels must be >= 0. Float64.
double modularity(const CsrF& graph, const std::vector<int32_t>& labels, double resolution = 1.0);

// Adjusted Rand index of two labelings of the same cells (Hubert & Arabie; 1 = identical
// partitions, ~0 = chance). Labels must be >= 0.
double adjusted_rand_index(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

namespace detail {
// The leidenalg flavor's CPU path before issue 19, kept as the tests' oracle and for comparisons:
// igraph's igraph_community_leiden (resolution_parameter = resolution / 2m, node weights =
// strengths, edge weights from the upper triangle, beta, igraph's default RNG seeded by
// random_state); n_iterations >= 0 handed to igraph, negative one igraph iteration at a time, each
// from the previous partition, under the rule above (igraph 0.10.2's own negative n_iterations
// stops after one iteration). Labels numbered as leiden()'s; flavor igraph as leiden().
LeidenResult leiden_igraph_loop(const CsrF& graph, const LeidenOptions& opt);
}  // namespace detail

}  // namespace scurry
