// scurry: spectral embedding of a weighted graph, umap-learn 0.5.3's spectral_layout: the
// eigenvectors 1..dim (0 is the trivial one) of the smallest eigenvalues of the symmetric normalised
// Laplacian L = I - D^-1/2 A D^-1/2, i.e. of the largest of M = D^-1/2 A D^-1/2.
// - n <= dense_max_nodes: M dense, LAPACK dsyevr (exact).
// - larger: Chebyshev-filtered subspace iteration (Zhou & Saad 2007, "A Chebyshev-Davidson
//   algorithm for large symmetric eigenproblems"; Zhou, Saad, Tiago & Chelikowsky 2006) on M with
//   the trivial eigenvector v0 = D^1/2 1 deflated: a block of dim + oversample vectors from a seeded
//   Gaussian start, each sweep a Rayleigh-Ritz step and a Chebyshev polynomial of `degree` in M that
//   damps [-1, the block's smallest Ritz value] and amplifies the wanted end of the spectrum;
//   orthonormalisation by SVQB (Stathopoulos & Wu 2002: Gram matrix, eigen-solve, twice). Stops when
//   the wanted Ritz pairs' residuals |M x - theta x| are below tol (umap asks ARPACK for tol 1e-4:
//   this is an initialisation, not a result) or after max_products products with M.
//   The block products run on the GPU when ctx is a CUDA context, on the CPU threads otherwise;
//   both sum in a fixed order (identical results for any thread count, and run to run on the GPU).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct SpectralOptions {
  int64_t dim = 2;
  int64_t dense_max_nodes = 3000;  // dsyevr up to this many nodes, the iterative solver above
  int64_t oversample = 8;          // iterative: block width dim + oversample
  // iterative: degree of the Chebyshev filter of each sweep. 20: the top of a kNN graph's spectrum is
  // clustered (at 200,000 cells the wanted eigenvalues 0.99923, 0.99909, the next 0.99784, the
  // block's last 0.99597), where T_d grows like cosh(d acosh(1 + x)) with x ~ 3e-3: per product,
  // a degree of 20 gains 1.6x more than 10 (bench/RESULTS.md section 34: 121 -> 101 products and 13
  // -> 6 sweeps at 200,000 cells, 91 -> 81 and 10 -> 5 at 100,000).
  int64_t degree = 20;
  double tol = 1e-4;               // iterative: residual norm of the wanted Ritz pairs
  int64_t max_products = 600;      // iterative: most products with M (block-wide)
  uint64_t random_state = 0;       // iterative: start block
};

// What the iterative solver did (zeros on the dense path).
struct SpectralStats {
  int64_t products = 0;     // block products with M
  int64_t sweeps = 0;       // Rayleigh-Ritz steps
  double residual = 0;      // largest residual norm of the wanted pairs at the end
  bool converged = false;   // residual <= tol
  bool gpu = false;         // the products ran on the GPU
  double seconds = 0;       // wall time of the iterative solver (products, Gram matrices, download)
};

// Number of connected components of the graph (edges = stored nonzeros; the matrix must be
// symmetric in its pattern) and the component of each node (numbered by first node), on `threads`
// threads (0: all); the same result for any thread count.
int64_t connected_components(const CsrF& graph, std::vector<int32_t>* labels = nullptr, int threads = 0);
// The same over the edges umap keeps when it prunes the graph (umap.hpp prune_graph): an entry is an
// edge when its weight is >= min_weight and not zero. Edges in both directions are needed only once
// (the pattern is symmetric, and so are the weights of a fuzzy union).
int64_t connected_components_above(const CsrF& graph, float min_weight, std::vector<int32_t>* labels = nullptr,
                                   int threads = 0);

// n x dim (columns in order of increasing Laplacian eigenvalue, unit norm, arbitrary sign), or
// nullopt when the graph is not connected or a node has no edges (umap then lays out the components
// separately: multi_component_layout below).
std::optional<DenseD> spectral_layout(const Context& ctx, const CsrF& graph, const SpectralOptions& opt = {},
                                      SpectralStats* stats = nullptr);

// umap-learn 0.5's multi_component_layout, the spectral start of a graph of several components
// (labels, n_components: connected_components' numbering). Each component is laid out around its
// point of a meta layout: with at most 2 dim components the points +-e_1, ..., +-e_k (k = half the
// components, rounded up; e_1, e_2, ..., then -e_1, ...); with more, umap's component_layout: the
// components' centroids in `data` (the representation the graph was built from: asked for only
// then), affinities exp(-d^2) between them, and their spectral embedding as sklearn's
// SpectralEmbedding makes it (the top dim + 1 eigenvectors of D^-1/2 A D^-1/2 with A's diagonal
// ignored, over sqrt(degree), each vector's largest entry positive, the first dropped), divided by
// its largest entry; without data (an empty function) the points are uniform in [0, 10)^dim. A
// component gets its own spectral layout (spectral_layout on its subgraph) scaled to half the
// distance from its point to the nearest other point, or, below 2 dim nodes (or at most dim + 1),
// uniform values in that range. Seeded by opt.random_state.
// umap's component_layout (euclidean): the components' centroids in x (labels in [0, nc)), affinities
// exp(-d^2), sklearn's SpectralEmbedding of them (see above), divided by its largest entry. nc x dim,
// nc > dim.
DenseD component_layout(const DenseF& x, const std::vector<int32_t>& labels, int64_t nc, int64_t dim);
DenseD multi_component_layout(const Context& ctx, const CsrF& graph, const std::vector<int32_t>& labels,
                              int64_t n_components, const SpectralOptions& opt,
                              const std::function<DenseF()>& data = {});

}  // namespace scurry
