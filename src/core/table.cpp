#include "core/table.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scurry {

int64_t Column::size() const {
  return std::visit([](const auto& x) -> int64_t {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, CategoricalColumn>) return static_cast<int64_t>(x.codes.size());
    else return static_cast<int64_t>(x.values.size());
  }, c);
}

const char* Column::kind() const {
  static const char* names[] = {"numeric", "bool", "string", "categorical"};
  return names[c.index()];
}

namespace {
template <class V>
V take_vec(const V& v, const std::vector<int64_t>& rows) {
  V out;
  out.reserve(rows.size());
  for (int64_t r : rows) out.push_back(v[static_cast<size_t>(r)]);
  return out;
}
}  // namespace

Column Column::take(const std::vector<int64_t>& rows) const {
  return std::visit([&](const auto& x) -> Column {
    using X = std::decay_t<decltype(x)>;
    X y = x;
    if constexpr (std::is_same_v<X, CategoricalColumn>) y.codes = take_vec(x.codes, rows);
    else y.values = take_vec(x.values, rows);
    return Column(std::move(y));
  }, c);
}

void Table::set(const std::string& name, Column col) {
  if (col.size() != n_rows())
    fail("internal: column '", name, "' has ", col.size(), " entries but the table has ", n_rows(), " rows");
  if (!has(name)) order_.push_back(name);
  cols_[name] = std::move(col);
}

void Table::remove(const std::string& name) {
  cols_.erase(name);
  order_.erase(std::remove(order_.begin(), order_.end(), name), order_.end());
}

const Column& Table::at(const std::string& name) const {
  auto it = cols_.find(name);
  if (it == cols_.end()) throw InputError("no column named '" + name + "'");
  return it->second;
}
Column& Table::at(const std::string& name) {
  auto it = cols_.find(name);
  if (it == cols_.end()) throw InputError("no column named '" + name + "'");
  return it->second;
}

const std::vector<double>& Table::numeric(const std::string& name) const {
  const Column& col = at(name);
  if (auto* p = std::get_if<NumericColumn>(&col.c)) return p->values;
  throw InputError(detail::concat("column '", name, "' is ", col.kind(), ", not numeric"));
}
const std::vector<uint8_t>& Table::boolean(const std::string& name) const {
  const Column& col = at(name);
  if (auto* p = std::get_if<BoolColumn>(&col.c)) return p->values;
  throw InputError(detail::concat("column '", name, "' is ", col.kind(), ", not bool"));
}

Table Table::take(const std::vector<int64_t>& rows) const {
  Table t;
  t.index_name = index_name;
  if (unnamed()) t.set_unnamed_rows(static_cast<int64_t>(rows.size()));
  else t.index = take_vec(index, rows);
  for (const auto& n : order_) t.set(n, cols_.at(n).take(rows));
  return t;
}

}  // namespace scurry
