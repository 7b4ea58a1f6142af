// scurry: spectral embedding of a weighted graph, umap-learn 0.5.3's spectral_layout: the
// eigenvectors 1..dim (0 is the trivial one) of the smallest eigenvalues of the symmetric normalised
// Laplacian L = I - D^-1/2 A D^-1/2, i.e. of the largest of M = D^-1/2 A D^-1/2.
// - n <= dense_max_nodes: M dense, LAPACK dsyevr (exact).
// - larger: block subspace iteration on (I + M) / 2 (spectrum in [0, 1]) with a seeded Gaussian
//   start, QR after every product, Rayleigh-Ritz every 10 iterations until the wanted Ritz values
//   move less than 1e-7 or max_iter products; sparse products in fixed row blocks (identical for any
//   thread count). umap uses ARPACK with tol 1e-4 here: this is an initialisation, not a result.
#pragma once
#include <cstdint>
#include <optional>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct SpectralOptions {
  int64_t dim = 2;
  int64_t dense_max_nodes = 3000;  // dsyevr up to this many nodes, subspace iteration above
  int64_t oversample = 10;         // subspace iteration: extra vectors
  int64_t max_iter = 300;          // subspace iteration: most products
  uint64_t random_state = 0;       // subspace iteration: start block
};

// Number of connected components of the graph (edges = stored nonzeros; the matrix must be
// symmetric in its pattern) and the component of each node (numbered by first node).
int64_t connected_components(const CsrF& graph, std::vector<int32_t>* labels = nullptr);

// n x dim (columns in order of increasing Laplacian eigenvalue, unit norm, arbitrary sign), or
// nullopt when the graph is not connected or a node has no edges (umap then lays out components
// separately; callers here fall back to a random layout).
std::optional<DenseD> spectral_layout(const Context& ctx, const CsrF& graph, const SpectralOptions& opt = {});

}  // namespace scurry
