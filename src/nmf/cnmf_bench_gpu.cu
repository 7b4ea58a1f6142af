// scurry: the cNMF benchmark on GPUs (see cnmf_bench.hpp). Every device generates the same counts
// itself (cell i's Philox stream is seeded by (seed, i)), scales them, lays them out (dense or CSR,
// nmf_device_x), then runs its contiguous group of each k's replicates; host threads, one a device.
//
// Floors of the generator (per device): 2 passes x n x g Poisson draws (compute-bound; ~0.1-1 s at
// 2.4M x 2000), the CSR written once (nnz * 8 bytes). Scaling: one read + one write of the values.
// Fit floors: see nmf_gpu.cu; the benchmark reports them per k.
#include <cub/device/device_scan.cuh>
#include <curand_kernel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "nmf/cnmf_bench.hpp"
#include "nmf/nmf_gpu.cuh"

namespace scurry {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxPrograms = 32;
constexpr int kSharedGenes = 3072;    // gene sums in shared memory up to this many genes (48 KB)
constexpr unsigned kGridStride = 4096;  // blocks of the grid-stride kernels
constexpr float kLibrarySigma = 0.5f;   // as the CPU generator
constexpr double kFp32 = 51e12, kBandwidth = 4.3e12;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Count pass (indptr == nullptr: row_nnz[i] = nonzeros of cell i) or fill pass (writes the row at
// indptr[i]). One thread per cell; both passes draw the same numbers.
__global__ void generate_kernel(int64_t n, int64_t g, int P, const float* __restrict__ spec_t, double library,
                                unsigned long long seed, const int64_t* __restrict__ indptr, int64_t* __restrict__ row_nnz,
                                int32_t* __restrict__ indices, float* __restrict__ vals) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  curandStatePhilox4_32_10_t st;
  curand_init(seed, static_cast<unsigned long long>(i), 0, &st);
  float u[kMaxPrograms];
  float tot = 0;
  for (int p = 0; p < P; ++p) {
    const float e = -logf(curand_uniform(&st));  // (0, 1]
    u[p] = e * e, tot += u[p];
  }
  const double L = library * exp(kLibrarySigma * curand_normal(&st));
  for (int p = 0; p < P; ++p) u[p] = static_cast<float>(L * u[p] / tot);
  const int64_t start = indptr ? indptr[i] : 0;
  int64_t c = 0;
  for (int64_t j = 0; j < g; ++j) {
    float lam = 0;
    const float* s = spec_t + j * P;
    for (int p = 0; p < P; ++p) lam = fmaf(u[p], s[p], lam);
    const unsigned x = lam > 0 ? curand_poisson(&st, lam) : 0u;
    if (x > 0) {
      if (indptr) indices[start + c] = static_cast<int32_t>(j), vals[start + c] = static_cast<float>(x);
      ++c;
    }
  }
  if (!indptr) row_nnz[i] = c;
}

// Per-gene sum and sum of squares (sums[j], sums[g + j]); shared-memory partials when g is small.
// (Atomic order varies: the last bits of the scale factors can differ run to run; benchmark only.)
template <bool kShared>
__global__ void gene_sums_kernel(int64_t nnz, int64_t g, const int32_t* __restrict__ idx, const float* __restrict__ v,
                                 double* __restrict__ sums) {
  extern __shared__ double sh[];
  if (kShared) {
    for (int64_t j = threadIdx.x; j < 2 * g; j += blockDim.x) sh[j] = 0;
    __syncthreads();
  }
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < nnz;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double x = v[p];
    double* dst = kShared ? sh : sums;
    atomicAdd(dst + idx[p], x);
    atomicAdd(dst + g + idx[p], x * x);
  }
  if (kShared) {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < 2 * g; j += blockDim.x)
      if (sh[j] != 0) atomicAdd(sums + j, sh[j]);
  }
}

__global__ void scale_kernel(int64_t nnz, const int32_t* __restrict__ idx, const double* __restrict__ sd,
                             float* __restrict__ v) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < nnz;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v[p] = static_cast<float>(v[p] / sd[idx[p]]);
}

// avg * |N(0, 1)|, element t drawing from Philox subsequence t of `seed`.
__global__ void init_kernel(int64_t count, float avg, unsigned long long seed, float* __restrict__ A) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < count;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    curandStatePhilox4_32_10_t st;
    curand_init(seed, static_cast<unsigned long long>(t), 0, &st);
    A[t] = avg * fabsf(curand_normal(&st));
  }
}

// Counts generated on the device, scaled as cNMF's prepare, as a DeviceCsr.
DeviceCsr generate(CudaResources& res, const CnmfBenchOptions& o, const std::vector<float>& spec) {
  const int64_t n = o.cells, g = o.genes;
  const int P = o.programs;
  std::vector<float> spec_t(static_cast<size_t>(g) * P);  // [g][P]
  for (int p = 0; p < P; ++p)
    for (int64_t j = 0; j < g; ++j) spec_t[static_cast<size_t>(j) * P + p] = spec[static_cast<size_t>(p) * g + j];
  DeviceArray<float> dspec(res, spec_t.size(), "bench spectra");
  SCURRY_CUDA(cudaMemcpyAsync(dspec.data(), spec_t.data(), spec_t.size() * 4, cudaMemcpyHostToDevice, res.stream));
  DeviceArray<int64_t> row_nnz(res, static_cast<size_t>(n) + 1, "bench row nonzeros");
  SCURRY_CUDA(cudaMemsetAsync(row_nnz.data(), 0, (static_cast<size_t>(n) + 1) * 8, res.stream));
  const unsigned blocks = static_cast<unsigned>(ceil_div(n, kThreads));
  const unsigned long long seed = o.seed;
  generate_kernel<<<blocks, kThreads, 0, res.stream>>>(n, g, P, dspec.data(), o.library_size, seed, nullptr,
                                                       row_nnz.data(), nullptr, nullptr);
  SCURRY_CUDA_LAUNCH();
  DeviceCsr X;
  X.n_rows = n, X.n_cols = g;
  X.indptr = DeviceArray<int64_t>(res, static_cast<size_t>(n) + 1, "bench indptr");
  size_t tmp = 0;
  SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, tmp, row_nnz.data(), X.indptr.data(), n + 1, res.stream));
  {
    DeviceArray<uint8_t> scratch(res, tmp, "bench scan scratch");
    SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(scratch.data(), tmp, row_nnz.data(), X.indptr.data(), n + 1, res.stream));
  }
  SCURRY_CUDA(cudaMemcpyAsync(&X.nnz, X.indptr.data() + n, 8, cudaMemcpyDeviceToHost, res.stream));
  SCURRY_CUDA(cudaStreamSynchronize(res.stream));
  row_nnz.release();
  X.indices = DeviceArray<int32_t>(res, static_cast<size_t>(X.nnz), "bench indices");
  X.data = DeviceArray<float>(res, static_cast<size_t>(X.nnz), "bench values");
  generate_kernel<<<blocks, kThreads, 0, res.stream>>>(n, g, P, dspec.data(), o.library_size, seed, X.indptr.data(),
                                                       nullptr, X.indices.data(), X.data.data());
  SCURRY_CUDA_LAUNCH();
  SCURRY_CUDA(cudaStreamSynchronize(res.stream));
  return X;
}

void scale(CudaResources& res, DeviceCsr& X) {
  const int64_t g = X.n_cols;
  DeviceArray<double> sums(res, static_cast<size_t>(2 * g), "bench gene sums");
  SCURRY_CUDA(cudaMemsetAsync(sums.data(), 0, static_cast<size_t>(2 * g) * 8, res.stream));
  if (X.nnz > 0) {
    if (g <= kSharedGenes)
      gene_sums_kernel<true><<<kGridStride, kThreads, static_cast<size_t>(2 * g) * 8, res.stream>>>(
          X.nnz, g, X.indices.data(), X.data.data(), sums.data());
    else
      gene_sums_kernel<false><<<kGridStride, kThreads, 0, res.stream>>>(X.nnz, g, X.indices.data(), X.data.data(),
                                                                        sums.data());
    SCURRY_CUDA_LAUNCH();
  }
  std::vector<double> h(static_cast<size_t>(2 * g));
  SCURRY_CUDA(cudaMemcpyAsync(h.data(), sums.data(), h.size() * 8, cudaMemcpyDeviceToHost, res.stream));
  SCURRY_CUDA(cudaStreamSynchronize(res.stream));
  const double n = static_cast<double>(X.n_rows);
  std::vector<double> sd(static_cast<size_t>(g));
  for (int64_t j = 0; j < g; ++j) {
    const double var = n > 1 ? (h[g + j] - h[j] * h[j] / n) / (n - 1) : 0.0;
    sd[j] = var > 0 ? std::sqrt(var) : 1.0;
  }
  SCURRY_CUDA(cudaMemcpyAsync(sums.data(), sd.data(), sd.size() * 8, cudaMemcpyHostToDevice, res.stream));
  if (X.nnz > 0) {
    scale_kernel<<<kGridStride, kThreads, 0, res.stream>>>(X.nnz, X.indices.data(), sums.data(), X.data.data());
    SCURRY_CUDA_LAUNCH();
  }
  SCURRY_CUDA(cudaStreamSynchronize(res.stream));
}

// Runs fn(d) on one host thread per device (cudaSetDevice first); rethrows the first error.
template <class Fn>
void on_devices(const std::vector<int>& devices, Fn&& fn) {
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> workers;
  for (size_t d = 0; d < devices.size(); ++d)
    workers.emplace_back([&, d] {
      try {
        SCURRY_CUDA(cudaSetDevice(devices[d]));
        fn(static_cast<int>(d));
      } catch (...) {
        errors[d] = std::current_exception();
      }
    });
  for (auto& w : workers) w.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct DeviceState {
  std::shared_ptr<CudaResources> res;
  NmfDeviceX x;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CnmfBenchResult cnmf_bench_gpu(const CnmfBenchOptions& o, const CudaOptions& base) {
  check_bench_options(o);
  if (o.devices.empty()) fail_input("--gpus", "no GPU given");
  int kmax = 0;
  for (const int k : o.ks) kmax = std::max(kmax, k);
  if (kmax > kNmfGpuMaxK) fail_input("-k", "the GPU NMF handles at most ", kNmfGpuMaxK, " components (got ", kmax, ")");
  const int D = static_cast<int>(o.devices.size());
  const int64_t n = o.cells, g = o.genes;
  CnmfBenchResult out;
  out.backend = "gpu";
  out.device = cuda_device_description(o.devices[0]);
  out.n_devices = D;
  out.cells = n, out.genes = g;
  NmfOptions nmf;
  nmf.solver = NmfSolver::cd;
  nmf.loss = NmfLoss::frobenius;
  nmf.tol = 0;
  nmf.gpu_layout = o.layout;
  nmf.gpu_tf32 = o.tf32;
  // The layout decision assumes the largest batch of the run.
  const int plan_rk = o.replicates > 0 ? static_cast<int>(ceil_div(o.replicates, D)) * kmax : o.auto_rk;
  const std::vector<float> spec = cnmf_bench_spectra(o);
  std::vector<DeviceState> st(D);
  std::vector<double> t_gen(D), t_scale(D), t_layout(D);
  on_devices(o.devices, [&](int d) {
    CudaOptions co = base;
    co.device = o.devices[d];
    st[d].res = make_cuda_resources(co);
    CudaResources& res = *st[d].res;
    auto t0 = std::chrono::steady_clock::now();
    DeviceCsr X = generate(res, o, spec);
    t_gen[d] = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    scale(res, X);
    t_scale[d] = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    st[d].x = nmf_device_x(res, std::move(X), nullptr, nmf, 1, plan_rk);
    t_layout[d] = seconds_since(t0);
  });
  out.nnz = st[0].x.nnz;
  out.density = static_cast<double>(out.nnz) / (static_cast<double>(n) * static_cast<double>(g));
  out.generate_seconds = *std::max_element(t_gen.begin(), t_gen.end());
  out.scale_seconds = *std::max_element(t_scale.begin(), t_scale.end());
  out.layout_seconds = *std::max_element(t_layout.begin(), t_layout.end());
  const bool dense = st[0].x.dense;
  const double normx = std::sqrt(st[0].x.sum_sq);
  log::info("cnmf bench: " + std::to_string(n) + " x " + std::to_string(g) + ", nnz " + std::to_string(out.nnz) +
            (dense ? ", dense layout" : ", sparse layout") + ", " + std::to_string(D) + " GPU(s)");

  for (const int k : o.ks) {
    // Replicates per device: given (split in contiguous groups) or as many as fit.
    std::vector<int> group(D);
    if (o.replicates > 0) {
      for (int d = 0; d < D; ++d) group[d] = o.replicates / D + (d < o.replicates % D ? 1 : 0);
    } else {
      on_devices(o.devices, [&](int d) {
        // What the previous k freed went back to the stream-ordered pool: return it to the device.
        SCURRY_CUDA(cudaStreamSynchronize(st[d].res->stream));
        cudaMemPool_t pool;
        SCURRY_CUDA(cudaDeviceGetDefaultMemPool(&pool, o.devices[d]));
        SCURRY_CUDA(cudaMemPoolTrimTo(pool, 0));
        size_t free_b = 0, total_b = 0;
        SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
        // W, Ht, P (dense: n + g rows of k per replicate), H transposed and X^T W's split-K partials
        // (the component-major fit: up to 32 + 1 copies of g x k), Gram partials.
        const double per_rep = (3.0 * static_cast<double>(n + g) + 33.0 * static_cast<double>(g)) * k * 4 +
                               static_cast<double>(ceil_div(std::max(n, g), 32768)) * k * k * 8;
        const int by_mem = static_cast<int>(0.85 * static_cast<double>(free_b) / per_rep);
        group[d] = std::max(1, std::min(by_mem, std::max(1, o.auto_rk / k)));
      });
      const int m = *std::min_element(group.begin(), group.end());
      for (auto& x : group) x = m;
    }
    CnmfBenchK r;
    r.k = k;
    for (const int x : group) r.replicates += x;
    r.layout = dense ? "dense" : "sparse";
    std::vector<double> secs(D, 0.0), peak(D, 0.0), err(D, 0.0);
    on_devices(o.devices, [&](int d) {
      if (group[d] == 0) return;
      CudaResources& res = *st[d].res;
      res.memory->reset_peak();
      NmfDeviceFactors f;
      f.n = n, f.g = g, f.k = k, f.R = group[d];
      f.W = DeviceArray<float>(res, static_cast<size_t>(n * f.rk()), "bench W");
      f.Ht = DeviceArray<float>(res, static_cast<size_t>(g * f.rk()), "bench H");
      const float avg = static_cast<float>(std::sqrt(st[d].x.sum / (static_cast<double>(n) * g) / k));
      const unsigned long long seed = o.seed * 1000003ull + static_cast<unsigned long long>(k) * 7919ull + d;
      init_kernel<<<kGridStride, kThreads, 0, res.stream>>>(static_cast<int64_t>(f.W.size()), avg, seed * 2, f.W.data());
      SCURRY_CUDA_LAUNCH();
      init_kernel<<<kGridStride, kThreads, 0, res.stream>>>(static_cast<int64_t>(f.Ht.size()), avg, seed * 2 + 1,
                                                            f.Ht.data());
      SCURRY_CUDA_LAUNCH();
      if (o.warmup > 0) {
        NmfOptions w = nmf;
        w.max_iter = o.warmup;
        nmf_fit_device(res, st[d].x, f, w, false);
      }
      NmfOptions timed = nmf;
      timed.max_iter = o.iterations;
      cudaEvent_t e0, e1;
      SCURRY_CUDA(cudaEventCreate(&e0));
      SCURRY_CUDA(cudaEventCreate(&e1));
      SCURRY_CUDA(cudaEventRecord(e0, res.stream));
      nmf_fit_device(res, st[d].x, f, timed, false);
      SCURRY_CUDA(cudaEventRecord(e1, res.stream));
      SCURRY_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      SCURRY_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      SCURRY_CUDA(cudaEventDestroy(e0));
      SCURRY_CUDA(cudaEventDestroy(e1));
      secs[d] = ms / 1e3;
      const std::vector<double> e = nmf_device_objective(res, st[d].x, f, NmfLoss::frobenius, o.tf32 && dense);
      for (const double v : e) err[d] += v / normx;
      peak[d] = static_cast<double>(cuda_peak_bytes(&res));
    });
    r.seconds = *std::max_element(secs.begin(), secs.end());
    r.seconds_per_iteration = r.seconds / o.iterations;
    r.replicates_per_second = r.replicates / r.seconds;
    r.flops_per_iteration = 4.0 * static_cast<double>(n) * static_cast<double>(g) * k * r.replicates;
    r.achieved_flops = r.flops_per_iteration / r.seconds_per_iteration;
    r.floor_flops_seconds = r.flops_per_iteration / (kFp32 * D);
    const double x_bytes = dense ? static_cast<double>(n) * g * 4 : static_cast<double>(out.nnz) * 8;
    const double bytes = 2.0 * x_bytes * D + 6.0 * static_cast<double>(n + g) * k * r.replicates * 4;
    r.floor_bytes_seconds = bytes / (kBandwidth * D);
    r.peak_bytes = peak;
    for (const double e : err) r.relative_error += e / r.replicates;
    out.ks.push_back(r);
  }
  on_devices(o.devices, [&](int d) {  // free on the owning device, the arrays before their resources
    st[d].x = NmfDeviceX{};
    st[d].res.reset();
  });
  return out;
}

}  // namespace scurry
