// scurry: cell_groups (see groups.hpp).
#include "tl/groups.hpp"

#include <algorithm>
#include <set>

#include "core/error.hpp"

namespace scurry {

CellGroups cell_groups(const Table& obs, const std::string& key, const std::string& step) {
  if (!obs.has(key)) {
    std::string names;
    for (const auto& n : obs.names()) names += (names.empty() ? "" : ", ") + n;
    fail_input(step, "obs column '", key, "' is missing (columns: ", names, ")");
  }
  const Column& c = obs.at(key);
  CellGroups g;
  if (const auto* cat = std::get_if<CategoricalColumn>(&c.c)) {
    g.categories = cat->categories;
    g.codes = cat->codes;
  } else if (const auto* s = std::get_if<StringColumn>(&c.c)) {
    std::set<std::string> u(s->values.begin(), s->values.end());
    g.categories.assign(u.begin(), u.end());
    g.codes.resize(s->values.size());
    for (size_t i = 0; i < s->values.size(); ++i)
      g.codes[i] = static_cast<int32_t>(std::lower_bound(g.categories.begin(), g.categories.end(), s->values[i]) -
                                        g.categories.begin());
  } else {
    fail_input(step, "obs column '", key, "' is ", c.kind(), "; expected a categorical (or string) column of groups");
  }
  return g;
}

}  // namespace scurry
