// scurry: GPU t-SNE's affinities, the PCA start's covariance and the fixed-order sums (tsne_gpu.cuh).
#include <cub/cub.cuh>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/error.hpp"
#include "tl/tsne_gpu.cuh"

namespace scurry::gpu::tsne {

namespace {

constexpr int kSumBlocks = 1024;  // chunks of a fixed-order sum at most

__device__ __forceinline__ double warp_sum(double v) {
  // Butterfly: every lane ends with the same value (IEEE addition commutes), in a fixed order.
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void chunk_sums_kernel(const double* x, int64_t n, int64_t chunk, double* part) {
  __shared__ double sh[kThreads];
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * chunk, hi = min(n, lo + chunk);
  double s = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) s += x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.x) < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

// sklearn's _binary_search_perplexity for one row a warp: beta (the precision) bisected until the
// entropy of exp(-d beta) / sum is log(perplexity) within 1e-5 (100 steps at most); the row's
// conditional P at the last beta evaluated, as the CPU path leaves it.
__global__ void perplexity_kernel(const double* sq, int64_t n, int64_t k, double desired, double* cond) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= n) return;  // warp-uniform
  const double* d = sq + row * k;
  double beta = 1, beta_min = -INFINITY, beta_max = INFINITY, used = 1, sum = 1;
  for (int step = 0; step < 100; ++step) {
    double s = 0, sdp = 0;
    for (int64_t j = lane; j < k; j += kWarp) {
      const double e = exp(-d[j] * beta);
      s += e;
      sdp += d[j] * e;
    }
    s = warp_sum(s);
    sdp = warp_sum(sdp);
    used = beta;
    sum = s == 0 ? 1e-8 : s;
    const double entropy = ::log(sum) + beta * (sdp / sum);
    const double diff = entropy - desired;
    if (fabs(diff) <= 1e-5) break;
    if (diff > 0) {
      beta_min = beta;
      beta = isinf(beta_max) ? beta * 2 : (beta + beta_max) / 2;
    } else {
      beta_max = beta;
      beta = isinf(beta_min) ? beta / 2 : (beta + beta_min) / 2;
    }
  }
  for (int64_t j = lane; j < k; j += kWarp) cond[row * k + j] = exp(-d[j] * used) / sum;
}

// Both directions of every kNN entry: key (row << 32 | column), value the conditional P.
__global__ void pair_keys_kernel(const int32_t* nbr, const double* cond, int64_t nk, int64_t k,
                                 unsigned long long* keys, double* vals) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= nk) return;
  const unsigned long long i = static_cast<unsigned long long>(e / k), t = static_cast<unsigned>(nbr[e]);
  keys[2 * e] = (i << 32) | t;
  keys[2 * e + 1] = (t << 32) | i;
  vals[2 * e] = vals[2 * e + 1] = cond[e];
}

__global__ void head_flags_kernel(const unsigned long long* keys, int64_t m, int64_t* flags) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < m) flags[e] = (e == 0 || keys[e] != keys[e - 1]) ? 1 : 0;
}

// Each run of equal keys (at most 2: p_j|i and p_i|j) summed in sorted order into one entry.
__global__ void merge_kernel(const unsigned long long* keys, const double* vals, const int64_t* pos, int64_t m,
                             int32_t* rows, int32_t* cols, double* merged) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m || (e > 0 && keys[e] == keys[e - 1])) return;
  double s = vals[e];
  for (int64_t f = e + 1; f < m && keys[f] == keys[e]; ++f) s += vals[f];
  const int64_t p = pos[e];
  rows[p] = static_cast<int32_t>(keys[e] >> 32);
  cols[p] = static_cast<int32_t>(keys[e] & 0xffffffffull);
  merged[p] = s;
}

__global__ void normalise_kernel(const double* merged, int64_t nnz, const double* total, float* out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < nnz) out[e] = static_cast<float>(merged[e] / fmax(*total, DBL_EPSILON));
}

__global__ void centre_kernel(const float* X, int64_t nd, int64_t d, const double* mean, double* Xc) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < nd) Xc[e] = static_cast<double>(X[e]) - mean[e % d];
}

template <class T>
void upload(CudaResources& r, DeviceArray<T>& to, const T* from, size_t count) {
  if (count) SCURRY_CUDA(cudaMemcpyAsync(to.data(), from, count * sizeof(T), cudaMemcpyHostToDevice, r.stream));
}

template <class T>
T download_one(CudaResources& r, const T* p) {
  T h{};
  SCURRY_CUDA(cudaMemcpyAsync(&h, p, sizeof(T), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return h;
}

}  // namespace

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = std::max<int64_t>(1, (n + threads - 1) / threads);
  if (b > INT32_MAX) fail("tsne (gpu): ", n, " work items exceed a CUDA grid");
  return static_cast<unsigned>(b);
}

void sum_fixed(CudaResources& r, const double* x, int64_t n, double* out, DeviceArray<double>& scratch) {
  if (n <= 0) {
    SCURRY_CUDA(cudaMemsetAsync(out, 0, sizeof(double), r.stream));
    return;
  }
  int64_t nb = std::min<int64_t>(kSumBlocks, (n + kThreads - 1) / kThreads);
  const int64_t chunk = (n + nb - 1) / nb;
  nb = (n + chunk - 1) / chunk;
  if (scratch.size() < static_cast<size_t>(nb)) scratch = DeviceArray<double>(r, static_cast<size_t>(nb), "tsne sums");
  chunk_sums_kernel<<<static_cast<unsigned>(nb), kThreads, 0, r.stream>>>(x, n, chunk, scratch.data());
  SCURRY_CUDA_LAUNCH();
  chunk_sums_kernel<<<1, kThreads, 0, r.stream>>>(scratch.data(), nb, nb, out);
  SCURRY_CUDA_LAUNCH();
}

DeviceP affinities(CudaResources& r, const std::vector<int32_t>& nbr, const std::vector<double>& sq, int64_t n,
                   int64_t k, double perplexity) {
  const int64_t nk = n * k, m = 2 * nk;
  DeviceArray<double> cond(r, static_cast<size_t>(nk), "tsne conditional P");
  {
    DeviceArray<double> dsq(r, static_cast<size_t>(nk), "tsne kNN distances");
    upload(r, dsq, sq.data(), static_cast<size_t>(nk));
    perplexity_kernel<<<blocks_for(n * kWarp), kThreads, 0, r.stream>>>(dsq.data(), n, k, std::log(perplexity),
                                                                       cond.data());
    SCURRY_CUDA_LAUNCH();
  }
  DeviceArray<unsigned long long> keys0(r, static_cast<size_t>(m), "tsne P keys"),
      keys1(r, static_cast<size_t>(m), "tsne P keys (sorted)");
  DeviceArray<double> vals0(r, static_cast<size_t>(m), "tsne P values"),
      vals1(r, static_cast<size_t>(m), "tsne P values (sorted)");
  {
    DeviceArray<int32_t> dnbr(r, static_cast<size_t>(nk), "tsne kNN indices");
    upload(r, dnbr, nbr.data(), static_cast<size_t>(nk));
    pair_keys_kernel<<<blocks_for(nk), kThreads, 0, r.stream>>>(dnbr.data(), cond.data(), nk, k, keys0.data(),
                                                               vals0.data());
    SCURRY_CUDA_LAUNCH();
  }
  cond.release();
  // Sorted by (row, column): cub's radix sort is stable and the same bits every run.
  int end_bit = 33;  // 32 column bits, then the row's
  while (end_bit < 64 && (int64_t{1} << (end_bit - 32)) < n) ++end_bit;
  {
    size_t bytes = 0;
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys0.data(), keys1.data(), vals0.data(), vals1.data(),
                                                m, 0, end_bit, r.stream));
    DeviceArray<uint8_t> tmp(r, std::max<size_t>(bytes, 16), "tsne sort scratch");
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(tmp.data(), bytes, keys0.data(), keys1.data(), vals0.data(),
                                                vals1.data(), m, 0, end_bit, r.stream));
  }
  keys0.release();
  vals0.release();
  DeviceArray<int64_t> flags(r, static_cast<size_t>(m), "tsne P heads"), pos(r, static_cast<size_t>(m), "tsne P slots");
  head_flags_kernel<<<blocks_for(m), kThreads, 0, r.stream>>>(keys1.data(), m, flags.data());
  SCURRY_CUDA_LAUNCH();
  {
    size_t bytes = 0;
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, bytes, flags.data(), pos.data(), m, r.stream));
    DeviceArray<uint8_t> tmp(r, std::max<size_t>(bytes, 16), "tsne scan scratch");
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(tmp.data(), bytes, flags.data(), pos.data(), m, r.stream));
  }
  const int64_t nnz = download_one(r, pos.data() + m - 1) + download_one(r, flags.data() + m - 1);
  flags.release();
  DeviceP P;
  P.n = n;
  P.nnz = nnz;
  P.indices = DeviceArray<int32_t>(r, static_cast<size_t>(nnz), "tsne P indices");
  P.values = DeviceArray<float>(r, static_cast<size_t>(nnz), "tsne P values");
  P.indptr = DeviceArray<int64_t>(r, static_cast<size_t>(n + 1), "tsne P indptr");
  {
    DeviceArray<int32_t> rows(r, static_cast<size_t>(nnz), "tsne P rows");
    DeviceArray<double> merged(r, static_cast<size_t>(nnz), "tsne P merged");
    merge_kernel<<<blocks_for(m), kThreads, 0, r.stream>>>(keys1.data(), vals1.data(), pos.data(), m, rows.data(),
                                                          P.indices.data(), merged.data());
    SCURRY_CUDA_LAUNCH();
    keys1.release();
    vals1.release();
    pos.release();
    DeviceArray<double> total(r, 1, "tsne P total"), scratch;
    sum_fixed(r, merged.data(), nnz, total.data(), scratch);
    normalise_kernel<<<blocks_for(nnz), kThreads, 0, r.stream>>>(merged.data(), nnz, total.data(), P.values.data());
    SCURRY_CUDA_LAUNCH();
    segment_starts_kernel<<<blocks_for(n + 1), kThreads, 0, r.stream>>>(rows.data(), nnz, n, P.indptr.data());
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // before the scratch arrays go
  }
  return P;
}

std::vector<double> covariance(CudaResources& r, const DenseF& X, const std::vector<double>& mean) {
  const int64_t n = X.n_rows, d = X.n_cols, nd = n * d;
  if (n > INT32_MAX || d > INT32_MAX) fail("tsne (gpu): the PCA start's GEMM takes at most 2^31 - 1 rows");
  DeviceArray<float> dX(r, static_cast<size_t>(nd), "tsne embedding");
  DeviceArray<double> dmean(r, static_cast<size_t>(d), "tsne column means"), Xc(r, static_cast<size_t>(nd), "tsne centred"),
      C(r, static_cast<size_t>(d * d), "tsne covariance");
  upload(r, dX, X.data.data(), static_cast<size_t>(nd));
  upload(r, dmean, mean.data(), static_cast<size_t>(d));
  centre_kernel<<<blocks_for(nd), kThreads, 0, r.stream>>>(dX.data(), nd, d, dmean.data(), Xc.data());
  SCURRY_CUDA_LAUNCH();
  // Column-major, Xc is the d x n matrix A (lda d): C = A A^T.
  const double one = 1, zero = 0;
  const int di = static_cast<int>(d), ni = static_cast<int>(n);
  SCURRY_CUBLAS(cublasDgemm(r.cublas, CUBLAS_OP_N, CUBLAS_OP_T, di, di, ni, &one, Xc.data(), di, Xc.data(), di, &zero,
                            C.data(), di));
  std::vector<double> h(static_cast<size_t>(d * d));
  SCURRY_CUDA(cudaMemcpyAsync(h.data(), C.data(), h.size() * sizeof(double), cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  for (int64_t a = 0; a < d; ++a)  // both triangles the same bits, as the CPU path's
    for (int64_t b = 0; b < a; ++b) h[static_cast<size_t>(b * d + a)] = h[static_cast<size_t>(a * d + b)];
  return h;
}

}  // namespace scurry::gpu::tsne
