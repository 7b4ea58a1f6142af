// scurry: the cNMF factorisation benchmark (`scurry cnmf bench`): synthetic counts with planted gene
// programs, cNMF's scaling (unit variance, no centring), then for each k, R replicates x exactly
// `iterations` HALS iterations (tol 0), timed. On the GPU everything big is made on the device (the
// counts by a Philox kernel, the CSR by a count pass + scan + fill pass), replicates are spread over
// the given devices, and the timing is by CUDA events after a warm-up.
//
// The generator (same model on both backends, not the same random streams): P planted programs
// (spectra: log-normal gene baselines, each program boosting a random 10% of the genes 3-12x, rows
// normalised to sum 1); per cell, its own random stream seeded by (seed, cell): usages u_p ~ E_p^2
// normalised (E_p exponential: a Dirichlet-like draw concentrated on few programs), a log-normal
// library size L (median library_size), counts x_j ~ Poisson(L * sum_p u_p s_pj).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "nmf/nmf.hpp"

namespace scurry {

struct CnmfBenchOptions {
  int64_t cells = 2400000;
  int64_t genes = 2000;
  std::vector<int> ks = {10, 30, 60};
  int replicates = 0;        // per k, over all devices; 0: GPU as many as fit with R*k <= auto_rk per device, CPU 2
  int auto_rk = 1200;        // GPU automatic R: replicates * k per device (memory permitting)
  int iterations = 100;      // timed iterations of every replicate (tol 0: no early stop)
  int warmup = 2;            // GPU: untimed iterations first (cuBLAS heuristics, lazy module loading)
  int programs = 20;         // planted programs (at most 32)
  double library_size = 375;  // median counts per cell (~15% nonzeros at 2000 genes)
  uint64_t seed = 0;
  NmfGpuLayout layout = NmfGpuLayout::automatic;
  bool tf32 = false;         // dense layout: TF32 GEMMs
  std::vector<int> devices = {0};  // GPU ordinals (one host thread each)
};

struct CnmfBenchK {
  int k = 0, replicates = 0;
  std::string layout;               // dense | sparse
  double seconds = 0;               // the timed iterations of all replicates (slowest device)
  double seconds_per_iteration = 0; // one iteration of every replicate
  double replicates_per_second = 0; // replicates / seconds
  double flops_per_iteration = 0;   // 4 n g k R (the two products, dense-equivalent)
  double achieved_flops = 0;        // flops_per_iteration / seconds_per_iteration
  double floor_flops_seconds = 0;   // GPU: per iteration, flops / (51e12 * devices)
  double floor_bytes_seconds = 0;   // GPU: per iteration, bytes read / (4.3e12 * devices)
  std::vector<double> peak_bytes;   // GPU: per device, peak memory held during this k
  double relative_error = 0;        // mean over replicates of ||X - WH||_F / ||X||_F at the end
};

struct CnmfBenchResult {
  std::string backend;  // cpu | gpu
  std::string device;   // description
  int n_devices = 1;
  int64_t cells = 0, genes = 0, nnz = 0;
  double density = 0;
  double generate_seconds = 0, scale_seconds = 0, layout_seconds = 0;
  std::vector<CnmfBenchK> ks;
};

// The planted programs: P x g row-major, each row summing to 1.
std::vector<float> cnmf_bench_spectra(const CnmfBenchOptions& o);
// The CPU generator: cells x genes counts (fixed cell blocks: the same for any thread count).
CsrF cnmf_bench_counts(const Context& ctx, const CnmfBenchOptions& o);
// cNMF's get_norm_counts scaling in place: each gene divided by its standard deviation over all
// cells (ddof 1; 0 -> 1), no centring.
void cnmf_bench_scale(CsrF& X);

void check_bench_options(const CnmfBenchOptions& o);
CnmfBenchResult cnmf_bench_cpu(const Context& ctx, const CnmfBenchOptions& o);
// One host thread per o.devices entry, each with its own CudaResources from `base`.
CnmfBenchResult cnmf_bench_gpu(const CnmfBenchOptions& o, const CudaOptions& base);

// The published GPU cNMF reference: ~11.8 s per replicate at 2.4M cells on an A100.
constexpr double kCnmfReferenceSecondsPerReplicate = 11.8;

}  // namespace scurry
