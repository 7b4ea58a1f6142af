// libFuzzer target: a 10x mtx directory (matrix.mtx[.gz], barcodes.tsv[.gz], features.tsv[.gz] or
// genes.tsv) through detect_format and read_10x_mtx, as the CLI reads one. Input: the directory as
// records "=== NAME\n<bytes>" (fuzz_common.hpp unpack_tree); the seeds hold plain and gzipped files.
#include "fuzz_common.hpp"
#include "io/format.hpp"
#include "io/tenx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace scurry;
  const std::string dir = fuzz::scratch() + "/mtx";
  fuzz::unpack_tree(data, size, dir, 8);
  fuzz::materialize_if_asked(dir);
  fuzz::run_clean([&] { detect_format(dir); });
  fuzz::run_clean([&] { read_10x_mtx(dir); });
  return 0;
}
