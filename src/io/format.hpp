// scurry: input formats and their detection.
#pragma once
#include <string>

namespace scurry {

enum class Format { h5ad, zarr, tenx_h5, tenx_mtx, unknown };

const char* format_name(Format f);
// From the path: a directory holding matrix.mtx[.gz] is 10x mtx; a directory holding .zattrs/.zgroup
// or zarr.json is zarr; a file is sniffed (HDF5 signature) and told apart as h5ad (has X or
// encoding-type attribute) or 10x h5 (has a `matrix` group or genome groups). Throws InputError
// naming the path if it is missing or of no known format.
// Also refuses special files at once (refuse_special_file).
Format detect_format(const std::string& path);

// Throws InputError "PATH: is a FIFO (named pipe), not a file or directory ..." for a FIFO,
// character or block device or socket (checked with stat before anything opens it: opening a FIFO
// blocks until a writer appears). Regular files, directories and missing paths pass.
void refuse_special_file(const std::string& path);

}  // namespace scurry
