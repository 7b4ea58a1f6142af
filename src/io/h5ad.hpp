// scurry: AnnData .h5ad reading and writing (anndata 0.7 to 0.11 on-disk encodings).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/array_tap.hpp"
#include "core/dataset.hpp"
#include "core/row_blocks.hpp"

namespace scurry {

struct H5adReadOptions {
  bool read_raw = true;     // read /raw (X, var, varm) when present
  bool read_layers = true;  // read /layers
  bool read_x = true;       // false: X is left empty (a streamed run reads it by row blocks instead)
  bool read_raw_x = true;   // false: raw's var and varm are read, raw/X is left empty (the report streams it)
  // X's CSR arrays given to these taps as they are read (float32 CSR X only; core/array_tap.hpp):
  // the GPU run's upload during the read. Also read_zarr.
  CsrTap x_tap;
};

// Reads the whole file. X as CSR (CSC converted), or dense; obs/var dataframes; obsm, varm, obsp,
// varp, layers, nested uns. Throws InputError "PATH: <problem>" on anything malformed.
Dataset read_h5ad(const std::string& path, const H5adReadOptions& opt = {});

// Reads the cells [begin, end) only (a rank's share of a sharded run): X's rows through
// H5adRowReader (hyperslabs of a CSR file: no other row is read), obs and obsm subset to the range;
// var, varm, varp and uns whole. layers, raw and obsp (cells x cells) are not read. X keeps the
// file's dtype. Throws InputError naming the file for a range outside [0, n_obs].
Dataset read_h5ad_rows(const std::string& path, int64_t begin, int64_t end);

// read_h5ad allows any values in X; steps that need raw counts call this: throws InputError
// "<where>: X has a NaN value (...) at row R, column C; ..." on the first NaN, Inf or negative value.
void check_counts(const Matrix& X, const std::string& where);

struct H5adWriteOptions {
  int gzip_level = 0;  // 0 = no compression (anndata's default); 1..9 gzip for matrices/arrays
  bool allow_no_x = false;  // an empty X is left out (anndata reads it as X = None) instead of an error
};

// Writes atomically: to "PATH.tmp-HHHHHHHH-PID" in the same directory (core/output.hpp), then renamed
// over PATH. On failure (a full disk: Error "PATH: disk full ...") or SIGINT/SIGTERM/SIGHUP the
// temporary is removed and PATH is untouched. Uses anndata's current encodings
// (anndata 0.8+/0.10 spec: encoding-type/-version attributes on every element).
void write_h5ad(const Dataset& d, const std::string& path, const H5adWriteOptions& opt = {});

// The same write in two parts: X first, then everything else, so that a run can write its (large)
// X while its graph steps still run. write_h5ad(d, path, opt) is H5adWriter(path, opt), write_x(d.X),
// finish(d): the same file. The temporary is created by the constructor, renamed over PATH by
// finish(), and removed by the destructor if finish() did not succeed. libhdf5 is not thread-safe:
// the parts may be called from different threads, but never while another thread uses HDF5.
class H5adWriter {
 public:
  explicit H5adWriter(const std::string& path, const H5adWriteOptions& opt = {});
  ~H5adWriter();
  H5adWriter(const H5adWriter&) = delete;
  H5adWriter& operator=(const H5adWriter&) = delete;
  // Writes X (at most once, before finish; an empty X is left out).
  void write_x(const Matrix& X);
  // The same for a dense float32 X whose values are still arriving (a GPU run's copy back): before
  // it reads bytes [0, b) of X.data it calls ready(b) (b increasing), which returns once they are
  // final; so the write follows the copy instead of waiting for its end.
  void write_x_following(const DenseF& X, const std::function<void(size_t)>& ready);
  // Writes layers/KEY (at most once a key, before finish), so that its caller can let the matrix go:
  // finish then writes d.layers' other keys beside it (d.layers must not hold KEY).
  void write_layer(const std::string& key, const Matrix& m);
  // Writes raw/X (at most once, before finish); finish then writes raw/var and raw/varm from d.raw,
  // whose X is not written again (it may be empty).
  void write_raw_x(const Matrix& m);
  // Reads back a matrix written so far ("X", "raw/X", "layers/KEY"): what a late step needs of a
  // matrix its caller let go after writing it (scurry run's markers read raw/X).
  Matrix read_back(const std::string& slot);
  // The same for a CSR matrix ("raw/X") read in row ranges, without holding it whole: a source valid
  // while this writer is (not thread-safe: one call at a time).
  std::unique_ptr<RowSource> read_back_rows(const std::string& slot);
  // Writes the rest of d (and d.X, if write_x was not called), closes and renames the file. d.X must
  // be the matrix given to write_x, if it was called, or empty (let go after write_x).
  void finish(const Dataset& d);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What `scurry info` shows without reading the matrix values.
struct SlotInfo {
  std::string name;      // e.g. "obsm/X_pca", "layers/counts", "obs/leiden"
  std::string encoding;  // "csr_matrix", "array", "categorical", "string-array", "dict", ...
  std::string dtype;     // "float32", ... or "" for groups
  std::vector<int64_t> shape;
};
struct H5adSummary {
  int64_t n_obs = 0, n_vars = 0;
  std::string x_encoding;  // csr_matrix | csc_matrix | array
  std::string x_dtype;     // numpy name
  int64_t x_nnz = 0;       // stored entries (n_obs*n_vars for dense)
  std::string anndata_encoding_version;  // root encoding-version or "" for old files
  std::vector<SlotInfo> slots;           // every element below the root, depth-first
};
H5adSummary summarize_h5ad(const std::string& path);

// Lazy row-block reader of X (or a layer: slot "layers/counts"). CSR: reads only the requested
// rows' indices/data by hyperslab; dense: reads the rows' hyperslab. CSC cannot be read by rows
// without a full pass: it is read and transposed once on first use. Values converted to float32.
class H5adRowReader : public RowSource {
 public:
  explicit H5adRowReader(const std::string& path, const std::string& slot = "X");
  ~H5adRowReader() override;
  int64_t n_rows() const override;
  int64_t n_cols() const override;
  int64_t nnz() const override;
  CsrF read_rows(int64_t begin, int64_t end) override;
  std::vector<int64_t> row_pointers() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace scurry
