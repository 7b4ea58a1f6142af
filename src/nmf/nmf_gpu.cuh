// scurry: the device side of the GPU NMF (included by .cu files only): X and the factors held on one
// device, and the fit over them. nmf_fit_gpu / nmf_fit_gpus (nmf.hpp) upload host data and call
// these; the cNMF benchmark generates X on the device and calls them directly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "exec/device_csr.cuh"
#include "nmf/nmf.hpp"

namespace scurry {

// X on one device, as the fit reads it: CSR (and X^T when H is updated) or dense row-major n x g.
struct NmfDeviceX {
  int64_t n = 0, g = 0, nnz = 0;
  bool dense = false;
  DeviceCsr X, Xt;        // sparse layout (X is released in the dense layout)
  DeviceArray<float> D;   // dense layout
  DeviceArray<float> Dt;  // dense layout: X^T [g, n] as well, when memory allows (the component-major fit)
  double sum = 0;         // sum of the values (sklearn's init scale)
  double sum_sq = 0;      // ||X||_F^2 (Frobenius objective)
  double sum_pos = 0;     // sum of the values > float32 eps (Kullback-Leibler objective)
};

// The replicates' factors on one device, laid out as NmfBatch: W [n, R*k], Ht [g, R*k].
struct NmfDeviceFactors {
  int64_t n = 0, g = 0;
  int k = 0, R = 0;
  DeviceArray<float> W, Ht;
  int64_t rk() const { return static_cast<int64_t>(R) * k; }
};

struct NmfDeviceStats {
  std::vector<int> n_iter;    // per replicate
  std::vector<double> error;  // per replicate (empty when the fit was asked not to compute it)
};

// Takes X (CSR, on res's device) and lays it out for the fit: the layout of opt.gpu_layout, where
// `automatic` is dense for the Frobenius loss when the density reaches opt.gpu_dense_min_density and
// the dense matrix plus R replicates of k components fit in the free device memory; the dense layout
// also keeps X^T when that fits too (and SCURRY_NMF_DENSE is not `legacy`). `host`: the
// same matrix on the host, if the caller has it (its sums and, for the sparse layout, its transpose
// are computed there; otherwise X is summed on the device and downloaded once for the transpose).
NmfDeviceX nmf_device_x(CudaResources& res, DeviceCsr X, const CsrF* host, const NmfOptions& opt, int R, int k);

NmfDeviceFactors nmf_upload_factors(CudaResources& res, const NmfBatch& b);
void nmf_download_factors(CudaResources& res, const NmfDeviceFactors& f, NmfBatch& out);

// Fits every replicate of f in place (semantics of nmf_fit). final_error: compute each replicate's
// error at the end (the benchmark's timed runs skip it). Synchronous on res.stream.
NmfDeviceStats nmf_fit_device(CudaResources& res, const NmfDeviceX& X, NmfDeviceFactors& f, const NmfOptions& opt,
                              bool final_error = true);

// Per replicate objective (sklearn's _beta_divergence(..., square_root=True)).
std::vector<double> nmf_device_objective(CudaResources& res, const NmfDeviceX& X, const NmfDeviceFactors& f,
                                         NmfLoss loss, bool tf32 = false);

// The most components the GPU kernels handle.
constexpr int kNmfGpuMaxK = 64;

// What the GPU fit needs of its input: X finite and non-negative (an InputError otherwise).
void nmf_gpu_check_x(const CsrF& X);
// ... and of a batch of factors: X's shape, at most kNmfGpuMaxK components (`what` names the batch).
void nmf_gpu_check_batch(const CsrF& X, const NmfBatch& b, const std::string& what);

}  // namespace scurry
