#include "io/format.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace scurry {

namespace fs = std::filesystem;

const char* format_name(Format f) {
  switch (f) {
    case Format::h5ad: return "h5ad";
    case Format::zarr: return "zarr";
    case Format::tenx_h5: return "10x-h5";
    case Format::tenx_mtx: return "10x-mtx";
    case Format::unknown: return "unknown";
  }
  return "unknown";
}

bool hdf5_looks_like_10x(const std::string& path);  // io/tenx.cpp

Format detect_format(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail_input(path, "no such file or directory");
  if (fs::is_directory(path, ec)) {
    for (const char* f : {"matrix.mtx", "matrix.mtx.gz"})
      if (fs::exists(fs::path(path) / f)) return Format::tenx_mtx;
    for (const char* f : {".zgroup", ".zattrs", "zarr.json"})
      if (fs::exists(fs::path(path) / f)) return Format::zarr;
    fail_input(path, "a directory that is neither a 10x mtx directory (matrix.mtx[.gz]) nor a zarr store");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path, "cannot be opened for reading");
  char sig[8] = {};
  in.read(sig, 8);
  static const char kHdf5[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  if (in.gcount() == 8 && std::memcmp(sig, kHdf5, 8) == 0)
    return hdf5_looks_like_10x(path) ? Format::tenx_h5 : Format::h5ad;
  fail_input(path, "unknown format: not an HDF5 file (h5ad, 10x .h5), a 10x mtx directory or a zarr store");
}

}  // namespace scurry
