// libFuzzer target: a Cell Ranger .h5 (v2 genome groups or v3 `matrix`) through what the CLI runs
// on one: detect_format (hdf5_looks_like_10x), then read_10x_h5 with gex_only on and off.
// Input: the file's bytes.
#include "fuzz_common.hpp"
#include "io/format.hpp"
#include "io/tenx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace scurry;
  const std::string path = fuzz::scratch() + "/in.h5";
  fuzz::write_bytes(path, data, size);
  fuzz::materialize_if_asked(path);
  fuzz::run_clean([&] { detect_format(path); });
  fuzz::run_clean([&] { read_10x_h5(path); });
  fuzz::run_clean([&] {
    TenxOptions o;
    o.gex_only = false;
    read_10x_h5(path, o);
  });
  return 0;
}
