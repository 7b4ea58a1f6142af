// scurry: the neighbourhood graph, scanpy 1.9.6's `sc.pp.neighbors(method='umap')`: kNN search on
// an embedding (exact, IVF-Flat or hnsw, knn.hpp) and umap's fuzzy simplicial set (connectivities.hpp).
//
// Differences from scanpy: scanpy searches exactly (dense pairwise distances) for euclidean data
// under 8192 cells and with umap's NN-descent otherwise; here the search is exact, IVF-Flat or hnswlib, as
// `algorithm` says, and the cell itself is always neighbour 0. When use_rep is unset and obsm has
// no X_pca, X is used as is (scanpy would first compute a PCA when X has more than 50 columns).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/connectivities.hpp"
#include "graph/knn.hpp"
#include "graph/knn_gpu.hpp"

namespace scurry {

struct NeighborsOptions {
  // Neighbours per cell, the cell itself included (scanpy's n_neighbors). 2 <= n_neighbors < n_cells.
  int64_t n_neighbors = 15;
  // Use the first n_pcs columns of use_rep (an obsm key). Unset: all columns. Ignored for X.
  std::optional<int64_t> n_pcs;
  // The representation: an obsm key (e.g. "X_pca") or "X". "" (scanpy's None): obsm['X_pca'] when
  // present, else X.
  std::string use_rep;
  // "euclidean" | "cosine".
  std::string metric = "euclidean";
  // Connectivity method; only "umap" is supported.
  std::string method = "umap";
  // Seeds the approximate search (recorded in uns['neighbors']['params'] as scanpy does).
  uint64_t random_state = 0;
  // "exact" | "ivf" | "hnsw" | "auto". auto on the CPU: exact up to auto_exact_max_cells cells (scanpy's
  // own threshold for its exact search), IVF-Flat above (knn_ivf: recall@15 >= 0.97, bench/RESULTS.md
  // section 21). On the GPU auto is exact up to auto_exact_max_cells_gpu cells, IVF-Flat above (at
  // 1.3M cells x 50 PCs ~1 s with connectivities, recall@15 0.996, against 2.6 s exact: sections 2
  // and 25); ivf and hnsw both mean the GPU's IVF-Flat there.
  std::string algorithm = "auto";
  int64_t auto_exact_max_cells = 8192;
  int64_t auto_exact_max_cells_gpu = 500000;
  // CPU IVF-Flat parameters (defaults: knn.hpp); its seed is random_state.
  IvfCpuOptions ivf;
  // hnsw parameters (M = 16, ef_construction = 200, ef = max(4 k, 64)); its seed is random_state.
  HnswOptions hnsw;
  // Keys: obsp[key_added + "_connectivities"/"_distances"] and uns[key_added] when key_added is not
  // "neighbors" (scanpy's naming); default obsp['connectivities'], obsp['distances'], uns['neighbors'].
  std::string key_added = "neighbors";
  // Several GPUs of this host (`--gpus`; the first is the Context's): the exact search
  // (knn_exact_gpus) and the IVF-Flat search ("hnsw" on the GPU, knn_ivf_gpus) run over them. Not
  // owned; empty: the Context's GPU.
  std::vector<Context*> gpus;
  // How those GPUs share the search (`--knn-shard`): split the queries, or split the index and merge
  // the per-query top-k lists (KnnShard, knn_gpu.hpp). The same result either way. MPI ranks
  // (neighbors_sharded) always split the queries.
  KnnShard gpu_sharding = KnnShard::queries;
};

struct NeighborsResult {
  Knn knn;              // n x n_neighbors, self first
  CsrF distances;       // obsp['distances'] (n x n, k - 1 entries a row)
  CsrF connectivities;  // obsp['connectivities'] (n x n, symmetric)
  std::string algorithm;  // the search that ran: "exact", "ivf", "hnsw" or (GPU) "ivf_flat"
  std::string use_rep;    // Dataset level: the representation used ("X_pca", "X", ...)
};

// Low level: neighbours of the rows of X (cells x dims).
NeighborsResult neighbors(const Context& ctx, const DenseF& X, const NeighborsOptions& opt);
// Several ranks (the Context's communicator; CPU only): this rank's cells are the rows of `local`, its
// share of the representation (ranks hold consecutive cells, in rank order). The representation is
// gathered on every rank (n x dims: small), each rank searches its own cells against all cells, and
// the kNN rows are gathered on `root`, which gets the full result (knn, distances, connectivities:
// the one-rank result); the other ranks get an empty result with only `algorithm` set. Collective.
// With one rank: neighbors(ctx, local, opt).
NeighborsResult neighbors_sharded(const Context& ctx, const DenseF& local, const NeighborsOptions& opt, int root = 0);
// Dataset level: reads the representation (see use_rep/n_pcs), writes obsp['distances'] (float32
// values, written as float64 as scanpy's file holds them), obsp['connectivities'] (float32) and
// uns['neighbors'] = {connectivities_key, distances_key, params: {n_neighbors, method,
// random_state, metric, n_pcs (when given), use_rep (when given)}}.
// The checks of the options alone (no data): method, algorithm, n_neighbors >= 2.
// `scurry run` calls it before its first step.
void validate_neighbors_options(const NeighborsOptions& opt);
NeighborsResult neighbors(const Context& ctx, Dataset& d, const NeighborsOptions& opt);
// The writing half of the Dataset overload (shared with the GPU path).
void write_neighbors(Dataset& d, const NeighborsResult& res, const NeighborsOptions& opt);

// The representation the Dataset overload searches (n x dims float32), as scanpy's
// _choose_representation; `used` receives its name. InputError for a missing use_rep or n_pcs larger
// than its columns.
DenseF choose_representation(const Dataset& d, const std::string& use_rep, std::optional<int64_t> n_pcs,
                             std::string* used = nullptr);

}  // namespace scurry
