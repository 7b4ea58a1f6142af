// scurry: the device pieces of the fixed-point sums (gene_sums.cu says why and how): a term
// rounded onto a grid 2^-k, and a 64-bit shared-memory accumulator kept as two 32-bit words.
// Included by .cu files only.
#pragma once

namespace scurry::gpu {

// acc += q modulo 2^64, the accumulator as two 32-bit words (lo, hi): exact in any order, since each
// wrap of the low word is seen, as a carry, by exactly the one addition that made it.
__device__ __forceinline__ void add64(unsigned* lo, unsigned* hi, long long q) {
  const unsigned ql = static_cast<unsigned>(q);
  unsigned qh = static_cast<unsigned>(static_cast<unsigned long long>(q) >> 32);
  const unsigned old = atomicAdd(lo, ql);
  qh += (old + ql < old) ? 1u : 0u;
  if (qh) atomicAdd(hi, qh);
}

// q = rint(f(x) * 2^k) (or f(x)^2 * 2^k), exact for every term the grid holds.
template <bool kSquares, class V>
__device__ __forceinline__ long long fixed_term(V x, int k) {
  if (!isfinite(x)) return 0;  // non-finite values are flagged by the callers' bounds pass
  const double d = static_cast<double>(x);
  if constexpr (kSquares) {
    const int k1 = k / 2;  // two half scalings: d*d may overflow or underflow where the scaled product does not
    return __double2ll_rn(ldexp(d, k1) * ldexp(d, k - k1));
  } else {
    return __double2ll_rn(ldexp(d, k));
  }
}

}  // namespace scurry::gpu
