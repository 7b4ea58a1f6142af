// The UMAP connectivities on the GPU (see connectivities_gpu.hpp for the semantics).
//
// Floor on one H200 (1.3M cells, k = 15: 19.6M kNN entries, 39M COO entries): the sigma search is
// ~30 iterations x 14 float64 exp per row (~0.6G exp, ~1-2 ms of FP64); the radix sort of 39M
// (41-bit key, float) pairs moves ~6 passes x 39M x 24 B ~ 5.6 GB (~2-3 ms at 3-4 TB/s); the rest is
// a few streaming passes. The host copies dominate: 157 MB of kNN up (pageable, ~7 GB/s: ~22 ms) and
// ~200 MB of CSR down (pinned staging). So ~30-40 ms in all.
//
// At 11.4M cells x 15: 342M COO entries, keys up to n^2 < 2^47; int64 counts and positions
// throughout, ~58 B of device memory per kNN entry at the peak (~10 GB).
#include <cub/cub.cuh>
#include <cuda/std/functional>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "graph/connectivities_gpu.hpp"
#include "graph/connectivities_row.hpp"

namespace scurry {
namespace {

const char* kWhere = "connectivities (gpu)";
constexpr int kBlock = 256;              // threads per block of every kernel here
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride loops above this many blocks
constexpr float kDeferred = -1.0f;       // sigma of a row waiting for the global mean distance

int blocks_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks)));
}

#define SCURRY_GRID_STRIDE(i, n)                                                           \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// rho and sigma per row; rows with rho = 0 get sigma = kDeferred and are counted.
__global__ void smooth_kernel(const float* __restrict__ dist, int64_t n, int64_t k, conn::SmoothParams p,
                              float* rho, float* sigma, unsigned long long* n_deferred) {
  SCURRY_GRID_STRIDE(i, n) {
    if (!conn::smooth_row(dist + i * k, k, p, 0.0, false, &rho[i], &sigma[i])) {
      sigma[i] = kDeferred;
      atomicAdd(n_deferred, 1ull);
    }
  }
}

// The deferred rows, now that the mean of all distances is known.
__global__ void smooth_deferred_kernel(const float* __restrict__ dist, int64_t n, int64_t k, conn::SmoothParams p,
                                       double mean_all, float* rho, float* sigma) {
  SCURRY_GRID_STRIDE(i, n) {
    if (sigma[i] == kDeferred) conn::smooth_row(dist + i * k, k, p, mean_all, true, &rho[i], &sigma[i]);
  }
}

// Row i's memberships into slots [i k, i k + k) as keys i n + c and into slots n k + [i k, i k + k)
// as the transposed keys c n + i; missing neighbours, the cell itself, later copies of a neighbour
// listed twice (the first copy carries the sum, in kNN order) and zero memberships get the
// sentinel key n^2. The lowest position of an index outside [-1, n) goes to *bad.
__global__ void coo_kernel(const int32_t* __restrict__ idx, const float* __restrict__ dist, int64_t n, int64_t k,
                           const float* __restrict__ rho, const float* __restrict__ sigma, unsigned long long* keys,
                           float* vals, unsigned long long* bad) {
  const unsigned long long sentinel = static_cast<unsigned long long>(n) * static_cast<unsigned long long>(n);
  const int64_t nk = n * k;
  SCURRY_GRID_STRIDE(i, n) {
    const int32_t* ri = idx + i * k;
    const float* di = dist + i * k;
    const float r = rho[i], s = sigma[i];
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = i * k + j;
      const int32_t c = ri[j];
      keys[slot] = sentinel;
      keys[nk + slot] = sentinel;
      if (c < -1 || c >= n) {
        atomicMin(bad, static_cast<unsigned long long>(slot));
        continue;
      }
      if (c < 0 || c == i) continue;
      bool repeat = false;
      for (int64_t q = 0; q < j && !repeat; ++q) repeat = ri[q] == c;
      if (repeat) continue;
      float v = conn::membership(di[j], r, s);
      for (int64_t q = j + 1; q < k; ++q)
        if (ri[q] == c) v = conn::fadd(v, conn::membership(di[q], r, s));
      if (v == 0.0f) continue;
      keys[slot] = static_cast<unsigned long long>(i) * static_cast<unsigned long long>(n) + static_cast<unsigned long long>(c);
      vals[slot] = v;
      keys[nk + slot] = static_cast<unsigned long long>(c) * static_cast<unsigned long long>(n) + static_cast<unsigned long long>(i);
      vals[nk + slot] = v;
    }
  }
}

// Over the sorted keys: the first entry of each key (a key holds A_ij and, when present, A_ji next
// to it) gets the fuzzy union of the pair in out[p] and keep[p] = (union != 0); the others, and
// the sentinels, keep[p] = 0. keep[m] = 0.
__global__ void combine_kernel(const unsigned long long* __restrict__ keys, const float* __restrict__ vals, int64_t m,
                               unsigned long long sentinel, float ratio, float* out, uint8_t* keep) {
  SCURRY_GRID_STRIDE(p, m + 1) {
    uint8_t flag = 0;
    if (p < m) {
      const unsigned long long key = keys[p];
      if (key != sentinel && (p == 0 || keys[p - 1] != key)) {
        const float y = (p + 1 < m && keys[p + 1] == key) ? vals[p + 1] : 0.0f;
        const float v = conn::fuzzy_union(vals[p], y, ratio);
        out[p] = v;
        flag = v != 0.0f;
      }
    }
    keep[p] = flag;
  }
}

// Row pointers from the sorted keys (row = key / n, the sentinels in row n) and the output positions
// pos (exclusive scan of keep, m + 1 entries): indptr[r] = pos of the first entry of row >= r.
__global__ void indptr_kernel(const unsigned long long* __restrict__ keys, const int64_t* __restrict__ pos, int64_t m,
                              int64_t n, int64_t* indptr) {
  const unsigned long long un = static_cast<unsigned long long>(n);
  SCURRY_GRID_STRIDE(p, m + 1) {
    const int64_t r_prev = p > 0 ? static_cast<int64_t>(keys[p - 1] / un) : -1;
    const int64_t r_cur = p < m ? static_cast<int64_t>(keys[p] / un) : n;
    for (int64_t r = r_prev + 1; r <= r_cur; ++r) indptr[r] = pos[p];
  }
}

// The kept entries to their positions: column = key mod n, value = the union.
__global__ void scatter_kernel(const unsigned long long* __restrict__ keys, const float* __restrict__ vals,
                               const uint8_t* __restrict__ keep, const int64_t* __restrict__ pos, int64_t m, int64_t n,
                               int32_t* indices, float* data) {
  const unsigned long long un = static_cast<unsigned long long>(n);
  SCURRY_GRID_STRIDE(p, m) {
    if (!keep[p]) continue;
    const int64_t q = pos[p];
    indices[q] = static_cast<int32_t>(keys[p] % un);
    data[q] = vals[p];
  }
}

int bit_width(unsigned long long x) {
  int b = 0;
  while (x) ++b, x >>= 1;
  return b;
}

}  // namespace

CsrF fuzzy_simplicial_set_gpu(const Context& ctx, const Knn& knn, const ConnectivitiesOptions& opt) {
  if (ctx.backend() != Backend::cuda || !ctx.cuda())
    fail_input(kWhere, "needs a GPU context; use --device gpu, or the CPU fuzzy_simplicial_set");
  const int64_t n = knn.n, k = knn.k;
  if (n < 0 || k < 0) fail_input(kWhere, "the kNN result has negative shape ", n, " x ", k);
  if (n > std::numeric_limits<int32_t>::max())
    fail_input(kWhere, n, " cells: more than 2^31 - 1 are not supported (int32 column indices)");
  const int64_t nk = n * k;
  if (knn.indices.size() != static_cast<size_t>(nk) || knn.distances.size() != static_cast<size_t>(nk))
    fail_input(kWhere, "the kNN result holds ", knn.indices.size(), " indices and ", knn.distances.size(),
               " distances; expected n x k = ", n, " x ", k, " of each");
  if (nk == 0) return CsrF::zeros(n, n);
  CudaResources& r = *ctx.cuda();
  SCURRY_CUDA(cudaSetDevice(r.device));
  cudaStream_t st = r.stream;
  const int64_t m = 2 * nk;  // COO entries: A and A^T
  const unsigned long long sentinel = static_cast<unsigned long long>(n) * static_cast<unsigned long long>(n);
  const int end_bit = bit_width(sentinel);

  DeviceArray<unsigned long long> keys0(r, static_cast<size_t>(m) + 1, "connectivities keys");
  DeviceArray<unsigned long long> keys1(r, static_cast<size_t>(m) + 1, "connectivities keys");
  DeviceArray<float> vals0(r, static_cast<size_t>(m), "connectivities values");
  DeviceArray<float> vals1(r, static_cast<size_t>(m), "connectivities values");
  DeviceArray<unsigned long long> counters(r, 2, "connectivities counters");  // deferred rows, first bad index
  {
    DeviceArray<int32_t> d_idx(r, static_cast<size_t>(nk), "kNN indices");
    DeviceArray<float> d_dist(r, static_cast<size_t>(nk), "kNN distances");
    DeviceArray<float> d_rho(r, static_cast<size_t>(n), "rho");
    DeviceArray<float> d_sigma(r, static_cast<size_t>(n), "sigma");
    SCURRY_CUDA(cudaMemcpyAsync(d_idx.data(), knn.indices.data(), static_cast<size_t>(nk) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, st));
    SCURRY_CUDA(cudaMemcpyAsync(d_dist.data(), knn.distances.data(), static_cast<size_t>(nk) * sizeof(float),
                                cudaMemcpyHostToDevice, st));
    const unsigned long long init[2] = {0ull, ~0ull};
    SCURRY_CUDA(cudaMemcpyAsync(counters.data(), init, sizeof(init), cudaMemcpyHostToDevice, st));

    conn::SmoothParams p;
    p.local_connectivity = opt.local_connectivity;
    p.target = std::log2(static_cast<double>(k)) * opt.bandwidth;
    p.n_iter = opt.n_iter;
    smooth_kernel<<<blocks_for(n), kBlock, 0, st>>>(d_dist.data(), n, k, p, d_rho.data(), d_sigma.data(),
                                                    counters.data());
    SCURRY_CUDA_LAUNCH();
    unsigned long long host_counters[2];
    SCURRY_CUDA(cudaMemcpyAsync(host_counters, counters.data(), sizeof(host_counters), cudaMemcpyDeviceToHost, st));
    SCURRY_CUDA(cudaStreamSynchronize(st));
    if (host_counters[0] > 0) {
      // Rows with rho = 0 (all their neighbours at distance 0 or missing): their sigma floor is the
      // mean of all distances, summed on the host in the CPU path's order.
      const double mean_all = conn::mean_finite(knn.distances.data(), knn.distances.size());
      smooth_deferred_kernel<<<blocks_for(n), kBlock, 0, st>>>(d_dist.data(), n, k, p, mean_all, d_rho.data(),
                                                               d_sigma.data());
      SCURRY_CUDA_LAUNCH();
    }
    coo_kernel<<<blocks_for(n), kBlock, 0, st>>>(d_idx.data(), d_dist.data(), n, k, d_rho.data(), d_sigma.data(),
                                                 keys0.data(), vals0.data(), counters.data() + 1);
    SCURRY_CUDA_LAUNCH();
    SCURRY_CUDA(cudaMemcpyAsync(host_counters, counters.data(), sizeof(host_counters), cudaMemcpyDeviceToHost, st));
    SCURRY_CUDA(cudaStreamSynchronize(st));
    if (host_counters[1] != ~0ull) {
      const int64_t at = static_cast<int64_t>(host_counters[1]);
      fail_input(kWhere, "neighbour ", at % k, " of cell ", at / k, " has index ", knn.indices[at], ", outside [0, ", n,
                 ") (-1 marks a missing neighbour); the kNN result is corrupt");
    }
  }  // the kNN, rho and sigma are freed before the sort

  // Sort the (key, membership) pairs: each key's A_ij and A_ji end up next to each other.
  cub::DoubleBuffer<unsigned long long> kb(keys0.data(), keys1.data());
  cub::DoubleBuffer<float> vb(vals0.data(), vals1.data());
  size_t tmp_bytes = 0;
  SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, kb, vb, m, 0, end_bit, st));
  {
    DeviceArray<char> tmp(r, tmp_bytes, "connectivities sort scratch");
    SCURRY_CUDA(cub::DeviceRadixSort::SortPairs(tmp.data(), tmp_bytes, kb, vb, m, 0, end_bit, st));
  }
  const unsigned long long* keys = kb.Current();
  const float* vals = vb.Current();
  float* unions = vb.Alternate();
  int64_t* pos = reinterpret_cast<int64_t*>(kb.Alternate());  // m + 1 entries

  DeviceArray<uint8_t> keep(r, static_cast<size_t>(m) + 1, "connectivities flags");
  combine_kernel<<<blocks_for(m + 1), kBlock, 0, st>>>(keys, vals, m, sentinel, static_cast<float>(opt.set_op_mix_ratio),
                                                      unions, keep.data());
  SCURRY_CUDA_LAUNCH();
  tmp_bytes = 0;
  SCURRY_CUDA(cub::DeviceScan::ExclusiveScan(nullptr, tmp_bytes, keep.data(), pos, ::cuda::std::plus<int64_t>{},
                                             int64_t{0}, m + 1, st));
  {
    DeviceArray<char> tmp(r, tmp_bytes, "connectivities scan scratch");
    SCURRY_CUDA(cub::DeviceScan::ExclusiveScan(tmp.data(), tmp_bytes, keep.data(), pos, ::cuda::std::plus<int64_t>{},
                                               int64_t{0}, m + 1, st));
  }
  CsrF out = CsrF::zeros(n, n);
  DeviceArray<int64_t> indptr(r, static_cast<size_t>(n) + 1, "connectivities row pointers");
  indptr_kernel<<<blocks_for(m + 1), kBlock, 0, st>>>(keys, pos, m, n, indptr.data());
  SCURRY_CUDA_LAUNCH();
  copy_to_host(r, out.indptr.data(), indptr.data(), static_cast<size_t>(n + 1) * sizeof(int64_t));
  const int64_t nnz = out.indptr[n];
  // The values go to the buffer of the sorted memberships (read by combine_kernel only).
  float* data = vb.Current();
  DeviceArray<int32_t> indices(r, static_cast<size_t>(nnz), "connectivities indices");
  scatter_kernel<<<blocks_for(m), kBlock, 0, st>>>(keys, unions, keep.data(), pos, m, n, indices.data(), data);
  SCURRY_CUDA_LAUNCH();
  resize_large(out.indices, static_cast<size_t>(nnz));
  resize_large(out.data, static_cast<size_t>(nnz));
  copy_to_host(r, out.indices.data(), indices.data(), static_cast<size_t>(nnz) * sizeof(int32_t));
  copy_to_host(r, out.data.data(), data, static_cast<size_t>(nnz) * sizeof(float));
  return out;
}

}  // namespace scurry
