// scurry: nested values for `uns`: dicts, strings, scalars and numeric arrays, as anndata stores them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.hpp"

namespace scurry {

struct NumArray {
  std::vector<int64_t> shape;  // row-major; {n} for 1-D
  std::vector<double> data;
  DType dtype = DType::f64;    // type on disk (bool arrays: DType::boolean)
};

struct Value;
using Dict = std::map<std::string, Value>;

struct Value {
  std::variant<std::monostate, Dict, std::string, std::vector<std::string>, double, int64_t, bool, NumArray> v;

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

  bool is_dict() const { return std::holds_alternative<Dict>(v); }
  Dict& dict() { return std::get<Dict>(v); }
  const Dict& dict() const { return std::get<Dict>(v); }
};

}  // namespace scurry
