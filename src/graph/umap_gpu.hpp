// scurry: UMAP layout on the GPU: the SGD epochs of umap-learn 0.5.3's optimize_layout_euclidean on
// the device; everything before them (a, b, validation, initial layout) is the CPU path's host math
// (umap.hpp), so the options and the result mean what they mean there.
//
// Per epoch one thread per edge of the pruned graph (edges below max_weight / n_epochs are never
// sampled, as on the CPU): an edge whose next sample is due is sampled (attractive move of both
// ends, every gradient component clipped to [-4, 4], learning rate alpha (1 - (epoch - 1) / n_epochs)
// as umap updates it after each epoch), then its negative samples (repulsive, gamma, moving the head
// only). The schedule is umap's epochs_per_sample one, in closed form: an edge of weight w is sampled
// at the epochs n >= 1 where floor(n w_max / w) grows, and draws floor(n / eps_neg) - 1 negative
// samples in all up to epoch n (exactly umap's bookkeeping of epoch_of_next_negative_sample).
//
// Determinism: the updates are Hogwild-style (threads read and write the embedding without locks,
// like umap's parallel mode), so GPU results are NOT bit-reproducible run to run; the random numbers
// are: negative sample s of edge e in epoch n is hash(random_state, e, n, s) mod n_cells (a
// counter-based generator), so a seed fixes the random choices, not the order of the races. The
// numbers differ from the CPU path's (Tausworthe stream), so GPU and CPU embeddings agree in
// quality, not value by value. Float32 arithmetic on the device (the CPU path uses float64).
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

// Same inputs and meaning as umap(ctx, graph, opt, init): the initial layout (spectral, random or
// `init`) on the host by the CPU path, then the epochs on the GPU. (For a non-default maxiter the
// spectral layout is computed on the graph pruned at max / default_epochs, not max / maxiter.)
UmapResult umap_gpu(const Context& ctx, const CsrF& graph, const UmapOptions& opt, const DenseF* init = nullptr);

// Dataset level: umap(ctx, d, opt) (umap.hpp) runs the epochs here when ctx is a CUDA context.

}  // namespace scurry
