// scurry: GPU t-SNE internals shared by tsne_gpu.cu (the iterations) and tsne_gpu_affinities.cu (P,
// the PCA start's covariance, the fixed-order sums). Included by .cu files only.
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"
#include "exec/cuda_resources.cuh"

namespace scurry::gpu::tsne {

constexpr int kThreads = 256;  // threads a block of the per-point and per-entry kernels
constexpr int kWarp = 32;

// P on the device: CSR (n rows, both triangles, sum 1), float32 values.
struct DeviceP {
  int64_t n = 0, nnz = 0;
  DeviceArray<int64_t> indptr;
  DeviceArray<int32_t> indices;
  DeviceArray<float> values;
};

// sklearn's joint probabilities from each row's k neighbours (nbr, squared distances: host, n x k):
// per row the binary search on the entropy (a warp a row), then P + P^T (the 2 n k directed entries
// sorted by (row, column), equal pairs summed), divided by its total (a fixed-order sum).
DeviceP affinities(CudaResources& r, const std::vector<int32_t>& nbr, const std::vector<double>& sq, int64_t n,
                   int64_t k, double perplexity);

// The covariance of the centred rows of X (host, n x d): d x d, both triangles, row-major, on the
// device by DGEMM on the float64 centred copy (cuBLAS: the same bits run after run on one GPU).
std::vector<double> covariance(CudaResources& r, const DenseF& X, const std::vector<double>& mean);

// A sum in a fixed order on the device: x[0..n) cut into kSumBlocks-or-fewer chunks (a partition of
// n alone), each reduced by a block's fixed tree, then the chunk sums by one block: *out (device).
// scratch grows as needed.
void sum_fixed(CudaResources& r, const double* x, int64_t n, double* out, DeviceArray<double>& scratch);

unsigned blocks_for(int64_t n, int threads = kThreads);

// starts[b] = the first position of sorted keys[0..n) whose key is >= b, for b <= count (the
// segment starts of sorted box ids or CSR rows), a thread each.
template <class Key, class Out>
__global__ void segment_starts_kernel(const Key* keys, int64_t n, int64_t count, Out* starts) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b > count) return;
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (static_cast<int64_t>(keys[mid]) < b) lo = mid + 1;
    else hi = mid;
  }
  starts[b] = static_cast<Out>(lo);
}

}  // namespace scurry::gpu::tsne
