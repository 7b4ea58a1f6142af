// scurry: splitmix64's finaliser (Steele, Lea & Flood 2014), a cheap counter-based hash for the GPU
// graph kernels' pseudo-random choices (UMAP's negative samples, Leiden's moving share, the spectral
// layout's start block); host code includes it too.
#pragma once
#include <cstdint>

namespace scurry::gpu {

#if defined(__CUDACC__)
#define SCURRY_MIX64_HD __host__ __device__
#else
#define SCURRY_MIX64_HD
#endif

SCURRY_MIX64_HD inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace scurry::gpu
