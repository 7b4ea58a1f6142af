// scurry: dendrogram (see dendrogram.hpp).
#include "tl/dendrogram.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/error.hpp"
#include "core/log.hpp"
#include "graph/neighbors.hpp"
#include "tl/groups.hpp"

namespace scurry {

DenseD hierarchical_linkage(const DenseD& dist, const std::string& method) {
  const int64_t k = dist.n_rows;
  if (method != "single" && method != "complete" && method != "average" && method != "weighted")
    fail_input("dendrogram", "linkage_method '", method, "' is not supported; use single, complete, average or weighted");
  DenseD D = dist;
  std::vector<int64_t> size(static_cast<size_t>(k), 1), id(static_cast<size_t>(k));
  std::iota(id.begin(), id.end(), 0);
  std::vector<bool> active(static_cast<size_t>(k), true);
  struct Merge {
    int64_t a, b;
    double d;
  };
  std::vector<Merge> merges;
  for (int64_t step = 0; step + 1 < k; ++step) {
    double best = std::numeric_limits<double>::infinity();
    int64_t bi = -1, bj = -1;
    for (int64_t i = 0; i < k; ++i) {
      if (!active[i]) continue;
      for (int64_t j = i + 1; j < k; ++j)
        if (active[j] && D(i, j) < best) best = D(i, j), bi = i, bj = j;
    }
    if (bi < 0) fail_input("dendrogram", "the distances between groups are not finite (a group without cells?)");
    merges.push_back({bi, bj, best});
    // Lance-Williams update into slot bi.
    for (int64_t m = 0; m < k; ++m) {
      if (!active[m] || m == bi || m == bj) continue;
      const double di = D(bi, m), dj = D(bj, m);
      double v = 0;
      if (method == "single") v = std::min(di, dj);
      else if (method == "complete") v = std::max(di, dj);
      else if (method == "average")
        v = (static_cast<double>(size[bi]) * di + static_cast<double>(size[bj]) * dj) /
            static_cast<double>(size[bi] + size[bj]);
      else v = 0.5 * (di + dj);
      D(bi, m) = D(m, bi) = v;
    }
    size[bi] += size[bj];
    active[bj] = false;
  }
  // Sort by distance (stable) and label as scipy's `label`: union-find over the original points.
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) { return x.d < y.d; });
  std::vector<int64_t> parent(static_cast<size_t>(2 * k - 1));
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<int64_t> csize(static_cast<size_t>(2 * k - 1), 1);
  auto find = [&](int64_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  DenseD Z(k - 1, 4);
  for (int64_t s = 0; s + 1 < k; ++s) {
    int64_t a = find(merges[s].a), b = find(merges[s].b);
    if (a > b) std::swap(a, b);
    const int64_t nid = k + s;
    parent[a] = parent[b] = nid;
    csize[nid] = csize[a] + csize[b];
    Z(s, 0) = static_cast<double>(a);
    Z(s, 1) = static_cast<double>(b);
    Z(s, 2) = merges[s].d;
    Z(s, 3) = static_cast<double>(csize[nid]);
  }
  return Z;
}

void dendrogram_order(const DenseD& Z, DendrogramResult& out) {
  const int64_t k = Z.n_rows + 1;
  out.leaves.clear();
  std::vector<std::array<double, 4>> ic, dc;
  // Returns (x centre, height) of node; leaves at 5, 15, 25, ... in visiting order.
  std::function<std::pair<double, double>(int64_t)> visit = [&](int64_t node) -> std::pair<double, double> {
    if (node < k) {
      const double x = 5.0 + 10.0 * static_cast<double>(out.leaves.size());
      out.leaves.push_back(node);
      return {x, 0.0};
    }
    const int64_t r = node - k;
    const auto [xa, ha] = visit(static_cast<int64_t>(Z(r, 0)));
    const auto [xb, hb] = visit(static_cast<int64_t>(Z(r, 1)));
    const double h = Z(r, 2);
    ic.push_back({xa, xa, xb, xb});
    dc.push_back({ha, h, h, hb});
    return {0.5 * (xa + xb), h};
  };
  if (k == 1) out.leaves = {0};
  else visit(2 * k - 2);
  out.icoord = DenseD(static_cast<int64_t>(ic.size()), 4);
  out.dcoord = DenseD(static_cast<int64_t>(dc.size()), 4);
  for (size_t i = 0; i < ic.size(); ++i)
    for (int c = 0; c < 4; ++c) out.icoord(static_cast<int64_t>(i), c) = ic[i][c], out.dcoord(static_cast<int64_t>(i), c) = dc[i][c];
}

namespace {

std::vector<double> ranks(const std::vector<double>& v) {  // average ranks (pandas' spearman)
  std::vector<size_t> o(v.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < o.size();) {
    size_t j = i;
    while (j + 1 < o.size() && v[o[j + 1]] == v[o[i]]) ++j;
    for (size_t t = i; t <= j; ++t) r[o[t]] = 0.5 * static_cast<double>(i + j) + 1.0;
    i = j + 1;
  }
  return r;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = a.size();
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; ++i) ma += a[i], mb += b[i];
  ma /= static_cast<double>(n);
  mb /= static_cast<double>(n);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

NumArray to_array(const DenseD& m) {
  NumArray a;
  a.shape = {m.n_rows, m.n_cols};
  a.data = m.data;
  return a;
}

}  // namespace

DendrogramResult dendrogram(const Context&, Dataset& d, const DendrogramOptions& opt) {
  if (opt.groupby.empty()) fail_input("dendrogram", "groupby is required (an obs column of groups)");
  if (opt.cor_method != "pearson" && opt.cor_method != "spearman")
    fail_input("dendrogram", "cor_method '", opt.cor_method, "' is not supported; use pearson or spearman");
  const CellGroups g = cell_groups(d.obs, opt.groupby, "dendrogram");
  std::string used;
  const DenseF x = choose_representation(d, opt.use_rep, opt.n_pcs, &used);
  const int64_t k = static_cast<int64_t>(g.categories.size()), dims = x.n_cols;
  if (k < 2) fail_input("dendrogram", "groupby '", opt.groupby, "' has ", k, " categories; a dendrogram needs 2 or more");
  std::vector<std::vector<double>> mean(static_cast<size_t>(k), std::vector<double>(static_cast<size_t>(dims), 0.0));
  std::vector<int64_t> cnt(static_cast<size_t>(k), 0);
  for (int64_t i = 0; i < x.n_rows; ++i) {
    const int32_t c = g.codes[i];
    if (c < 0) continue;
    ++cnt[c];
    for (int64_t j = 0; j < dims; ++j) mean[c][j] += x(i, j);
  }
  for (int64_t c = 0; c < k; ++c) {
    if (cnt[c] == 0) fail_input("dendrogram", "category '", g.categories[c], "' of '", opt.groupby, "' has no cells");
    for (auto& v : mean[c]) v /= static_cast<double>(cnt[c]);
    if (opt.cor_method == "spearman") mean[c] = ranks(mean[c]);
  }
  DendrogramResult r;
  r.correlation = DenseD(k, k);
  DenseD dist(k, k);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t b = 0; b < k; ++b) {
      r.correlation(a, b) = a == b ? 1.0 : pearson(mean[a], mean[b]);
      dist(a, b) = a == b ? 0.0 : 1.0 - r.correlation(a, b);
    }
  r.linkage = hierarchical_linkage(dist, opt.linkage_method);
  dendrogram_order(r.linkage, r);
  for (int64_t l : r.leaves) r.ivl.push_back(g.categories[l]);
  Dict info;
  info["icoord"] = Value(to_array(r.icoord));
  info["dcoord"] = Value(to_array(r.dcoord));
  info["ivl"] = Value(r.ivl);
  NumArray leaves;
  leaves.shape = {k};
  for (int64_t l : r.leaves) leaves.data.push_back(static_cast<double>(l));
  leaves.dtype = DType::i64;
  info["leaves"] = Value(leaves);
  Dict out;
  out["linkage"] = Value(to_array(r.linkage));
  out["groupby"] = Value(std::vector<std::string>{opt.groupby});
  if (!opt.use_rep.empty()) out["use_rep"] = Value(opt.use_rep);
  out["cor_method"] = Value(opt.cor_method);
  out["linkage_method"] = Value(opt.linkage_method);
  out["categories_ordered"] = Value(r.ivl);
  out["categories_idx_ordered"] = Value(leaves);
  out["dendrogram_info"] = Value(std::move(info));
  out["correlation_matrix"] = Value(to_array(r.correlation));
  const std::string key = opt.key_added.empty() ? "dendrogram_" + opt.groupby : opt.key_added;
  d.uns[key] = Value(std::move(out));
  log::info(detail::concat("dendrogram: ", k, " groups of '", opt.groupby, "' in ", used, " -> uns['", key, "']"));
  return r;
}

}  // namespace scurry
