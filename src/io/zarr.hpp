// scurry: AnnData zarr stores (directories), zarr format 2 (anndata with zarr-python 2, the default of
// anndata < 0.11) and 3 (anndata >= 0.11 with zarr-python 3): reading whole or lazily by row blocks,
// and writing, with the same AnnData encodings as h5ad (encoding-type/-version attributes in .zattrs
// for v2, in zarr.json `attributes` for v3).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/row_blocks.hpp"
#include "io/h5ad.hpp"

namespace scurry {

// Reads the whole store (X as CSR, CSC converted, or dense; obs/var; obsm, varm, obsp, varp, layers,
// nested uns; raw). Chunks are decompressed in parallel on all hardware threads (the result does not
// depend on the thread count). Throws InputError "STORE: ARRAY: <problem>" on anything malformed:
// missing keys, a wrong dtype, a chunk of the wrong size, a corrupt compressed chunk.
Dataset read_zarr(const std::string& dir, const H5adReadOptions& opt = {});

enum class ZarrCodec { blosc_lz4, blosc_zstd, zstd, gzip, none };
// "blosc-lz4" | "zstd" | "gzip" | "none"; throws InputError otherwise.
ZarrCodec parse_zarr_codec(const std::string& s);

struct ZarrWriteOptions {
  int format = 2;  // zarr_format: 2 (read by every anndata) or 3 (anndata >= 0.11 with zarr-python 3)
  // Compressor of every chunk. blosc-lz4 is anndata's/zarr's default: Blosc(cname=lz4, clevel=5,
  // shuffle=SHUFFLE); zstd and gzip are also zarr-python 3's standard codecs.
  ZarrCodec codec = ZarrCodec::blosc_lz4;
  int level = -1;           // compression level; -1 = the codec's default (blosc 5, zstd 0, gzip 5)
  int64_t chunk_rows = 0;   // rows per chunk of 2-D arrays (X, layers, obsm, ...); 0 = about 2^18 values a chunk
  int64_t chunk_elems = 0;  // values per chunk of 1-D arrays (CSR data/indices/indptr, columns); 0 = 2^18
  int threads = 0;          // compression threads; 0 = all hardware threads (output is the same for any count)
};

// Writes atomically: into "DIR.tmp-HHHHHHHH-PID" next to DIR (core/output.hpp), then renamed to DIR.
// An existing zarr store at DIR is replaced; any other existing DIR is refused (InputError). On
// failure (a full disk: Error "DIR: disk full ...") or SIGINT/SIGTERM/SIGHUP the temporary is removed
// and DIR is untouched.
void write_zarr(const Dataset& d, const std::string& dir, const ZarrWriteOptions& opt = {});

// What `scurry info` shows, from the metadata only (no chunk is read except the obs/var index sizes,
// which come from array shapes).
H5adSummary summarize_zarr(const std::string& dir);

// Lazy row-block reader of X (or a layer: slot "layers/counts"). CSR: indptr is read once; each
// block reads only the chunks of indices/data covering its rows. Dense: the row chunks covering the
// rows. CSC is read and transposed once on first use. Values converted to float32.
class ZarrRowReader : public RowSource {
 public:
  explicit ZarrRowReader(const std::string& dir, const std::string& slot = "X", int threads = 0);
  ~ZarrRowReader() override;
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
