// scurry: read any supported input (h5ad, 10x .h5, 10x mtx directory) into a Dataset, choosing the
// reader from the detected format (io/format.hpp).
#pragma once
#include <string>

#include "core/dataset.hpp"
#include "io/format.hpp"
#include "io/h5ad.hpp"
#include "io/tenx.hpp"

namespace scurry {

struct ReadOptions {
  H5adReadOptions h5ad;  // for h5ad inputs
  TenxOptions tenx;      // for 10x inputs (.h5 and mtx directories)
};

// Detects the format of `path` and reads it whole. Throws InputError naming the path when it is
// missing, of no known format, of a format not supported yet (zarr) or malformed.
Dataset read_any(const std::string& path, const ReadOptions& opt = {});
// As above, also reporting the detected format.
Dataset read_any(const std::string& path, Format& format, const ReadOptions& opt = {});

}  // namespace scurry
