// scurry: zarr stores on the local file system, format 2 and 3: group/array metadata (.zgroup,
// .zarray, .zattrs; zarr.json), chunk keys ("0.1", "0/1", v3 "c/0/1"), fill values, codecs and
// (v3, reading) the sharding_indexed codec. Arrays are read by row ranges along their first axis,
// decompressing the chunks in parallel; written in row chunks. The AnnData layer is io/zarr.cpp.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/array_tap.hpp"
#include "core/dtype.hpp"
#include "core/value.hpp"
#include "io/zarr_codecs.hpp"

namespace scurry::zarr {

using Json = nlohmann::json;

enum class NodeKind { missing, group, array };
enum class Elem { numeric, vlen_string, fixed_unicode, fixed_bytes };

struct ArrayMeta {
  int format = 2;
  std::vector<int64_t> shape;
  std::vector<int64_t> chunks;  // the chunk grid read here: inner chunks when sharded
  Elem elem = Elem::numeric;
  DType dtype = DType::f64;  // numeric elements
  int itemsize = 8;          // bytes per element (fixed-size kinds)
  bool big_endian = false;
  double fill = 0;           // numeric fill value
  bool fill_null = false;    // fill_value is null (v2): a missing chunk's contents are undefined
  std::string fill_str;      // string fill value
  std::vector<Codec> codecs;  // bytes->bytes codecs in encoding order (v2: the compressor)
  bool v3_default_keys = false;  // "c/0/1" (v3 default encoding) rather than "0.1"
  char sep = '.';
  // v3 sharding_indexed: the stored objects are shards of `shard` elements holding inner chunks.
  bool sharded = false;
  std::vector<int64_t> shard;
  bool index_crc = false;
  bool index_at_end = true;
  Json attrs;
  // A v2 structured dtype ([[name, type], ...]: anndata's rec-array): elem is fixed_bytes of the
  // record's itemsize and `record` lists the fields; null otherwise.
  Json record;

  int64_t size() const;
  std::string type_name() const;  // "float32", ..., "str"
};

// A store rooted at a directory. Paths are relative to the root, "" = the root, "a/b" = nested.
class Store {
 public:
  explicit Store(std::string root);
  const std::string& root() const { return root_; }
  NodeKind kind(const std::string& path) const;
  int format(const std::string& path) const;  // 2 or 3 for an existing node
  Json attrs(const std::string& path) const;  // {} when there are none
  std::vector<std::string> children(const std::string& path) const;  // groups and arrays, sorted
  ArrayMeta array_meta(const std::string& path) const;
  // "STORE: PATH" for messages.
  std::string where(const std::string& path) const;

 private:
  std::string root_;
};

// An array of a store, read by rows along its first axis (0-d arrays: one element).
class Array {
 public:
  Array(const Store& s, std::string path);
  const ArrayMeta& meta() const { return m_; }
  const std::string& path() const { return path_; }
  const std::vector<int64_t>& shape() const { return m_.shape; }
  int64_t size() const { return m_.size(); }
  int rank() const { return static_cast<int>(m_.shape.size()); }
  bool is_string() const { return m_.elem != Elem::numeric; }
  DType dtype() const;  // throws InputError for string arrays

  // Elements of rows [begin, end) (all of the other axes), C order, converted to T
  // (T = float, double, int32_t, int64_t, uint8_t). Integer overflow in the conversion is an error.
  // `tap` (1-D arrays; core/array_tap.hpp) is given each chunk's elements once they are final.
  template <class T>
  std::vector<T> read_rows(int64_t begin, int64_t end, int threads, ArrayTap* tap = nullptr) const;
  template <class T>
  std::vector<T> read_all(int threads, ArrayTap* tap = nullptr) const;
  std::vector<std::string> read_strings(int threads) const;
  // A 1-D structured (record) array: fixed-width unicode / bytes fields as strings, numeric fields
  // as double with their dtype.
  RecArray read_records(int threads) const;

  // Missing chunks. zarr lets a chunk (or a sharded inner chunk) be absent: it then holds the
  // fill_value, and zarr-python 3 omits chunks equal to it. That is kept for ordinary arrays, but a
  // missing chunk is an InputError naming the array and the chunk key (a) where the fill_value is
  // null (zarr v2: the contents are undefined; zarr-python would hand out uninitialised memory) and
  // (b) for arrays marked require_chunks(): the data, indices and indptr of a sparse matrix, where a
  // lost chunk read as fill would silently drop counts (or, for indices/indptr, move them).
  void require_chunks() { require_chunks_ = true; }

 private:
  std::string chunk_key(const std::vector<int64_t>& idx) const;
  std::string chunk_file(const std::vector<int64_t>& idx) const;
  [[noreturn]] void fail_missing_chunk(const std::vector<int64_t>& idx) const;
  std::optional<Bytes> raw_chunk(const std::vector<int64_t>& idx) const;  // nullopt: missing
  template <class E, class Decode>
  std::vector<E> gather(int64_t begin, int64_t end, int threads, const E& fill, Decode decode) const;

  const Store* store_;
  std::string path_;
  ArrayMeta m_;
  bool require_chunks_ = false;
};

// ---- writing --------------------------------------------------------------------------------------

enum class CodecChoice { blosc_lz4, blosc_zstd, zstd, gzip, none };

struct ArrayWriteSpec {
  int format = 2;
  CodecChoice codec = CodecChoice::blosc_lz4;
  int level = -1;              // -1: the codec's default (blosc 5, zstd 0, gzip 5)
  int64_t chunk_rows = 0;      // rows per chunk of 2-D arrays; 0 = about kAutoChunkElems elements
  int64_t chunk_elems = 0;     // elements per chunk of 1-D arrays; 0 = kAutoChunkElems
  int threads = 1;
};
constexpr int64_t kAutoChunkElems = int64_t{1} << 18;

// Creates the directory `dir` of a group with these attributes (may be empty).
void write_group(const std::string& dir, int format, const Json& attrs);
// Writes a numeric array of `shape` holding `values` (C order) converted to `dtype`.
template <class T>
void write_numeric(const std::string& dir, const std::vector<int64_t>& shape, const T* values, DType dtype,
                   const Json& attrs, const ArrayWriteSpec& spec);
void write_strings(const std::string& dir, const std::vector<int64_t>& shape, const std::string* values,
                   const Json& attrs, const ArrayWriteSpec& spec);
// A 1-D structured array (zarr v2 only: a structured dtype, string fields fixed-width unicode "<U{n}"
// as anndata writes them through _to_fixed_length_strings). Format 3 throws InputError.
void write_records(const std::string& dir, const RecArray& a, const Json& attrs, const ArrayWriteSpec& spec);
// A 0-d string as numpy's fixed-width unicode ("<U{n}", v2) or a 0-d vlen string (v3), as anndata.
void write_string_scalar(const std::string& dir, const std::string& value, const Json& attrs,
                         const ArrayWriteSpec& spec);

}  // namespace scurry::zarr
