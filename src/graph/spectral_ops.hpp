// scurry: the block operations of the spectral layout's eigensolver (spectral.cpp), one interface
// with a host and a GPU implementation, so that the solver's host math is written once.
//
// Blocks are n x w matrices of doubles (row-major) held by the backend in numbered slots; the small
// w x w matrices the solver works with (Gram matrices, rotations) live on the host. Every sum runs
// in a fixed order (row blocks of a fixed size, partials added in block order), so the results do
// not depend on the thread count, and on the GPU they are the same bits run after run.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/spectral.hpp"

namespace scurry::spectral {

constexpr int64_t kMaxWidth = 32;  // widest block the backends take (n_components + oversample)

class BlockOps {
 public:
  virtual ~BlockOps() = default;
  // dst(i, c) = a standard normal from the counter (seed, i * w + c): gaussian_at below, so the
  // host and the GPU start from the same block (to rounding).
  virtual void gaussian(int dst, uint64_t seed) = 0;
  // dst = alpha M src + beta src + gamma prev (prev < 0: no third term), M = D^-1/2 A D^-1/2.
  virtual void cheb(int dst, int src, int prev, double alpha, double beta, double gamma) = 0;
  // dst = a x + b y.
  virtual void axpby(int dst, int x, double a, int y, double b) = 0;
  // x^T y (w x w).
  virtual DenseD gram(int x, int y) = 0;
  // dst = src S (S: w x w).
  virtual void mul(int dst, int src, const DenseD& s) = 0;
  // x -= v0 (v0^T x), v0 = D^1/2 1 / |D^1/2 1|: M's eigenvector of eigenvalue 1.
  virtual void deflate(int x) = 0;
  // The first `cols` columns of slot src.
  virtual DenseD download(int src, int64_t cols) = 0;
};

// The solver: the k wanted eigenvectors of M (largest eigenvalues, v0 deflated) by Chebyshev-filtered
// subspace iteration on a block of width w (spectral.hpp), from ops' slots 0-3. Returns the slot whose
// first k columns hold them.
int chebyshev_subspace(BlockOps& ops, int64_t k, int64_t w, const SpectralOptions& opt, SpectralStats& st);

// The graph (n x n, symmetric, every row with a positive sum) with dinv = D^-1/2; `slots` blocks of
// width w.
std::unique_ptr<BlockOps> host_block_ops(const Context& ctx, const CsrF& graph, const std::vector<double>& dinv,
                                         int64_t w, int slots);
// The same on ctx's GPU (InputError without CUDA).
std::unique_ptr<BlockOps> device_block_ops(const Context& ctx, const CsrF& graph, const std::vector<double>& dinv,
                                           int64_t w, int slots);

}  // namespace scurry::spectral
