// scurry: logreg (rank_genes_groups' method 'logreg') on the GPU: the data term of the L-BFGS
// objective and its gradient on the device, the L-BFGS itself on the host (rank_genes_groups.cpp's
// logistic_regression, shared with the CPU path), and the per-cell cross-entropy (logreg_row) shared
// by both.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

#if defined(__CUDACC__)
#define SCURRY_LOGREG_HD __host__ __device__
#else
#define SCURRY_LOGREG_HD
#endif

namespace scurry {

// One cell's cross-entropy for its scores z[0, R) (R = 1 when K = 2: the binary sigmoid of class 1;
// else R = K classes, the softmax) and its class yk; pr[k] = P(k) - [yk == k], the gradient's factor.
// pr may be z (each z[k] is read before pr[k] is written).
SCURRY_LOGREG_HD inline double logreg_row(const double* z, int K, int yk, double* pr) {
  if (K == 2) {
    const double zz = z[0], yy = yk == 1 ? 1.0 : 0.0;
    const double lse = zz > 0 ? zz + std::log1p(std::exp(-zz)) : std::log1p(std::exp(zz));
    pr[0] = 1.0 / (1.0 + std::exp(-zz)) - yy;
    return lse - yy * zz;
  }
  double mx = z[0];
  for (int k = 1; k < K; ++k) mx = z[k] > mx ? z[k] : mx;
  double s = 0;
  for (int k = 0; k < K; ++k) s += std::exp(z[k] - mx);
  const double lse = mx + std::log(s);
  const double loss = lse - z[yk];
  for (int k = 0; k < K; ++k) pr[k] = std::exp(z[k] - lse) - (yk == k ? 1.0 : 0.0);
  return loss;
}

// The data term on one or more devices: per call, for the weights w (class-major, [k * p + j], then
// the R intercepts) the sum of the cells' cross-entropies (returned) and its gradient g (the same
// layout). The cells are split into shares of whole 256-cell blocks, one per device; a share that fits
// its device beside the working memory stays resident, else it is streamed from the host in chunks of
// whole blocks on every call (max_chunk_entries > 0 caps a chunk's stored entries: the streamed path
// on small data, for tests). Per cell one warp, a lane per class: z in the row's order with unfused
// roundings (the CPU's z, bit for bit), logreg_row by one lane, then each entry's gradient term
// (P - Y) * v rounded onto a per-gene fixed-point grid 2^-k (k from the gene's largest |v| and the
// cell count, so that no sum can overflow) and added as a 64-bit integer: exact, so the gradient has
// the same bits whatever the split, the chunks or the order of the additions (pre-rounding summation,
// Demmel & Nguyen 2013). The loss and the intercepts' sums per block of 256 cells, the blocks added
// in order on the host. So the same bits every run and for any number of devices (the device's exp
// and log differ from the host's by ulps, so not the CPU's bits). Every value of x must be finite.
class LogregGpu {
 public:
  LogregGpu(const std::vector<const Context*>& devices, const CsrF& x, const std::vector<int32_t>& y, int K,
            int64_t max_chunk_entries = 0);
  ~LogregGpu();
  LogregGpu(const LogregGpu&) = delete;
  LogregGpu& operator=(const LogregGpu&) = delete;
  double operator()(const std::vector<double>& w, std::vector<double>& g);
  // How many of the devices stream their share (0: every share resident).
  int streamed_devices() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace scurry
