// scurry Python binding: conversions between Python objects (numpy arrays, scipy sparse matrices,
// pandas columns, uns values) and scurry's Dataset slots. Checked at the boundary: a wrong type or
// shape raises TypeError / ValueError naming the slot.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "core/dataset.hpp"

namespace scurry::py_binding {

namespace py = pybind11;

// numpy ndarray (2-D; any numeric dtype) or scipy.sparse csr/csc matrix (float32/float64 or
// integer values; int32 or int64 indices) -> Matrix (CSR for sparse input; copies). `where` names
// the slot in errors ("X", "layers['counts']").
Matrix matrix_from_py(py::handle obj, const std::string& where);
// Matrix -> numpy ndarray or scipy.sparse.csr_matrix. The buffers are moved out of `m` into the
// arrays (no copy); m is left empty.
py::object matrix_to_py(Matrix&& m);

// pandas Series / numpy array / list -> Column: numeric, bool, categorical (pandas Categorical) or
// strings (object/str arrays).
Column column_from_py(py::handle obj, const std::string& where);
// Column -> numpy array (numeric in its dtype, bool), pandas.Categorical, or numpy object array.
py::object column_to_py(const Column& c);
// A 0/1 mask as a numpy bool array (the filters' keep masks).
py::array_t<bool> bool_array(const std::vector<uint8_t>& v);
// The same, a numeric column's values moved into the array (no copy of float64); `c` is left empty.
py::object column_to_py(Column&& c);

// uns values: dict, str, bool, int, float, numpy arrays (numeric, bool, str, structured), lists of
// str, pandas DataFrame, None.
Value value_from_py(py::handle obj, const std::string& where);
py::object value_to_py(const Value& v);

// pandas DataFrame <-> Table (index from df.index as strings).
Table table_from_py(py::handle df, const std::string& where);
py::object table_to_py(const Table& t);

DType dtype_from_numpy(py::dtype dt);
py::dtype numpy_dtype(DType t);

}  // namespace scurry::py_binding
