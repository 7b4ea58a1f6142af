// scurry: numpy's legacy RandomState stream (see numpy_random.hpp).
#include "nmf/numpy_random.hpp"

#include <cmath>

#include "core/error.hpp"

namespace scurry {

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  uint32_t s = seed;
  for (int p = 0; p < 624; ++p) {
    key_[p] = s;
    s = 1812433253u * (s ^ (s >> 30)) + static_cast<uint32_t>(p + 1);
  }
  pos_ = 624;
}

uint32_t NumpyRandomState::next_u32() {
  constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrixA = 0x9908b0dfu;
  if (pos_ == 624) {  // regenerate the 624 words
    int i = 0;
    for (; i < 624 - 397; ++i) {
      const uint32_t y = (key_[i] & kUpper) | (key_[i + 1] & kLower);
      key_[i] = key_[i + 397] ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);
    }
    for (; i < 623; ++i) {
      const uint32_t y = (key_[i] & kUpper) | (key_[i + 1] & kLower);
      key_[i] = key_[i + 397 - 624] ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);
    }
    const uint32_t y = (key_[623] & kUpper) | (key_[0] & kLower);
    key_[623] = key_[396] ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);
    pos_ = 0;
  }
  uint32_t y = key_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

double NumpyRandomState::random_sample() {
  const uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

double NumpyRandomState::standard_normal() {
  if (has_gauss_) {
    has_gauss_ = false;
    return gauss_;
  }
  double x1, x2, r2;
  do {
    x1 = 2.0 * random_sample() - 1.0;
    x2 = 2.0 * random_sample() - 1.0;
    r2 = x1 * x1 + x2 * x2;
  } while (r2 >= 1.0 || r2 == 0.0);
  const double f = std::sqrt(-2.0 * std::log(r2) / r2);
  gauss_ = f * x1;
  has_gauss_ = true;
  return f * x2;
}

int64_t NumpyRandomState::randint(int64_t low, int64_t high) {
  if (high <= low) fail("randint: empty range [", low, ", ", high, ")");
  const uint64_t rng = static_cast<uint64_t>(high - low - 1);
  if (rng > 0xffffffffull) fail("randint: ranges of 2^32 or more are not implemented");
  if (rng == 0) return low;
  uint64_t mask = rng;
  mask |= mask >> 1, mask |= mask >> 2, mask |= mask >> 4, mask |= mask >> 8, mask |= mask >> 16;
  uint64_t v;
  while ((v = (next_u32() & mask)) > rng) {
  }
  return low + static_cast<int64_t>(v);
}

}  // namespace scurry
