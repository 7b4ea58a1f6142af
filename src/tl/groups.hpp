// scurry: the groups of an obs column as the graph tools read them (paga, dendrogram,
// embedding_density): categories and per-cell codes (-1: missing), from a categorical column or
// a string column (categories sorted, as pandas makes them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/table.hpp"

namespace scurry {

struct CellGroups {
  std::vector<std::string> categories;
  std::vector<int32_t> codes;
};

// InputError naming `step` and the column when it is absent or not categorical / strings.
CellGroups cell_groups(const Table& obs, const std::string& key, const std::string& step);

}  // namespace scurry
