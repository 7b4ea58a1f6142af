#include "io/read.hpp"

#include "core/error.hpp"
#include "io/zarr.hpp"

namespace scurry {

Dataset read_any(const std::string& path, Format& format, const ReadOptions& opt) {
  format = detect_format(path);
  switch (format) {
    case Format::h5ad: return read_h5ad(path, opt.h5ad);
    case Format::tenx_h5: return read_10x_h5(path, opt.tenx);
    case Format::tenx_mtx: return read_10x_mtx(path, opt.tenx);
    case Format::zarr: return read_zarr(path, opt.h5ad);
    case Format::unknown: break;
  }
  fail_input(path, "unknown input format");
}

Dataset read_any(const std::string& path, const ReadOptions& opt) {
  Format f = Format::unknown;
  return read_any(path, f, opt);
}

}  // namespace scurry
