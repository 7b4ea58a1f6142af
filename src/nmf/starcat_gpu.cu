// scurry: starCAT's exact fit on the GPU (see nnls_fixed_spectra_gpu and starcat_fit_gpu in starcat.hpp).
//
// A thread per cell: b = H x over the cell's nonzeros (float64, in the row's order), then Lawson &
// Hanson's active set on the k x k Gram (nmf/nnls_active_set.hpp, the code the CPU runs; its
// products unfused), the Gram in shared memory, the solver's scratch (a packed Cholesky factor of at
// most k (k + 1) / 2 doubles) in local memory, sized by a compile-time bound on k. The query is
// uploaded in blocks of cells (all of it at once through upload()'s pinned staging when it is one
// block), each block's usages downloaded before the next is uploaded; no
// atomics, no reduction across threads: the usages are the CPU's bit for bit, for any block size.
//
// starcat_fit_gpu runs the whole fit from the raw query: one upload, then on the device the value
// check (the first bad entry by position: atomicMin), the per-gene sums and sums of squares (a
// thread block per (16,384-cell block, 2,048 fit columns), the block's entries staged through shared
// memory a tile at a time and added into shared partials one cell after the other, so that each
// gene's partial adds its values in entry order from 0 as the CPU's reduce_blocks body does; then a
// thread per column adds the blocks' partials in block order from 0, as reduce_blocks), the sd on
// the host from those 2h doubles (the CPU's code), then in place each entry's column through the
// gene map (-1: skipped by the solve) and its value scaled as the CPU does (float(double(v) / sd)),
// and the solve. No compacted copy of the query is made on either side.
//
// Cost at 1M cells, 1,500 genes, k = 20 (H200): the gather reads ~450 nonzeros x 20 doubles of H^T
// per cell (L2-resident, 240 KB), ~1e10 FLOPs; the active set ~k outer steps of an m^3 / 6 Cholesky
// (m <= k), ~1e4-1e5 float64 FLOPs per cell: ~1e10-1e11 in all against the H200's ~60 TFLOP/s
// float64, so the device time is milliseconds to a few tenths of a second and the upload of the
// query (8 bytes a nonzero, 4.8 GB at 600 a cell) is of the same order.
#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "nmf/nnls_active_set.hpp"
#include "nmf/starcat.hpp"

namespace scurry {

namespace {

constexpr int kThreads = 128;  // cells per thread block
constexpr int kMaxPrograms = 64;

// An entry with a negative column (a query gene outside the fit: map_and_scale_kernel) is skipped.
template <int KM>
__global__ void starcat_nnls_kernel(int64_t rows, int k, const int64_t* __restrict__ indptr, int64_t base,
                                    const int32_t* __restrict__ indices, const float* __restrict__ data,
                                    const double* __restrict__ Ht, const double* __restrict__ G, double tol,
                                    float* __restrict__ W) {
  extern __shared__ double Gs[];
  for (int q = threadIdx.x; q < k * k; q += blockDim.x) Gs[q] = G[q];
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  double b[KM], w[KM], z[KM], L[KM * (KM + 1) / 2];
  int P[KM];
  unsigned char passive[KM];
  const int64_t p0 = indptr[i] - base, p1 = indptr[i + 1] - base;
  // f(v, h) for each entry of the cell in order: v its value, h the row of H^T of its column.
  auto entries = [&](auto f) {
    for (int64_t p = p0; p < p1; ++p) {
      const int32_t j = indices[p];
      if (j >= 0) f(static_cast<double>(data[p]), Ht + static_cast<int64_t>(j) * k);
    }
  };
  if constexpr (KM <= 32) {
    // b in registers while it is gathered (constant indices: the loops unrolled, a >= k predicated
    // off), then stored once for the active set; the same products and sums in the same order.
    double acc[KM];
#pragma unroll
    for (int a = 0; a < KM; ++a) acc[a] = 0;
    entries([&](double v, const double* h) {
#pragma unroll
      for (int a = 0; a < KM; ++a)
        if (a < k) acc[a] = acc[a] + nnls_mul(v, h[a]);
    });
#pragma unroll
    for (int a = 0; a < KM; ++a)
      if (a < k) b[a] = acc[a];
  } else {
    for (int a = 0; a < k; ++a) b[a] = 0;
    entries([&](double v, const double* h) {
      for (int a = 0; a < k; ++a) b[a] = b[a] + nnls_mul(v, h[a]);
    });
  }
  nnls_active_set(Gs, k, b, tol, w, z, P, passive, L);
  for (int a = 0; a < k; ++a) W[i * k + a] = static_cast<float>(w[a]);
}

template <class T>
void to_device(CudaResources& res, T* dst, const T* src, size_t n) {
  if (n) SCURRY_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, res.stream));
}

// In place, the raw query's entries to the fit's: the column through map (fit column or -1), the
// value divided as the CPU's scale (sd not null): float(double(v) / sd[j]).
__global__ void map_and_scale_kernel(int64_t nnz, int32_t* __restrict__ indices, float* __restrict__ data,
                                     const int32_t* __restrict__ map, const double* __restrict__ sd) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < nnz;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t j = map[indices[p]];
    indices[p] = j;
    if (sd && j >= 0) data[p] = __double2float_rn(__ddiv_rn(static_cast<double>(data[p]), sd[j]));
  }
}

unsigned stride_grid(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 1023) / 1024, 1, 4096)); }

// The first entry p (by position) with !(v >= 0): atomicMin over the offenders (rare), nnz if none.
__global__ void first_bad_value_kernel(int64_t nnz, const float* __restrict__ data, unsigned long long* first) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < nnz;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!(data[p] >= 0.0f)) atomicMin(first, static_cast<unsigned long long>(p));
}

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

constexpr int kSumThreads = 512;
constexpr int kSumGenes = 2048;  // fit columns per thread block
constexpr int kSumTile = 4096;   // entries staged in shared memory at a time
constexpr int kSumRows = 1024;   // row pointers staged at a time
constexpr size_t kSumShared = size_t(kSumGenes) * (2 * sizeof(double) + sizeof(int)) +
                              size_t(kSumTile) * (sizeof(int) + sizeof(float)) + size_t(kSumRows + 1) * sizeof(int64_t);

// Per (block of kStarcatStatRows cells: blockIdx.x, kSumGenes fit columns: blockIdx.y): the sums and
// sums of squares of the block's mapped entries, into part[blockIdx.x * 2h + (column | h + column)].
// The cells one after the other (a __syncthreads between two cells), a cell's entries over the
// threads: a gene appears once in a cell, so each gene's partial adds its values in entry order, from
// 0, as the CPU's. A gene repeated within a cell (the stamp: the last cell that touched a gene) would
// be added out of order: *dup is set and the host sums instead.
__global__ void __launch_bounds__(kSumThreads)
    gene_sums_kernel(int64_t n, const int64_t* __restrict__ indptr, const int32_t* __restrict__ indices,
                     const float* __restrict__ data, const int32_t* __restrict__ map, int h, double* __restrict__ part,
                     int* dup) {
  extern __shared__ double sh[];
  double* s1 = sh;
  double* s2 = s1 + kSumGenes;
  int64_t* rp = reinterpret_cast<int64_t*>(s2 + kSumGenes);
  int* stamp = reinterpret_cast<int*>(rp + kSumRows + 1);
  int* tj = stamp + kSumGenes;
  float* tv = reinterpret_cast<float*>(tj + kSumTile);
  const int tid = threadIdx.x;
  const int g0 = blockIdx.y * kSumGenes, gw = min(kSumGenes, h - g0);
  for (int q = tid; q < kSumGenes; q += kSumThreads) s1[q] = 0, s2[q] = 0, stamp[q] = -1;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kStarcatStatRows, r1 = min64(n, r0 + kStarcatStatRows);
  int64_t rbase = r0;  // rp[q] = indptr[rbase + q]
  for (int64_t q = tid; q <= min64(kSumRows, r1 - rbase); q += kSumThreads) rp[q] = indptr[rbase + q];
  const int64_t pend = indptr[r1];
  int64_t row = r0;
  __syncthreads();
  for (int64_t t0 = indptr[r0]; t0 < pend; t0 += kSumTile) {
    const int64_t t1 = min64(pend, t0 + kSumTile);
    for (int64_t p = t0 + tid; p < t1; p += kSumThreads) {
      const int c = map[indices[p]];
      tj[p - t0] = c < 0 ? -1 : c - g0;
      tv[p - t0] = data[p];
    }
    __syncthreads();
    while (row < r1) {  // the cells with entries in [t0, t1), in order (uniform over the block)
      if (row + 1 - rbase > kSumRows) {
        rbase = row;
        for (int64_t q = tid; q <= min64(kSumRows, r1 - rbase); q += kSumThreads) rp[q] = indptr[rbase + q];
        __syncthreads();
      }
      const int64_t a = max64(rp[row - rbase], t0), e = rp[row + 1 - rbase], b = min64(e, t1);
      const int mark = static_cast<int>(row - r0);
      for (int64_t p = a + tid; p < b; p += kSumThreads) {
        const int j = tj[p - t0];
        if (j < 0 || j >= gw) continue;
        const double v = tv[p - t0];
        if (atomicExch(&stamp[j], mark) == mark) *dup = 1;
        s1[j] = __dadd_rn(s1[j], v);
        s2[j] = __dadd_rn(s2[j], __dmul_rn(v, v));
      }
      __syncthreads();
      if (e > t1) break;  // the cell goes on in the next tile
      ++row;
    }
  }
  double* out = part + static_cast<int64_t>(blockIdx.x) * 2 * h + g0;
  for (int q = tid; q < gw; q += kSumThreads) out[q] = s1[q], out[h + q] = s2[q];
}

// acc[j] = ((0 + part[0][j]) + part[1][j]) + ...: reduce_blocks' order.
__global__ void add_partials_kernel(int64_t blocks, int64_t width, const double* __restrict__ part, double* __restrict__ acc) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= width) return;
  double s = 0;
  for (int64_t b = 0; b < blocks; ++b) s = __dadd_rn(s, part[b * width + j]);
  acc[j] = s;
}

// The spectra on the device: the Gram G = H H^T, H^T (g x k) and the active set's tolerance.
struct DeviceSpectra {
  int k = 0;
  double tol = 0;
  DeviceArray<double> G, Ht;
};

DeviceSpectra upload_spectra(CudaResources& res, const DenseD& H) {
  const int64_t k = H.n_rows, g = H.n_cols;
  if (k < 1 || k > kMaxPrograms)
    fail_input("reference", "starCAT on the GPU fits 1..", kMaxPrograms, " programs (the reference has ", k,
               "); use --device cpu");
  DeviceSpectra s;
  s.k = static_cast<int>(k);
  const DenseD G = spectra_gram(H);
  s.tol = nnls_tolerance(G.data.data(), s.k);
  std::vector<double> ht(static_cast<size_t>(g * k));
  for (int64_t a = 0; a < k; ++a)
    for (int64_t j = 0; j < g; ++j) ht[static_cast<size_t>(j * k + a)] = H(a, j);
  s.G = DeviceArray<double>(res, G.data.size(), "starCAT Gram");
  s.Ht = DeviceArray<double>(res, ht.size(), "starCAT spectra");
  to_device(res, s.G.data(), G.data.data(), G.data.size());
  to_device(res, s.Ht.data(), ht.data(), ht.size());
  return s;
}

// The usages of rows [r0, r0 + rows) of X, whose CSR is on the device (row pointers from row r0,
// entries from X.indptr[r0] on), into W's rows from r0. With a map, the block's entries are first
// mapped (and scaled by sd when not null) in place.
void solve_rows(CudaResources& res, const DeviceSpectra& s, const CsrF& X, int64_t r0, int64_t rows,
                const DeviceCsr& blk, const int32_t* map, const double* sd, DenseF& W) {
  const int64_t k = s.k;
  const int64_t nnz = X.indptr[r0 + rows] - X.indptr[r0];
  if (map && nnz) {
    map_and_scale_kernel<<<stride_grid(nnz), 256, 0, res.stream>>>(nnz, blk.indices.data(), blk.data.data(), map, sd);
    SCURRY_CUDA_LAUNCH();
  }
  DeviceArray<float> dW(res, static_cast<size_t>(rows * k), "starCAT usages");
  const unsigned blocks = static_cast<unsigned>((rows + kThreads - 1) / kThreads);
  const size_t shared = static_cast<size_t>(k * k) * sizeof(double);
  const int64_t p0 = X.indptr[r0];
#define SCURRY_STARCAT_LAUNCH(KM)                                                                             \
  starcat_nnls_kernel<KM><<<blocks, kThreads, shared, res.stream>>>(rows, s.k, blk.indptr.data(), p0,            \
                                                                   blk.indices.data(), blk.data.data(),          \
                                                                   s.Ht.data(), s.G.data(), s.tol, dW.data())
  if (k <= 8) SCURRY_STARCAT_LAUNCH(8);
  else if (k <= 16) SCURRY_STARCAT_LAUNCH(16);
  else if (k <= 32) SCURRY_STARCAT_LAUNCH(32);
  else SCURRY_STARCAT_LAUNCH(64);
#undef SCURRY_STARCAT_LAUNCH
  SCURRY_CUDA_LAUNCH();
  copy_to_host(res, W.data.data() + r0 * k, dW.data(), static_cast<size_t>(rows * k) * sizeof(float));
}

// X's rows uploaded and fitted in blocks of rows_per_block cells (the whole of X through upload()'s
// pinned staging, several times a plain copy, when it is one block).
void solve_in_blocks(CudaResources& res, const DeviceSpectra& s, const CsrF& X, int64_t rows_per_block,
                     const int32_t* map, const double* sd, DenseF& W) {
  const int64_t n = X.n_rows;
  const int64_t step = std::max<int64_t>(1, rows_per_block);
  for (int64_t r0 = 0; r0 < n; r0 += step) {
    const int64_t rows = std::min(step, n - r0);
    const int64_t p0 = X.indptr[r0], nnz = X.indptr[r0 + rows] - p0;
    DeviceCsr blk;
    if (rows == n) {
      blk = upload(res, X);
    } else {
      blk.indptr = DeviceArray<int64_t>(res, static_cast<size_t>(rows + 1), "starCAT row pointers");
      blk.indices = DeviceArray<int32_t>(res, static_cast<size_t>(nnz), "starCAT indices");
      blk.data = DeviceArray<float>(res, static_cast<size_t>(nnz), "starCAT values");
      to_device(res, blk.indptr.data(), X.indptr.data() + r0, static_cast<size_t>(rows + 1));
      to_device(res, blk.indices.data(), X.indices.data() + p0, static_cast<size_t>(nnz));
      to_device(res, blk.data.data(), X.data.data() + p0, static_cast<size_t>(nnz));
    }
    solve_rows(res, s, X, r0, rows, blk, map, sd, W);
  }
}

CudaResources& cuda_of(const Context& ctx) {
  CudaResources* resp = ctx.cuda();
  if (!resp) fail_input("--device", "starCAT's GPU fit needs a CUDA context (--device gpu)");
  return *resp;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void starcat_gpu_warm_up(const Context& ctx) {
  CudaResources& res = cuda_of(ctx);
  SCURRY_CUDA(cudaSetDevice(res.device));  // this thread's current device (it may be a new thread)
  const std::vector<char> zeros(size_t(8) << 20);  // over copy_to_device's direct-copy size
  DeviceArray<char> d(res, zeros.size(), "starCAT warm-up");
  copy_to_device(res, d.data(), zeros.data(), zeros.size());
}

DenseF nnls_fixed_spectra_gpu(const Context& ctx, const CsrF& X, const DenseD& H, int64_t rows_per_block) {
  CudaResources& res = cuda_of(ctx);
  if (X.n_cols != H.n_cols) fail("nnls_fixed_spectra_gpu: X has ", X.n_cols, " genes, the spectra ", H.n_cols);
  const DeviceSpectra s = upload_spectra(res, H);
  DenseF W(X.n_rows, H.n_rows);
  solve_in_blocks(res, s, X, rows_per_block, nullptr, nullptr, W);
  return W;
}

DenseF starcat_fit_gpu(const Context& ctx, const CsrF& query, const std::vector<int32_t>& map, int64_t h,
                       const DenseD& H, bool scale, int64_t rows_per_block, const std::string& where, StarcatResult& r) {
  CudaResources& res = cuda_of(ctx);
  const int64_t n = query.n_rows, nnz = query.nnz();
  if (H.n_cols != h || static_cast<int64_t>(map.size()) != query.n_cols)
    fail("starcat_fit_gpu: ", h, " fit columns, the spectra ", H.n_cols, ", a map of ", map.size(), " for ",
         query.n_cols, " query columns");
  const DeviceSpectra s = upload_spectra(res, H);
  DenseF W(n, H.n_rows);
  DeviceArray<int32_t> dmap(res, map.size(), "starCAT gene map");
  to_device(res, dmap.data(), map.data(), map.size());
  DeviceArray<double> dsd;
  auto put_sd = [&](const std::vector<double>& sd) {
    dsd = DeviceArray<double>(res, sd.size(), "starCAT gene sd");
    to_device(res, dsd.data(), sd.data(), sd.size());
  };
  if (rows_per_block <= 0) {  // auto: one block when it fits in 3/4 of the free device memory
    size_t free_b = 0, total_b = 0;
    SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const size_t cap = res.memory->max_bytes(), held = res.memory->in_use();
    if (cap) free_b = std::min(free_b, cap > held ? cap - held : size_t{0});
    const size_t need = static_cast<size_t>(nnz) * 8 + static_cast<size_t>(n + 1) * 8 +
                        static_cast<size_t>(n) * static_cast<size_t>(H.n_rows) * 4;
    rows_per_block = need <= free_b / 4 * 3 ? std::max<int64_t>(1, n) : int64_t(1) << 20;
  }
  if (n > rows_per_block) {
    // Larger than one block: checked and summed on the host threads, uploaded and fitted block-wise.
    auto t0 = std::chrono::steady_clock::now();
    const int64_t bad = starcat_first_bad_value(ctx, query);
    if (bad < nnz) starcat_bad_value(where, query.data[bad]);
    if (scale) put_sd(starcat_sd(starcat_gene_sums(ctx, query, map, h), h, n));
    r.prep_seconds = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    solve_in_blocks(res, s, query, rows_per_block, dmap.data(), dsd.data(), W);
    r.solve_seconds = seconds_since(t0);  // the block uploads with the kernels
    return W;
  }
  auto t0 = std::chrono::steady_clock::now();
  const DeviceCsr dq = upload(res, query);
  r.upload_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  {
    DeviceArray<unsigned long long> first(res, 1, "starCAT value check");
    const unsigned long long none = static_cast<unsigned long long>(nnz);
    to_device(res, first.data(), &none, 1);
    if (nnz) first_bad_value_kernel<<<stride_grid(nnz), 256, 0, res.stream>>>(nnz, dq.data.data(), first.data());
    SCURRY_CUDA_LAUNCH();
    unsigned long long got = none;
    copy_to_host(res, &got, first.data(), sizeof(got));
    if (got < none) {
      float v = 0;
      copy_to_host(res, &v, dq.data.data() + got, sizeof(v));
      starcat_bad_value(where, v);
    }
  }
  r.device_prep = true;
  if (scale) {
    const int64_t blocks = (n + kStarcatStatRows - 1) / kStarcatStatRows, width = 2 * h;
    std::vector<double> sums(static_cast<size_t>(width), 0.0);
    if (blocks > 0) {
      DeviceArray<double> part(res, static_cast<size_t>(blocks * width), "starCAT gene partials");
      DeviceArray<double> acc(res, static_cast<size_t>(width), "starCAT gene sums");
      DeviceArray<int> dup(res, 1, "starCAT repeated-gene flag");
      SCURRY_CUDA(cudaMemsetAsync(dup.data(), 0, sizeof(int), res.stream));
      SCURRY_CUDA(cudaFuncSetAttribute(gene_sums_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSumShared)));
      const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((h + kSumGenes - 1) / kSumGenes));
      gene_sums_kernel<<<grid, kSumThreads, kSumShared, res.stream>>>(n, dq.indptr.data(), dq.indices.data(),
                                                                      dq.data.data(), dmap.data(), static_cast<int>(h),
                                                                      part.data(), dup.data());
      SCURRY_CUDA_LAUNCH();
      add_partials_kernel<<<static_cast<unsigned>((width + 255) / 256), 256, 0, res.stream>>>(blocks, width, part.data(),
                                                                                             acc.data());
      SCURRY_CUDA_LAUNCH();
      int repeated = 0;
      copy_to_host(res, &repeated, dup.data(), sizeof(int));
      if (repeated) {  // a gene twice in a cell: the host's sums, in the CPU's order
        sums = starcat_gene_sums(ctx, query, map, h);
        r.device_prep = false;
      } else {
        copy_to_host(res, sums.data(), acc.data(), sums.size() * sizeof(double));
      }
    }
    put_sd(starcat_sd(sums, h, n));
  }
  r.prep_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  if (n) solve_rows(res, s, query, 0, n, dq, dmap.data(), dsd.data(), W);
  r.solve_seconds = seconds_since(t0);
  return W;
}

}  // namespace scurry
