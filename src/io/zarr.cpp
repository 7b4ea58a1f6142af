// scurry: AnnData zarr stores: reading (whole, and the lazy row reader), writing (atomic), summary.
// The element encodings are anndata's, as in io/h5ad.cpp; the zarr mechanics are io/zarr_store.cpp.
#include "io/zarr.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <thread>
#include <type_traits>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output.hpp"
#include "io/zarr_store.hpp"

namespace scurry {

namespace {

namespace fs = std::filesystem;
using zarr::Array;
using zarr::Json;
using zarr::NodeKind;
using zarr::Store;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int default_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

std::string attr_string(const Json& a, const char* key, const std::string& def = "") {
  if (!a.contains(key)) return def;
  const Json& v = a[key];
  return v.is_string() ? v.get<std::string>() : def;
}

std::string encoding_of(const Store& s, const std::string& p) { return attr_string(s.attrs(p), "encoding-type"); }

std::string num_to_string(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

bool is_sparse_encoding(const std::string& e) {
  return e == "csr_matrix" || e == "csc_matrix" || e == "csr" || e == "csc";
}

struct Reader {
  const Store& s;
  int threads;
  std::string where(const std::string& p) const { return s.where(p); }
};

// ---- matrices -------------------------------------------------------------------------------------

std::vector<int64_t> sparse_shape(const Reader& r, const std::string& p, const Json& a) {
  const char* key = a.contains("shape") ? "shape" : a.contains("h5sparse_shape") ? "h5sparse_shape" : nullptr;
  if (!key) fail_input(r.where(p), ": sparse matrix without a 'shape' attribute");
  std::vector<int64_t> shape;
  const Json& js = a[key];
  if (!js.is_array()) fail_input(r.where(p), ": sparse matrix 'shape' attribute must hold two non-negative sizes");
  for (const Json& x : js) {
    // nlohmann's get<int64_t> truncates 2.5 to 2: a fractional (or non-numeric) size is an error.
    if (x.is_number_integer()) {
      shape.push_back(x.get<int64_t>());
    } else if (x.is_number_float() && std::isfinite(x.get<double>()) && x.get<double>() == std::floor(x.get<double>()) &&
               std::abs(x.get<double>()) < 9.0e15) {
      shape.push_back(static_cast<int64_t>(x.get<double>()));
    } else if (x.is_number()) {
      fail_input(r.where(p), ": sparse matrix '", key, "' attribute holds ", x.dump(), ", not an integer");
    } else {
      fail_input(r.where(p), ": sparse matrix 'shape' attribute must hold two non-negative sizes");
    }
  }
  if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0)
    fail_input(r.where(p), ": sparse matrix 'shape' attribute must hold two non-negative sizes");
  return shape;
}

Array open_array(const Reader& r, const std::string& p) {
  const NodeKind k = r.s.kind(p);
  if (k == NodeKind::missing) fail_input(r.where(p), ": missing (expected an array)");
  if (k != NodeKind::array) fail_input(r.where(p), ": is a group, expected an array");
  return Array(r.s, p);
}

// `tap` (float32 CSR only): X's arrays copied elsewhere as they are read (core/array_tap.hpp).
template <class T>
Csr<T> read_compressed(const Reader& r, const std::string& p, int64_t major, int64_t minor, const CsrTap& tap = {}) {
  Array data = open_array(r, join(p, "data")), indices = open_array(r, join(p, "indices")),
        indptr = open_array(r, join(p, "indptr"));
  if (data.rank() != 1 || indices.rank() != 1 || indptr.rank() != 1)
    fail_input(r.where(p), ": data, indices and indptr must be 1-D arrays");
  data.require_chunks();  // a lost chunk is an error, not fill_value (zarr_store.hpp)
  indices.require_chunks();
  indptr.require_chunks();
  Csr<T> m;
  m.n_rows = major;
  m.n_cols = minor;
  m.indptr = indptr.read_all<int64_t>(r.threads, tap.indptr);
  if (static_cast<int64_t>(m.indptr.size()) != major + 1)
    fail_input(r.where(p), ": indptr has length ", m.indptr.size(), " but the shape needs ", major + 1,
               " (wrong indptr length)");
  if (data.size() != indices.size())
    fail_input(r.where(p), ": data (", data.size(), ") and indices (", indices.size(), ") differ in length");
  // SCURRY_ZARR_TIMES=1: each array's wall and CPU seconds on stderr
  const bool timed = std::getenv("SCURRY_ZARR_TIMES") != nullptr;
  auto t0 = std::chrono::steady_clock::now();
  std::clock_t c0 = std::clock();
  auto lap = [&](const char* what) {
    if (!timed) return;
    const auto t1 = std::chrono::steady_clock::now();
    const std::clock_t c1 = std::clock();
    std::fprintf(stderr, "[zarr] %s %s: %.3f s wall, %.3f s cpu (%d threads)\n", p.c_str(), what,
                 std::chrono::duration<double>(t1 - t0).count(), static_cast<double>(c1 - c0) / CLOCKS_PER_SEC,
                 r.threads);
    t0 = t1, c0 = c1;
  };
  m.indices = indices.read_all<int32_t>(r.threads, tap.indices);
  lap("indices");
  m.data = data.read_all<T>(r.threads, tap.data);
  lap("data");
  validate_csr(m, r.where(p));
  lap("validated");
  return m;
}

Matrix read_sparse(const Reader& r, const std::string& p, const std::string& enc, const Json& a, const CsrTap& tap = {}) {
  const bool csc = enc == "csc_matrix" || enc == "csc";
  const auto shape = sparse_shape(r, p, a);
  const int64_t rows = shape[0], cols = shape[1];
  if ((csc ? rows : cols) > kInt32Max)
    fail_input(r.where(p), ": ", rows, "x", cols, " has too many ", csc ? "rows" : "columns",
               " for 32-bit indices (at most 2^31-1)");
  const DType dt = open_array(r, join(p, "data")).dtype();
  auto finish = [&](auto m) -> Matrix {
    if (csc) return Matrix(transpose(m), dt);
    return Matrix(std::move(m), dt);
  };
  if (dt == DType::f64) return finish(read_compressed<double>(r, p, csc ? cols : rows, csc ? rows : cols));
  return finish(read_compressed<float>(r, p, csc ? cols : rows, csc ? rows : cols, csc ? CsrTap{} : tap));
}

Matrix read_dense(const Reader& r, const Array& a) {
  auto sh = a.shape();
  if (sh.size() == 1) sh.push_back(1);
  if (sh.size() != 2) fail_input(r.where(a.path()), ": dense matrix must be 2-D, found ", sh.size(), " dimensions");
  const DType dt = a.dtype();
  if (dt == DType::f64) {
    DenseD m;
    m.n_rows = sh[0];
    m.n_cols = sh[1];
    m.data = a.read_all<double>(r.threads);
    return Matrix(std::move(m), dt);
  }
  DenseF m;
  m.n_rows = sh[0];
  m.n_cols = sh[1];
  m.data = a.read_all<float>(r.threads);
  return Matrix(std::move(m), dt);
}

std::optional<Matrix> read_matrix(const Reader& r, const std::string& p, bool required, const CsrTap& tap = {}) {
  const NodeKind k = r.s.kind(p);
  const Json a = r.s.attrs(p);
  std::string enc = attr_string(a, "encoding-type");
  if (k == NodeKind::array) {
    Array arr(r.s, p);
    if (!enc.empty() && enc != "array") {
      if (required)
        fail_input(r.where(p), ": unknown encoding-type '", enc, "' for a matrix (expected array, csr_matrix or csc_matrix)");
      log::warn(r.where(p) + ": skipped (encoding '" + enc + "' is not a matrix)");
      return std::nullopt;
    }
    if (arr.is_string()) {
      if (required) fail_input(r.where(p), ": holds strings, expected a numeric matrix");
      log::warn(r.where(p) + ": skipped (a string array, not a matrix)");
      return std::nullopt;
    }
    return read_dense(r, arr);
  }
  if (k != NodeKind::group) fail_input(r.where(p), ": missing");
  if (enc.empty()) enc = attr_string(a, "h5sparse_format");
  if (is_sparse_encoding(enc)) return read_sparse(r, p, enc, a, tap);
  if (required)
    fail_input(r.where(p), ": unknown encoding-type '", enc, "' for a matrix (expected csr_matrix, csc_matrix or array)");
  log::warn(r.where(p) + ": skipped (encoding '" + (enc.empty() ? "none" : enc) + "' is not read by scurry)");
  return std::nullopt;
}

std::map<std::string, Matrix> read_matrix_dict(const Reader& r, const std::string& p) {
  std::map<std::string, Matrix> out;
  if (r.s.kind(p) != NodeKind::group) return out;
  for (const auto& k : r.s.children(p))
    if (auto m = read_matrix(r, join(p, k), false)) out.emplace(k, std::move(*m));
  return out;
}

// ---- dataframes -----------------------------------------------------------------------------------

std::vector<std::string> read_string_like(const Reader& r, const Array& a) {
  if (a.is_string()) return a.read_strings(r.threads);
  auto v = a.read_all<double>(r.threads);
  std::vector<std::string> s(v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = num_to_string(v[i]);
  return s;
}

std::vector<int32_t> read_codes(const Reader& r, const Array& a) {
  if (a.rank() != 1) fail_input(r.where(a.path()), ": categorical codes must be 1-D");
  auto v = a.read_all<int64_t>(r.threads);
  std::vector<int32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < -1 || v[i] > kInt32Max)
      fail_input(r.where(a.path()), ": categorical code ", v[i], " at row ", i, " is out of range");
    out[i] = static_cast<int32_t>(v[i]);
  }
  return out;
}

std::optional<Column> read_column(const Reader& r, const std::string& p) {
  const NodeKind k = r.s.kind(p);
  const Json a = r.s.attrs(p);
  const std::string enc = attr_string(a, "encoding-type");
  if (k == NodeKind::group) {
    if (enc == "categorical") {
      const bool ordered = a.contains("ordered") && a["ordered"].is_boolean() ? a["ordered"].get<bool>() : false;
      auto codes = read_codes(r, open_array(r, join(p, "codes")));
      auto cats = read_string_like(r, open_array(r, join(p, "categories")));
      const int64_t nc = static_cast<int64_t>(cats.size());
      for (size_t i = 0; i < codes.size(); ++i)
        if (codes[i] < -1 || codes[i] >= nc)
          fail_input(r.where(p), ": categorical code ", codes[i], " at row ", i, " is out of range (", nc,
                     " categories; -1 = missing)");
      CategoricalColumn c;
      c.codes = std::move(codes);
      c.categories = std::move(cats);
      c.ordered = ordered;
      return Column(std::move(c));
    }
    if (enc == "nullable-integer" || enc == "nullable-boolean" || enc == "nullable-string-array") {
      Array vals = open_array(r, join(p, "values"));
      auto mask = open_array(r, join(p, "mask")).read_all<uint8_t>(r.threads);
      if (static_cast<int64_t>(mask.size()) != vals.size()) fail_input(r.where(p), ": values and mask differ in length");
      const bool any_masked = std::any_of(mask.begin(), mask.end(), [](uint8_t m) { return m != 0; });
      if (enc == "nullable-string-array") {
        auto v = vals.read_strings(r.threads);
        if (any_masked) {
          log::warn(r.where(p) + ": missing strings read as empty strings");
          for (size_t i = 0; i < v.size(); ++i)
            if (mask[i]) v[i].clear();
        }
        return Column::strings(std::move(v));
      }
      auto v = vals.read_all<double>(r.threads);
      if (enc == "nullable-boolean" && !any_masked) {
        std::vector<uint8_t> b(v.size());
        for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] != 0 ? 1 : 0;
        return Column::boolean(std::move(b));
      }
      DType dt = enc == "nullable-boolean" ? DType::f64 : vals.dtype();
      if (any_masked) {
        log::info(r.where(p) + ": missing values of a " + enc + " column read as NaN (float64)");
        for (size_t i = 0; i < v.size(); ++i)
          if (mask[i]) v[i] = std::nan("");
        dt = DType::f64;
      }
      return Column::numeric(std::move(v), dt);
    }
    log::warn(r.where(p) + ": column skipped (encoding '" + (enc.empty() ? "none" : enc) + "' is not supported)");
    return std::nullopt;
  }
  if (k != NodeKind::array) return std::nullopt;
  Array arr(r.s, p);
  if (arr.rank() != 1) {
    log::warn(r.where(p) + ": column skipped (not 1-D)");
    return std::nullopt;
  }
  if (arr.is_string()) return Column::strings(arr.read_strings(r.threads));
  if (arr.dtype() == DType::boolean) return Column::boolean(arr.read_all<uint8_t>(r.threads));
  return Column::numeric(arr.read_all<double>(r.threads), arr.dtype());
}

Table read_dataframe(const Reader& r, const std::string& p) {
  const NodeKind k = r.s.kind(p);
  if (k == NodeKind::missing) fail_input(r.where(p), ": missing dataframe: not an AnnData store?");
  if (k != NodeKind::group) fail_input(r.where(p), ": expected a dataframe group");
  const Json a = r.s.attrs(p);
  const std::string enc = attr_string(a, "encoding-type");
  if (!enc.empty() && enc != "dataframe") fail_input(r.where(p), ": wrong encoding-type '", enc, "', expected 'dataframe'");
  if (!a.contains("_index") || !a["_index"].is_string()) fail_input(r.where(p), ": dataframe without an '_index' attribute");
  Table t;
  t.index_name = a["_index"].get<std::string>();
  if (r.s.kind(join(p, t.index_name)) != NodeKind::array)
    fail_input(r.where(p), ": the index array '", t.index_name, "' is missing");
  {
    Array idx(r.s, join(p, t.index_name));
    if (idx.rank() != 1) fail_input(r.where(idx.path()), ": the index must be 1-D");
    t.index = read_string_like(r, idx);
  }
  std::vector<std::string> cols;
  if (a.contains("column-order") && a["column-order"].is_array()) {
    for (const auto& c : a["column-order"]) {
      if (!c.is_string()) fail_input(r.where(p), ": 'column-order' must hold strings");
      cols.push_back(c.get<std::string>());
    }
  } else {
    for (const auto& c : r.s.children(p))
      if (c != t.index_name && c != "__categories") cols.push_back(c);
  }
  for (const auto& c : cols) {
    if (r.s.kind(join(p, c)) == NodeKind::missing)
      fail_input(r.where(p), ": column '", c, "' listed in column-order is missing");
    auto col = read_column(r, join(p, c));
    if (!col) continue;
    if (col->size() != t.n_rows())
      fail_input(r.where(join(p, c)), ": column has length ", col->size(), " but the index has ", t.n_rows(),
                 " rows (length mismatch)");
    t.set(c, std::move(*col));
  }
  return t;
}

// ---- uns ------------------------------------------------------------------------------------------

std::optional<Value> read_value(const Reader& r, const std::string& p);

Dict read_dict(const Reader& r, const std::string& p) {
  Dict d;
  for (const auto& k : r.s.children(p))
    if (auto v = read_value(r, join(p, k))) d.emplace(k, std::move(*v));
  return d;
}

std::optional<Value> read_value(const Reader& r, const std::string& p) {
  const NodeKind k = r.s.kind(p);
  const std::string enc = encoding_of(r.s, p);
  if (k == NodeKind::group) {
    if (enc.empty() || enc == "dict") return Value(read_dict(r, p));
    if (enc == "dataframe") return Value(read_dataframe(r, p));
    log::warn(r.where(p) + ": skipped (encoding '" + enc + "' is not supported in uns)");
    return std::nullopt;
  }
  if (k != NodeKind::array) return std::nullopt;
  if (enc == "null") return std::nullopt;
  Array a(r.s, p);
  if (a.meta().record.is_array()) return Value(a.read_records(r.threads));
  if (a.is_string()) {
    auto v = a.read_strings(r.threads);
    if (a.rank() == 0) return Value(v.at(0));
    return Value(std::move(v));
  }
  const DType dt = a.dtype();
  if (a.rank() == 0) {
    if (dt == DType::boolean) return Value(a.read_all<uint8_t>(r.threads).at(0) != 0);
    if (is_integer(dt)) return Value(a.read_all<int64_t>(r.threads).at(0));
    return Value(a.read_all<double>(r.threads).at(0));
  }
  NumArray v;
  v.shape = a.shape();
  v.dtype = dt;
  v.data = a.read_all<double>(r.threads);
  return Value(std::move(v));
}

// ---- writing --------------------------------------------------------------------------------------

struct Writer {
  std::string store;  // the final name, for messages
  std::string root;   // the temporary directory written to
  zarr::ArrayWriteSpec spec;
  std::string dir(const std::string& p) const { return p.empty() ? root : root + "/" + p; }
};

Json enc(const char* type, const char* version) { return {{"encoding-type", type}, {"encoding-version", version}}; }

void check_key(const Writer& w, const std::string& slot, const std::string& key) {
  if (key.empty() || key.find('/') != std::string::npos || key == "." || key == ".." || key == "zarr.json" ||
      key == ".zarray" || key == ".zgroup" || key == ".zattrs" || key == ".zmetadata")
    fail_input(w.store, slot, ": key '", key, "' cannot be written to a zarr store (empty, containing '/', ",
               "or a zarr metadata/chunk name); rename it");
}

template <class T>
DType value_dtype(const std::vector<T>& v, DType want, const std::string& where) {
  if (!is_integer(want) && want != DType::boolean) return want;
  for (T x : v)
    if (!std::isfinite(x) || x != std::floor(x) || (want == DType::boolean && x != T(0) && x != T(1))) {
      const DType fb = std::is_same_v<T, double> ? DType::f64 : DType::f32;
      log::warn(where + " is marked " + dtype_name(want) + " but holds non-integer values; written as " + dtype_name(fb));
      return fb;
    }
  return want;
}

template <class T>
void write_csr(const Writer& w, const std::string& p, const Csr<T>& m, DType dt) {
  Json a = enc("csr_matrix", "0.1.0");
  a["shape"] = {m.n_rows, m.n_cols};
  zarr::write_group(w.dir(p), w.spec.format, a);
  zarr::write_numeric(w.dir(p + "/data"), {m.nnz()}, m.data.data(), value_dtype(m.data, dt, w.store + ": " + p), Json(),
                      w.spec);
  zarr::write_numeric(w.dir(p + "/indices"), {m.nnz()}, m.indices.data(), DType::i32, Json(), w.spec);
  zarr::write_numeric(w.dir(p + "/indptr"), {static_cast<int64_t>(m.indptr.size())}, m.indptr.data(),
                      m.nnz() > kInt32Max ? DType::i64 : DType::i32, Json(), w.spec);
}

void write_matrix(const Writer& w, const std::string& parent, const std::string& name, const Matrix& m) {
  check_key(w, parent, name);
  const std::string p = join(parent, name);
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          fail_input(w.store, p, ": matrix is empty");
        } else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) {
          write_csr(w, p, x, m.dtype);
        } else {
          zarr::write_numeric(w.dir(p), {x.n_rows, x.n_cols}, x.data.data(), value_dtype(x.data, m.dtype, w.store + ": " + p),
                              enc("array", "0.2.0"), w.spec);
        }
      },
      m.m);
}

void write_matrix_dict(const Writer& w, const std::string& p, const std::map<std::string, Matrix>& ms) {
  zarr::write_group(w.dir(p), w.spec.format, enc("dict", "0.1.0"));
  for (const auto& [k, m] : ms) write_matrix(w, p, k, m);
}

void write_column(const Writer& w, const std::string& df, const std::string& name, const Column& col) {
  check_key(w, df, name);
  const std::string p = join(df, name);
  const int64_t n = col.size();
  std::visit(
      [&](const auto& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, NumericColumn>) {
          DType dt = c.dtype == DType::boolean ? DType::f64 : c.dtype;
          dt = value_dtype(c.values, dt, w.store + ": " + p);
          zarr::write_numeric(w.dir(p), {n}, c.values.data(), dt, enc("array", "0.2.0"), w.spec);
        } else if constexpr (std::is_same_v<C, BoolColumn>) {
          zarr::write_numeric(w.dir(p), {n}, c.values.data(), DType::boolean, enc("array", "0.2.0"), w.spec);
        } else if constexpr (std::is_same_v<C, StringColumn>) {
          zarr::write_strings(w.dir(p), {n}, c.values.data(), enc("string-array", "0.2.0"), w.spec);
        } else {
          Json a = enc("categorical", "0.2.0");
          a["ordered"] = c.ordered;
          zarr::write_group(w.dir(p), w.spec.format, a);
          const size_t nc = c.categories.size();
          const DType ct = nc < 127 ? DType::i8 : nc < 32767 ? DType::i16 : DType::i32;
          zarr::write_numeric(w.dir(p + "/codes"), {n}, c.codes.data(), ct, enc("array", "0.2.0"), w.spec);
          zarr::write_strings(w.dir(p + "/categories"), {static_cast<int64_t>(nc)}, c.categories.data(),
                              enc("string-array", "0.2.0"), w.spec);
        }
      },
      col.c);
}

void write_dataframe(const Writer& w, const std::string& p, const Table& t) {
  if (t.unnamed()) fail_input(w.store, "/", p, ": its rows have no names (an unnamed table cannot be written)");
  const std::string index_name = t.index_name.empty() ? "_index" : t.index_name;
  check_key(w, p, index_name);
  Json a = enc("dataframe", "0.2.0");
  a["_index"] = index_name;
  a["column-order"] = t.names();
  zarr::write_group(w.dir(p), w.spec.format, a);
  zarr::write_strings(w.dir(join(p, index_name)), {t.n_rows()}, t.index.data(), enc("string-array", "0.2.0"), w.spec);
  for (const auto& c : t.names()) {
    if (c == index_name) fail_input(w.store, p, ": column '", c, "' has the same name as the index; rename it");
    write_column(w, p, c, t.at(c));
  }
}

void write_value(const Writer& w, const std::string& parent, const std::string& name, const Value& v) {
  check_key(w, parent, name);
  const std::string p = join(parent, name);
  zarr::ArrayWriteSpec scalar = w.spec;
  scalar.codec = zarr::CodecChoice::none;  // anndata writes scalars uncompressed
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          // None: anndata writes nothing for it either.
        } else if constexpr (std::is_same_v<X, Dict>) {
          zarr::write_group(w.dir(p), w.spec.format, enc("dict", "0.1.0"));
          for (const auto& [k, val] : x) write_value(w, p, k, val);
        } else if constexpr (std::is_same_v<X, std::string>) {
          zarr::write_string_scalar(w.dir(p), x, enc("string", "0.2.0"), scalar);
        } else if constexpr (std::is_same_v<X, std::vector<std::string>>) {
          zarr::write_strings(w.dir(p), {static_cast<int64_t>(x.size())}, x.data(), enc("string-array", "0.2.0"), w.spec);
        } else if constexpr (std::is_same_v<X, double>) {
          zarr::write_numeric(w.dir(p), {}, &x, DType::f64, enc("numeric-scalar", "0.2.0"), scalar);
        } else if constexpr (std::is_same_v<X, int64_t>) {
          zarr::write_numeric(w.dir(p), {}, &x, DType::i64, enc("numeric-scalar", "0.2.0"), scalar);
        } else if constexpr (std::is_same_v<X, bool>) {
          const uint8_t b = x ? 1 : 0;
          zarr::write_numeric(w.dir(p), {}, &b, DType::boolean, enc("numeric-scalar", "0.2.0"), scalar);
        } else if constexpr (std::is_same_v<X, Table>) {
          write_dataframe(w, p, x);
        } else if constexpr (std::is_same_v<X, RecArray>) {
          zarr::write_records(w.dir(p), x, enc("rec-array", "0.2.0"), w.spec);
        } else {
          int64_t n = 1;
          for (auto s : x.shape) n *= s;
          if (x.shape.empty() || n != static_cast<int64_t>(x.data.size()))
            fail_input(w.store, p, ": array shape does not match its ", x.data.size(), " values");
          const DType dt = value_dtype(x.data, x.dtype, w.store + ": " + p);
          zarr::write_numeric(w.dir(p), x.shape, x.data.data(), dt, enc("array", "0.2.0"), w.spec);
        }
      },
      v.v);
}

std::string random_suffix(const char* tag) {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, ".%s-%08x", tag, static_cast<unsigned>(rd()));
  return buf;
}

std::string strip_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool looks_like_zarr(const fs::path& d) {
  std::error_code ec;
  for (const char* f : {".zgroup", ".zattrs", "zarr.json"})
    if (fs::exists(d / f, ec)) return true;
  return false;
}

// ---- summary --------------------------------------------------------------------------------------

void summarize_group(const Store& s, const std::string& p, const std::string& prefix, std::vector<SlotInfo>& out);

void summarize_child(const Store& s, const std::string& p, const std::string& name, std::vector<SlotInfo>& out) {
  SlotInfo info;
  info.name = name;
  const Json a = s.attrs(p);
  info.encoding = attr_string(a, "encoding-type");
  const NodeKind k = s.kind(p);
  if (k == NodeKind::array) {
    const zarr::ArrayMeta m = s.array_meta(p);
    if (info.encoding.empty()) info.encoding = m.elem != zarr::Elem::numeric ? "string-array" : "array";
    info.dtype = m.type_name();
    info.shape = m.shape;
    out.push_back(std::move(info));
    return;
  }
  if (k != NodeKind::group) return;
  if (info.encoding.empty() && a.contains("h5sparse_format")) info.encoding = attr_string(a, "h5sparse_format");
  const std::string e = info.encoding;
  if (is_sparse_encoding(e)) {
    if (s.kind(join(p, "data")) == NodeKind::array) info.dtype = s.array_meta(join(p, "data")).type_name();
    if (a.contains("shape")) info.shape = a["shape"].get<std::vector<int64_t>>();
    out.push_back(std::move(info));
  } else if (e == "categorical") {
    if (s.kind(join(p, "codes")) == NodeKind::array) {
      info.dtype = "category";
      info.shape = s.array_meta(join(p, "codes")).shape;
    }
    out.push_back(std::move(info));
  } else if (e == "dataframe") {
    const std::string idx = attr_string(a, "_index", "_index");
    int64_t rows = 0;
    if (s.kind(join(p, idx)) == NodeKind::array) rows = s.array_meta(join(p, idx)).size();
    std::vector<std::string> cols;
    if (a.contains("column-order") && a["column-order"].is_array())
      for (const auto& c : a["column-order"])
        if (c.is_string()) cols.push_back(c.get<std::string>());
    info.shape = {rows, static_cast<int64_t>(cols.size())};
    const std::string here = info.name;
    out.push_back(std::move(info));
    for (const auto& c : cols)
      if (s.kind(join(p, c)) != NodeKind::missing) summarize_child(s, join(p, c), here + "/" + c, out);
  } else if (e.empty() || e == "dict" || e == "raw") {
    if (info.encoding.empty()) info.encoding = "dict";
    const std::string here = info.name;
    out.push_back(std::move(info));
    summarize_group(s, p, here, out);
  } else {
    out.push_back(std::move(info));
  }
}

void summarize_group(const Store& s, const std::string& p, const std::string& prefix, std::vector<SlotInfo>& out) {
  for (const auto& c : s.children(p)) summarize_child(s, join(p, c), prefix.empty() ? c : prefix + "/" + c, out);
}

}  // namespace

// ---- public -----------------------------------------------------------------------------------------

ZarrCodec parse_zarr_codec(const std::string& s) {
  if (s == "blosc-lz4" || s == "blosc") return ZarrCodec::blosc_lz4;
  if (s == "blosc-zstd") return ZarrCodec::blosc_zstd;
  if (s == "zstd") return ZarrCodec::zstd;
  if (s == "gzip") return ZarrCodec::gzip;
  if (s == "none") return ZarrCodec::none;
  fail_input("--zarr-codec", "unknown codec '", s, "' (blosc-lz4, blosc-zstd, zstd, gzip or none)");
}

Dataset read_zarr(const std::string& dir_in, const H5adReadOptions& opt) {
  const std::string dir = strip_slashes(dir_in);
  Store s(dir);
  Reader r{s, default_threads()};
  if (s.kind("") != NodeKind::group) fail_input(dir, "the root of the store is not a group");
  const std::string root_enc = encoding_of(s, "");
  if (!root_enc.empty() && root_enc != "anndata")
    fail_input(dir, "wrong root encoding-type '", root_enc, "', expected 'anndata' (not an AnnData store?)");
  Dataset d;
  d.obs = read_dataframe(r, "obs");
  d.var = read_dataframe(r, "var");
  if (s.kind("X") == NodeKind::missing) fail_input(dir, "missing X matrix (this reader needs X; is it an AnnData store?)");
  if (opt.read_x) d.X = *read_matrix(r, "X", true, opt.x_tap);
  if (opt.read_layers) d.layers = read_matrix_dict(r, "layers");
  d.obsm = read_matrix_dict(r, "obsm");
  d.varm = read_matrix_dict(r, "varm");
  d.obsp = read_matrix_dict(r, "obsp");
  d.varp = read_matrix_dict(r, "varp");
  if (s.kind("uns") == NodeKind::group) d.uns = read_dict(r, "uns");
  d.check_shapes(dir);
  if (opt.read_raw && s.kind("raw") == NodeKind::group) {
    auto raw = std::make_shared<Dataset>();
    if (s.kind("raw/X") == NodeKind::missing) fail_input(dir, "raw: missing raw/X");
    raw->X = *read_matrix(r, "raw/X", true);
    raw->var = read_dataframe(r, "raw/var");
    raw->varm = read_matrix_dict(r, "raw/varm");
    d.raw = std::move(raw);
    d.check_shapes(dir);  // raw's shapes
  }
  return d;
}

void write_zarr(const Dataset& d, const std::string& dir_in, const ZarrWriteOptions& opt) {
  if (d.pending_x) fail("internal: writing a dataset whose X is still being copied; settle() it first");
  const std::string dir = strip_slashes(dir_in);
  d.check_shapes(dir);
  if (d.X.empty()) fail_input(dir, "cannot write: X is empty");
  if (opt.format != 2 && opt.format != 3) fail_input(dir, "zarr format must be 2 or 3, not ", opt.format);
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && looks_like_zarr(dir)))
    fail_input(dir, "exists and is not a zarr store; refusing to replace it (remove it or choose another name)");
  TempOutput tmp(dir, true);  // removed on failure, on SIGINT/SIGTERM/SIGHUP, or as stale by a later write
  Writer w;
  w.store = dir;
  w.root = tmp.name();
  w.spec.format = opt.format;
  w.spec.codec = opt.codec == ZarrCodec::blosc_lz4    ? zarr::CodecChoice::blosc_lz4
                 : opt.codec == ZarrCodec::blosc_zstd ? zarr::CodecChoice::blosc_zstd
                 : opt.codec == ZarrCodec::zstd    ? zarr::CodecChoice::zstd
                 : opt.codec == ZarrCodec::gzip    ? zarr::CodecChoice::gzip
                                                   : zarr::CodecChoice::none;
  w.spec.level = opt.level;
  w.spec.chunk_rows = opt.chunk_rows;
  w.spec.chunk_elems = opt.chunk_elems;
  w.spec.threads = opt.threads > 0 ? opt.threads : default_threads();
  try {
    zarr::write_group(w.root, opt.format, enc("anndata", "0.1.0"));
    write_matrix(w, "", "X", d.X);
    write_dataframe(w, "obs", d.obs);
    write_dataframe(w, "var", d.var);
    write_matrix_dict(w, "layers", d.layers);
    write_matrix_dict(w, "obsm", d.obsm);
    write_matrix_dict(w, "varm", d.varm);
    write_matrix_dict(w, "obsp", d.obsp);
    write_matrix_dict(w, "varp", d.varp);
    zarr::write_group(w.dir("uns"), opt.format, enc("dict", "0.1.0"));
    for (const auto& [k, v] : d.uns) write_value(w, "uns", k, v);
    if (d.raw && !d.raw->X.empty()) {
      const auto& r = *d.raw;
      if (r.X.n_rows() != d.n_obs() || r.X.n_cols() != r.var.n_rows())
        fail_input(dir, "raw/X has shape ", r.X.n_rows(), "x", r.X.n_cols(), " but obs has ", d.n_obs(),
                   " rows and raw/var ", r.var.n_rows());
      zarr::write_group(w.dir("raw"), opt.format, enc("raw", "0.1.0"));
      write_matrix(w, "raw", "X", r.X);
      write_dataframe(w, "raw/var", r.var);
      write_matrix_dict(w, "raw/varm", r.varm);
    }
    // Into place: an existing store is moved aside first and removed after the rename.
    std::string old;
    if (fs::exists(dir, ec)) {
      old = dir + random_suffix("old");
      fs::rename(dir, old, ec);
      if (ec) fail_input(dir, "cannot move the existing store aside: ", ec.message());
    }
    fs::rename(w.root, dir, ec);
    if (ec) {
      std::error_code ec2;
      if (!old.empty()) fs::rename(old, dir, ec2);
      fail_input(dir, "cannot move the finished store into place: ", ec.message());
    }
    tmp.release();
    if (!old.empty()) fs::remove_all(old, ec);
  } catch (...) {
    rethrow_naming_output(tmp.name(), dir);  // messages name the store, not the temporary
  }
}

H5adSummary summarize_zarr(const std::string& dir_in) {
  const std::string dir = strip_slashes(dir_in);
  Store s(dir);
  H5adSummary out;
  out.anndata_encoding_version = attr_string(s.attrs(""), "encoding-version");
  auto index_len = [&](const std::string& df) -> int64_t {
    if (s.kind(df) != NodeKind::group) fail_input(dir, "missing '", df, "' dataframe: not an AnnData store?");
    const std::string idx = attr_string(s.attrs(df), "_index", "_index");
    if (s.kind(join(df, idx)) != NodeKind::array) fail_input(s.where(df), ": the index array '", idx, "' is missing");
    return s.array_meta(join(df, idx)).size();
  };
  out.n_obs = index_len("obs");
  out.n_vars = index_len("var");
  const NodeKind xk = s.kind("X");
  if (xk == NodeKind::missing) fail_input(dir, "missing X matrix");
  if (xk == NodeKind::array) {
    const auto m = s.array_meta("X");
    out.x_encoding = "array";
    out.x_dtype = m.type_name();
    out.x_nnz = m.size();
  } else {
    const Json a = s.attrs("X");
    out.x_encoding = attr_string(a, "encoding-type");
    if (out.x_encoding.empty()) out.x_encoding = attr_string(a, "h5sparse_format") + "_matrix";
    if (s.kind("X/data") != NodeKind::array) fail_input(s.where("X"), ": missing X/data");
    const auto m = s.array_meta("X/data");
    out.x_dtype = m.type_name();
    out.x_nnz = m.size();
  }
  summarize_group(s, "", "", out.slots);
  return out;
}

// ---- row reader -----------------------------------------------------------------------------------

struct ZarrRowReader::Impl {
  std::string dir, slot;
  std::unique_ptr<Store> store;
  int threads = 1;
  bool dense = false, csc = false;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> indptr;
  std::optional<Array> data, indices, dense_arr;
  std::optional<CsrF> whole;

  std::string where() const { return store->where(slot); }
  void load_whole() {
    if (whole) return;
    Reader r{*store, threads};
    whole = to_csr_f(*read_matrix(r, slot, true));
  }
};

ZarrRowReader::ZarrRowReader(const std::string& dir, const std::string& slot, int threads)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.dir = strip_slashes(dir);
  m.slot = slot;
  m.store = std::make_unique<Store>(m.dir);
  m.threads = threads > 0 ? threads : default_threads();
  const Store& s = *m.store;
  const NodeKind k = s.kind(slot);
  if (k == NodeKind::missing) fail_input(m.dir, "missing matrix '", slot, "'");
  if (k == NodeKind::array) {
    m.dense_arr.emplace(s, slot);
    if (m.dense_arr->rank() != 2) fail_input(m.where(), ": dense matrix must be 2-D");
    (void)m.dense_arr->dtype();  // numeric check
    m.dense = true;
    m.rows = m.dense_arr->shape()[0];
    m.cols = m.dense_arr->shape()[1];
    if (m.cols > kInt32Max) fail_input(m.where(), ": too many columns for 32-bit indices");
    return;
  }
  const Json a = s.attrs(slot);
  std::string e = attr_string(a, "encoding-type");
  if (e.empty()) e = attr_string(a, "h5sparse_format");
  if (!is_sparse_encoding(e))
    fail_input(m.where(), ": unknown encoding-type '", e, "' for a matrix (expected csr_matrix, csc_matrix or array)");
  Reader r{s, m.threads};
  const auto shape = sparse_shape(r, slot, a);
  m.rows = shape[0];
  m.cols = shape[1];
  if (e == "csc_matrix" || e == "csc") {
    m.csc = true;
    if (m.rows > kInt32Max) fail_input(m.where(), ": too many rows for 32-bit indices");
    return;
  }
  if (m.cols > kInt32Max) fail_input(m.where(), ": too many columns for 32-bit indices");
  m.data.emplace(open_array(r, join(slot, "data")));
  m.indices.emplace(open_array(r, join(slot, "indices")));
  m.data->require_chunks();  // a lost chunk is an error, not fill_value (zarr_store.hpp)
  m.indices->require_chunks();
  (void)m.data->dtype();
  Array ip = open_array(r, join(slot, "indptr"));
  ip.require_chunks();
  m.indptr = ip.read_all<int64_t>(m.threads);
  if (static_cast<int64_t>(m.indptr.size()) != m.rows + 1)
    fail_input(m.where(), ": indptr has length ", m.indptr.size(), " but the shape needs ", m.rows + 1,
               " (wrong indptr length)");
  if (m.data->rank() != 1 || m.indices->rank() != 1 || m.data->size() != m.indices->size())
    fail_input(m.where(), ": data and indices must be 1-D arrays of equal length");
  if (m.indptr[0] != 0) fail_input(m.where(), ": row pointers must start at 0");
  for (int64_t i = 0; i < m.rows; ++i)
    if (m.indptr[i + 1] < m.indptr[i]) fail_input(m.where(), ": row pointers decrease at row ", i);
  if (m.indptr.back() != m.data->size())
    fail_input(m.where(), ": last row pointer ", m.indptr.back(), " does not equal the number of stored values ",
               m.data->size());
}

ZarrRowReader::~ZarrRowReader() = default;
int64_t ZarrRowReader::n_rows() const { return impl_->rows; }
int64_t ZarrRowReader::n_cols() const { return impl_->cols; }
int64_t ZarrRowReader::nnz() const {
  if (impl_->dense) return impl_->rows * impl_->cols;
  if (impl_->csc) return Array(*impl_->store, join(impl_->slot, "data")).size();
  return impl_->indptr.back();
}

CsrF ZarrRowReader::read_rows(int64_t begin, int64_t end) {
  Impl& m = *impl_;
  if (begin < 0 || end < begin || end > m.rows)
    fail("ZarrRowReader::read_rows: rows [", begin, ", ", end, ") out of range [0, ", m.rows, ")");
  if (m.csc) {
    m.load_whole();
    return slice_rows(*m.whole, begin, end);
  }
  if (m.dense) {
    const auto vals = m.dense_arr->read_rows<float>(begin, end, m.threads);
    return csr_from_dense_rows(vals.data(), end - begin, m.cols);
  }
  CsrF out;
  out.n_rows = end - begin;
  out.n_cols = m.cols;
  out.indptr.assign(static_cast<size_t>(out.n_rows) + 1, 0);
  const int64_t p0 = m.indptr[begin], p1 = m.indptr[end];
  out.indices = m.indices->read_rows<int32_t>(p0, p1, m.threads);
  out.data = m.data->read_rows<float>(p0, p1, m.threads);
  for (int64_t r = 0; r <= out.n_rows; ++r) out.indptr[r] = m.indptr[begin + r] - p0;
  for (size_t p = 0; p < out.indices.size(); ++p)
    if (out.indices[p] < 0 || out.indices[p] >= m.cols)
      fail_input(m.where(), ": column index ", out.indices[p], " at position ", p0 + static_cast<int64_t>(p),
                 " is out of range [0, ", m.cols, ")");
  return out;
}

std::vector<int64_t> ZarrRowReader::row_pointers() {
  Impl& m = *impl_;
  if (m.dense) {
    std::vector<int64_t> ptr(static_cast<size_t>(m.rows) + 1, 0);
    const int64_t block = std::max<int64_t>(1, (int64_t{1} << 24) / std::max<int64_t>(m.cols, 1));
    for (int64_t b = 0; b < m.rows; b += block) {
      const int64_t e = std::min(m.rows, b + block);
      const auto vals = m.dense_arr->read_rows<float>(b, e, m.threads);
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
    m.load_whole();
    return m.whole->indptr;
  }
  return m.indptr;
}

}  // namespace scurry
