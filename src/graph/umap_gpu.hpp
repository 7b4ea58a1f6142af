// scurry: UMAP layout on the GPU: the SGD epochs of umap-learn 0.5.3's optimize_layout_euclidean on
// the device, and, above the dense eigen-solver's size (spectral.hpp, 3,000 cells), the spectral start
// there too: the graph is uploaded once, pruned as umap prunes it (entries below max / default epochs
// count as absent), its degrees, the Chebyshev-filtered subspace iteration (spectral_gpu.cuh), the
// noise and the scaling to [0, 10] on the device, while the host threads check that the pruned graph
// is connected (else the CPU path's random start, as there). The other starts (random, given, the
// dense solver's) are the CPU path's host math (umap.hpp), so the options and the result mean what
// they mean there. SCURRY_UMAP_HOST_START=1 makes the spectral start on the host as well (A/B).
//
// The epochs are the batched form (umap_sgd.hpp, the CPU path's default sgd = "batched"): one
// thread per vertex makes the moves of its row's due edges and their negative samples, the vertices
// in kSubRounds interleaved groups one after the other; per group one kernel moves each chunk of
// at most kChunk edges of a row (a thread per chunk) into a displacement buffer, and a second adds
// each vertex's displacements in order to its position. No races and no atomics: the same seed gives the same
// bits run after run on the same GPU, and the same arithmetic as the CPU's batched epochs (to
// rounding: nvcc contracts products and sums into FMAs, and exp2f/log2f differ in the last bits),
// with the same random numbers. Float32 arithmetic. sgd = "sequential" is CPU only (InputError).
#pragma once
#include "core/dataset.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/umap.hpp"

namespace scurry {

// The SGD epochs on the GPU from the layout `init` (n x n_components, used as is: the CPU path's
// initial layout is `umap(ctx, graph, opt with maxiter = 0).embedding`). a, b: opt.a/opt.b when both
// set, else find_ab_params. Needs a CUDA context (InputError otherwise).
UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const DenseF& init, const UmapOptions& opt);

// Same inputs and meaning as umap(ctx, graph, opt, init): the initial layout (spectral on the device
// above 3,000 cells; otherwise spectral, random or `init` on the host by the CPU path), then the
// epochs on the GPU. (For a non-default maxiter the spectral layout is computed on the graph pruned
// at max / default_epochs, not max / maxiter.)
// rep: as umap's (the representation, for a graph of several components).
UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init = nullptr,
                    const RepresentationFn& rep = {});

// Dataset level: umap(ctx, d, opt) (umap.hpp) runs the epochs here when ctx is a CUDA context.

}  // namespace scurry
