// scurry: the dendrogram of groups behind scanpy's dotplots, scanpy 1.9.6's
// `sc.tl.dendrogram(groupby, n_pcs, use_rep, cor_method='pearson', linkage_method='complete')`:
// the per-group mean of the representation (X_pca, all its columns unless n_pcs), the Pearson
// correlation between the groups' means, and hierarchical clustering (scipy.cluster.hierarchy
// linkage) of the distances 1 - correlation; the leaf order is scipy's dendrogram's (in-order from
// the root, Z[:, 0] before Z[:, 1]).
//
// linkage: single, complete, average, weighted (Lance & Williams 1967 updates), merges found as the
// closest pair of active clusters (O(k^3), k = groups); the rows sorted stably by distance and the
// cluster ids relabelled as scipy does (smaller id first; new clusters k, k + 1, ...).
//
// Written: uns['dendrogram_<groupby>'] = {linkage (k-1 x 4), groupby, use_rep, cor_method,
// linkage_method, categories_ordered, categories_idx_ordered, correlation_matrix, dendrogram_info:
// {icoord, dcoord, ivl, leaves}}.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct DendrogramOptions {
  std::string groupby;
  std::optional<int64_t> n_pcs;
  std::string use_rep;                  // "" = X_pca (scanpy's None)
  std::string cor_method = "pearson";   // pearson | spearman
  std::string linkage_method = "complete";
  std::string key_added;                // "" = dendrogram_<groupby>
};

struct DendrogramResult {
  DenseD linkage;                       // (k - 1) x 4: id a, id b, distance, size
  std::vector<int64_t> leaves;          // categories_idx_ordered
  std::vector<std::string> ivl;         // categories_ordered
  DenseD correlation;                   // k x k
  DenseD icoord, dcoord;                // (k - 1) x 4 each, scipy's dendrogram coordinates
};

// scipy.cluster.hierarchy.linkage of a symmetric k x k distance matrix.
DenseD hierarchical_linkage(const DenseD& dist, const std::string& method);
// scipy.cluster.hierarchy.dendrogram(Z, no_plot=True): leaves and coordinates.
void dendrogram_order(const DenseD& Z, DendrogramResult& out);

DendrogramResult dendrogram(const Context& ctx, Dataset& d, const DendrogramOptions& opt);

}  // namespace scurry
