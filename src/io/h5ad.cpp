// scurry: AnnData .h5ad reading (anndata 0.7 .. 0.11 encodings) and writing (anndata 0.10/0.11's
// current encodings), the file summary for `scurry info`, and the lazy row reader.
#include "io/h5ad.hpp"
#include "io/bad_count.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output.hpp"
#include "io/hdf5.hpp"

namespace scurry {

namespace {

using H5Data = h5::Dataset;
using h5::Group;
using h5::Kind;
using h5::Node;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::string encoding_of(const Node& n) { return n.attr_string_or("encoding-type", ""); }

// The length of dataframe `df` of f (obs, var): its index dataset's, without reading it.
int64_t dataframe_length(const h5::File& f, const std::string& path, const std::string& df) {
  if (f.child_kind(df) != Kind::group) fail_input(path, "missing '", df, "' dataframe: not an AnnData file?");
  Group g = f.group(df);
  const std::string idx = g.attr_string_or("_index", "_index");
  if (g.child_kind(idx) != Kind::dataset) fail_input(path, df, ": the index dataset '", idx, "' is missing");
  return g.dataset(idx).size();
}

// Slot name for messages: "/obs/leiden" -> "obs/leiden".
std::string slot_of(const Node& n) {
  const std::string& p = n.path();
  return (!p.empty() && p[0] == '/') ? p.substr(1) : p;
}

std::string num_to_string(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// ---- matrices -------------------------------------------------------------------------------------

// `tap` (float32 CSR only): X's arrays copied elsewhere as they are read (core/array_tap.hpp).
template <class T>
Csr<T> read_compressed(const Group& g, int64_t major, int64_t minor, const std::string& where, const CsrTap& tap = {}) {
  H5Data data = g.dataset("data"), indices = g.dataset("indices"), indptr = g.dataset("indptr");
  if (data.rank() != 1 || indices.rank() != 1 || indptr.rank() != 1)
    fail_input(g.file(), slot_of(g), ": data, indices and indptr must be 1-D arrays");
  Csr<T> m;
  m.n_rows = major;
  m.n_cols = minor;
  m.indptr = indptr.read<int64_t>(tap.indptr);
  if (static_cast<int64_t>(m.indptr.size()) != major + 1)
    fail_input(g.file(), slot_of(g), ": indptr has length ", m.indptr.size(), " but the shape needs ", major + 1,
               " (wrong indptr length)");
  if (data.size() != indices.size())
    fail_input(g.file(), slot_of(g), ": data (", data.size(), ") and indices (", indices.size(),
               ") differ in length");
  // Indices beyond int32 saturate in HDF5's conversion and are then caught as out of range.
  m.indices = indices.read<int32_t>(tap.indices);
  m.data = data.read<T>(tap.data);
  validate_csr(m, where);
  return m;
}

// A sparse matrix group (csr_matrix / csc_matrix, or old h5sparse_format).
Matrix read_sparse(const Group& g, const std::string& enc, const CsrTap& tap = {}) {
  const std::string& path = g.file();
  const bool csc = enc == "csc_matrix" || enc == "csc";
  std::vector<int64_t> shape;
  if (g.has_attr("shape")) shape = g.attr_ints("shape");
  else if (g.has_attr("h5sparse_shape")) shape = g.attr_ints("h5sparse_shape");
  else fail_input(path, slot_of(g), ": sparse matrix without a 'shape' attribute");
  if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0)
    fail_input(path, slot_of(g), ": sparse matrix 'shape' attribute must hold two non-negative sizes");
  const int64_t rows = shape[0], cols = shape[1];
  if ((csc ? rows : cols) > kInt32Max)
    fail_input(path, slot_of(g), ": ", rows, "x", cols, " has too many ", csc ? "rows" : "columns",
               " for 32-bit indices (at most 2^31-1)");
  const std::string where = path + ": " + slot_of(g);
  const DType dt = g.dataset("data").dtype();
  auto finish = [&](auto m) -> Matrix {
    using C = decltype(m);
    if (csc) {
      C t = transpose(m);
      return Matrix(std::move(t), dt);
    }
    return Matrix(std::move(m), dt);
  };
  if (dt == DType::f64)
    return finish(read_compressed<double>(g, csc ? cols : rows, csc ? rows : cols, where));
  return finish(read_compressed<float>(g, csc ? cols : rows, csc ? rows : cols, where, csc ? CsrTap{} : tap));
}

Matrix read_dense(const H5Data& d) {
  auto sh = d.shape();
  if (sh.size() == 1) sh.push_back(1);  // 1-D arrays in obsm/varm: one column
  if (sh.size() != 2) fail_input(d.file(), slot_of(d), ": dense matrix must be 2-D, found ", sh.size(), " dimensions");
  const DType dt = d.dtype();
  if (dt == DType::f64) {
    DenseD m;
    m.n_rows = sh[0];
    m.n_cols = sh[1];
    m.data = d.read<double>();
    return Matrix(std::move(m), dt);
  }
  DenseF m;
  m.n_rows = sh[0];
  m.n_cols = sh[1];
  m.data = d.read<float>();
  return Matrix(std::move(m), dt);
}

bool is_sparse_encoding(const std::string& e) {
  return e == "csr_matrix" || e == "csc_matrix" || e == "csr" || e == "csc";
}

// A matrix element (dataset or sparse group). `required`: unknown encodings are errors (X) rather
// than skipped with a warning (obsm entries, ...).
std::optional<Matrix> read_matrix(const Group& parent, const std::string& name, bool required, const CsrTap& tap = {}) {
  Node n = parent.open_child(name);
  if (n.kind() == Kind::dataset) {
    H5Data d = std::move(n).as_dataset();
    const std::string enc = encoding_of(d);
    if (!enc.empty() && enc != "array") {
      if (required)
        fail_input(d.file(), slot_of(d), ": unknown encoding-type '", enc, "' for a matrix (expected array, ",
                   "csr_matrix or csc_matrix)");
      log::warn(d.file() + ": skipping " + slot_of(d) + " (encoding '" + enc + "' is not a matrix)");
      return std::nullopt;
    }
    if (d.type().is_string) {
      if (required) fail_input(d.file(), slot_of(d), ": holds strings, expected a numeric matrix");
      log::warn(d.file() + ": skipping " + slot_of(d) + " (a string array, not a matrix)");
      return std::nullopt;
    }
    return read_dense(d);
  }
  if (n.kind() != Kind::group) fail_input(n.file(), slot_of(n), ": neither a dataset nor a group");
  Group g = std::move(n).as_group();
  std::string enc = encoding_of(g);
  if (enc.empty()) enc = g.attr_string_or("h5sparse_format", "");
  if (is_sparse_encoding(enc)) return read_sparse(g, enc, tap);
  if (required)
    fail_input(g.file(), slot_of(g), ": unknown encoding-type '", enc,
               "' for a matrix (expected csr_matrix, csc_matrix or array)");
  log::warn(g.file() + ": skipping " + slot_of(g) + " (encoding '" + (enc.empty() ? "none" : enc) +
            "' is not read by scurry)");
  return std::nullopt;
}

std::map<std::string, Matrix> read_matrix_dict(const Group& root, const std::string& name) {
  std::map<std::string, Matrix> out;
  if (root.child_kind(name) != Kind::group) return out;
  Group g = root.group(name);
  for (const auto& k : g.children())
    if (auto m = read_matrix(g, k, false)) out.emplace(k, std::move(*m));
  return out;
}

// ---- dataframes -----------------------------------------------------------------------------------

std::vector<std::string> read_string_like(const H5Data& d) {
  if (d.type().is_string) return d.read_strings();
  // Numeric index/categories: format as text.
  auto v = d.read<double>();
  std::vector<std::string> s(v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = num_to_string(v[i]);
  return s;
}

CategoricalColumn make_categorical(const Node& where, std::vector<int32_t> codes, std::vector<std::string> cats,
                                   bool ordered) {
  const int64_t nc = static_cast<int64_t>(cats.size());
  for (size_t i = 0; i < codes.size(); ++i)
    if (codes[i] < -1 || codes[i] >= nc)
      fail_input(where.file(), slot_of(where), ": categorical code ", codes[i], " at row ", i,
                 " is out of range (", nc, " categories; -1 = missing)");
  CategoricalColumn c;
  c.codes = std::move(codes);
  c.categories = std::move(cats);
  c.ordered = ordered;
  return c;
}

// Codes are read as int64 first so that values beyond int32 are reported, not saturated.
std::vector<int32_t> read_codes(const H5Data& d) {
  if (d.rank() != 1) fail_input(d.file(), slot_of(d), ": categorical codes must be 1-D");
  auto v = d.read<int64_t>();
  std::vector<int32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < -1 || v[i] > kInt32Max)
      fail_input(d.file(), slot_of(d), ": categorical code ", v[i], " at row ", i, " is out of range");
    out[i] = static_cast<int32_t>(v[i]);
  }
  return out;
}

std::optional<Column> read_column(const Group& df, const std::string& name) {
  Node n = df.open_child(name);
  if (n.kind() == Kind::group) {
    Group g = std::move(n).as_group();
    const std::string enc = encoding_of(g);
    if (enc == "categorical") {
      const bool ordered = g.has_attr("ordered") ? g.attr_bool("ordered") : false;
      auto codes = read_codes(g.dataset("codes"));
      auto cats = read_string_like(g.dataset("categories"));
      return Column(make_categorical(g, std::move(codes), std::move(cats), ordered));
    }
    if (enc == "nullable-integer" || enc == "nullable-boolean" || enc == "nullable-string-array") {
      H5Data vals = g.dataset("values");
      auto mask = g.dataset("mask").read<uint8_t>();
      if (static_cast<int64_t>(mask.size()) != vals.size())
        fail_input(g.file(), slot_of(g), ": values and mask differ in length");
      const bool any_masked = std::any_of(mask.begin(), mask.end(), [](uint8_t m) { return m != 0; });
      if (enc == "nullable-string-array") {
        auto v = vals.read_strings();
        if (any_masked) {
          log::warn(g.file() + ": " + slot_of(g) + ": missing strings read as empty strings");
          for (size_t i = 0; i < v.size(); ++i)
            if (mask[i]) v[i].clear();
        }
        return Column::strings(std::move(v));
      }
      auto v = vals.read<double>();
      if (enc == "nullable-boolean" && !any_masked) {
        std::vector<uint8_t> b(v.size());
        for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] != 0 ? 1 : 0;
        return Column::boolean(std::move(b));
      }
      DType dt = enc == "nullable-boolean" ? DType::f64 : vals.dtype();
      if (any_masked) {
        log::info(g.file() + ": " + slot_of(g) + ": missing values of a " + enc + " column read as NaN (float64)");
        for (size_t i = 0; i < v.size(); ++i)
          if (mask[i]) v[i] = std::nan("");
        dt = DType::f64;
      }
      return Column::numeric(std::move(v), dt);
    }
    log::warn(g.file() + ": skipping column " + slot_of(g) + " (encoding '" + (enc.empty() ? "none" : enc) +
              "' is not supported)");
    return std::nullopt;
  }
  if (n.kind() != Kind::dataset) return std::nullopt;
  H5Data d = std::move(n).as_dataset();
  const h5::TypeInfo ti = d.type();
  if (d.rank() != 1) {
    log::warn(d.file() + ": skipping column " + slot_of(d) + " (not 1-D)");
    return std::nullopt;
  }
  // anndata 0.7: codes with a `categories` attribute referencing the categories dataset.
  if (d.has_attr("categories") && d.attr_type("categories").is_reference) {
    Node target = d.attr_deref("categories");
    if (target.kind() != Kind::dataset) fail_input(d.file(), slot_of(d), ": categories reference is not a dataset");
    H5Data cd = std::move(target).as_dataset();
    const bool ordered = d.has_attr("ordered") ? d.attr_bool("ordered") : false;
    return Column(make_categorical(d, read_codes(d), read_string_like(cd), ordered));
  }
  if (ti.is_string) return Column::strings(d.read_strings());
  if (ti.is_bool) {
    auto v = d.read<uint8_t>();
    for (auto& x : v) x = x ? 1 : 0;
    return Column::boolean(std::move(v));
  }
  if (ti.is_numeric()) return Column::numeric(d.read<double>(), d.dtype());
  log::warn(d.file() + ": skipping column " + slot_of(d) + " (unsupported element type)");
  return std::nullopt;
}

Table read_dataframe(const Group& root, const std::string& name) {
  const std::string& path = root.file();
  const Kind k = root.child_kind(name);
  if (k == Kind::missing) fail_input(path, "missing '", name, "' dataframe: not an AnnData file?");
  if (k != Kind::group)
    fail_input(path, name, ": expected a dataframe group (old anndata < 0.7 record arrays are not supported; ",
               "re-save the file with a current anndata)");
  Group g = root.group(name);
  const std::string enc = encoding_of(g);
  if (!enc.empty() && enc != "dataframe")
    fail_input(path, name, ": wrong encoding-type '", enc, "', expected 'dataframe'");
  if (!g.has_attr("_index")) fail_input(path, name, ": dataframe without an '_index' attribute");
  Table t;
  t.index_name = g.attr_string("_index");
  if (g.child_kind(t.index_name) != Kind::dataset)
    fail_input(path, name, ": the index dataset '", t.index_name, "' is missing");
  {
    H5Data idx = g.dataset(t.index_name);
    if (idx.rank() != 1) fail_input(path, name, ": the index must be 1-D");
    t.index = read_string_like(idx);
  }
  std::vector<std::string> cols;
  if (g.has_attr("column-order")) {
    cols = g.attr_strings("column-order");
  } else {
    for (const auto& c : g.children())
      if (c != t.index_name && c != "__categories") cols.push_back(c);
  }
  for (const auto& c : cols) {
    if (!g.has(c)) fail_input(path, name, ": column '", c, "' listed in column-order is missing");
    auto col = read_column(g, c);
    if (!col) continue;
    if (col->size() != t.n_rows())
      fail_input(path, name, "/", c, ": column has length ", col->size(), " but the index has ", t.n_rows(),
                 " rows (length mismatch)");
    t.set(c, std::move(*col));
  }
  return t;
}

// ---- uns ------------------------------------------------------------------------------------------

std::optional<Value> read_value(const Group& parent, const std::string& name);

Dict read_dict(const Group& g) {
  Dict d;
  for (const auto& k : g.children())
    if (auto v = read_value(g, k)) d.emplace(k, std::move(*v));
  return d;
}

std::optional<Value> read_value(const Group& parent, const std::string& name) {
  Node n = parent.open_child(name);
  if (n.kind() == Kind::group) {
    Group g = std::move(n).as_group();
    const std::string enc = encoding_of(g);
    if (enc.empty() || enc == "dict") return Value(read_dict(g));
    if (enc == "dataframe") return Value(read_dataframe(parent, name));
    log::warn(g.file() + ": skipping " + slot_of(g) + " (encoding '" + enc + "' is not supported in uns)");
    return std::nullopt;
  }
  if (n.kind() != Kind::dataset) return std::nullopt;
  H5Data d = std::move(n).as_dataset();
  const h5::TypeInfo ti = d.type();
  const auto shape = d.shape();
  if (ti.is_string) {
    if (shape.empty()) return Value(d.read_string());
    return Value(d.read_strings());
  }
  if (ti.cls == H5T_COMPOUND) return Value(d.read_compound());
  if (!ti.is_numeric()) {
    log::warn(d.file() + ": skipping " + slot_of(d) + " (unsupported element type)");
    return std::nullopt;
  }
  const DType dt = d.dtype();
  if (shape.empty()) {
    if (dt == DType::boolean) return Value(d.read_scalar_int() != 0);
    if (is_integer(dt)) return Value(d.read_scalar_int());
    return Value(d.read_scalar_double());
  }
  NumArray a;
  a.shape = shape;
  a.dtype = dt;
  a.data = d.read<double>();
  return Value(std::move(a));
}

// ---- writing --------------------------------------------------------------------------------------

void set_encoding(const Node& n, const char* type, const char* version) {
  n.set_attr("encoding-type", type);
  n.set_attr("encoding-version", version);
}

void check_key(const std::string& file, const std::string& slot, const std::string& key) {
  if (key.empty() || key.find('/') != std::string::npos || key == "." || key == "..")
    fail_input(file, slot, ": key '", key, "' cannot be written (empty or containing '/'); rename it");
}

// The dtype to write values with: an integer dtype only if every value is an integer.
template <class T>
DType value_dtype(const std::vector<T>& v, DType want, const std::string& file, const std::string& slot) {
  if (!is_integer(want) && want != DType::boolean) return want;
  for (T x : v)
    if (!std::isfinite(x) || x != std::floor(x) || (want == DType::boolean && x != T(0) && x != T(1))) {
      const DType fb = std::is_same_v<T, double> ? DType::f64 : DType::f32;
      log::warn(file + ": " + slot + " is marked " + dtype_name(want) + " but holds non-integer values; written as " +
                dtype_name(fb));
      return fb;
    }
  return want;
}

template <class T>
void write_csr(const Group& parent, const std::string& name, const Csr<T>& m, DType dt, int gzip,
               const std::string& slot) {
  Group g = parent.create_group(name);
  set_encoding(g, "csr_matrix", "0.1.0");
  g.set_attr("shape", std::vector<int64_t>{m.n_rows, m.n_cols});
  g.write("data", m.data.data(), {m.nnz()}, value_dtype(m.data, dt, g.file(), slot), gzip);
  g.write("indices", m.indices.data(), {m.nnz()}, DType::i32, gzip);
  g.write("indptr", m.indptr.data(), {static_cast<int64_t>(m.indptr.size())},
          m.nnz() > kInt32Max ? DType::i64 : DType::i32, gzip);
}

template <class T>
void write_dense(const Group& parent, const std::string& name, const Dense<T>& m, DType dt, int gzip,
                 const std::string& slot) {
  H5Data d = parent.write(name, m.data.data(), {m.n_rows, m.n_cols}, value_dtype(m.data, dt, parent.file(), slot),
                           gzip);
  set_encoding(d, "array", "0.2.0");
}

void write_matrix(const Group& parent, const std::string& name, const Matrix& m, int gzip) {
  check_key(parent.file(), slot_of(parent), name);
  const std::string slot = parent.path() == "/" ? name : slot_of(parent) + "/" + name;
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) fail_input(parent.file(), slot, ": matrix is empty");
        else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>)
          write_csr(parent, name, x, m.dtype, gzip, slot);
        else write_dense(parent, name, x, m.dtype, gzip, slot);
      },
      m.m);
}

void write_matrix_dict(const Group& root, const std::string& name, const std::map<std::string, Matrix>& ms, int gzip) {
  Group g = root.create_group(name);
  set_encoding(g, "dict", "0.1.0");
  for (const auto& [k, m] : ms) write_matrix(g, k, m, gzip);
}

void write_column(const Group& g, const std::string& name, const Column& col) {
  check_key(g.file(), slot_of(g), name);
  std::visit(
      [&](const auto& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, NumericColumn>) {
          DType dt = c.dtype;
          if (dt == DType::boolean) dt = DType::f64;
          dt = value_dtype(c.values, dt, g.file(), slot_of(g) + "/" + name);  // NaN in int columns -> float64
          H5Data d = g.write(name, c.values, dt);
          set_encoding(d, "array", "0.2.0");
        } else if constexpr (std::is_same_v<C, BoolColumn>) {
          H5Data d = g.write(name, c.values, DType::boolean);
          set_encoding(d, "array", "0.2.0");
        } else if constexpr (std::is_same_v<C, StringColumn>) {
          H5Data d = g.write_strings(name, c.values);
          set_encoding(d, "string-array", "0.2.0");
        } else {
          Group cg = g.create_group(name);
          set_encoding(cg, "categorical", "0.2.0");
          cg.set_attr_bool("ordered", c.ordered);
          const size_t nc = c.categories.size();
          const DType ct = nc < 127 ? DType::i8 : nc < 32767 ? DType::i16 : DType::i32;
          H5Data codes = cg.write("codes", c.codes, ct);
          set_encoding(codes, "array", "0.2.0");
          H5Data cats = cg.write_strings("categories", c.categories);
          set_encoding(cats, "string-array", "0.2.0");
        }
      },
      col.c);
}

void write_dataframe(const Group& root, const std::string& name, const Table& t) {
  if (t.unnamed()) fail_input(root.file(), name, ": its rows have no names (an unnamed table cannot be written)");
  Group g = root.create_group(name);
  set_encoding(g, "dataframe", "0.2.0");
  const std::string index_name = t.index_name.empty() ? "_index" : t.index_name;
  check_key(g.file(), name, index_name);
  g.set_attr("_index", index_name);
  g.set_attr("column-order", t.names());
  H5Data idx = g.write_strings(index_name, t.index);
  set_encoding(idx, "string-array", "0.2.0");
  for (const auto& c : t.names()) {
    if (c == index_name) fail_input(g.file(), name, ": column '", c, "' has the same name as the index; rename it");
    write_column(g, c, t.at(c));
  }
}

void write_value(const Group& g, const std::string& name, const Value& v, int gzip) {
  check_key(g.file(), slot_of(g), name);
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          // None: anndata writes nothing for it either.
        } else if constexpr (std::is_same_v<X, Dict>) {
          Group s = g.create_group(name);
          set_encoding(s, "dict", "0.1.0");
          for (const auto& [k, val] : x) write_value(s, k, val, gzip);
        } else if constexpr (std::is_same_v<X, std::string>) {
          set_encoding(g.write_string(name, x), "string", "0.2.0");
        } else if constexpr (std::is_same_v<X, std::vector<std::string>>) {
          set_encoding(g.write_strings(name, x), "string-array", "0.2.0");
        } else if constexpr (std::is_same_v<X, double>) {
          set_encoding(g.write(name, &x, {}, DType::f64), "numeric-scalar", "0.2.0");
        } else if constexpr (std::is_same_v<X, int64_t>) {
          set_encoding(g.write(name, &x, {}, DType::i64), "numeric-scalar", "0.2.0");
        } else if constexpr (std::is_same_v<X, bool>) {
          const int8_t b = x ? 1 : 0;
          set_encoding(g.write(name, &b, {}, DType::boolean), "numeric-scalar", "0.2.0");
        } else if constexpr (std::is_same_v<X, RecArray>) {
          set_encoding(g.write_compound(name, x, gzip), "rec-array", "0.2.0");
        } else if constexpr (std::is_same_v<X, Table>) {
          write_dataframe(g, name, x);
        } else {
          int64_t n = 1;
          for (auto s : x.shape) n *= s;
          if (x.shape.empty() || n != static_cast<int64_t>(x.data.size()))
            fail_input(g.file(), slot_of(g), "/", name, ": array shape does not match its ", x.data.size(),
                       " values");
          const DType dt = value_dtype(x.data, x.dtype, g.file(), slot_of(g) + "/" + name);
          set_encoding(g.write(name, x.data.data(), x.shape, dt, gzip), "array", "0.2.0");
        }
      },
      v.v);
}

// ---- summary helpers -------------------------------------------------------------------------------

std::string dtype_str(const H5Data& d) {
  const h5::TypeInfo ti = d.type();
  if (ti.is_string) return "str";
  if (!ti.is_numeric()) return "other";
  return dtype_name(d.dtype());
}

void summarize_group(const Group& g, const std::string& prefix, std::vector<SlotInfo>& out);

void summarize_child(const Group& g, const std::string& name, const std::string& prefix, std::vector<SlotInfo>& out) {
  Node n = g.open_child(name);
  SlotInfo s;
  s.name = prefix.empty() ? name : prefix + "/" + name;
  s.encoding = encoding_of(n);
  if (n.kind() == Kind::dataset) {
    H5Data d = std::move(n).as_dataset();
    if (s.encoding.empty()) s.encoding = d.type().is_string ? "string-array" : "array";
    s.dtype = dtype_str(d);
    s.shape = d.shape();
    out.push_back(std::move(s));
    return;
  }
  if (n.kind() != Kind::group) return;
  Group cg = std::move(n).as_group();
  if (s.encoding.empty() && cg.has_attr("h5sparse_format")) s.encoding = cg.attr_string_or("h5sparse_format", "");
  const std::string enc = s.encoding;
  if (is_sparse_encoding(enc)) {
    if (cg.has("data")) s.dtype = dtype_str(cg.dataset("data"));
    if (cg.has_attr("shape")) s.shape = cg.attr_ints("shape");
    out.push_back(std::move(s));
  } else if (enc == "categorical") {
    if (cg.has("codes")) {
      H5Data c = cg.dataset("codes");
      s.dtype = "category";
      s.shape = c.shape();
    }
    out.push_back(std::move(s));
  } else if (enc == "dataframe") {
    int64_t rows = 0;
    std::string idx = cg.attr_string_or("_index", "_index");
    if (cg.child_kind(idx) == Kind::dataset) rows = cg.dataset(idx).size();
    const auto cols = cg.has_attr("column-order") ? cg.attr_strings("column-order") : std::vector<std::string>{};
    s.shape = {rows, static_cast<int64_t>(cols.size())};
    const std::string here = s.name;
    out.push_back(std::move(s));
    for (const auto& c : cols)
      if (cg.has(c)) summarize_child(cg, c, here, out);
  } else if (enc.empty() || enc == "dict" || enc == "raw") {
    if (s.encoding.empty()) s.encoding = "dict";
    const std::string here = s.name;
    out.push_back(std::move(s));
    summarize_group(cg, here, out);
  } else {
    out.push_back(std::move(s));  // other encodings (awkward, nullable-*, ...) are not descended into
  }
}

void summarize_group(const Group& g, const std::string& prefix, std::vector<SlotInfo>& out) {
  for (const auto& c : g.children()) summarize_child(g, c, prefix, out);
}

}  // namespace

// ---- public: read ---------------------------------------------------------------------------------

scurry::Dataset read_h5ad(const std::string& path, const H5adReadOptions& opt) {
  h5::File f = h5::File::open(path);
  const std::string root_enc = encoding_of(f);
  if (!root_enc.empty() && root_enc != "anndata")
    fail_input(path, "wrong root encoding-type '", root_enc, "', expected 'anndata' (not an h5ad file?)");
  scurry::Dataset d;
  d.obs = read_dataframe(f, "obs");
  d.var = read_dataframe(f, "var");
  if (!f.has("X")) fail_input(path, "missing X matrix (this reader needs X; is it an AnnData file?)");
  if (opt.read_x) d.X = *read_matrix(f, "X", true, opt.x_tap);
  if (opt.read_layers) d.layers = read_matrix_dict(f, "layers");
  d.obsm = read_matrix_dict(f, "obsm");
  d.varm = read_matrix_dict(f, "varm");
  d.obsp = read_matrix_dict(f, "obsp");
  d.varp = read_matrix_dict(f, "varp");
  if (f.child_kind("uns") == Kind::group) d.uns = read_dict(f.group("uns"));
  d.check_shapes(path);
  if (opt.read_raw && f.child_kind("raw") == Kind::group) {
    Group rg = f.group("raw");
    auto raw = std::make_shared<scurry::Dataset>();
    if (!rg.has("X")) fail_input(path, "raw: missing raw/X");
    if (opt.read_raw_x) raw->X = *read_matrix(rg, "X", true);
    raw->var = read_dataframe(rg, "var");
    raw->varm = read_matrix_dict(rg, "varm");
    d.raw = std::move(raw);
    d.check_shapes(path);  // raw's shapes
  }
  return d;
}

void fail_bad_count(const std::string& where, double v, int64_t row, int64_t col) {
  const char* what = std::isnan(v) ? "a NaN value" : std::isinf(v) ? "an infinite (Inf) value" : "a negative value";
  fail_input(where, "X has ", what, " (", v, ") at row ", row, ", column ", col,
             "; counts must be finite and non-negative (pass raw counts)");
}

void check_counts(const Matrix& X, const std::string& where) {
  auto bad = [&](double v, int64_t r, int64_t c) { fail_bad_count(where, v, r, c); };
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
        } else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) {
          // One parallel pass for the first bad entry (by position, so the message does not depend
          // on the thread count), then its row by binary search.
          // Blocks of 4,096 values are tested branch-free (vectorised: v >= 0 && v <= max fails for
          // NaN, -Inf, +Inf and negatives); only a block that fails is searched for its first entry.
          using V = std::decay_t<decltype(x.data[0])>;
          const int64_t nnz = static_cast<int64_t>(x.data.size());
          constexpr int64_t kBlock = 4096;
          const int64_t blocks = (nnz + kBlock - 1) / kBlock;
          const V* vals = x.data.data();
          int64_t first = nnz;
#pragma omp parallel for reduction(min : first) schedule(static)
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t lo = b * kBlock, hi = std::min(nnz, lo + kBlock);
            bool ok = true;
            for (int64_t p = lo; p < hi; ++p) ok &= (vals[p] >= V(0)) & (vals[p] <= std::numeric_limits<V>::max());
            if (ok) continue;
            for (int64_t p = lo; p < hi; ++p)
              if (!(vals[p] >= V(0) && vals[p] <= std::numeric_limits<V>::max())) {
                first = std::min(first, p);
                break;
              }
          }
          if (first < nnz) {
            const int64_t r = std::upper_bound(x.indptr.begin(), x.indptr.end(), first) - x.indptr.begin() - 1;
            bad(x.data[first], r, x.indices[first]);
          }
        } else {
          for (int64_t r = 0; r < x.n_rows; ++r)
            for (int64_t c = 0; c < x.n_cols; ++c) {
              const double v = x(r, c);
              if (!std::isfinite(v) || v < 0) bad(v, r, c);
            }
        }
      },
      X.m);
}

scurry::Dataset read_h5ad_rows(const std::string& path, int64_t begin, int64_t end) {
  std::string x_dtype;
  {
    const H5adSummary sum = summarize_h5ad(path);
    if (begin < 0 || end > sum.n_obs || begin > end)
      fail_input(path, "rows [", begin, ", ", end, ") are outside the file's ", sum.n_obs, " cells");
    x_dtype = sum.x_dtype;
  }
  scurry::Dataset d;
  {
    h5::File f = h5::File::open(path);
    const std::string root_enc = encoding_of(f);
    if (!root_enc.empty() && root_enc != "anndata")
      fail_input(path, "wrong root encoding-type '", root_enc, "', expected 'anndata' (not an h5ad file?)");
    d.obs = read_dataframe(f, "obs");
    d.var = read_dataframe(f, "var");
    if (!f.has("X")) fail_input(path, "missing X matrix (this reader needs X; is it an AnnData file?)");
    d.obsm = read_matrix_dict(f, "obsm");
    d.varm = read_matrix_dict(f, "varm");
    d.varp = read_matrix_dict(f, "varp");
    if (f.child_kind("uns") == Kind::group) d.uns = read_dict(f.group("uns"));
  }
  std::vector<int64_t> keep(static_cast<size_t>(end - begin));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = begin + static_cast<int64_t>(i);
  d.subset_obs(keep);  // X is not read yet: obs and obsm only
  H5adRowReader rows(path);
  DType dt = DType::f32;
  for (DType t : {DType::f32, DType::f64, DType::i8, DType::i16, DType::i32, DType::i64, DType::u8, DType::u16,
                  DType::u32, DType::u64, DType::boolean})
    if (x_dtype == dtype_name(t)) dt = t;
  d.X = scurry::Matrix(rows.read_rows(begin, end), dt);
  d.check_shapes(path);
  return d;
}

// ---- public: write --------------------------------------------------------------------------------

namespace {
// What makes d unwritable before any byte is written: X still being copied, inconsistent shapes,
// no X where one is needed.
void check_writable(const scurry::Dataset& d, const std::string& path, const H5adWriteOptions& opt) {
  if (d.pending_x) fail("internal: writing a dataset whose X is still being copied; settle() it first");
  d.check_shapes(path);
  if (d.X.empty() && !opt.allow_no_x) fail_input(path, "cannot write: X is empty");
}
}  // namespace

struct H5adWriter::Impl {
  std::string path;
  H5adWriteOptions opt;
  int gz = 0;
  TempOutput tmp;  // removed on failure, on SIGINT/SIGTERM/SIGHUP, or as stale by a later write
  h5::File f;
  bool x_written = false, raw_x_written = false, failed = false, done = false;
  int64_t x_rows = 0, x_cols = 0;
  std::vector<std::string> layers_written;  // write_layer's keys
  // The dict group NAME ("layers"), created with its encoding on first use.
  Group dict_group(const std::string& name) {
    if (f.has(name)) return f.group(name);
    Group g = f.create_group(name);
    set_encoding(g, "dict", "0.1.0");
    return g;
  }
  Impl(const std::string& p, const H5adWriteOptions& o) : path(p), opt(o), gz(std::clamp(o.gzip_level, 0, 9)), tmp(p) {}
  // Runs one part; on failure frees the file's space (a full disk), closes it and rethrows naming PATH.
  template <class F>
  void part(F&& f_part) {
    if (failed || done) fail("internal: H5adWriter used after it failed or finished");
    try {
      f_part();
    } catch (...) {
      failed = true;
      f.discard();  // still open after a failed write: its space freed (a full disk), closed
      rethrow_naming_output(tmp.name(), path);  // messages name PATH, not the temporary
    }
  }
};

H5adWriter::H5adWriter(const std::string& path, const H5adWriteOptions& opt)
    : impl_(std::make_unique<Impl>(path, opt)) {
  impl_->part([&] {
    impl_->f = h5::File::create(impl_->tmp.name());
    set_encoding(impl_->f, "anndata", "0.1.0");
  });
}

H5adWriter::~H5adWriter() {
  if (impl_ && !impl_->done && !impl_->failed) impl_->f.discard();  // the TempOutput then removes the file
}

void H5adWriter::write_x(const Matrix& X) {
  Impl& w = *impl_;
  if (w.x_written) fail("internal: H5adWriter::write_x called twice");
  w.part([&] {
    if (!X.empty()) write_matrix(w.f, "X", X, w.gz);
    w.x_written = true;
    w.x_rows = X.n_rows(), w.x_cols = X.n_cols();
  });
}

void H5adWriter::write_x_following(const DenseF& X, const std::function<void(size_t)>& ready) {
  Impl& w = *impl_;
  if (w.x_written) fail("internal: H5adWriter::write_x called twice");
  w.part([&] {
    if (w.gz > 0) {  // compressed: chunk by chunk through HDF5's filters, once the whole X is there
      ready(X.data.size() * sizeof(float));
      write_dense(w.f, "X", X, DType::f32, w.gz, "X");
      w.x_written = true;
      w.x_rows = X.n_rows, w.x_cols = X.n_cols;
      return;
    }
    const char* src = reinterpret_cast<const char*>(X.data.data());
    H5Data d = w.f.write_from<float>("X", {X.n_rows, X.n_cols}, DType::f32, [&](char* dst, size_t off, size_t len) {
      ready(off + len);
      h5::parallel_copy(dst, src + off, len);
    });
    set_encoding(d, "array", "0.2.0");
    w.x_written = true;
    w.x_rows = X.n_rows, w.x_cols = X.n_cols;
  });
}

void H5adWriter::write_layer(const std::string& key, const Matrix& m) {
  Impl& w = *impl_;
  if (std::find(w.layers_written.begin(), w.layers_written.end(), key) != w.layers_written.end())
    fail("internal: H5adWriter::write_layer called twice for layers/" + key);
  w.part([&] {
    write_matrix(w.dict_group("layers"), key, m, w.gz);
    w.layers_written.push_back(key);
  });
}

void H5adWriter::write_raw_x(const Matrix& m) {
  Impl& w = *impl_;
  if (w.raw_x_written) fail("internal: H5adWriter::write_raw_x called twice");
  w.part([&] {
    Group rg = w.f.create_group("raw");
    set_encoding(rg, "raw", "0.1.0");
    write_matrix(rg, "X", m, w.gz);
    w.raw_x_written = true;
  });
}

Matrix H5adWriter::read_back(const std::string& slot) {
  Impl& w = *impl_;
  if (w.failed || w.done) fail("internal: H5adWriter::read_back after it failed or finished");
  Matrix m;
  w.part([&] {  // (a failure here is the file's: it is discarded as for a failed write)
    const size_t cut = slot.rfind('/');
    if (cut == std::string::npos) m = *read_matrix(w.f, slot, true);
    else m = *read_matrix(w.f.group(slot.substr(0, cut)), slot.substr(cut + 1), true);
  });
  return m;
}

namespace {
// Rows [begin, end) of a CSR matrix in a file (its row pointers held, indices and data read by range).
CsrF read_csr_rows(const std::vector<int64_t>& indptr, H5Data& indices, H5Data& data, int64_t cols, int64_t begin,
                   int64_t end) {
  CsrF c;
  const int64_t p0 = indptr[begin], p1 = indptr[end];
  c.n_rows = end - begin;
  c.n_cols = cols;
  c.indptr.resize(static_cast<size_t>(c.n_rows) + 1);
  for (int64_t r = 0; r <= c.n_rows; ++r) c.indptr[r] = indptr[begin + r] - p0;
  c.indices = indices.read_range<int32_t>(p0, p1 - p0);
  c.data = data.read_range<float>(p0, p1 - p0);
  return c;
}

// Rows of a CSR matrix the writer has written, read through its open file (H5adWriter::read_back_rows).
class WrittenRows : public RowSource {
 public:
  using Part = std::function<void(const std::function<void()>&)>;  // the writer's failure handling
  WrittenRows(h5::File& f, const std::string& slot, Part part) : part_(std::move(part)) {
    part_([&] {
      Group g = f.group(slot);
      if (encoding_of(g) != "csr_matrix") fail("internal: H5adWriter::read_back_rows of ", slot, ", not a csr_matrix");
      const std::vector<int64_t> shape = g.attr_ints("shape");
      if (shape.size() != 2) fail("internal: H5adWriter::read_back_rows: ", slot, " has no 2-D shape");
      rows_ = shape[0], cols_ = shape[1];
      data_ = g.dataset("data");
      indices_ = g.dataset("indices");
      indptr_ = g.dataset("indptr").read<int64_t>();
      if (static_cast<int64_t>(indptr_.size()) != rows_ + 1)
        fail("internal: H5adWriter::read_back_rows: ", slot, "'s indptr does not match its shape");
    });
  }
  int64_t n_rows() const override { return rows_; }
  int64_t n_cols() const override { return cols_; }
  int64_t nnz() const override { return indptr_.back(); }
  std::vector<int64_t> row_pointers() override { return indptr_; }
  CsrF read_rows(int64_t begin, int64_t end) override {
    if (begin < 0 || end < begin || end > rows_)
      fail("internal: H5adWriter::read_back_rows: rows [", begin, ", ", end, ") out of range");
    CsrF c;
    part_([&] { c = read_csr_rows(indptr_, indices_, data_, cols_, begin, end); });
    return c;
  }

 private:
  Part part_;
  int64_t rows_ = 0, cols_ = 0;
  H5Data data_, indices_;
  std::vector<int64_t> indptr_;
};
}  // namespace

std::unique_ptr<RowSource> H5adWriter::read_back_rows(const std::string& slot) {
  Impl& w = *impl_;
  if (w.failed || w.done) fail("internal: H5adWriter::read_back_rows after it failed or finished");
  return std::make_unique<WrittenRows>(w.f, slot, [&w](const std::function<void()>& f) { w.part(f); });
}

void H5adWriter::finish(const scurry::Dataset& d) {
  Impl& w = *impl_;
  const std::string& path = w.path;
  if (w.x_written && d.X.empty()) {  // X let go after write_x: the other slots' shapes
    if (d.pending_x) fail("internal: writing a dataset whose X is still being copied; settle() it first");
    d.check_shapes(path);
    if (d.n_obs() != w.x_rows || d.n_vars() != w.x_cols)
      fail("internal: H5adWriter::finish with obs/var other than the X written");
  } else {
    check_writable(d, path, w.opt);
    if (w.x_written && (d.X.n_rows() != w.x_rows || d.X.n_cols() != w.x_cols))
      fail("internal: H5adWriter::finish with an X other than the one written");
  }
  for (const auto& k : w.layers_written)
    if (d.layers.count(k)) fail("internal: H5adWriter::finish with layers/" + k + " written twice");
  if (w.raw_x_written && !d.raw) fail("internal: H5adWriter::finish without raw after write_raw_x");
  w.part([&] {
    h5::File& f = w.f;
    if (!w.x_written && !d.X.empty()) write_matrix(f, "X", d.X, w.gz);
    w.x_written = true;
    const int gz = w.gz;
    write_dataframe(f, "obs", d.obs);
    write_dataframe(f, "var", d.var);
    {
      Group lg = w.dict_group("layers");
      for (const auto& [k, m] : d.layers) write_matrix(lg, k, m, gz);
    }
    write_matrix_dict(f, "obsm", d.obsm, gz);
    write_matrix_dict(f, "varm", d.varm, gz);
    write_matrix_dict(f, "obsp", d.obsp, gz);
    write_matrix_dict(f, "varp", d.varp, gz);
    {
      Group u = f.create_group("uns");
      set_encoding(u, "dict", "0.1.0");
      for (const auto& [k, v] : d.uns) write_value(u, k, v, gz);
    }
    if (w.raw_x_written) {  // raw/X written early (write_raw_x): raw's var and varm beside it
      const auto& r = *d.raw;
      Group rg = f.group("raw");
      write_dataframe(rg, "var", r.var);
      write_matrix_dict(rg, "varm", r.varm, gz);
    } else if (d.raw && !d.raw->X.empty()) {
      const auto& r = *d.raw;
      if (r.X.n_rows() != d.n_obs() || r.X.n_cols() != r.var.n_rows())
        fail_input(path, "raw/X has shape ", r.X.n_rows(), "x", r.X.n_cols(), " but obs has ", d.n_obs(),
                   " rows and raw/var ", r.var.n_rows());
      Group rg = f.create_group("raw");
      set_encoding(rg, "raw", "0.1.0");
      write_matrix(rg, "X", r.X, gz);
      write_dataframe(rg, "var", r.var);
      write_matrix_dict(rg, "varm", r.varm, gz);
    }
    f.close();
    w.tmp.commit();
  });
  w.done = true;
}

void write_h5ad(const scurry::Dataset& d, const std::string& path, const H5adWriteOptions& opt) {
  check_writable(d, path, opt);  // (before the temporary is made; finish checks again, at no cost)
  H5adWriter w(path, opt);
  w.finish(d);
}

// ---- public: summary ------------------------------------------------------------------------------

H5adSummary summarize_h5ad(const std::string& path) {
  h5::File f = h5::File::open(path);
  H5adSummary s;
  s.anndata_encoding_version = f.attr_string_or("encoding-version", "");
  s.n_obs = dataframe_length(f, path, "obs");
  s.n_vars = dataframe_length(f, path, "var");
  if (!f.has("X")) fail_input(path, "missing X matrix");
  {
    Node x = f.open_child("X");
    if (x.kind() == Kind::dataset) {
      H5Data d = std::move(x).as_dataset();
      s.x_encoding = "array";
      s.x_dtype = dtype_str(d);
      s.x_nnz = d.size();
    } else {
      Group g = std::move(x).as_group();
      s.x_encoding = encoding_of(g);
      if (s.x_encoding.empty()) s.x_encoding = g.attr_string_or("h5sparse_format", "") + "_matrix";
      H5Data data = g.dataset("data");
      s.x_dtype = dtype_str(data);
      s.x_nnz = data.size();
    }
  }
  summarize_group(f, "", s.slots);
  return s;
}

// ---- public: row reader ---------------------------------------------------------------------------

struct H5adRowReader::Impl {
  h5::File file;
  std::string path, slot;
  bool dense = false, csc = false;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> indptr;  // CSR
  H5Data data, indices, dense_ds;
  std::optional<CsrF> whole;  // CSC, read and transposed on first use
};

H5adRowReader::H5adRowReader(const std::string& path, const std::string& slot) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.slot = slot;
  m.file = h5::File::open(path);
  if (!m.file.has(slot)) fail_input(path, "missing matrix '", slot, "'");
  Node n = m.file.open_child(slot);
  if (n.kind() == Kind::dataset) {
    m.dense_ds = std::move(n).as_dataset();
    auto sh = m.dense_ds.shape();
    if (sh.size() != 2) fail_input(path, slot, ": dense matrix must be 2-D");
    m.dense = true;
    m.rows = sh[0];
    m.cols = sh[1];
    if (m.cols > kInt32Max) fail_input(path, slot, ": too many columns for 32-bit indices");
    (void)m.dense_ds.dtype();  // numeric check
    return;
  }
  Group g = std::move(n).as_group();
  std::string enc = encoding_of(g);
  if (enc.empty()) enc = g.attr_string_or("h5sparse_format", "");
  if (!is_sparse_encoding(enc))
    fail_input(path, slot, ": unknown encoding-type '", enc, "' for a matrix (expected csr_matrix, csc_matrix or array)");
  std::vector<int64_t> shape =
      g.has_attr("shape") ? g.attr_ints("shape") : g.has_attr("h5sparse_shape") ? g.attr_ints("h5sparse_shape")
                                                                                 : std::vector<int64_t>{};
  if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0)
    fail_input(path, slot, ": sparse matrix 'shape' attribute must hold two non-negative sizes");
  m.rows = shape[0];
  m.cols = shape[1];
  if (enc == "csc_matrix" || enc == "csc") {
    m.csc = true;
    if (m.rows > kInt32Max) fail_input(path, slot, ": too many rows for 32-bit indices");
    // A CSC matrix's row count bounds nothing it stores, and the CSR it is turned into takes
    // rows + 1 row pointers: the rows must be obs's cells before that is allocated (fuzz_h5ad,
    // session 21: a 27 KB file whose 'shape' stated 5e7 rows took 8 s and 400 MB).
    const int64_t n_obs = dataframe_length(m.file, path, "obs");
    if (n_obs != m.rows)
      fail_input(path, slot, ": shape states ", m.rows, " rows but obs has ", n_obs, " cells");
    return;
  }
  if (m.cols > kInt32Max) fail_input(path, slot, ": too many columns for 32-bit indices");
  m.data = g.dataset("data");
  m.indices = g.dataset("indices");
  m.indptr = g.dataset("indptr").read<int64_t>();
  if (static_cast<int64_t>(m.indptr.size()) != m.rows + 1)
    fail_input(path, slot, ": indptr has length ", m.indptr.size(), " but the shape needs ", m.rows + 1,
               " (wrong indptr length)");
  if (m.data.rank() != 1 || m.indices.rank() != 1 || m.data.size() != m.indices.size())
    fail_input(path, slot, ": data and indices must be 1-D arrays of equal length");
  if (m.indptr[0] != 0) fail_input(path, slot, ": row pointers must start at 0");
  for (int64_t r = 0; r < m.rows; ++r)
    if (m.indptr[r + 1] < m.indptr[r]) fail_input(path, slot, ": row pointers decrease at row ", r);
  if (m.indptr.back() != m.data.size())
    fail_input(path, slot, ": last row pointer ", m.indptr.back(), " does not equal the number of stored values ",
               m.data.size());
}

H5adRowReader::~H5adRowReader() = default;
int64_t H5adRowReader::n_rows() const { return impl_->rows; }
int64_t H5adRowReader::n_cols() const { return impl_->cols; }
int64_t H5adRowReader::nnz() const {
  if (impl_->dense) return impl_->rows * impl_->cols;
  if (impl_->csc) return impl_->file.group(impl_->slot).dataset("data").size();
  return impl_->indptr.back();
}

CsrF H5adRowReader::read_rows(int64_t begin, int64_t end) {
  Impl& m = *impl_;
  if (begin < 0 || end < begin || end > m.rows)
    fail("H5adRowReader::read_rows: rows [", begin, ", ", end, ") out of range [0, ", m.rows, ")");
  if (m.csc) {
    if (!m.whole) {
      auto mat = read_matrix(m.file, m.slot, true);
      m.whole = to_csr_f(*mat);
    }
    return slice_rows(*m.whole, begin, end);
  }
  if (m.dense) {
    const auto vals = m.dense_ds.read_rows<float>(begin, end - begin);
    return csr_from_dense_rows(vals.data(), end - begin, m.cols);
  }
  CsrF out = read_csr_rows(m.indptr, m.indices, m.data, m.cols, begin, end);
  const int64_t p0 = m.indptr[begin];
  for (size_t p = 0; p < out.indices.size(); ++p)
    if (out.indices[p] < 0 || out.indices[p] >= m.cols)
      fail_input(m.path, m.slot, ": column index ", out.indices[p], " at position ", p0 + static_cast<int64_t>(p),
                 " is out of range [0, ", m.cols, ")");
  return out;
}

std::vector<int64_t> H5adRowReader::row_pointers() {
  Impl& m = *impl_;
  if (m.dense) {
    // Counting nonzeros of a dense matrix needs a pass over it: do it block by block.
    std::vector<int64_t> ptr(static_cast<size_t>(m.rows) + 1, 0);
    const int64_t block = std::max<int64_t>(1, (int64_t{1} << 24) / std::max<int64_t>(m.cols, 1));
    for (int64_t b = 0; b < m.rows; b += block) {
      const int64_t e = std::min(m.rows, b + block);
      const auto vals = m.dense_ds.read_rows<float>(b, e - b);
      for (int64_t r = b; r < e; ++r) {
        int64_t nz = 0;
        const float* row = vals.data() + static_cast<size_t>(r - b) * m.cols;
        for (int64_t c = 0; c < m.cols; ++c) nz += row[c] != 0.0f;
        ptr[r + 1] = ptr[r] + nz;
      }
    }
    return ptr;
  }
  if (m.csc) {
    if (!m.whole) m.whole = to_csr_f(*read_matrix(m.file, m.slot, true));
    return m.whole->indptr;
  }
  return m.indptr;
}

}  // namespace scurry
