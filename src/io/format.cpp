#include "io/format.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>

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

void refuse_special_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing: the caller says so
  const char* what = S_ISFIFO(st.st_mode)  ? "a FIFO (named pipe)"
                     : S_ISCHR(st.st_mode) ? "a character device"
                     : S_ISBLK(st.st_mode) ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : nullptr;
  if (what)
    fail_input(path, "is ", what, ", not a file or directory (give a regular file, or a directory for 10x mtx or zarr)");
}

Format detect_format(const std::string& path) {
  refuse_special_file(path);
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
