// scurry: Scrublet of one batch with every step over the cells on the GPU (scrublet_gpu.cu); the
// host keeps the per-gene decisions (the same code as the CPU path), the doublet pairs (scanpy's RNG,
// drawn on a host thread while the device works) and the scores from the neighbour counts.
#pragma once
#include <cstdint>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "pp/scrublet.hpp"

namespace scurry {

// Whether scrublet_counts_gpu takes these options: euclidean, no log_transform, no UMI subsampling,
// normalize_variance and mean_center (the defaults), n_prin_comps <= 64, an exact or default search.
bool scrublet_gpu_supported(const ScrubletOptions& opt);

// scrublet_counts on the device (a CUDA ctx): the counts uploaded once; filters, normalize_total +
// log1p and the seurat HVG statistics (the GPU chain's kernels), the HVG counts' rows scaled to 1e6,
// their z-score statistics and the PCA fitted on the observed cells (Gram + cuSOLVER, pca_rows), the
// projection of every observed row and, by linearity, of every simulated doublet from its parents'
// projections (no doublet matrix is built), then the count search. Built without CUDA: InputError.
ScrubletBatchResult scrublet_counts_gpu(const Context& ctx, const CsrF& counts, const ScrubletOptions& opt,
                                        uint64_t seed);

}  // namespace scurry
