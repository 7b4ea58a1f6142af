// scurry: fixed-order float64 sums on the device, for the batch tools (harmony_gpu.cu,
// regress_out_gpu.cu, combat_gpu.cu). A kernel writes one partial sum per (output, chunk) into a
// [output][chunk] array (chunks of a partition that depends on the sizes only); reduce_partials adds
// each output's chunks in a fixed order (strided per thread, then a fixed tree). No floating-point
// atomics: the same inputs give the same bits on every run. Included by .cu files only; the kernels
// live in fixed_order_sums.cu.
#pragma once
#include <cstdint>

#include "exec/cuda_resources.cuh"

namespace scurry::gpu {

constexpr int64_t kMaxPartials = int64_t{1} << 25;  // doubles of per-chunk partials at most (256 MB)

// Blocks of `threads` for n work items; throws past CUDA's grid limit.
unsigned grid_for(int64_t n, int threads);
unsigned as_grid(int64_t n);  // n in [1, 2^31): a grid dimension
// Items per chunk for `width` outputs over n items: at least min_chunk items a chunk, the partials
// under kMaxPartials doubles, at most 65,535 chunks.
int64_t chunk_for(int64_t n, int64_t width, int64_t min_chunk);
int64_t n_chunks(int64_t n, int64_t chunk);

// out[w] = sum over j < n of part[w * n + j], w < n_out.
void reduce_partials(CudaResources& r, const double* part, int64_t n_out, int64_t n, double* out);

// Per chunk of `chunk` rows of the dense row-major float32 matrix Y (n x g), chunk ch < nch: for each
// gene j, part[(c * g + j) * nch + ch] = sum over the chunk's rows i of w_c(i) y_ij, where rows
// c < nb are the one-hot indicators of codes[i] (codes may be null when nb = 0) and rows nb + c the
// columns of the dense float64 design D (n x pd, row-major); with count_diff, one more row c = nb +
// pd: the number of rows whose value differs from row 0's. Throws when nb + pd + 1 accumulators do
// not fit a block's shared memory (more than 191).
void design_sums(CudaResources& r, const float* Y, int64_t n, int64_t g, const int32_t* codes, int64_t nb,
                 const double* D, int64_t pd, bool count_diff, int64_t chunk, int64_t nch, double* part);

}  // namespace scurry::gpu
