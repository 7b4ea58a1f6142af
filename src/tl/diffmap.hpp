// scurry: diffusion maps (Coifman et al. 2005; Haghverdi, Buettner & Theis 2015) and diffusion
// pseudotime (Haghverdi, Buttner, Wolf, Buettner & Theis 2016), as scanpy 1.9.6's `sc.tl.diffmap`
// and `sc.tl.dpt` (n_branchings = 0).
//
// diffmap: the connectivities W of the neighbours graph, density-normalised K = Q W Q with
// Q = diag(1 / column sums of W), then the symmetric transition matrix T = Z K Z with
// Z = diag(1 / sqrt(column sums of K)); the n_comps eigenpairs of T of largest magnitude (scanpy's
// eigsh(which='LM')), in decreasing order of eigenvalue. obsm['X_diffmap'] = the eigenvectors (unit
// norm; eigenvectors have no sign: here the entry of largest magnitude of each is positive),
// uns['diffmap_evals'] = the eigenvalues (both float32, as scanpy).
// Solver: dense LAPACK (dsyevr) up to dense_max_cells cells; above, Lanczos with full
// reorthogonalisation (Lanczos 1950; Golub & Van Loan section 10.1) from a seeded start vector,
// grown until the wanted Ritz pairs' residuals are below tol.
//
// dpt: the DPT distance of every cell to the root, from the first n_dcs diffusion components:
// d(i, j)^2 = sum over components l with lambda_l < 0.9994 of (lambda_l / (1 - lambda_l) (v_il -
// v_jl))^2 plus, for the stationary components (lambda_l >= 0.9994), (v_il - v_jl)^2 (scanpy's
// formula, kept for compatibility); cells of other connected components than the root are at
// infinity; pseudotime = the distance divided by its largest finite value. The root is uns['iroot']
// or root_cell.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct DiffmapOptions {
  int64_t n_comps = 15;
  std::string neighbors_key = "neighbors";
  uint64_t random_state = 0;       // the Lanczos start vector
  int64_t dense_max_cells = 4000;  // dense eigensolver up to this many cells
  double tol = 1e-8;               // Lanczos: residual norm of the wanted pairs
};

struct DiffmapResult {
  DenseF components;          // n x n_comps (obsm X_diffmap)
  std::vector<double> evals;  // n_comps, decreasing
  int64_t lanczos_steps = 0;  // 0: dense solver
};

// The symmetric transition matrix T of scanpy's Neighbors.compute_transitions (density_normalize).
CsrD diffusion_transitions_sym(const CsrF& connectivities);
// Eigenpairs of T of largest magnitude.
DiffmapResult diffmap(const Context& ctx, const CsrF& connectivities, const DiffmapOptions& opt);
// Dataset level: the connectivities of uns[neighbors_key]; writes obsm['X_diffmap'] and
// uns['diffmap_evals'] (InputError when n_comps <= 2, as scanpy, or no neighbours).
DiffmapResult diffmap(const Context& ctx, Dataset& d, const DiffmapOptions& opt);

struct DptOptions {
  int64_t n_dcs = 10;
  std::optional<int64_t> root_cell;  // unset: uns['iroot']
  std::string neighbors_key = "neighbors";
};

// Pseudotime of every cell from the diffusion components (n x >= n_dcs) and eigenvalues; the
// component label of each cell (connected components of the graph) masks other components (inf).
std::vector<double> dpt_pseudotime(const DenseF& components, const std::vector<double>& evals, int64_t n_dcs,
                                   int64_t root, const std::vector<int32_t>& component);
// Dataset level: runs diffmap(n_comps = n_dcs) when obsm has no X_diffmap, writes
// obs['dpt_pseudotime'] (float64) and uns['iroot'].
std::vector<double> dpt(const Context& ctx, Dataset& d, const DptOptions& opt);

}  // namespace scurry
