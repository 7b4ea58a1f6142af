#include "graph/neighbors.hpp"

#include "graph/connectivities_gpu.hpp"
#include "graph/knn_gpu.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

namespace scurry {
namespace {

const char* kWhere = "neighbors";

void check_options(const NeighborsOptions& opt, int64_t n) {
  validate_neighbors_options(opt);
  if (opt.n_neighbors >= n)
    fail_input(kWhere, "n_neighbors = ", opt.n_neighbors, " must be smaller than the number of cells (", n,
               "); pass a smaller n_neighbors");
}

}  // namespace

void validate_neighbors_options(const NeighborsOptions& opt) {
  if (opt.method != "umap")
    fail_input(kWhere, "method '", opt.method, "' is not supported; use umap");
  if (opt.algorithm != "exact" && opt.algorithm != "ivf" && opt.algorithm != "hnsw" && opt.algorithm != "auto")
    fail_input(kWhere, "algorithm '", opt.algorithm, "' is unknown; use exact, ivf, hnsw or auto");
  if (opt.n_neighbors < 2)
    fail_input(kWhere, "n_neighbors = ", opt.n_neighbors, " is too small; use at least 2 (the cell itself counts)");
  if (opt.n_pcs && *opt.n_pcs < 1) fail_input(kWhere, "n_pcs = ", *opt.n_pcs, " must be at least 1");
}

NeighborsResult neighbors(const Context& ctx, const DenseF& X, const NeighborsOptions& opt) {
  check_options(opt, X.n_rows);
  const KnnMetric metric = parse_knn_metric(opt.metric, kWhere);
  NeighborsResult res;
  const bool gpu = ctx.backend() == Backend::cuda;
  // (on the GPU "ivf" and "hnsw" both mean the GPU's IVF-Flat)
  res.algorithm = opt.algorithm == "auto" ? (X.n_rows <= (gpu ? opt.auto_exact_max_cells_gpu : opt.auto_exact_max_cells)
                                                 ? "exact" : "ivf")
                                          : opt.algorithm;
  if (res.algorithm == "exact") {
    KnnExactGpuOptions exact_opt;
    exact_opt.sharding = opt.gpu_sharding;
    res.knn = !gpu                 ? knn_exact(ctx, X, opt.n_neighbors, metric)
              : opt.gpus.size() > 1 ? knn_exact_gpus(opt.gpus, X, opt.n_neighbors, metric, exact_opt)
                                    : knn_exact_gpu(ctx, X, opt.n_neighbors, metric);
  } else if (gpu) {
    IvfOptions ivf;
    ivf.seed = opt.random_state;
    ivf.sharding = opt.gpu_sharding;
    res.knn = opt.gpus.size() > 1 ? knn_ivf_gpus(opt.gpus, X, opt.n_neighbors, metric, ivf)
                                  : knn_ivf_gpu(ctx, X, opt.n_neighbors, metric, ivf);
    res.algorithm = "ivf_flat";
  } else if (res.algorithm == "ivf") {
    IvfCpuOptions v = opt.ivf;
    v.seed = opt.random_state;
    res.knn = knn_ivf(ctx, X, opt.n_neighbors, metric, v);
  } else {
    HnswOptions h = opt.hnsw;
    h.random_state = opt.random_state;
    res.knn = knn_hnsw(ctx, X, opt.n_neighbors, metric, h);
  }
  res.distances = knn_distance_matrix(ctx, res.knn);
  res.connectivities = gpu ? fuzzy_simplicial_set_gpu(ctx, res.knn) : fuzzy_simplicial_set(ctx, res.knn);
  return res;
}

NeighborsResult neighbors_sharded(const Context& ctx, const DenseF& local, const NeighborsOptions& opt, int root) {
  Comm& comm = ctx.comm();
  if (comm.size() == 1) return neighbors(ctx, local, opt);
  const bool gpu = ctx.backend() == Backend::cuda;
  // Every rank's rows of the representation (n x dims: small), in rank order.
  const std::vector<int64_t> rows = allgather_count(comm, local.n_rows);
  const std::vector<int64_t> cols = allgather_count(comm, local.n_cols);
  for (int64_t c : cols)
    if (c != local.n_cols) fail("internal: ranks hold representations of ", c, " and ", local.n_cols, " columns");
  int64_t begin = 0, n = 0;
  for (int r = 0; r < comm.size(); ++r) {
    if (r < comm.rank()) begin += rows[r];
    n += rows[r];
  }
  DenseF X;
  X.n_rows = n;
  X.n_cols = local.n_cols;
  X.data = allgatherv(comm, local.data);
  check_options(opt, n);
  const KnnMetric metric = parse_knn_metric(opt.metric, kWhere);
  NeighborsResult res;
  res.algorithm = opt.algorithm == "auto" ? (n <= (gpu ? opt.auto_exact_max_cells_gpu : opt.auto_exact_max_cells)
                                                 ? "exact" : "ivf")
                                          : opt.algorithm;
  Knn mine;
  if (gpu && res.algorithm == "exact") {
    mine = knn_exact_gpu_rows(ctx, X, opt.n_neighbors, metric, begin, begin + local.n_rows);
  } else if (gpu) {
    // IVF-Flat: every rank builds the same lists and searches shard `rank` of the query blocks; root
    // gathers each shard's rows with their cells and puts them in place. (Ranks split the queries
    // only; opt.gpu_sharding is for the GPUs of one process.)
    IvfOptions ivf;
    ivf.seed = opt.random_state;
    ivf.shard = comm.rank();
    ivf.n_shards = comm.size();
    std::vector<int32_t> cells;
    const Knn part = knn_ivf_gpu_shard(ctx, X, opt.n_neighbors, metric, ivf, cells);
    std::vector<std::vector<int32_t>> all_cells{gatherv(comm, cells, root)};
    std::vector<Knn> gathered(1);
    gathered[0].indices = gatherv(comm, part.indices, root);
    gathered[0].distances = gatherv(comm, part.distances, root);
    res.algorithm = "ivf_flat";
    if (comm.rank() != root) return res;
    res.knn = join_rows(n, opt.n_neighbors, all_cells, gathered);
    res.distances = knn_distance_matrix(ctx, res.knn);
    res.connectivities = fuzzy_simplicial_set_gpu(ctx, res.knn);
    return res;
  } else if (res.algorithm == "exact") {
    mine = knn_exact(ctx, X, opt.n_neighbors, metric, begin, begin + local.n_rows);
  } else if (res.algorithm == "ivf") {
    IvfCpuOptions v = opt.ivf;
    v.seed = opt.random_state;
    mine = knn_ivf(ctx, X, opt.n_neighbors, metric, v, begin, begin + local.n_rows);
  } else {
    HnswOptions h = opt.hnsw;
    h.random_state = opt.random_state;
    mine = knn_hnsw(ctx, X, opt.n_neighbors, metric, h, begin, begin + local.n_rows);
  }
  // This rank's rows of the kNN result, gathered on root in rank order.
  Knn all;
  all.k = opt.n_neighbors;
  all.indices = gatherv(comm, mine.indices, root);
  all.distances = gatherv(comm, mine.distances, root);
  if (comm.rank() != root) return res;
  all.n = n;
  res.knn = std::move(all);
  res.distances = knn_distance_matrix(ctx, res.knn);
  res.connectivities = gpu ? fuzzy_simplicial_set_gpu(ctx, res.knn) : fuzzy_simplicial_set(ctx, res.knn);
  return res;
}

DenseF choose_representation(const Dataset& d, const std::string& use_rep, std::optional<int64_t> n_pcs,
                             std::string* used) {
  std::string rep = use_rep;
  if (rep.empty()) rep = d.obsm.count("X_pca") ? "X_pca" : "X";
  if (used) *used = rep;
  if (rep == "X") {
    if (d.pending_x) fail("internal: neighbors of X while X is still being copied; settle() the dataset first");
    if (d.X.empty()) fail_input(kWhere, "the dataset has no X and no obsm['X_pca']; run pca or load a matrix first");
    if (d.X.n_cols() > 50 && use_rep.empty())
      log::info(detail::concat("neighbors: no obsm['X_pca']; searching X directly (", d.X.n_cols(), " columns)"));
    return to_dense_f(d.X);
  }
  auto it = d.obsm.find(rep);
  if (it == d.obsm.end())
    fail_input(kWhere, "use_rep '", rep, "' is not in obsm; run pca first or name an existing obsm key (or X)");
  DenseF x = to_dense_f(it->second);
  if (x.n_rows != d.n_obs() && d.n_obs() > 0)
    fail_input(kWhere, "obsm['", rep, "'] has ", x.n_rows, " rows but the dataset has ", d.n_obs(), " cells");
  if (n_pcs) {
    if (*n_pcs < 1 || *n_pcs > x.n_cols)
      fail_input(kWhere, "n_pcs = ", *n_pcs, " is out of range: obsm['", rep, "'] has ", x.n_cols,
                 " columns; pass n_pcs between 1 and ", x.n_cols);
    if (*n_pcs < x.n_cols) {
      DenseF y(x.n_rows, *n_pcs);
      for (int64_t i = 0; i < x.n_rows; ++i)
        for (int64_t c = 0; c < *n_pcs; ++c) y(i, c) = x(i, c);
      x = std::move(y);
    }
  }
  return x;
}

NeighborsResult neighbors(const Context& ctx, Dataset& d, const NeighborsOptions& opt) {
  std::string used;
  const DenseF x = choose_representation(d, opt.use_rep, opt.n_pcs, &used);
  NeighborsResult res = neighbors(ctx, x, opt);
  res.use_rep = used;
  write_neighbors(d, res, opt);
  log::info(detail::concat("neighbors: ", opt.n_neighbors, " neighbours of ", x.n_rows, " cells in ", used, " (",
                           x.n_cols, " dims, ", res.algorithm, " ", opt.metric, " search)"));
  return res;
}

void write_neighbors(Dataset& d, const NeighborsResult& res, const NeighborsOptions& opt) {
  const bool plain = opt.key_added.empty() || opt.key_added == "neighbors";
  const std::string uns_key = plain ? "neighbors" : opt.key_added;
  const std::string conn_key = plain ? "connectivities" : opt.key_added + "_connectivities";
  const std::string dist_key = plain ? "distances" : opt.key_added + "_distances";
  // scanpy builds the distances matrix from a float64 array: written as float64.
  d.obsp[dist_key] = Matrix(res.distances, DType::f64);
  d.obsp[conn_key] = Matrix(res.connectivities, DType::f32);
  Dict params;
  params["n_neighbors"] = Value(opt.n_neighbors);
  params["method"] = Value(opt.method);
  params["random_state"] = Value(static_cast<int64_t>(opt.random_state));
  params["metric"] = Value(opt.metric);
  if (opt.n_pcs) params["n_pcs"] = Value(*opt.n_pcs);
  if (!opt.use_rep.empty()) params["use_rep"] = Value(opt.use_rep);
  Dict u;
  u["connectivities_key"] = Value(conn_key);
  u["distances_key"] = Value(dist_key);
  u["params"] = Value(std::move(params));
  d.uns[uns_key] = Value(std::move(u));
}

}  // namespace scurry
