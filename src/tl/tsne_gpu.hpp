// scurry: t-SNE on the GPU, the CPU path's algorithm (tsne.hpp) with every per-iteration step on the
// device: the same affinities (perplexity-calibrated P from the kNN of k = 3 perplexity + 1, P + P^T
// normalised; the binary search and the symmetrisation on the device), the same start (sklearn's PCA
// init: the covariance by cuBLAS DGEMM, the 2 components on the host), the same iterations (early
// exaggeration, momentum, gains, n_iter) and the same gradient: the attraction over the sparse P
// (a warp a row), the repulsion by FIt-SNE's FFT interpolation (Linderman et al. 2019) on the same
// grid as the CPU path (tsne_detail::grid_shape: boxes, 3 Lagrange nodes a box, M = 2 p boxes), the
// circular convolution by cuFFT (R2C / C2R, float32 grids, the kernel's spectrum in double rounded to
// float, recomputed only when the node spacing changes), or all pairs below exact_below cells.
//
// Deterministic (issue 22 point 5): the same input gives the same bits run after run on the same GPU.
// No floating-point atomics anywhere: the charges are spread per box (the points sorted by box with
// cub's stable radix sort, one block a box summing its points in a fixed order); the potentials are
// gathered per point; every sum (Z, the KL, P's total) is a fixed partition reduced in a fixed order
// (a partition that depends on the sizes only); cuFFT and cuBLAS give the same bits for the same
// plan on the same GPU. Float64 for the layout, the gradient and every sum; float32 for P's values
// and the FFT grids (as the CPU path's fftwf grids).
//
// Differences from the CPU path: the sums are in other orders (a warp's tree, a block's tree), so the
// layouts differ by rounding, which t-SNE's dynamics amplify: the GPU and CPU embeddings agree in
// quality (neighbour preservation, KL), not bit for bit. knn = auto takes IVF-Flat from
// knn_ivf_from cells (tsne.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "tl/tsne.hpp"

namespace scurry {

// t-SNE of the rows of X (n x d, host) on the GPU of ctx (a CUDA Context; InputError otherwise).
// tsne(ctx, X, opt) calls this when ctx is a CUDA context. The embedding comes back to the host.
TsneResult tsne_gpu(const Context& ctx, const DenseF& X, const TsneOptions& opt);

// The device path's repulsion, for tests: as tsne_repulsion (tsne.hpp), rep[2i..2i+1] = sum_j w_ij^2
// (y_i - y_j) and returns Z, by the grid (method fft) or all pairs (exact), on the GPU.
double tsne_repulsion_gpu(const Context& ctx, const std::vector<double>& y, int64_t n, const TsneOptions& opt,
                          std::vector<double>& rep);

}  // namespace scurry
