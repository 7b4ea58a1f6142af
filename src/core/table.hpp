// scurry: typed tables (obs, var): an index of row names and ordered named columns, each numeric,
// bool, string or categorical, as in AnnData's dataframes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.hpp"

namespace scurry {

struct NumericColumn {
  std::vector<double> values;  // integers are held exactly up to 2^53
  DType dtype = DType::f64;    // type on disk
};
struct BoolColumn {
  std::vector<uint8_t> values;  // 0 or 1
};
struct StringColumn {
  std::vector<std::string> values;
};
struct CategoricalColumn {
  std::vector<std::string> categories;
  std::vector<int32_t> codes;  // -1 = missing
  bool ordered = false;
};

struct Column {
  std::variant<NumericColumn, BoolColumn, StringColumn, CategoricalColumn> c;

  Column() = default;
  Column(NumericColumn x) : c(std::move(x)) {}
  Column(BoolColumn x) : c(std::move(x)) {}
  Column(StringColumn x) : c(std::move(x)) {}
  Column(CategoricalColumn x) : c(std::move(x)) {}
  // Convenience constructors.
  static Column numeric(std::vector<double> v, DType t = DType::f64) { return NumericColumn{std::move(v), t}; }
  static Column boolean(std::vector<uint8_t> v) { return BoolColumn{std::move(v)}; }
  static Column strings(std::vector<std::string> v) { return StringColumn{std::move(v)}; }

  int64_t size() const;
  const char* kind() const;  // "numeric", "bool", "string", "categorical"
  Column take(const std::vector<int64_t>& rows) const;  // rows in the new order
};

class Table {
 public:
  std::vector<std::string> index;      // row names
  std::string index_name = "_index";   // anndata's _index_name attribute (column name in the file)

  int64_t n_rows() const { return index.empty() ? unnamed_ : static_cast<int64_t>(index.size()); }
  // n rows without names (index empty): the Python package's cells when a step needs only their
  // number (building 1.3M empty names cost 0.15 s a step). take() keeps a table unnamed; a writer
  // refuses one (InputError naming the table). Assigning names to `index` makes it named again.
  void set_unnamed_rows(int64_t n) { index.clear(); unnamed_ = n; }
  bool unnamed() const { return index.empty() && unnamed_ > 0; }
  bool has(const std::string& name) const { return cols_.count(name) != 0; }
  // Adds or replaces; the column must have n_rows() entries (throws scurry::Error otherwise).
  void set(const std::string& name, Column col);
  void remove(const std::string& name);
  const Column& at(const std::string& name) const;  // throws InputError naming the column if absent
  Column& at(const std::string& name);
  const std::vector<std::string>& names() const { return order_; }  // insertion order
  // Typed access; throws InputError if absent or of another kind.
  const std::vector<double>& numeric(const std::string& name) const;
  const std::vector<uint8_t>& boolean(const std::string& name) const;

  Table take(const std::vector<int64_t>& rows) const;  // rows (and index) in the new order

 private:
  std::vector<std::string> order_;
  std::map<std::string, Column> cols_;
  int64_t unnamed_ = 0;  // n_rows() while index is empty
};

}  // namespace scurry
