// libFuzzer target: an .h5ad file through the readers the CLI uses on one: detect_format (as every
// command does), read_h5ad (run, every step, convert, info), summarize_h5ad (info, run's planning),
// H5adRowReader (run --stream, bench --stream, sharded runs: the row pointers, then two row blocks)
// and read_h5ad_rows (a rank's cells under MPI). Input: the file's bytes.
#include "fuzz_common.hpp"
#include "io/format.hpp"
#include "io/h5ad.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace scurry;
  const std::string path = fuzz::scratch() + "/in.h5ad";
  fuzz::write_bytes(path, data, size);
  fuzz::materialize_if_asked(path);
  fuzz::run_clean([&] { detect_format(path); });
  fuzz::run_clean([&] { read_h5ad(path); });
  fuzz::run_clean([&] { summarize_h5ad(path); });
  fuzz::run_clean([&] {
    H5adRowReader r(path);
    r.row_pointers();
    const int64_t n = r.n_rows();
    r.read_rows(0, n / 2);
    r.read_rows(n / 2, n);
  });
  fuzz::run_clean([&] {
    H5adRowReader r(path);
    read_h5ad_rows(path, r.n_rows() / 3, r.n_rows());
  });
  return 0;
}
