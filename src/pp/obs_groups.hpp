// scurry: an obs column read as groups (batches, categories) the way pandas groups it: the
// categories of a categorical column (unused ones dropped, as groupby(observed=True)), the sorted
// unique values of a string column (anndata's sanitize_anndata makes it a categorical with sorted
// categories), False/True of a bool column. Used by combat, regress_out, harmony and scrublet.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/table.hpp"

namespace scurry {

struct ObsGroups {
  std::vector<std::string> names;  // group names, in pandas' order
  std::vector<int32_t> codes;      // per cell, in [0, names.size())
  std::vector<int64_t> sizes;      // cells per group
  int32_t n() const { return static_cast<int32_t>(names.size()); }
};

// Throws InputError "<where>: obs has no column 'key' (columns: ...)" when absent, and names the
// column when it is numeric with non-integer values or has missing values. A numeric column of
// integers is grouped by its sorted distinct values (pandas would make it categorical only on
// request; harmonypy and scrublet accept it).
ObsGroups obs_groups(const Table& obs, const std::string& key, const std::string& where);

// "a, b, c" (at most 20 names, then "...") for error messages.
std::string list_columns(const Table& t);

}  // namespace scurry
