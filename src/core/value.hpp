// scurry: nested values for `uns`: dicts, strings, scalars, numeric arrays, record (structured)
// arrays and dataframes, as anndata stores them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.hpp"
#include "core/table.hpp"

namespace scurry {

struct NumArray {
  std::vector<int64_t> shape;  // row-major; {n} for 1-D
  std::vector<double> data;
  DType dtype = DType::f64;    // type on disk (bool arrays: DType::boolean)
};

// A numpy structured (record) array of n rows, one named field a column: what scanpy stores in
// uns['rank_genes_groups']['names'|'scores'|...] (anndata's "rec-array" encoding: an HDF5 compound
// dataset, a zarr v2 structured dtype). A field holds strings (dtype 'O'/'U', written as
// variable-length UTF-8 in HDF5) or numbers (`dtype` on disk: float32, float64, int...).
struct RecField {
  std::string name;
  bool is_string = false;
  DType dtype = DType::f64;          // numeric fields
  std::vector<double> num;           // numeric fields: n values
  std::vector<std::string> str;      // string fields: n values
};
struct RecArray {
  int64_t n = 0;
  std::vector<RecField> fields;
  const RecField* field(const std::string& name) const {
    for (const auto& f : fields)
      if (f.name == name) return &f;
    return nullptr;
  }
};

struct Value;
using Dict = std::map<std::string, Value>;

struct Value {
  std::variant<std::monostate, Dict, std::string, std::vector<std::string>, double, int64_t, bool, NumArray, RecArray, Table> v;

  Value() = default;
  Value(Dict d) : v(std::move(d)) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(std::vector<std::string> s) : v(std::move(s)) {}
  Value(double x) : v(x) {}
  Value(int64_t x) : v(x) {}
  Value(int x) : v(static_cast<int64_t>(x)) {}
  Value(bool x) : v(x) {}
  Value(NumArray a) : v(std::move(a)) {}
  Value(RecArray a) : v(std::move(a)) {}
  Value(Table t) : v(std::move(t)) {}  // a dataframe in uns (anndata's "dataframe" encoding)

  bool is_dict() const { return std::holds_alternative<Dict>(v); }
  Dict& dict() { return std::get<Dict>(v); }
  const Dict& dict() const { return std::get<Dict>(v); }
};

}  // namespace scurry
