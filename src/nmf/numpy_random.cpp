// scurry: numpy's legacy RandomState stream (see numpy_random.hpp).
#include "nmf/numpy_random.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

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

namespace {

constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrixA = 0x9908b0dfu;

// Four words at a time (GCC/Clang vector extensions: SSE2 on x86-64, NEON on arm64), the same
// integer operations as the scalar code.
typedef uint32_t U32x4 __attribute__((vector_size(16)));
inline U32x4 load4(const uint32_t* p) {
  U32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(uint32_t* p, U32x4 v) { std::memcpy(p, &v, sizeof v); }
// key[i .. i+3] = twist(key[i .. i+4], key[m .. m+3]).
inline void twist4(uint32_t* key, int i, int m) {
  const U32x4 y = (load4(key + i) & kUpper) | (load4(key + i + 1) & kLower);
  store4(key + i, load4(key + m) ^ (y >> 1) ^ (-(y & 1u) & kMatrixA));
}
inline uint32_t twist1(const uint32_t* key, int i, int i1, int m) {
  const uint32_t y = (key[i] & kUpper) | (key[i1] & kLower);
  return key[m] ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);
}

// One candidate of the polar method from four tempered words (two random_sample: 53-bit doubles
// (a >> 5) * 2^26 + (b >> 6), / 2^53), exactly as random_sample and standard_normal compute it.
inline PolarPair candidate(uint32_t a1, uint32_t b1, uint32_t a2, uint32_t b2) {
  a1 >>= 5, b1 >>= 6, a2 >>= 5, b2 >>= 6;
  PolarPair c;
  c.x1 = 2.0 * ((a1 * 67108864.0 + b1) / 9007199254740992.0) - 1.0;
  c.x2 = 2.0 * ((a2 * 67108864.0 + b2) / 9007199254740992.0) - 1.0;
  c.r2 = c.x1 * c.x1 + c.x2 * c.x2;
  return c;
}
// legacy_gauss's loop runs while r2 >= 1.0 || r2 == 0.0 (r2 is never NaN).
inline int accepted(double r2) { return static_cast<int>(r2 < 1.0) & static_cast<int>(r2 != 0.0); }

}  // namespace

// MT19937's block refill (numpy's mt19937_gen): the 624 words regenerated in place, in three runs
// (i + 397 below 624; wrapped; the last word, which reads the new key[0]).
void NumpyRandomState::refill() {
  int i = 0;
  for (; i + 4 <= 624 - 397; i += 4) twist4(key_, i, i + 397);  // reads old words only
  for (; i < 624 - 397; ++i) key_[i] = twist1(key_, i, i + 1, i + 397);
  static_assert((623 - (624 - 397)) % 4 == 0, "the wrapped run is whole vectors");
  for (; i < 623; i += 4) twist4(key_, i, i + 397 - 624);  // reads words 227 back: already new
  key_[623] = twist1(key_, 623, 0, 396);
  pos_ = 0;
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

// Marsaglia's polar method (Marsaglia & Bray 1964; numpy's legacy_gauss), its sequential part:
// the candidates in the stream's order, four words each, and the accepted ones written out. Runs
// of candidates within one refill are branch-free (each candidate is stored at out[got] and got
// advances by its acceptance: ~21% of candidates are rejected, at random, which a branch would
// mispredict); a candidate whose words straddle a refill (only after next_u32 calls that left the
// position off a multiple of four) goes through random_sample as standard_normal does.
void NumpyRandomState::polar_pairs(PolarPair* out, int64_t count) {
  if (has_gauss_) fail("polar_pairs: a normal is cached (an odd number of standard_normal calls before)");
  alignas(16) uint32_t tw[624];
  int64_t got = 0;
  while (got < count) {
    if (pos_ == 624) refill();
    if (pos_ + 4 > 624) {
      PolarPair c;
      c.x1 = 2.0 * random_sample() - 1.0;
      c.x2 = 2.0 * random_sample() - 1.0;
      c.r2 = c.x1 * c.x1 + c.x2 * c.x2;
      out[got] = c;
      got += accepted(c.r2);
      continue;
    }
    int p = pos_;
    for (; p + 4 <= 624; p += 4) {  // the words this run may use, tempered four at a time
      U32x4 y = load4(key_ + p);
      y ^= y >> 11;
      y ^= (y << 7) & 0x9d2c5680u;
      y ^= (y << 15) & 0xefc60000u;
      y ^= y >> 18;
      store4(tw + p, y);
    }
    // As many candidates as this refill holds and the count allows even if all were accepted (got
    // advances by at most one a candidate), then the loop again for the rest.
    const int n_cand = static_cast<int>(std::min<int64_t>((624 - pos_) / 4, count - got));
    p = pos_;
    for (int q = 0; q < n_cand; ++q, p += 4) {
      const PolarPair c = candidate(tw[p], tw[p + 1], tw[p + 2], tw[p + 3]);
      PolarPair& o = out[got];
      o.x1 = c.x1, o.x2 = c.x2, o.r2 = c.r2;
      got += accepted(c.r2);
    }
    pos_ = p;
  }
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
