// scurry: the device tap without CUDA (exec/device_tap.hpp): there is none.
#include "exec/device_tap.hpp"

namespace scurry {

class DeviceCsrTap {};

std::shared_ptr<DeviceCsrTap> make_device_csr_tap(const Context&) { return nullptr; }
CsrTap csr_tap_of(const std::shared_ptr<DeviceCsrTap>&) { return {}; }
bool tapped_counts_clean(const std::shared_ptr<DeviceCsrTap>&, const Matrix&) { return false; }

}  // namespace scurry
