// scurry: the counter-based normal numbers of the spectral layout's start block, the same function
// on the host and the GPU (spectral.cpp, spectral_gpu.cu): splitmix64's finaliser (Steele, Lea &
// Flood 2014) of (seed, counter) into two 53-bit uniforms, then Box-Muller.
#pragma once
#include <cmath>
#include <cstdint>

#include "graph/mix64.cuh"

#if defined(__CUDACC__)
#define SCURRY_SPECTRAL_HD __host__ __device__
#else
#define SCURRY_SPECTRAL_HD
#endif

namespace scurry::spectral {

SCURRY_SPECTRAL_HD inline uint64_t splitmix(uint64_t x) { return gpu::mix64(x + 0x9E3779B97F4A7C15ULL); }

SCURRY_SPECTRAL_HD inline double gaussian_at(uint64_t seed, uint64_t counter) {
  const uint64_t s = splitmix(seed);
  const double u1 = (static_cast<double>(splitmix(s ^ (2 * counter)) >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (static_cast<double>(splitmix(s ^ (2 * counter + 1)) >> 11) + 0.5) * 0x1.0p-53;
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

}  // namespace scurry::spectral
