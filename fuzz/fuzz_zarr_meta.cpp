// libFuzzer target: an AnnData zarr store (v2: .zgroup/.zarray/.zattrs; v3: zarr.json; and its
// chunks) through what the CLI runs on one: detect_format, read_zarr, summarize_zarr (info, run's
// planning) and ZarrRowReader (run --stream: row pointers, two row blocks). Input: the store as
// records "=== NAME\n<bytes>" (fuzz_common.hpp unpack_tree); the seeds are small stores whose
// chunks are uncompressed, so that the mutations land on the JSON metadata and the raw chunk bytes.
#include "fuzz_common.hpp"
#include "io/format.hpp"
#include "io/zarr.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace scurry;
  const std::string dir = fuzz::scratch() + "/store.zarr";
  fuzz::unpack_tree(data, size, dir, 48);
  fuzz::materialize_if_asked(dir);
  fuzz::run_clean([&] { detect_format(dir); });
  fuzz::run_clean([&] { read_zarr(dir); });
  fuzz::run_clean([&] { summarize_zarr(dir); });
  fuzz::run_clean([&] {
    ZarrRowReader r(dir, "X", 1);
    r.row_pointers();
    const int64_t n = r.n_rows();
    r.read_rows(0, n / 2);
    r.read_rows(n / 2, n);
  });
  return 0;
}
