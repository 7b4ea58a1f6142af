// scurry: small RAII wrappers over the HDF5 1.10 C API, used by the h5ad and 10x readers/writers.
// This is the ONE place where HDF5 status codes become errors: every failing call throws
// InputError "<file>: <what> (<object path>)". HDF5's own error stack printing is switched off, so
// a corrupt file never spews to stderr.
//
// Numeric reads let HDF5 convert from the on-disk type to the requested memory type (one H5Dread
// per dataset or hyperslab); h5py's bool enum (int8 FALSE/TRUE) is read as 0/1. Strings may be
// variable- or fixed-length, ASCII or UTF-8. Written strings are variable-length UTF-8, as h5py
// (and so anndata) writes them, except long arrays of near-equal lengths (cell and gene names):
// fixed-length UTF-8, which h5py and anndata read as str too and HDF5 writes far faster.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/array_tap.hpp"
#include "core/dtype.hpp"
#include "core/value.hpp"

namespace scurry::h5 {

// Writes bytes [offset, offset + len) of an array being written to dst (Group::write_from).
using ByteSource = std::function<void(char* dst, size_t offset, size_t len)>;
// [0, len) of src copied to dst on several threads (the writes into mapped files).
void parallel_copy(char* dst, const char* src, size_t len);

// Switches off HDF5's automatic error printing for the calling thread (idempotent, cheap).
void quiet();

// Owns one HDF5 identifier of any kind; released with H5Idec_ref.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Forgets the identifier without releasing it (it was consumed, e.g. by H5Fclose).
  void release() { id_ = H5I_INVALID_HID; }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Throws InputError "<file>: <what> (<object>)".
[[noreturn]] void fail_h5(const std::string& file, const std::string& what, const std::string& object);
// The same for a failed write: when HDF5's error stack records the errno of the system call that
// failed (its file driver does), the error is fail_write's (core/output.hpp): "disk full" for ENOSPC.
[[noreturn]] void fail_h5_write(const std::string& file, const std::string& what, const std::string& object);

enum class Kind { missing, group, dataset, other };

// What a dataset or attribute holds.
struct TypeInfo {
  H5T_class_t cls = H5T_NO_CLASS;
  size_t size = 0;
  bool is_string = false;
  bool is_vlen_string = false;
  bool is_bool = false;       // h5py's bool enum (or a 1-byte enum of FALSE/TRUE)
  bool is_reference = false;  // object reference
  bool is_numeric() const { return cls == H5T_INTEGER || cls == H5T_FLOAT || is_bool; }
};

class Group;
class Dataset;

// A group or dataset: something that carries attributes.
class Node {
 public:
  Node() = default;
  Node(Id id, std::string file, std::string path) : id_(std::move(id)), file_(std::move(file)), path_(std::move(path)) {}
  hid_t id() const { return id_.get(); }
  bool valid() const { return id_.valid(); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  // Path of a child: "/obs" + "leiden" -> "/obs/leiden".
  std::string child_path(const std::string& name) const;
  Kind kind() const;

  bool has_attr(const std::string& name) const;
  std::vector<std::string> attr_names() const;
  TypeInfo attr_type(const std::string& name) const;
  std::vector<int64_t> attr_shape(const std::string& name) const;  // {} for scalars
  // Scalar (or one-element) string attribute.
  std::string attr_string(const std::string& name) const;
  // String attribute "name" if present and a string, else `fallback`.
  std::string attr_string_or(const std::string& name, const std::string& fallback) const;
  // String array attribute (scalar -> one element; an empty array of any type -> empty).
  std::vector<std::string> attr_strings(const std::string& name) const;
  // Numeric attribute, any shape, converted (bool enums -> 0/1).
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<double> attr_doubles(const std::string& name) const;
  bool attr_bool(const std::string& name) const;
  // Dereferences an object-reference attribute (anndata 0.7 categoricals).
  Node attr_deref(const std::string& name) const;

  void set_attr(const std::string& name, const std::string& value) const;  // vlen UTF-8 scalar
  void set_attr(const std::string& name, const char* value) const { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, const std::vector<std::string>& values) const;  // vlen UTF-8 1-D
  void set_attr(const std::string& name, const std::vector<int64_t>& values) const;      // int64 1-D
  void set_attr_bool(const std::string& name, bool value) const;                          // bool enum scalar

  // Reinterpretations (no checks beyond the object kind).
  Group as_group() &&;
  Dataset as_dataset() &&;

  // Checks this object's attribute messages once before libhdf5 decodes them (detail::
  // check_attribute_messages in io/hdf5_vlen.hpp); every attribute accessor calls it.
  void check_attributes_once() const;

 protected:
  Id id_;
  std::string file_, path_;
  mutable bool attrs_checked_ = false;
};

class Dataset : public Node {
 public:
  Dataset() = default;
  Dataset(Id id, std::string file, std::string path) : Node(std::move(id), std::move(file), std::move(path)) {}

  TypeInfo type() const;
  std::vector<int64_t> shape() const;  // {} for scalars
  int rank() const { return static_cast<int>(shape().size()); }
  int64_t size() const;                // number of elements (1 for scalars)
  // The numpy dtype of a numeric dataset; throws InputError for strings/compounds.
  DType dtype() const;

  // Whole dataset, converted to T (float, double, int8..int64, uint8..uint64).
  template <class T>
  std::vector<T> read() const {
    return read<T>(nullptr);
  }
  // The same, each piece given to `tap` as it lands (core/array_tap.hpp; null: none).
  template <class T>
  std::vector<T> read(ArrayTap* tap) const;
  // Elements [begin, begin+count) of a 1-D dataset.
  template <class T>
  std::vector<T> read_range(int64_t begin, int64_t count) const;
  // Rows [begin, begin+count) of a 2-D dataset, row-major.
  template <class T>
  std::vector<T> read_rows(int64_t begin, int64_t count) const;
  // String dataset (scalar -> one element), variable- or fixed-length.
  std::vector<std::string> read_strings() const;
  std::string read_string() const;  // scalar (or one-element) string
  double read_scalar_double() const;
  int64_t read_scalar_int() const;
  // A 1-D compound dataset (a numpy structured array, anndata's rec-array): every member read by
  // name (strings of any kind as strings, numbers as double with their dtype kept). Throws
  // InputError naming the member for nested or unsupported member types.
  RecArray read_compound() const;

 private:
  // Whether each stored chunk was found whole (hdf5.cpp check_chunk_storage): once per Dataset.
  mutable bool chunks_checked_ = false;
  friend void check_chunks_once(const Dataset& d, size_t elem_bytes);
};

class Group : public Node {
 public:
  Group() = default;
  Group(Id id, std::string file, std::string path) : Node(std::move(id), std::move(file), std::move(path)) {}

  // Kind of the child `name` (a relative path "a/b" is followed component by component).
  Kind child_kind(const std::string& name) const;
  bool has(const std::string& name) const { return child_kind(name) != Kind::missing; }
  std::vector<std::string> children() const;  // link names, in name order
  Group group(const std::string& name) const;  // throws InputError if missing or not a group
  Dataset dataset(const std::string& name) const;  // throws InputError if missing or not a dataset
  Node open_child(const std::string& name) const;  // group or dataset

  Group create_group(const std::string& name) const;
  // A numeric dataset of shape `dims` (empty = scalar) holding `data` converted to `disk`.
  // gzip > 0 compresses (chunked along the first axis).
  template <class T>
  Dataset write(const std::string& name, const T* data, const std::vector<int64_t>& dims, DType disk,
                int gzip = 0) const;
  // The same without the array in memory (uncompressed, T = float): fill(dst, offset, len) writes
  // bytes [offset, offset + len) of the array to dst, called on this thread with consecutive ranges in
  // order (large datasets: a mapped window at a time).
  template <class T>
  Dataset write_from(const std::string& name, const std::vector<int64_t>& dims, DType disk, const ByteSource& fill) const;
  template <class T>
  Dataset write(const std::string& name, const std::vector<T>& data, DType disk, int gzip = 0) const {
    return write(name, data.data(), {static_cast<int64_t>(data.size())}, disk, gzip);
  }
  Dataset write_strings(const std::string& name, const std::vector<std::string>& values, int gzip = 0) const;
  Dataset write_string(const std::string& name, const std::string& value) const;  // scalar
  // A 1-D compound dataset, one member a field, as h5py writes anndata's rec-arrays: string fields
  // variable-length UTF-8, numeric fields in their dtype, packed in field order.
  Dataset write_compound(const std::string& name, const RecArray& a, int gzip = 0) const;
};

class File : public Group {
 public:
  File() = default;
  // Opens an existing file read-only (write = false) or read-write. Throws InputError saying
  // whether the file is missing, not HDF5, or truncated/corrupt.
  static File open(const std::string& path, bool write = false);
  // Creates a new file (fails if it exists).
  static File create(const std::string& path);
  // Closes the file (and every object still open in it), reporting errors of the final flush. A file
  // whose close failed is forgotten, never closed again (HDF5 1.10 crashes on a second close).
  void close();
  // Abandons a file being written whose writing failed (its caller removes it): truncates it to
  // nothing, freeing the space it took (on a full disk the final flush can then succeed), and closes
  // it. Never throws.
  void discard() noexcept;
  ~File();
  File(File&&) = default;
  File& operator=(File&&) = default;

 private:
  File(Id id, std::string file) : Group(std::move(id), std::move(file), "/") {}
};

// HDF5 file type for a numpy dtype (bool: h5py's enum). The returned Id must be kept alive.
Id file_type(DType t);

}  // namespace scurry::h5
