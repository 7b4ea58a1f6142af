// scurry: numpy's .npy and .npz formats, enough for pandas DataFrames as cNMF stores them
// (dylkot/cNMF cnmf.py save_df_to_npz: np.savez_compressed(fn, data=df.values,
// index=df.index.values, columns=df.columns.values); load_df_from_npz: pd.DataFrame(**np.load(fn,
// allow_pickle=True))).
//
// .npz: a zip archive of NAME.npy members (numpy's savez_compressed: deflate, zip64 extras in the
// local headers). Written here with zlib: one deflate stream per member, CRC-32, a central
// directory; read through the central directory (stored or deflated members, zip64 sizes).
//
// .npy (NEP 1): magic "\x93NUMPY", version 1.0 (2.0/3.0 read), a Python-literal header dict
// {'descr', 'fortran_order', 'shape'} padded with spaces to a multiple of 64 bytes, then the data.
// Numeric dtypes '<f4', '<f8', '<i4', '<i8', '|b1' (and '<U<n>' fixed unicode, read only), C or
// Fortran order. Object arrays ('|O': what pandas gives for string labels and mixed-type frames)
// hold a pickle: numpy pickles the ndarray with protocol 3 as
//   numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b') + BUILD
//   (1, shape, dtype('O8') + BUILD (3, '|', None, None, None, -1, -1, 63), is_fortran, [items])
// where the list holds the elements in C (row-major) order whatever the flag. The writer emits
// exactly that for items that are str, int or bool; the reader is a small pickle stack machine
// for protocols 2..5 that understands the opcodes Python's pickler uses for these objects (tuples,
// lists, memo get/put, ints of any width, floats, str, bytes, None/True/False, globals, REDUCE of
// numpy scalars, BUILD) and refuses anything else with an error naming the file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/matrix.hpp"

namespace scurry {

// One element of an object array.
struct PyValue {
  enum Kind { none, boolean, integer, real, str } kind = none;
  int64_t i = 0;  // boolean (0/1) and integer
  double d = 0;   // real
  std::string s;  // str (UTF-8)
  static PyValue of(int64_t v) { PyValue p; p.kind = integer; p.i = v; return p; }
  static PyValue of_bool(bool v) { PyValue p; p.kind = boolean; p.i = v; return p; }
  static PyValue of(double v) { PyValue p; p.kind = real; p.d = v; return p; }
  static PyValue of(std::string v) { PyValue p; p.kind = str; p.s = std::move(v); return p; }
  double as_double() const;     // integer, boolean or real; InputError otherwise (caller adds the file)
  std::string as_string() const;  // str as is; integers and booleans as Python's str()
};

// An n-dimensional array in C order.
struct NpyArray {
  std::string descr;  // '<f4', '<f8', '<i8', '|b1', '|O', '<U12', ...
  std::vector<int64_t> shape;
  std::vector<double> numbers;  // numeric dtypes, converted to double, C order
  std::vector<PyValue> objects; // '|O' and '<U..' (as str), C order
  bool is_object() const { return descr == "|O" || descr.rfind("<U", 0) == 0; }
  int64_t size() const;
};

// Raw npy serialisation (C order, version 1.0).
std::string npy_encode_f32(const std::vector<int64_t>& shape, const float* v);
std::string npy_encode_f64(const std::vector<int64_t>& shape, const double* v);
std::string npy_encode_i64(const std::vector<int64_t>& shape, const int64_t* v);
std::string npy_encode_objects(const std::vector<int64_t>& shape, const std::vector<PyValue>& v);
// `where` names the file in errors.
NpyArray npy_decode(const std::string& bytes, const std::string& where);

// Zip members: name -> bytes. The writer deflates each member (level 6, as zipfile's default) and
// writes atomically (temporary name, then rename). Members of 4 GiB or more get zip64 records.
void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members);
std::map<std::string, std::string> read_zip(const std::string& path);

// A labelled table as cNMF's save_df_to_npz writes it. Labels are int64 arrays when `*_int` is set
// (then every label must parse as an integer), else object arrays of str.
struct DfNpz {
  std::vector<std::string> index, columns;
  bool index_int = false, columns_int = false;
  DenseD data;              // numeric view of the values (object entries: int, bool, float)
  std::string data_descr;   // what the file holds ('<f8', '<f4', '|O', ...)
  std::vector<PyValue> objects;  // the raw entries when data_descr is '|O'
};

enum class NpzDtype { f32, f64 };
void write_df_npz(const std::string& path, const std::vector<std::string>& index, bool index_int,
                  const std::vector<std::string>& columns, bool columns_int, const DenseD& data, NpzDtype dtype);
void write_df_npz(const std::string& path, const std::vector<std::string>& index, bool index_int,
                  const std::vector<std::string>& columns, bool columns_int, const DenseF& data);
// Mixed-type frames (cNMF's nmf_params: int columns and a bool column): an object array.
void write_df_npz_objects(const std::string& path, const std::vector<std::string>& index, bool index_int,
                          const std::vector<std::string>& columns, bool columns_int, int64_t n_rows,
                          const std::vector<PyValue>& values_row_major);
// InputError naming the path when the file is not such a table.
DfNpz read_df_npz(const std::string& path);

}  // namespace scurry
