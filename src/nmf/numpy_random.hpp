// scurry: numpy's legacy random stream (numpy.random.RandomState, numpy/random/src/mt19937 and
// legacy-distributions.c), so that cNMF's replicate seeds and sklearn's NMF initialisations are the
// same numbers as in Python:
//  * MT19937 (Matsumoto & Nishimura 1998) seeded as RandomState(int) does: init_genrand(seed)
//    (seeds 0 .. 2^32 - 1);
//  * random_sample: 53-bit doubles from two 32-bit words, (a >> 5) * 2^26 + (b >> 6), / 2^53;
//  * standard_normal: the legacy Marsaglia polar method with its cached second value;
//  * polar_pairs + polar_normals: the same normals in bulk, the polar method split into its
//    sequential part (words, candidates, rejections: one stream's order) and the per-pair part
//    (log, square root, products: any thread, any order);
//  * randint(low, high) for ranges below 2^32: a 32-bit word masked to the smallest 2^m - 1 >= range,
//    rejected while above the range (RandomState's masked rejection sampling).
#pragma once
#include <cmath>
#include <cstdint>

namespace scurry {

// One accepted pair of Marsaglia's polar method (numpy's legacy_gauss): x1, x2 uniform in (-1, 1)
// and r2 = x1^2 + x2^2 in (0, 1).
struct PolarPair {
  double x1, x2, r2;
};

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed);
  uint32_t next_u32() {
    if (pos_ == 624) refill();
    return temper(key_[pos_++]);
  }
  double random_sample();        // [0, 1)
  double standard_normal();      // legacy_gauss
  int64_t randint(int64_t low, int64_t high);  // [low, high); high - low - 1 < 2^32

  // Marsaglia's polar method in two parts, for bulk draws (the sequential part is ~1/3 of a
  // normal's cost; the rest runs on any thread). polar_pairs is the stream's sequential part: the
  // MT19937 words in order, each candidate x1 = 2 u1 - 1, x2 = 2 u2 - 1 (four words, two
  // random_sample) and numpy's rejection (r2 >= 1 or r2 == 0), without branches on the outcome; it
  // writes the next `count` accepted pairs to out, in order. polar_normals turns one pair into the
  // two normals that standard_normal returns for it: f * x2 first, then the cached f * x1, with
  // f = sqrt(-2 log(r2) / r2), the same operations as legacy_gauss (bit-identical values).
  // standard_normal() x 2m = polar_pairs(m) + polar_normals on each pair; it requires that no
  // normal is cached (a fresh state, or an even number of standard_normal calls so far).
  void polar_pairs(PolarPair* out, int64_t count);
  static void polar_normals(const PolarPair& p, double& first, double& second) {
    const double f = std::sqrt(-2.0 * std::log(p.r2) / p.r2);
    first = f * p.x2;
    second = f * p.x1;
  }

 private:
  void refill();  // the next 624 words of the state (MT19937's twist), pos_ = 0
  static uint32_t temper(uint32_t y) {  // MT19937's tempering of one state word
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }
  uint32_t key_[624];
  int pos_ = 624;
  bool has_gauss_ = false;
  double gauss_ = 0;
};

}  // namespace scurry
