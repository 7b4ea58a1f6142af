// scurry: numpy's legacy random stream (numpy.random.RandomState, numpy/random/src/mt19937 and
// legacy-distributions.c), so that cNMF's replicate seeds and sklearn's NMF initialisations are the
// same numbers as in Python:
//  * MT19937 (Matsumoto & Nishimura 1998) seeded as RandomState(int) does: init_genrand(seed)
//    (seeds 0 .. 2^32 - 1);
//  * random_sample: 53-bit doubles from two 32-bit words, (a >> 5) * 2^26 + (b >> 6), / 2^53;
//  * standard_normal: the legacy Marsaglia polar method with its cached second value;
//  * randint(low, high) for ranges below 2^32: a 32-bit word masked to the smallest 2^m - 1 >= range,
//    rejected while above the range (RandomState's masked rejection sampling).
#pragma once
#include <cstdint>

namespace scurry {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed);
  uint32_t next_u32();
  double random_sample();        // [0, 1)
  double standard_normal();      // legacy_gauss
  int64_t randint(int64_t low, int64_t high);  // [low, high); high - low - 1 < 2^32

 private:
  uint32_t key_[624];
  int pos_ = 624;
  bool has_gauss_ = false;
  double gauss_ = 0;
};

}  // namespace scurry
