// scurry Python binding: Python objects <-> Dataset slots (see convert.hpp).
#include "convert.hpp"

#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <memory>

#include "core/error.hpp"

namespace scurry::py_binding {

namespace {

py::module_ numpy() { return py::module_::import("numpy"); }
py::module_ pandas() { return py::module_::import("pandas"); }

// A 1-D numpy array owning `v` (moved into a capsule: no copy).
template <class T>
py::array vec_to_array(std::vector<T>&& v) {
  auto* p = new std::vector<T>(std::move(v));
  py::capsule owner(p, [](void* q) { delete static_cast<std::vector<T>*>(q); });
  return py::array_t<T>({static_cast<py::ssize_t>(p->size())}, {static_cast<py::ssize_t>(sizeof(T))}, p->data(),
                        owner);
}
template <class T>
py::array vec_to_array_2d(std::vector<T>&& v, int64_t rows, int64_t cols) {
  auto* p = new std::vector<T>(std::move(v));
  py::capsule owner(p, [](void* q) { delete static_cast<std::vector<T>*>(q); });
  return py::array_t<T>({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)},
                        {static_cast<py::ssize_t>(cols * sizeof(T)), static_cast<py::ssize_t>(sizeof(T))}, p->data(),
                        owner);
}

bool is_numeric_kind(char k) { return k == 'f' || k == 'i' || k == 'u' || k == 'b'; }

// Copies a 1-D numeric array into a vector<T> (converting the element type).
template <class T>
std::vector<T> to_vector(py::handle a) {
  auto arr = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!arr) throw py::type_error("cannot convert an array to a numeric vector");
  std::vector<T> v(static_cast<size_t>(arr.size()));
  if (!v.empty()) std::memcpy(v.data(), arr.data(), v.size() * sizeof(T));
  return v;
}

template <class T>
Csr<T> csr_from_parts(py::handle data, py::handle indices, py::handle indptr, int64_t rows, int64_t cols,
                      const std::string& where) {
  Csr<T> m;
  m.n_rows = rows;
  m.n_cols = cols;
  m.data = to_vector<T>(data);
  m.indptr = to_vector<int64_t>(indptr);
  if (cols > std::numeric_limits<int32_t>::max())
    throw py::value_error(where + ": " + std::to_string(cols) + " columns do not fit scurry's 32-bit column indices");
  py::array ia = py::array::ensure(indices);
  if (!ia) throw py::type_error(where + ": indices are not an array");
  if (ia.dtype().kind() != 'i' && ia.dtype().kind() != 'u')
    throw py::type_error(where + ": indices have dtype " + std::string(py::str(ia.dtype())) + " (an integer dtype is needed)");
  if (ia.dtype().itemsize() == 4 && ia.dtype().kind() == 'i') {
    m.indices = to_vector<int32_t>(ia);
  } else {
    auto wide = to_vector<int64_t>(ia);
    m.indices.resize(wide.size());
    for (size_t i = 0; i < wide.size(); ++i) {
      if (wide[i] < 0 || wide[i] >= cols)
        throw py::value_error(where + ": index " + std::to_string(wide[i]) + " at position " + std::to_string(i) +
                              " is outside [0, " + std::to_string(cols) + ")");
      m.indices[i] = static_cast<int32_t>(wide[i]);
    }
  }
  if (static_cast<int64_t>(m.indptr.size()) != rows + 1)
    throw py::value_error(where + ": indptr has " + std::to_string(m.indptr.size()) + " entries but the matrix has " +
                          std::to_string(rows) + " rows (" + std::to_string(rows + 1) + " expected)");
  if (m.indices.size() != m.data.size())
    throw py::value_error(where + ": " + std::to_string(m.indices.size()) + " indices but " +
                          std::to_string(m.data.size()) + " values");
  validate_csr(m, where);
  return m;
}

template <class T>
Dense<T> dense_from_array(py::handle a, int64_t rows, int64_t cols) {
  Dense<T> d;
  d.n_rows = rows;
  d.n_cols = cols;
  d.data = to_vector<T>(a);
  return d;
}

}  // namespace

DType dtype_from_numpy(py::dtype dt) {
  const char k = dt.kind();
  const int s = static_cast<int>(dt.itemsize());
  if (k == 'f') return s == 8 ? DType::f64 : DType::f32;
  if (k == 'b') return DType::boolean;
  if (k == 'i') return s == 1 ? DType::i8 : s == 2 ? DType::i16 : s == 4 ? DType::i32 : DType::i64;
  if (k == 'u') return s == 1 ? DType::u8 : s == 2 ? DType::u16 : s == 4 ? DType::u32 : DType::u64;
  throw py::type_error("dtype " + std::string(py::str(dt)) + " is not numeric");
}

py::dtype numpy_dtype(DType t) { return py::dtype(dtype_name(t)); }

Matrix matrix_from_py(py::handle obj, const std::string& where) {
  if (obj.is_none()) throw py::value_error(where + " is empty (None)");
  if (py::hasattr(obj, "indptr") && py::hasattr(obj, "format")) {
    const std::string fmt = py::str(obj.attr("format"));
    if (fmt != "csr" && fmt != "csc")
      throw py::type_error(where + ": a scipy sparse '" + fmt + "' matrix is not supported (csr, csc or a numpy array)");
    py::tuple shape = obj.attr("shape");
    const int64_t r = shape[0].cast<int64_t>(), c = shape[1].cast<int64_t>();
    const bool csc = fmt == "csc";
    const int64_t rows = csc ? c : r, cols = csc ? r : c;  // as stored
    py::array data = py::array::ensure(obj.attr("data"));
    if (!data || !is_numeric_kind(data.dtype().kind()))
      throw py::type_error(where + ": values of dtype " + std::string(py::str(obj.attr("dtype"))) +
                           " are not numeric");
    const DType dt = dtype_from_numpy(data.dtype());
    if (dt == DType::f64) {
      auto m = csr_from_parts<double>(data, obj.attr("indices"), obj.attr("indptr"), rows, cols, where);
      return csc ? Matrix(transpose(m), dt) : Matrix(std::move(m), dt);
    }
    auto m = csr_from_parts<float>(data, obj.attr("indices"), obj.attr("indptr"), rows, cols, where);
    return csc ? Matrix(transpose(m), dt) : Matrix(std::move(m), dt);
  }
  if (py::isinstance<py::array>(obj)) {
    py::array a = py::reinterpret_borrow<py::array>(obj);
    if (a.ndim() != 2) throw py::value_error(where + ": a " + std::to_string(a.ndim()) + "-D array (2-D needed)");
    if (!is_numeric_kind(a.dtype().kind()))
      throw py::type_error(where + ": dtype " + std::string(py::str(a.dtype())) + " is not numeric");
    const DType dt = dtype_from_numpy(a.dtype());
    if (dt == DType::f64) return Matrix(dense_from_array<double>(a, a.shape(0), a.shape(1)), dt);
    return Matrix(dense_from_array<float>(a, a.shape(0), a.shape(1)), dt);
  }
  const std::string tname = py::str(py::type::of(obj).attr("__name__"));
  throw py::type_error(where + ": a " + tname +
                       " is not supported (a numpy array or a scipy.sparse csr/csc matrix is; a backed AnnData must be "
                       "loaded into memory first: adata = adata.to_memory())");
}

py::object matrix_to_py(Matrix&& m) {
  py::module_ sp = py::module_::import("scipy.sparse");
  return std::visit(
      [&](auto&& x) -> py::object {
        using M = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<M, std::monostate>) {
          return py::none();
        } else if constexpr (std::is_same_v<M, CsrF> || std::is_same_v<M, CsrD>) {
          const int64_t r = x.n_rows, c = x.n_cols;
          py::array data = vec_to_array(std::move(x.data));
          py::array ind = vec_to_array(std::move(x.indices));
          py::array ptr = vec_to_array(std::move(x.indptr));
          return sp.attr("csr_matrix")(py::make_tuple(data, ind, ptr), py::arg("shape") = py::make_tuple(r, c));
        } else {
          return vec_to_array_2d(std::move(x.data), x.n_rows, x.n_cols);
        }
      },
      m.m);
}

Column column_from_py(py::handle obj, const std::string& where) {
  py::module_ pd = pandas();
  py::object dtype = py::getattr(obj, "dtype", py::none());
  if (!dtype.is_none() && py::isinstance(dtype, pd.attr("CategoricalDtype"))) {
    py::object cat = py::hasattr(obj, "cat") ? obj.attr("cat") : py::reinterpret_borrow<py::object>(obj);
    CategoricalColumn c;
    for (auto x : cat.attr("categories")) c.categories.push_back(py::str(x));
    c.codes = to_vector<int32_t>(numpy().attr("asarray")(cat.attr("codes")));
    c.ordered = cat.attr("ordered").cast<bool>();
    return c;
  }
  py::array a = numpy().attr("asarray")(obj);
  if (a.ndim() != 1) throw py::value_error(where + ": a " + std::to_string(a.ndim()) + "-D column (1-D needed)");
  const char k = a.dtype().kind();
  if (k == 'b') return Column::boolean(to_vector<uint8_t>(a.attr("astype")("uint8")));
  if (k == 'f' || k == 'i' || k == 'u') return Column::numeric(to_vector<double>(a), dtype_from_numpy(a.dtype()));
  std::vector<std::string> s;
  s.reserve(static_cast<size_t>(a.size()));
  for (auto x : a) s.push_back(py::str(x));
  return Column::strings(std::move(s));
}

py::object column_to_py(const Column& col) {
  return std::visit(
      [&](const auto& c) -> py::object {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, NumericColumn>) {
          py::array a = py::array_t<double>(static_cast<py::ssize_t>(c.values.size()), c.values.data());
          return a.attr("astype")(numpy_dtype(c.dtype), py::arg("copy") = false);  // (float64: the one copy above)
        } else if constexpr (std::is_same_v<C, BoolColumn>) {
          py::array a = py::array_t<uint8_t>(static_cast<py::ssize_t>(c.values.size()), c.values.data());
          return a.attr("astype")("bool");
        } else if constexpr (std::is_same_v<C, CategoricalColumn>) {
          py::array codes = py::array_t<int32_t>(static_cast<py::ssize_t>(c.codes.size()), c.codes.data());
          py::list cats;
          for (const auto& s : c.categories) cats.append(py::str(s));
          return pandas().attr("Categorical").attr("from_codes")(codes, py::arg("categories") = cats,
                                                                 py::arg("ordered") = c.ordered);
        } else {
          py::list l;
          for (const auto& s : c.values) l.append(py::str(s));
          return numpy().attr("array")(l, py::arg("dtype") = "object");
        }
      },
      col.c);
}

py::array_t<bool> bool_array(const std::vector<uint8_t>& v) {
  py::array_t<bool> a(static_cast<py::ssize_t>(v.size()));
  auto* p = a.mutable_data();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i] != 0;
  return a;
}

py::object column_to_py(Column&& col) {
  if (auto* c = std::get_if<NumericColumn>(&col.c)) {  // the values moved, not copied (one conversion when not float64)
    const auto dtype = numpy_dtype(c->dtype);
    return vec_to_array(std::move(c->values)).attr("astype")(dtype, py::arg("copy") = false);
  }
  return column_to_py(static_cast<const Column&>(col));
}

Table table_from_py(py::handle df, const std::string& where) {
  Table t;
  for (auto x : df.attr("index")) t.index.push_back(py::str(x));
  py::object name = df.attr("index").attr("name");
  if (!name.is_none()) t.index_name = py::str(name);
  for (auto c : df.attr("columns")) {
    const std::string n = py::str(c);
    t.set(n, column_from_py(df.attr("__getitem__")(c), where + "['" + n + "']"));
  }
  return t;
}

py::object table_to_py(const Table& t) {
  py::module_ pd = pandas();
  py::list idx;
  for (const auto& s : t.index) idx.append(py::str(s));
  py::object index = pd.attr("Index")(idx, py::arg("dtype") = "object");
  if (t.index_name != "_index") index.attr("name") = py::str(t.index_name);
  py::dict cols;
  for (const auto& n : t.names()) cols[py::str(n)] = column_to_py(t.at(n));
  py::object df = pd.attr("DataFrame")(cols, py::arg("index") = index);
  return df;
}

Value value_from_py(py::handle obj, const std::string& where) {
  if (obj.is_none()) return Value();
  if (py::isinstance<py::bool_>(obj)) return Value(obj.cast<bool>());
  if (py::isinstance<py::int_>(obj)) return Value(obj.cast<int64_t>());
  if (py::isinstance<py::float_>(obj)) return Value(obj.cast<double>());
  if (py::isinstance<py::str>(obj)) return Value(obj.cast<std::string>());
  if (py::isinstance<py::dict>(obj) ||
      py::isinstance(obj, py::module_::import("collections.abc").attr("Mapping"))) {  // anndata's OverloadedDict too
    Dict d;
    for (auto k_obj : obj.attr("keys")()) {
      const std::string k = py::str(k_obj);
      d[k] = value_from_py(obj.attr("__getitem__")(k_obj), where + "['" + k + "']");
    }
    return Value(std::move(d));
  }
  py::module_ pd = pandas();
  if (py::isinstance(obj, pd.attr("DataFrame"))) return Value(table_from_py(obj, where));
  py::module_ np = numpy();
  if (py::isinstance(obj, np.attr("generic"))) return value_from_py(obj.attr("item")(), where);
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    bool all_str = true;
    for (auto x : obj) all_str = all_str && py::isinstance<py::str>(x);
    if (all_str) {
      std::vector<std::string> s;
      for (auto x : obj) s.push_back(py::str(x));
      return Value(std::move(s));
    }
    return value_from_py(np.attr("asarray")(obj), where);
  }
  if (py::isinstance<py::array>(obj)) {
    py::array a = py::reinterpret_borrow<py::array>(obj);
    py::object names = a.dtype().attr("names");
    if (!names.is_none()) {  // structured (record) array
      RecArray r;
      r.n = a.size();
      for (auto nm : names) {
        RecField f;
        f.name = py::str(nm);
        py::array col = np.attr("asarray")(a.attr("__getitem__")(nm));
        const char k = col.dtype().kind();
        if (is_numeric_kind(k)) {
          f.dtype = dtype_from_numpy(col.dtype());
          f.num = to_vector<double>(col);
        } else {
          f.is_string = true;
          for (auto x : col) f.str.push_back(py::str(x));
        }
        r.fields.push_back(std::move(f));
      }
      return Value(std::move(r));
    }
    const char k = a.dtype().kind();
    if (is_numeric_kind(k)) {
      NumArray n;
      for (py::ssize_t i = 0; i < a.ndim(); ++i) n.shape.push_back(a.shape(i));
      n.dtype = dtype_from_numpy(a.dtype());
      n.data = to_vector<double>(a);
      return Value(std::move(n));
    }
    std::vector<std::string> s;
    for (auto x : a.attr("ravel")()) s.push_back(py::str(x));
    return Value(std::move(s));
  }
  const std::string tname = py::str(py::type::of(obj).attr("__name__"));
  throw py::type_error(where + ": a " + tname + " cannot be passed to scurry");
}

py::object value_to_py(const Value& val) {
  return std::visit(
      [&](const auto& v) -> py::object {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::monostate>) {
          return py::none();
        } else if constexpr (std::is_same_v<V, Dict>) {
          py::dict d;
          for (const auto& [k, x] : v) d[py::str(k)] = value_to_py(x);
          return d;
        } else if constexpr (std::is_same_v<V, std::string>) {
          return py::str(v);
        } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          py::list l;
          for (const auto& s : v) l.append(py::str(s));
          return numpy().attr("array")(l, py::arg("dtype") = "object");
        } else if constexpr (std::is_same_v<V, double>) {
          return py::float_(v);
        } else if constexpr (std::is_same_v<V, int64_t>) {
          return py::int_(v);
        } else if constexpr (std::is_same_v<V, bool>) {
          return py::bool_(v);
        } else if constexpr (std::is_same_v<V, NumArray>) {
          py::array a = py::array_t<double>(static_cast<py::ssize_t>(v.data.size()), v.data.data());
          py::tuple shape(v.shape.size());
          for (size_t i = 0; i < v.shape.size(); ++i) shape[i] = py::int_(v.shape[i]);
          return a.attr("astype")(numpy_dtype(v.dtype)).attr("reshape")(shape);
        } else if constexpr (std::is_same_v<V, RecArray>) {
          py::list arrays, names;
          for (const auto& f : v.fields) {
            names.append(py::str(f.name));
            if (f.is_string) {
              py::list l;
              for (const auto& s : f.str) l.append(py::str(s));
              arrays.append(numpy().attr("array")(l, py::arg("dtype") = "object"));
            } else {
              py::array a = py::array_t<double>(static_cast<py::ssize_t>(f.num.size()), f.num.data());
              arrays.append(a.attr("astype")(numpy_dtype(f.dtype)));
            }
          }
          return numpy().attr("rec").attr("fromarrays")(arrays, py::arg("names") = names);
        } else {
          return table_to_py(v);
        }
      },
      val.v);
}

}  // namespace scurry::py_binding
