#include "pp/obs_groups.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"

namespace scurry {

std::string list_columns(const Table& t) {
  std::string s;
  int k = 0;
  for (const auto& n : t.names()) {
    if (k == 20) return s + ", ...";
    s += (k++ ? ", " : "") + n;
  }
  return s.empty() ? "none" : s;
}

namespace {
// Drops groups with no cell and renumbers, keeping the order.
ObsGroups compact(std::vector<std::string> names, const std::vector<int32_t>& codes) {
  std::vector<int64_t> count(names.size(), 0);
  for (int32_t c : codes) ++count[static_cast<size_t>(c)];
  std::vector<int32_t> remap(names.size(), -1);
  ObsGroups g;
  for (size_t k = 0; k < names.size(); ++k)
    if (count[k] > 0) {
      remap[k] = g.n();
      g.names.push_back(names[k]);
      g.sizes.push_back(count[k]);
    }
  g.codes.resize(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) g.codes[i] = remap[static_cast<size_t>(codes[i])];
  return g;
}
}  // namespace

ObsGroups obs_groups(const Table& obs, const std::string& key, const std::string& where) {
  if (!obs.has(key)) fail_input(where, "obs has no column '", key, "' (obs columns: ", list_columns(obs), ")");
  const Column& col = obs.at(key);
  if (auto* c = std::get_if<CategoricalColumn>(&col.c)) {
    for (int32_t v : c->codes)
      if (v < 0 || v >= static_cast<int32_t>(c->categories.size()))
        fail_input(where, "obs column '", key, "' has missing values; every cell needs a group");
    return compact(c->categories, c->codes);
  }
  if (auto* s = std::get_if<StringColumn>(&col.c)) {
    std::vector<std::string> names = s->values;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::vector<int32_t> codes(s->values.size());
    for (size_t i = 0; i < codes.size(); ++i)
      codes[i] = static_cast<int32_t>(std::lower_bound(names.begin(), names.end(), s->values[i]) - names.begin());
    return compact(names, codes);
  }
  if (auto* b = std::get_if<BoolColumn>(&col.c)) {
    std::vector<int32_t> codes(b->values.begin(), b->values.end());
    return compact({"False", "True"}, codes);
  }
  const auto& v = std::get<NumericColumn>(col.c).values;
  std::map<double, int32_t> distinct;
  for (double x : v) {
    if (!std::isfinite(x) || x != std::floor(x))
      fail_input(where, "obs column '", key, "' is numeric with non-integer or missing values; a batch key must be categorical");
    distinct.emplace(x, 0);
  }
  std::vector<std::string> names;
  for (auto& [x, k] : distinct) {
    k = static_cast<int32_t>(names.size());
    names.push_back(std::to_string(static_cast<long long>(x)));
  }
  std::vector<int32_t> codes(v.size());
  for (size_t i = 0; i < v.size(); ++i) codes[i] = distinct[v[i]];
  return compact(names, codes);
}

}  // namespace scurry
