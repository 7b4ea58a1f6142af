// Built without CUDA: no device generator.
#include "core/error.hpp"
#include "sim/simulate.hpp"

namespace scurry {
DeviceSimulated simulate_on_device(Context&, const SimulateOptions&) {
  throw InputError("this scurry was built without CUDA; simulate on the device needs --device gpu");
}
DeviceSimulated simulate_on_devices(const std::vector<Context*>&, const SimulateOptions&) {
  throw InputError("this scurry was built without CUDA; simulate on the device needs --device gpu");
}
}  // namespace scurry
