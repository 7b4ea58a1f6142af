// scurry: partition-based graph abstraction (Wolf et al. 2019, Genome Biology 20:59), scanpy
// 1.9.6's `sc.tl.paga(groups, model='v1.2')`.
//
// The kNN graph's directed edges (the stored entries of obsp['distances'], each weighing 1) are
// counted within and between the groups: es_i = edges leaving cells of group i (inner ones
// included), inter_ij = edges i -> j plus j -> i; connectivities_ij = min(1, inter_ij / ((es_i n_j
// + es_j n_i) / (n - 1))) where inter_ij > 0. connectivities_tree: the minimum spanning tree of
// 1 / connectivities (Kruskal, ties in row-major order as scipy's minimum_spanning_tree takes
// them), each tree edge (i, j), i < j, holding connectivities_ij.
//
// Written: uns['paga'] = {connectivities, connectivities_tree, groups} and uns[<groups>_sizes].
// Difference from scanpy: the two matrices are written dense (scanpy stores scipy CSR matrices;
// np.asarray / .toarray() readers see the same values).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct PagaOptions {
  std::string groups;                        // obs column; "" = leiden, else louvain
  std::string model = "v1.2";                // only v1.2
  std::string neighbors_key = "neighbors";
};

struct PagaResult {
  std::string groups;
  std::vector<std::string> categories;
  DenseD connectivities;       // k x k, symmetric
  DenseD connectivities_tree;  // k x k, upper triangle
  std::vector<int64_t> sizes;  // cells a group
};

// Low level: `knn` the directed kNN pattern (n x n; values ignored), codes in [0, k).
PagaResult paga(const CsrF& knn, const std::vector<int32_t>& codes, int64_t n_groups);
PagaResult paga(const Context& ctx, Dataset& d, const PagaOptions& opt);

// The minimum spanning tree of a symmetric weight matrix (0 = no edge), as scipy's
// minimum_spanning_tree on it: the tree's edges (i, j), i < j.
std::vector<std::pair<int64_t, int64_t>> minimum_spanning_tree(const DenseD& w);

}  // namespace scurry
