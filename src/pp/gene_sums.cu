// Per-gene sums on the GPU, the same bits on every run (issue 15, point 4).
//
// Floating-point atomics add in an order that changes from run to run, and so do the last bits of
// their sums; every statistic downstream (HVG, the scale's mean and std, hence X_pca, the kNN and the
// graph) inherited that. Here every value is first rounded onto a per-gene fixed-point grid and the
// grid points are added as 64-bit integers, whose sum does not depend on the order (pre-rounding
// summation: Demmel & Nguyen, "Fast reproducible floating-point summation", ARITH 2013; ReproBLAS).
//  pass A (gene_bounds_smem): per gene, the largest binary exponent e of f(x) (|f(x)| < 2^e; a
//    shared-memory atomicMax, taken only when it raises the maximum) and, when asked, the number of
//    nonzero f(x) (atomicAdd); the blocks' bounds combined in bounds_finish, which picks each gene's
//    grid 2^-k: float values k = 32 - e (each term carries 32 bits below the gene's largest power of
//    two; n < 2^31 terms below 2^32 cannot pass 2^63), double values k = 62 - e - ceil(log2(count))
//    (the full 64-bit range for the precision the caller chose).
//  pass B (gene_fixed_smem, once for the sums, once for the squares): q = rint(f(x) 2^k) added into a
//    64-bit shared-memory accumulator kept as two 32-bit words (add64: an atomicAdd on the low word,
//    whose old value tells the carry, and one on the high word only when q's high word or the carry is
//    nonzero: the native 32-bit atomics, where a 64-bit shared atomicAdd costs three times as much;
//    counts and other values below 2^32 on the grid take one atomic), the block partials added in
//    uint64 (exact, wrap-around), then q_total 2^-k in float64.
// Precision (float values): each term is rounded to 2^(e-33), so a gene's sum is within
// count * 2^(e-33) of the exact sum of its float values, i.e. 2^-32 of its largest term per term (the
// float32 shared-memory partials this replaces: 2^-24 of the partial sum per addition); integer
// counts below 2^31 are summed exactly. Non-finite values: a gene with a NaN, or with both +inf and
// -inf, sums to NaN; one with +inf (-inf) only to +inf (-inf), as in any order of float additions
// (flags set with global atomicOr, rare by nature).
// SCURRY_GENE_SUMS=atomic: pass B with 64-bit global atomics (RED in L2) instead of shared memory
// (same bits; kept to compare the two).
// Templated on the value type V and the column-index type I (kernels.cuh; instantiations at the end).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <math_constants.h>

#include "pp/fixed_point.cuh"
#include "pp/kernels.cuh"

namespace scurry::gpu {

namespace {

template <GeneTransform F, class V>
__device__ __forceinline__ V transform(V v, int64_t g, const V* clip) {
  if constexpr (F == GeneTransform::expm1) {
    if constexpr (sizeof(V) == 4) return expm1f(v);
    else return expm1(v);
  } else if constexpr (F == GeneTransform::clip) {
    if constexpr (sizeof(V) == 4) return fminf(v, clip[g]);
    else return fmin(v, clip[g]);
  } else {
    return v;
  }
}

// The biased exponent field of |x| (float: 0..255, double: 0..2047); |x| < 2^(field - bias + 1) for
// finite x (subnormals included, field 0); the all-ones field is inf or NaN.
template <class V>
struct Bits;
template <>
struct Bits<float> {
  static constexpr int kBias = 127, kInfField = 255;
  __device__ static unsigned field(float x) { return (__float_as_uint(x) >> 23) & 0xffu; }
};
template <>
struct Bits<double> {
  static constexpr int kBias = 1023, kInfField = 2047;
  __device__ static unsigned field(double x) {
    return static_cast<unsigned>((static_cast<unsigned long long>(__double_as_longlong(x)) >> 52) & 0x7ffu);
  }
};

constexpr unsigned kFlagNan = 1u, kFlagPosInf = 2u, kFlagNegInf = 4u;

constexpr int kSmemThreads = 1024;
constexpr int kSmemBlocksPerSm = 4;
constexpr size_t kSmemBytes = 229376;  // 224 KB of shared memory
constexpr int kTile = static_cast<int>(kSmemBytes / 8);  // 28,672 genes: 2 x 4 bytes (pass A), 8 bytes (pass B)

// Pass A over the genes [g0, g0 + tile): acc[0, tile) the largest exponent field, acc[tile, 2 tile) the
// count of nonzero f(x) (kCount); flags[g] for non-finite values.
template <GeneTransform F, bool kCount, class V, class I>
__global__ void __launch_bounds__(kSmemThreads) gene_bounds_smem(const I* idx, const V* val, int64_t nnz, int64_t g0,
                                                                 int tile, const V* clip, unsigned* partial,
                                                                 unsigned* flags) {
  using U = std::make_unsigned_t<I>;
  extern __shared__ __align__(8) unsigned char smem_raw[];
  unsigned* acc = reinterpret_cast<unsigned*>(smem_raw);
  for (int i = threadIdx.x; i < 2 * tile; i += kSmemThreads) acc[i] = 0u;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSmemThreads;
  const I base = static_cast<I>(g0);
  volatile unsigned* seen = acc;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kSmemThreads) + threadIdx.x; p < nnz; p += stride) {
    const I g = idx[p] - base;
    if (static_cast<U>(g) < static_cast<U>(tile)) {
      const V x = transform<F>(val[p], static_cast<int64_t>(g) + g0, clip);
      if (x != V(0)) {
        const unsigned e = Bits<V>::field(x);
        if (e > seen[g]) atomicMax(&acc[g], e);  // the maximum rises a few times per gene only
        if (kCount) atomicAdd(&acc[tile + g], 1u);
        if (e == static_cast<unsigned>(Bits<V>::kInfField))
          atomicOr(&flags[static_cast<int64_t>(g) + g0], x != x ? kFlagNan : (x > V(0) ? kFlagPosInf : kFlagNegInf));
      }
    }
  }
  __syncthreads();
  unsigned* out = partial + static_cast<int64_t>(blockIdx.x) * 2 * tile;
  for (int i = threadIdx.x; i < 2 * tile; i += kSmemThreads) out[i] = acc[i];
}

// ceil(log2(c)) for c >= 1.
__device__ __forceinline__ int ceil_log2(unsigned long long c) { return c <= 1 ? 0 : 64 - __clzll(c - 1); }

// The blocks' bounds combined (max, sum: order-free) and the grids chosen (see the top of the file):
// shift[j] for the sum, shift[tile + j] for the squares; count[j] as float64 (kCount).
template <bool kCount, class V>
__global__ void bounds_finish(const unsigned* partial, int n_blocks, int tile, int* shift, double* count) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= tile) return;
  unsigned e = 0;
  unsigned long long c = 0;
  for (int b = 0; b < n_blocks; ++b) {
    const unsigned* p = partial + static_cast<int64_t>(b) * 2 * tile;
    e = max(e, p[j]);
    if (kCount) c += p[tile + j];
  }
  const int ex = static_cast<int>(e) - Bits<V>::kBias + 1;  // |f(x)| < 2^ex
  if constexpr (sizeof(V) == 4) {
    shift[j] = 32 - ex;
    shift[tile + j] = 32 - 2 * ex;
  } else {
    const int lc = ceil_log2(c);
    shift[j] = 62 - ex - lc;
    shift[tile + j] = 62 - 2 * ex - lc;
  }
  if (kCount) count[j] = static_cast<double>(c);
}

// add64, fixed_term: pp/fixed_point.cuh

// Pass B over the genes [g0, g0 + tile): the sum of q per gene (uint64, wrap-around), as the words
// lo[0, tile) and hi[tile, 2 tile) of shared memory.
template <GeneTransform F, bool kSquares, class V, class I>
__global__ void __launch_bounds__(kSmemThreads) gene_fixed_smem(const I* idx, const V* val, int64_t nnz, int64_t g0,
                                                                int tile, const V* clip, const int* shift,
                                                                unsigned long long* partial) {
  using U = std::make_unsigned_t<I>;
  extern __shared__ __align__(8) unsigned char smem_raw[];
  unsigned* acc = reinterpret_cast<unsigned*>(smem_raw);
  for (int i = threadIdx.x; i < 2 * tile; i += kSmemThreads) acc[i] = 0u;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSmemThreads;
  const I base = static_cast<I>(g0);
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kSmemThreads) + threadIdx.x; p < nnz; p += stride) {
    const I g = idx[p] - base;
    if (static_cast<U>(g) < static_cast<U>(tile)) {
      const V x = transform<F>(val[p], static_cast<int64_t>(g) + g0, clip);
      if (x != V(0)) add64(&acc[g], &acc[tile + g], fixed_term<kSquares>(x, shift[g]));
    }
  }
  __syncthreads();
  unsigned long long* out = partial + static_cast<int64_t>(blockIdx.x) * tile;
  for (int i = threadIdx.x; i < tile; i += kSmemThreads)
    out[i] = (static_cast<unsigned long long>(acc[tile + i]) << 32) | acc[i];
}

// Pass B with 64-bit global atomics into acc[0, g) (SCURRY_GENE_SUMS=atomic).
template <GeneTransform F, bool kSquares, class V, class I>
__global__ void __launch_bounds__(256) gene_fixed_global(const I* idx, const V* val, int64_t nnz, const V* clip,
                                                         const int* shift, unsigned long long* acc) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * 256;
  for (int64_t p = blockIdx.x * 256ll + threadIdx.x; p < nnz; p += stride) {
    const I g = idx[p];
    const V x = transform<F>(val[p], g, clip);
    if (x != V(0)) atomicAdd(&acc[g], static_cast<unsigned long long>(fixed_term<kSquares>(x, shift[g])));
  }
}

// out[j] = (sum over blocks of partial[b * tile + j]) * 2^-shift[j], non-finite flags applied.
__global__ void fixed_finish(const unsigned long long* partial, int n_blocks, int tile, const int* shift,
                             const unsigned* flags, bool squares, double* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= tile) return;
  unsigned long long s = 0;
  for (int b = 0; b < n_blocks; ++b) s += partial[static_cast<int64_t>(b) * tile + j];
  double v = ldexp(static_cast<double>(static_cast<long long>(s)), -shift[j]);
  const unsigned f = flags[j];
  if (f) {
    const bool pos = f & kFlagPosInf, neg = f & kFlagNegInf;
    if ((f & kFlagNan) || (pos && neg && !squares)) v = CUDART_NAN;
    else v = (neg && !squares) ? -CUDART_INF : CUDART_INF;
  }
  out[j] = v;
}

template <class V, class I>
GeneSums gene_sums_fixed(CudaResources& r, const CsrView<V, I>& m, GeneTransform f, const V* clip, bool want_count,
                         bool squares) {
  constexpr bool sums = true;
  // (double values: the grid needs the count; float values: n < 2^31 terms below 2^32 fit 63 bits)
  const bool count = want_count || sizeof(V) == 8;
  if (m.n_rows >= (int64_t{1} << 31)) fail("gene_sums: more than 2^31 rows in one device matrix; split in row blocks");
  const int64_t g = m.n_cols;
  GeneSums out;
  out.sum.assign(g, 0.0), out.sumsq.assign(g, 0.0), out.nnz.assign(g, 0.0);
  if (g == 0 || m.nnz == 0) return out;
  const char* strategy = std::getenv("SCURRY_GENE_SUMS");
  // (the global variant indexes the grids by gene: it runs when the genes fit one tile)
  const bool global = strategy && std::strcmp(strategy, "atomic") == 0 && g <= kTile;
  int sms = 0;
  SCURRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r.device));
  const int blocks = sms * kSmemBlocksPerSm;
  const int tile_max = static_cast<int>(std::min<int64_t>(g, kTile));
  const size_t partial_bytes = static_cast<size_t>(blocks) * tile_max * 8;  // pass A: 2 x 4 bytes; pass B: 8
  DeviceArray<unsigned long long> partial(r, partial_bytes / 8, "gene sums partials");
  DeviceArray<unsigned> flags(r, g, "gene sums flags");
  DeviceArray<int> shift(r, 2 * static_cast<size_t>(tile_max), "gene sums grids");
  DeviceArray<double> res(r, 3 * static_cast<size_t>(tile_max), "gene sums");
  DeviceArray<unsigned long long> gacc(r, global ? tile_max : 1, "gene sums (global)");
  SCURRY_CUDA(cudaMemsetAsync(flags.data(), 0, g * sizeof(unsigned), r.stream));
  std::vector<double> h(3 * static_cast<size_t>(tile_max));
  using T = GeneTransform;
  for (int64_t g0 = 0; g0 < g; g0 += tile_max) {
    const int tile = static_cast<int>(std::min<int64_t>(tile_max, g - g0));
    const unsigned fin_blocks = static_cast<unsigned>((tile + 255) / 256);
    // pass A
    {
      const size_t smem = 2 * static_cast<size_t>(tile) * 4;
      auto launch = [&](auto kernel) {
        SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        kernel<<<blocks, kSmemThreads, smem, r.stream>>>(m.indices, m.data, m.nnz, g0, tile, clip,
                                                         reinterpret_cast<unsigned*>(partial.data()), flags.data());
        SCURRY_CUDA_LAUNCH();
      };
      const unsigned* pa = reinterpret_cast<const unsigned*>(partial.data());
      if (count) {
        switch (f) {
          case T::identity: launch(gene_bounds_smem<T::identity, true, V, I>); break;
          case T::expm1: launch(gene_bounds_smem<T::expm1, true, V, I>); break;
          case T::clip: launch(gene_bounds_smem<T::clip, true, V, I>); break;
        }
        bounds_finish<true, V><<<fin_blocks, 256, 0, r.stream>>>(pa, blocks, tile, shift.data(), res.data() + 2 * tile);
      } else {
        switch (f) {
          case T::identity: launch(gene_bounds_smem<T::identity, false, V, I>); break;
          case T::expm1: launch(gene_bounds_smem<T::expm1, false, V, I>); break;
          case T::clip: launch(gene_bounds_smem<T::clip, false, V, I>); break;
        }
        bounds_finish<false, V><<<fin_blocks, 256, 0, r.stream>>>(pa, blocks, tile, shift.data(), res.data() + 2 * tile);
      }
      SCURRY_CUDA_LAUNCH();
    }
    // pass B: the sums, then the squares
    for (int pass = 0; pass < 2; ++pass) {
      const bool sq = pass == 1;
      if (sq ? !squares : !sums) continue;
      const int* sh = shift.data() + (sq ? tile : 0);
      double* dst = res.data() + (sq ? tile : 0);
      if (global) {
        SCURRY_CUDA(cudaMemsetAsync(gacc.data(), 0, tile * sizeof(unsigned long long), r.stream));
        auto launch = [&](auto kernel) {
          const int64_t want = (m.nnz + 255) / 256;
          const unsigned gb = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(want, int64_t(sms) * 16)));
          kernel<<<gb, 256, 0, r.stream>>>(m.indices, m.data, m.nnz, clip, sh, gacc.data());
          SCURRY_CUDA_LAUNCH();
        };
        if (sq) {
          switch (f) {
            case T::identity: launch(gene_fixed_global<T::identity, true, V, I>); break;
            case T::expm1: launch(gene_fixed_global<T::expm1, true, V, I>); break;
            case T::clip: launch(gene_fixed_global<T::clip, true, V, I>); break;
          }
        } else {
          switch (f) {
            case T::identity: launch(gene_fixed_global<T::identity, false, V, I>); break;
            case T::expm1: launch(gene_fixed_global<T::expm1, false, V, I>); break;
            case T::clip: launch(gene_fixed_global<T::clip, false, V, I>); break;
          }
        }
        fixed_finish<<<fin_blocks, 256, 0, r.stream>>>(gacc.data(), 1, tile, sh, flags.data() + g0, sq, dst);
      } else {
        const size_t smem = 2 * static_cast<size_t>(tile) * 4;
        auto launch = [&](auto kernel) {
          SCURRY_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
          kernel<<<blocks, kSmemThreads, smem, r.stream>>>(m.indices, m.data, m.nnz, g0, tile, clip, sh, partial.data());
          SCURRY_CUDA_LAUNCH();
        };
        if (sq) {
          switch (f) {
            case T::identity: launch(gene_fixed_smem<T::identity, true, V, I>); break;
            case T::expm1: launch(gene_fixed_smem<T::expm1, true, V, I>); break;
            case T::clip: launch(gene_fixed_smem<T::clip, true, V, I>); break;
          }
        } else {
          switch (f) {
            case T::identity: launch(gene_fixed_smem<T::identity, false, V, I>); break;
            case T::expm1: launch(gene_fixed_smem<T::expm1, false, V, I>); break;
            case T::clip: launch(gene_fixed_smem<T::clip, false, V, I>); break;
          }
        }
        fixed_finish<<<fin_blocks, 256, 0, r.stream>>>(partial.data(), blocks, tile, sh, flags.data() + g0, sq, dst);
      }
      SCURRY_CUDA_LAUNCH();
    }
    SCURRY_CUDA(cudaMemcpyAsync(h.data(), res.data(), 3 * tile * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    if (sums) std::copy(h.begin(), h.begin() + tile, out.sum.begin() + g0);
    if (squares) std::copy(h.begin() + tile, h.begin() + 2 * tile, out.sumsq.begin() + g0);
    if (want_count) std::copy(h.begin() + 2 * tile, h.begin() + 3 * tile, out.nnz.begin() + g0);
  }
  return out;
}

// Per gene, the nonzero entries of the selected rows (one warp per row; integer atomics: exact).
template <class V, class I>
__global__ void rows_gene_nnz_kernel(const int64_t* indptr, const I* idx, const V* val, const int64_t* rows,
                                     int64_t n_rows, unsigned long long* cnt) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n_rows) return;
  const int64_t row = rows[w];
  for (int64_t p = indptr[row] + lane; p < indptr[row + 1]; p += 32)
    if (val[p] != V(0)) atomicAdd(&cnt[idx[p]], 1ull);
}

}  // namespace

template <class V, class I>
void rows_gene_nnz(CudaResources& r, const CsrView<V, I>& m, const int64_t* d_rows, int64_t n_sel,
                   unsigned long long* d_cnt) {
  if (n_sel <= 0) return;
  const int64_t threads = n_sel * 32;
  rows_gene_nnz_kernel<V, I><<<static_cast<unsigned>((threads + kWarpRowsBlock - 1) / kWarpRowsBlock), kWarpRowsBlock, 0,
                               r.stream>>>(m.indptr, m.indices, m.data, d_rows, n_sel, d_cnt);
  SCURRY_CUDA_LAUNCH();
}

template <class V, class I>
GeneSums gene_sums(CudaResources& r, const CsrView<V, I>& m, GeneTransform f, const NonDeduced<V>* clip,
                   SecondStat second) {
  return gene_sums_fixed(r, m, f, clip, second != SecondStat::squares, second != SecondStat::count);
}

#define SCURRY_GENE_SUMS(V, I)                                                                                 \
  template GeneSums gene_sums<V, I>(CudaResources&, const CsrView<V, I>&, GeneTransform, const V*, SecondStat); \
  template void rows_gene_nnz<V, I>(CudaResources&, const CsrView<V, I>&, const int64_t*, int64_t, unsigned long long*);
SCURRY_GENE_SUMS(float, int32_t)
SCURRY_GENE_SUMS(double, int32_t)
SCURRY_GENE_SUMS(float, int64_t)
SCURRY_GENE_SUMS(double, int64_t)
#undef SCURRY_GENE_SUMS

}  // namespace scurry::gpu
