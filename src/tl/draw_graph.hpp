// scurry: force-directed graph drawing, scanpy 1.9.6's `sc.tl.draw_graph(layout='fa')`: ForceAtlas2
// (Jacomy, Venturini, Heymann & Bastian 2014, "ForceAtlas2, a continuous graph layout algorithm for
// handy network visualization designed for the Gephi software", PLoS ONE 9(6): e98853) with the
// settings scanpy hands the fa2 package (Chippada 2018, a port of Gephi's ForceAtlas2.java):
// outboundAttractionDistribution False, linLogMode False, adjustSizes False, edgeWeightInfluence 1,
// jitterTolerance 1, barnesHutOptimize True, barnesHutTheta 1.2, scalingRatio 2, strongGravityMode
// False, gravity 1, 500 iterations.
//
// One iteration, as fa2's forceatlas2() loop (node mass m_i = 1 + the stored entries of row i):
// - repulsion kr m_i m_j / d^2 along (y_i - y_j), kr = scaling_ratio, from every other node; with
//   Barnes-Hut (Barnes & Hut 1986) as fa2 builds its tree: a region splits into four at its centre
//   of mass, its size is twice the largest distance of its nodes from that centre, and a region is
//   taken as one body of its total mass at its centre when distance * theta > size;
// - gravity m_i g towards the origin (strong gravity: kr m_i g |y_i|);
// - attraction -w_ij (y_i - y_j) along every edge (each undirected edge once, the weight of the
//   upper triangle, w^edgeWeightInfluence; outbound distribution: / m of the edge's lower node);
// - Gephi's adaptive speed: swinging and effective traction summed over nodes, the global speed
//   and speed efficiency updated as fa2's adjustSpeedAndApplyForces, each node moved by
//   F_i speed / (1 + sqrt(speed m_i |F_i - F_i_old|)).
//
// Start: an obsm key (init_pos), else scanpy's np.random.seed(random_state);
// np.random.random((n, 2)) (numpy's legacy MT19937 stream, the same numbers). init_pos 'paga' needs
// pl.paga's positions and is not implemented (an error says so). Layouts other than 'fa' (igraph's
// fr, kk, drl, grid_fr, lgl, rt, rt_circular) are not implemented: an error names them.
//
// Difference from fa2: fa2's (and Gephi's) Barnes-Hut, on reaching a region of one node, applies
// the pair force to both nodes, so that near pairs are pushed apart about twice (once from each
// side's traversal) while far ones once; here each node gathers the force on itself only, so that
// theta -> 0 gives the exact all-pairs repulsion (the oracle of the tests) and every node's sum is
// independent of the others: the same bits for any thread count (each node's traversal in a fixed
// order, the global sums over fixed blocks in block order).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct DrawGraphOptions {
  std::string layout = "fa";        // only ForceAtlas2
  std::string init_pos;             // obsm key of 2-D start coordinates; "" = random (scanpy's None)
  std::optional<int64_t> root;      // for igraph's tree layouts (not used by 'fa')
  uint64_t random_state = 0;        // seed of the random start (numpy's RandomState)
  int n_jobs = 0;                   // threads; 0 = the Context's
  std::string neighbors_key = "neighbors";  // whose connectivities
  std::string obsp;                 // an obsp key to use instead (scanpy's obsp / adjacency)
  std::string key_added_ext;        // obsm key X_draw_graph_<ext>; "" = the layout's name
  int64_t iterations = 500;         // scanpy's `maxiter` / `iterations` keyword (default 500)
  // ForceAtlas2's settings as scanpy passes them.
  bool barnes_hut = true;           // false: exact all-pairs repulsion (O(n^2), the oracle)
  double theta = 1.2;               // barnesHutTheta
  double scaling_ratio = 2.0;
  double gravity = 1.0;
  bool strong_gravity = false;
  double jitter_tolerance = 1.0;
  double edge_weight_influence = 1.0;
  bool outbound_attraction_distribution = false;
};

struct DrawGraphResult {
  DenseD positions;  // n x 2 (obsm X_draw_graph_fa)
  std::string key;   // the obsm key written (Dataset level)
  double seconds = 0;
};

// The checks of the options alone (no data): InputError naming the bad value.
void validate_draw_graph_options(const DrawGraphOptions& opt);
// Low level: ForceAtlas2 on a weighted graph (n x n CSR, symmetric: the upper triangle's weights
// are read, the diagonal ignored) from `init` (n x 2).
DrawGraphResult force_atlas2(const Context& ctx, const CsrF& graph, const DenseD& init, const DrawGraphOptions& opt);
// Dataset level: the graph of obsp[opt.obsp] or of uns[neighbors_key]; writes obsm['X_draw_graph_'
// + (key_added_ext or layout)] (float64, as scanpy) and uns['draw_graph'] = {params: {layout,
// random_state}}.
DrawGraphResult draw_graph(const Context& ctx, Dataset& d, const DrawGraphOptions& opt);

// Pieces, exposed for tests. The repulsive forces on every node (f[2i], f[2i+1]) at positions y
// (n x 2 row-major, float64) of masses m: Barnes-Hut with `theta`, or all pairs when theta <= 0.
void fa2_repulsion(const std::vector<double>& y, const std::vector<double>& mass, double theta, double kr, int threads,
                   std::vector<double>& f);

// Fraction of each node's k strongest graph neighbours (the stored entries of its row, self
// excluded, by decreasing weight, ties by index; rows with fewer keep all) that are among its k
// nearest in `layout` (exact euclidean search): the mean over nodes with at least one neighbour.
double graph_preservation(const Context& ctx, const CsrF& graph, const DenseF& layout, int64_t k);

}  // namespace scurry
