// The simulator's model (simulate.hpp) generated on the GPU, so that benchmarks at millions of cells
// need nothing big on the host and no upload.
//
// One block per cell. The cell's cluster and library size L come from its own Philox stream; the L
// multinomial draws are spread over the block's threads (each thread its own Philox subsequence,
// so the counts do not depend on scheduling), each an O(1) draw from the cluster's Walker alias
// table, counted in a shared-memory histogram of 16-bit counters (two per 32-bit word: up to
// kMaxGenes genes). Two passes with the same streams: the first counts each cell's distinct genes
// (for the row pointers, an exclusive scan), the second writes the sorted gene indices and counts.
// Cost at 1.3M cells x ~2,000 genes (L ~ 7,000 draws per cell): 2 x 9e9 draws; each a Philox half
// block, two L2-resident table reads and one shared-memory atomic: ~0.1 s, against 27 s on 16 host
// threads for simulate().
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <curand_kernel.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "exec/device_csr.cuh"
#include "sim/simulate.hpp"

namespace scurry {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGenes = 100000;  // histogram words: 50,000 x 4 bytes = 195 KiB of shared memory

struct SimParams {
  const float* prob;      // [cluster][gene] alias acceptance
  const int32_t* alias;   // [cluster][gene]
  int64_t n_cells;        // cells of this part
  int64_t row0;           // the first cell's index in the whole matrix (its random streams)
  int32_t n_genes;
  int32_t n_clusters;
  double lib_scale, lib_sd;
  uint64_t seed;
  int64_t* row_nnz;       // pass 1
  const int64_t* indptr;  // pass 2
  int32_t* indices;
  float* data;
  int32_t* cluster;
};

// Philox subsequences: one per (cell, thread) for the draws, and the cell's own for its cluster and size.
__device__ __forceinline__ unsigned long long stream_of(int64_t cell, int t) {
  return (static_cast<unsigned long long>(cell) << 9) | static_cast<unsigned>(t);
}

template <bool kWrite>
__global__ void __launch_bounds__(kThreads) simulate_kernel(SimParams P) {
  extern __shared__ uint32_t hist[];  // (n_genes + 1) / 2 words
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int s_cluster;
  __shared__ long long s_lib;
  const int words = (P.n_genes + 1) / 2;
  for (int64_t cell = blockIdx.x; cell < P.n_cells; cell += gridDim.x) {
    for (int w = threadIdx.x; w < words; w += kThreads) hist[w] = 0u;
    if (threadIdx.x == 0) {
      curandStatePhilox4_32_10_t st;
      curand_init(P.seed, stream_of(P.row0 + cell, 511), 0, &st);
      s_cluster = static_cast<int>(curand(&st) % static_cast<unsigned>(P.n_clusters));
      s_lib = llround(P.lib_scale * exp(P.lib_sd * curand_normal_double(&st)));
    }
    __syncthreads();
    const int k = s_cluster;
    const long long L = s_lib;
    const float* prob = P.prob + static_cast<int64_t>(k) * P.n_genes;
    const int32_t* alias = P.alias + static_cast<int64_t>(k) * P.n_genes;
    {
      curandStatePhilox4_32_10_t st;
      curand_init(P.seed, stream_of(P.row0 + cell, threadIdx.x), 0, &st);
      for (long long i = threadIdx.x; i < L; i += kThreads) {
        const uint2 u = make_uint2(curand(&st), curand(&st));
        const int slot = static_cast<int>((static_cast<unsigned long long>(u.x) * P.n_genes) >> 32);
        const float accept = (u.y >> 8) * (1.0f / 16777216.0f);
        const int g = accept < __ldg(prob + slot) ? slot : __ldg(alias + slot);
        atomicAdd(&hist[g >> 1], (g & 1) ? 0x10000u : 1u);
      }
    }
    __syncthreads();
    // Each thread owns a contiguous range of genes: distinct genes per range, then a block scan.
    const int per = (P.n_genes + kThreads - 1) / kThreads;
    const int g0 = min(P.n_genes, static_cast<int>(threadIdx.x) * per), g1 = min(P.n_genes, g0 + per);
    int mine = 0;
    for (int g = g0; g < g1; ++g) mine += ((hist[g >> 1] >> ((g & 1) * 16)) & 0xffffu) != 0u;
    int offset = 0, total = 0;
    Scan(scan_tmp).ExclusiveSum(mine, offset, total);
    if constexpr (!kWrite) {
      if (threadIdx.x == 0) P.row_nnz[cell] = total, P.cluster[cell] = k;
    } else {
      const int64_t base = P.indptr[cell] + offset;
      int o = 0;
      for (int g = g0; g < g1; ++g) {
        const unsigned c = (hist[g >> 1] >> ((g & 1) * 16)) & 0xffffu;
        if (c) P.indices[base + o] = g, P.data[base + o] = static_cast<float>(c), ++o;
      }
    }
    __syncthreads();  // before the next cell clears the histogram
  }
}

// The model's tables (host): per cluster, the alias table of its gene proportions.
struct Tables {
  double L0 = 0;
  std::vector<float> prob;
  std::vector<int32_t> alias;
};

Tables make_tables(const SimulateOptions& o) {
  if (o.n_genes > kMaxGenes)
    throw InputError(detail::concat("simulate on the device: at most ", kMaxGenes, " genes (got ", o.n_genes, ")"));
  Tables t;
  t.L0 = calibrate_library_size(o);  // also validates the options
  if (t.L0 * std::exp(6.0 * o.library_log_sd) > 60000.0)
    throw InputError("simulate on the device: library sizes above 60,000 draws per cell (16-bit counters); "
                     "lower --nnz-per-cell or use the host simulator");
  const auto props = simulate_cluster_proportions(o);
  const int64_t G = o.n_genes, C = o.n_clusters;
  t.prob.resize(static_cast<size_t>(G * C));
  t.alias.resize(static_cast<size_t>(G * C));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    std::vector<double> pd;
    std::vector<int32_t> al;
    simulate_alias_table(props[c], pd, al);
    std::copy(pd.begin(), pd.end(), t.prob.begin() + c * G);  // float acceptance thresholds
    std::copy(al.begin(), al.end(), t.alias.begin() + c * G);
  }
  return t;
}

// Cells [row0, row0 + n) on r's device; their cluster codes into codes[0..n).
std::shared_ptr<DeviceCsr> simulate_rows(CudaResources& r, const SimulateOptions& o, const Tables& t, int64_t row0,
                                         int64_t n, int32_t* codes) {
  const int64_t G = o.n_genes, C = o.n_clusters;
  DeviceArray<float> dprob(r, t.prob.size(), "simulation tables");
  DeviceArray<int32_t> dalias(r, t.alias.size(), "simulation tables");
  SCURRY_CUDA(cudaMemcpyAsync(dprob.data(), t.prob.data(), t.prob.size() * 4, cudaMemcpyHostToDevice, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(dalias.data(), t.alias.data(), t.alias.size() * 4, cudaMemcpyHostToDevice, r.stream));

  auto m = std::make_shared<DeviceCsr>();
  m->n_rows = n, m->n_cols = G;
  m->indptr = DeviceArray<int64_t>(r, static_cast<size_t>(n) + 1, "simulated matrix (row pointers)");
  DeviceArray<int64_t> row_nnz(r, static_cast<size_t>(n) + 1, "simulated row sizes");
  DeviceArray<int32_t> dcluster(r, static_cast<size_t>(std::max<int64_t>(n, 1)), "simulated clusters");
  SimParams P{};
  P.prob = dprob.data(), P.alias = dalias.data(), P.n_cells = n, P.row0 = row0, P.n_genes = static_cast<int32_t>(G);
  P.n_clusters = static_cast<int32_t>(C), P.lib_scale = t.L0, P.lib_sd = o.library_log_sd, P.seed = o.seed;
  P.row_nnz = row_nnz.data(), P.cluster = dcluster.data();
  const size_t smem = static_cast<size_t>((G + 1) / 2) * 4;
  SCURRY_CUDA(cudaFuncSetAttribute(simulate_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  SCURRY_CUDA(cudaFuncSetAttribute(simulate_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int sms = 0, per_sm = 0;
  SCURRY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r.device));
  SCURRY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, simulate_kernel<true>, kThreads, smem));
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(n, int64_t(sms) * std::max(per_sm, 1) * 8)));
  if (n > 0) {
    simulate_kernel<false><<<grid, kThreads, smem, r.stream>>>(P);
    SCURRY_CUDA_LAUNCH();
  }
  // Row pointers: exclusive scan of the row sizes (n + 1 entries, the last one 0).
  SCURRY_CUDA(cudaMemsetAsync(row_nnz.data() + n, 0, 8, r.stream));
  size_t tmp = 0;
  SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, tmp, row_nnz.data(), m->indptr.data(), n + 1, r.stream));
  DeviceArray<uint8_t> scratch(r, std::max<size_t>(tmp, 1), "scan scratch");
  SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(scratch.data(), tmp, row_nnz.data(), m->indptr.data(), n + 1, r.stream));
  int64_t nnz = 0;
  SCURRY_CUDA(cudaMemcpyAsync(&nnz, m->indptr.data() + n, 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  scratch.release();
  row_nnz.release();
  m->nnz = nnz;
  m->indices = DeviceArray<int32_t>(r, static_cast<size_t>(std::max<int64_t>(nnz, 1)), "simulated matrix (indices)");
  m->data = DeviceArray<float>(r, static_cast<size_t>(std::max<int64_t>(nnz, 1)), "simulated matrix (values)");
  P.indptr = m->indptr.data(), P.indices = m->indices.data(), P.data = m->data.data();
  if (n > 0) {
    simulate_kernel<true><<<grid, kThreads, smem, r.stream>>>(P);
    SCURRY_CUDA_LAUNCH();
  }
  if (n > 0) SCURRY_CUDA(cudaMemcpyAsync(codes, dcluster.data(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return m;
}

}  // namespace

DeviceSimulated simulate_on_device(Context& ctx, const SimulateOptions& o) {
  CudaResources* rp = ctx.cuda();
  if (!rp) throw Error("simulate on the device: needs --device gpu");
  const Tables t = make_tables(o);
  std::vector<int32_t> codes(static_cast<size_t>(o.n_cells));
  auto m = simulate_rows(*rp, o, t, 0, o.n_cells, codes.data());
  DeviceSimulated out;
  simulate_frame(out.frame, o, std::move(codes), t.L0);
  out.nnz = m->nnz;
  out.matrix = std::static_pointer_cast<void>(m);
  return out;
}

DeviceSimulated simulate_on_devices(const std::vector<Context*>& gpus, const SimulateOptions& o) {
  if (gpus.empty()) throw Error("simulate on the devices: no GPU");
  for (Context* c : gpus)
    if (!c || !c->cuda()) throw Error("simulate on the devices: needs --device gpu");
  const Tables t = make_tables(o);
  const int R = static_cast<int>(gpus.size());
  DeviceSimulated out;
  out.parts.resize(static_cast<size_t>(R));
  out.part_begin.resize(static_cast<size_t>(R) + 1);
  for (int q = 0; q <= R; ++q) out.part_begin[q] = o.n_cells * q / R;
  std::vector<int32_t> codes(static_cast<size_t>(o.n_cells));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(R));
  {
    std::vector<std::thread> workers;
    for (int q = 0; q < R; ++q)
      workers.emplace_back([&, q] {
        try {
          CudaResources& r = *gpus[q]->cuda();
          SCURRY_CUDA(cudaSetDevice(r.device));  // the resources were made on another thread
          const int64_t b = out.part_begin[q], e = out.part_begin[q + 1];
          out.parts[q] = std::static_pointer_cast<void>(simulate_rows(r, o, t, b, e - b, codes.data() + b));
        } catch (...) {
          errors[q] = std::current_exception();
        }
      });
    for (auto& w : workers) w.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (const auto& p : out.parts) out.nnz += std::static_pointer_cast<DeviceCsr>(p)->nnz;
  simulate_frame(out.frame, o, std::move(codes), t.L0);
  return out;
}

}  // namespace scurry
