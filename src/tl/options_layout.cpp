#include "tl/options_layout.hpp"

namespace scurry {

uint64_t options_layout_of_library() { return options_layout_here(); }

}  // namespace scurry
