// scurry: the counts check's error (io/h5ad.hpp check_counts), shared with the check on the device
// (pp/resident.hpp check_counts) so that both name a bad value the same way.
#pragma once
#include <cstdint>
#include <string>

namespace scurry {

// Throws InputError "<where>: X has a NaN value (v) at row R, column C; counts must be finite and
// non-negative (pass raw counts)" (or an infinite / a negative value).
[[noreturn]] void fail_bad_count(const std::string& where, double v, int64_t row, int64_t col);

}  // namespace scurry
