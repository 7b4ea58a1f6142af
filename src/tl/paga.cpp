// scurry: PAGA (see paga.hpp).
#include "tl/paga.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "core/log.hpp"
#include "tl/groups.hpp"

namespace scurry {

std::vector<std::pair<int64_t, int64_t>> minimum_spanning_tree(const DenseD& w) {
  const int64_t k = w.n_rows;
  struct E {
    double w;
    int64_t i, j;
  };
  std::vector<E> es;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j)
      if (w(i, j) != 0) es.push_back({w(i, j), i, j});
  // scipy sorts the stored entries by weight with a stable sort; (i, j) comes before (j, i).
  std::stable_sort(es.begin(), es.end(), [](const E& a, const E& b) { return a.w < b.w; });
  std::vector<int64_t> parent(static_cast<size_t>(k));
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int64_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const E& e : es) {
    const int64_t a = find(e.i), b = find(e.j);
    if (a == b) continue;
    parent[a] = b;
    out.emplace_back(e.i, e.j);
  }
  return out;
}

PagaResult paga(const CsrF& knn, const std::vector<int32_t>& codes, int64_t k) {
  const int64_t n = knn.n_rows;
  if (static_cast<int64_t>(codes.size()) != n) fail("internal: paga codes and graph sizes differ");
  PagaResult r;
  r.sizes.assign(static_cast<size_t>(k), 0);
  for (int32_t c : codes) {
    if (c < 0 || c >= k) fail_input("paga", "a cell has no group (missing value in the groups column)");
    ++r.sizes[c];
  }
  std::vector<double> inner(static_cast<size_t>(k), 0.0);
  DenseD inter(k, k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = knn.indptr[i]; e < knn.indptr[i + 1]; ++e) {
      const int32_t a = codes[i], b = codes[knn.indices[e]];
      if (a == b) inner[a] += 1;
      else inter(a, b) += 1;
    }
  std::vector<double> es(static_cast<size_t>(k));
  for (int64_t a = 0; a < k; ++a) {
    es[a] = inner[a];
    for (int64_t b = 0; b < k; ++b) es[a] += inter(a, b);
  }
  r.connectivities = DenseD(k, k);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t b = 0; b < k; ++b) {
      const double v = inter(a, b) + inter(b, a);
      if (v == 0) continue;
      const double expected = (es[a] * static_cast<double>(r.sizes[b]) + es[b] * static_cast<double>(r.sizes[a])) /
                              static_cast<double>(n - 1);
      r.connectivities(a, b) = expected != 0 ? std::min(1.0, v / expected) : 1.0;
    }
  DenseD inv(k, k);
  for (size_t i = 0; i < inv.data.size(); ++i)
    inv.data[i] = r.connectivities.data[i] != 0 ? 1.0 / r.connectivities.data[i] : 0.0;
  r.connectivities_tree = DenseD(k, k);
  for (const auto& [i, j] : minimum_spanning_tree(inv)) r.connectivities_tree(i, j) = r.connectivities(i, j);
  return r;
}

namespace {

NumArray dense_array(const DenseD& m) {
  NumArray a;
  a.shape = {m.n_rows, m.n_cols};
  a.data = m.data;
  a.dtype = DType::f64;
  return a;
}

}  // namespace

PagaResult paga(const Context&, Dataset& d, const PagaOptions& opt) {
  if (opt.model != "v1.2") fail_input("paga", "model '", opt.model, "' is not supported; use v1.2");
  std::string key = opt.groups;
  if (key.empty()) {
    if (d.obs.has("leiden")) key = "leiden";
    else if (d.obs.has("louvain")) key = "louvain";
    else fail_input("paga", "no groups: run leiden first or pass groups (an obs column)");
  }
  const CellGroups g = cell_groups(d.obs, key, "paga");
  std::string dist_key = opt.neighbors_key == "neighbors" ? "distances" : opt.neighbors_key + "_distances";
  auto u = d.uns.find(opt.neighbors_key);
  if (u == d.uns.end()) fail_input("paga", "uns['", opt.neighbors_key, "'] is missing; run neighbors first");
  if (u->second.is_dict()) {
    auto dk = u->second.dict().find("distances_key");
    if (dk != u->second.dict().end() && std::holds_alternative<std::string>(dk->second.v))
      dist_key = std::get<std::string>(dk->second.v);
  }
  auto it = d.obsp.find(dist_key);
  if (it == d.obsp.end()) fail_input("paga", "obsp['", dist_key, "'] is missing; run neighbors first");
  CsrF knn = to_csr_f(it->second);
  // to_csr_f drops explicit zeros of dense input only; a CSR's stored entries are the edges.
  if (it->second.is_sparse()) {
    validate_csr(knn, "paga: obsp['" + dist_key + "']");
  }
  if (knn.n_rows != d.n_obs() || knn.n_cols != d.n_obs())
    fail_input("paga", "obsp['", dist_key, "'] is ", knn.n_rows, " x ", knn.n_cols, " but the dataset has ", d.n_obs(),
               " cells");
  PagaResult r = paga(knn, g.codes, static_cast<int64_t>(g.categories.size()));
  r.groups = key;
  r.categories = g.categories;
  Dict p;
  p["connectivities"] = Value(dense_array(r.connectivities));
  p["connectivities_tree"] = Value(dense_array(r.connectivities_tree));
  p["groups"] = Value(key);
  d.uns["paga"] = Value(std::move(p));
  NumArray sz;
  sz.shape = {static_cast<int64_t>(r.sizes.size())};
  for (int64_t s : r.sizes) sz.data.push_back(static_cast<double>(s));
  sz.dtype = DType::i64;
  d.uns[key + "_sizes"] = Value(std::move(sz));
  log::info(detail::concat("paga: ", r.categories.size(), " groups of '", key, "'"));
  return r;
}

}  // namespace scurry
