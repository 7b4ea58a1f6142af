// scurry: k-means of cells (see tl/kmeans.hpp).
#include "tl/kmeans.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "core/log.hpp"
#include "graph/neighbors.hpp"
#include "nmf/kmeans.hpp"

namespace scurry {

KmeansClusterResult kmeans_cluster(const Context& ctx, Dataset& d, const KmeansClusterOptions& opt) {
  std::string used;
  std::optional<int64_t> n_pcs = opt.n_pcs;
  {
    std::string rep = opt.use_rep.empty() ? (d.obsm.count("X_pca") ? "X_pca" : "X") : opt.use_rep;
    if (rep != "X" && d.obsm.count(rep) && n_pcs && *n_pcs > d.obsm.at(rep).n_cols()) n_pcs = d.obsm.at(rep).n_cols();
    if (rep == "X") n_pcs.reset();
  }
  const DenseF x = choose_representation(d, opt.use_rep, n_pcs, &used);
  if (opt.n_clusters < 1 || opt.n_clusters > x.n_rows)
    fail_input("kmeans", "n_clusters = ", opt.n_clusters, " must be between 1 and the number of cells (", x.n_rows, ")");
  if (opt.n_init < 1) fail_input("kmeans", "n_init must be at least 1");
  DenseD X(x.n_rows, x.n_cols);
  for (size_t i = 0; i < x.data.size(); ++i) X.data[i] = x.data[i];
  KMeansOptions ko;
  ko.n_init = opt.n_init;
  ko.max_iter = opt.max_iter;
  ko.tol = opt.tol;
  ko.seed = opt.random_state;
  const KMeansResult km = kmeans(ctx, X, opt.n_clusters, ko);
  // Renumber by decreasing size, ties by first cell.
  const int k = opt.n_clusters;
  std::vector<int64_t> size(static_cast<size_t>(k), 0), first(static_cast<size_t>(k), x.n_rows);
  for (int64_t i = 0; i < x.n_rows; ++i) {
    ++size[km.labels[i]];
    first[km.labels[i]] = std::min(first[km.labels[i]], i);
  }
  std::vector<int> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return size[a] != size[b] ? size[a] > size[b] : first[a] < first[b]; });
  std::vector<int32_t> relabel(static_cast<size_t>(k));
  for (int r = 0; r < k; ++r) relabel[order[r]] = r;
  KmeansClusterResult res;
  res.inertia = km.inertia;
  CategoricalColumn col;
  int used_k = 0;
  for (int r = 0; r < k; ++r)
    if (size[order[r]] > 0) ++used_k;
  for (int r = 0; r < used_k; ++r) col.categories.push_back(std::to_string(r));
  for (int64_t i = 0; i < x.n_rows; ++i) {
    res.labels.push_back(relabel[km.labels[i]]);
    col.codes.push_back(relabel[km.labels[i]]);
  }
  d.obs.set(opt.key_added, Column(std::move(col)));
  Dict params;
  params["n_clusters"] = static_cast<int64_t>(k);
  params["random_state"] = static_cast<int64_t>(opt.random_state);
  params["use_rep"] = used;
  Dict u;
  u["params"] = Value(std::move(params));
  d.uns[opt.key_added] = Value(std::move(u));
  log::info(detail::concat("kmeans: ", k, " clusters of ", x.n_rows, " cells in ", used, ", inertia ", km.inertia));
  return res;
}

}  // namespace scurry
