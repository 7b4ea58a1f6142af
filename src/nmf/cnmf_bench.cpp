// scurry: the cNMF benchmark on the CPU, and what both backends share (the planted programs).
#include "nmf/cnmf_bench.hpp"

#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "nmf/cnmf_prepare.hpp"

namespace scurry {

namespace {

constexpr int64_t kCellsPerBlock = 1024;  // fixed partition of the generator's cells
constexpr double kLibrarySigma = 0.5;     // log-normal spread of the library sizes
constexpr double kBaseSigma = 1.0;        // log-normal spread of the gene baselines

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A small generator for the benchmark's data: splitmix64 stream, uniforms in (0, 1), normals by
// Box-Muller, Poisson by multiplication (lambda < 30) or a rounded normal approximation.
class BenchRng {
 public:
  explicit BenchRng(uint64_t seed) : s_(seed) {}
  double uniform() { return (static_cast<double>(splitmix64(s_) >> 11) + 0.5) * 0x1.0p-53; }
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }
  int64_t poisson(double lam) {
    if (lam <= 0) return 0;
    if (lam >= 30) return std::max<int64_t>(0, std::llround(lam + std::sqrt(lam) * normal()));
    const double L = std::exp(-lam);
    int64_t k = 0;
    double p = uniform();
    while (p > L) p *= uniform(), ++k;
    return k;
  }

 private:
  uint64_t s_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void check_bench_options(const CnmfBenchOptions& o) {
  if (o.cells < 1 || o.genes < 1) fail_input("--cells/--genes", "must be at least 1 (got ", o.cells, " x ", o.genes, ")");
  if (o.genes > INT32_MAX) fail_input("--genes", "at most 2^31 - 1 genes");
  if (o.ks.empty()) fail_input("-k", "give at least one number of components");
  for (const int k : o.ks)
    if (k < 1) fail_input("-k", "each k must be at least 1 (got ", k, ")");
  if (o.replicates < 0) fail_input("--replicates", "must be >= 0 (0: automatic)");
  if (o.iterations < 1) fail_input("--iterations", "must be at least 1 (got ", o.iterations, ")");
  if (o.warmup < 0) fail_input("--warmup", "must be >= 0");
  if (o.programs < 1 || o.programs > 32) fail_input("--programs", "must be in 1..32 (got ", o.programs, ")");
  if (!(o.library_size > 0)) fail_input("--library-size", "must be > 0");
}

std::vector<float> cnmf_bench_spectra(const CnmfBenchOptions& o) {
  BenchRng rng(o.seed ^ 0x5350454354524Aull);
  const int64_t g = o.genes;
  std::vector<double> base(static_cast<size_t>(g));
  for (auto& b : base) b = std::exp(kBaseSigma * rng.normal());
  std::vector<float> s(static_cast<size_t>(o.programs) * g);
  for (int p = 0; p < o.programs; ++p) {
    std::vector<double> row(base);
    for (auto& v : row)
      if (rng.uniform() < 0.1) v *= std::exp(1.1 + 1.4 * rng.uniform());  // 3x..12x
    double tot = 0;
    for (const double v : row) tot += v;
    for (int64_t j = 0; j < g; ++j) s[static_cast<size_t>(p) * g + j] = static_cast<float>(row[j] / tot);
  }
  return s;
}

CsrF cnmf_bench_counts(const Context& ctx, const CnmfBenchOptions& o) {
  check_bench_options(o);
  const std::vector<float> spec = cnmf_bench_spectra(o);
  const int64_t n = o.cells, g = o.genes;
  const int P = o.programs;
  const RowBlocks rb = RowBlocks::uniform(n, kCellsPerBlock);
  std::vector<std::vector<int32_t>> bidx(rb.n_blocks());
  std::vector<std::vector<float>> bval(rb.n_blocks());
  std::vector<int64_t> row_nnz(static_cast<size_t>(n));
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    std::vector<double> u(P), lam(static_cast<size_t>(g));
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
      uint64_t s = o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);
      BenchRng rng(splitmix64(s));
      double tot = 0;
      for (int p = 0; p < P; ++p) {
        const double e = -std::log(rng.uniform());
        u[p] = e * e, tot += u[p];
      }
      const double L = o.library_size * std::exp(kLibrarySigma * rng.normal());
      std::fill(lam.begin(), lam.end(), 0.0);
      for (int p = 0; p < P; ++p) {
        const double w = L * u[p] / tot;
        const float* sp = spec.data() + static_cast<size_t>(p) * g;
        for (int64_t j = 0; j < g; ++j) lam[j] += w * sp[j];
      }
      int64_t c = 0;
      for (int64_t j = 0; j < g; ++j) {
        const int64_t x = rng.poisson(lam[j]);
        if (x > 0) bidx[b].push_back(static_cast<int32_t>(j)), bval[b].push_back(static_cast<float>(x)), ++c;
      }
      row_nnz[i] = c;
    }
  });
  CsrF X;
  X.n_rows = n, X.n_cols = g;
  X.indptr.assign(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) X.indptr[i + 1] = X.indptr[i] + row_nnz[i];
  X.indices.reserve(static_cast<size_t>(X.indptr[n]));
  X.data.reserve(static_cast<size_t>(X.indptr[n]));
  for (int64_t b = 0; b < rb.n_blocks(); ++b) {
    X.indices.insert(X.indices.end(), bidx[b].begin(), bidx[b].end());
    X.data.insert(X.data.end(), bval[b].begin(), bval[b].end());
    std::vector<int32_t>().swap(bidx[b]);
    std::vector<float>().swap(bval[b]);
  }
  return X;
}

void cnmf_bench_scale(CsrF& X) {
  std::vector<double> mean, sd;
  column_mean_std(X, mean, sd);
  const double n = static_cast<double>(X.n_rows);
  for (double& s : sd) {
    s = n > 1 ? std::sqrt(s * s * n / (n - 1)) : 0.0;
    if (s == 0) s = 1;
  }
  for (int64_t p = 0; p < X.nnz(); ++p) X.data[p] = static_cast<float>(X.data[p] / sd[X.indices[p]]);
}

CnmfBenchResult cnmf_bench_cpu(const Context& ctx, const CnmfBenchOptions& o) {
  check_bench_options(o);
  CnmfBenchResult res;
  res.backend = "cpu";
  res.device = ctx.describe();
  res.cells = o.cells, res.genes = o.genes;
  auto t0 = std::chrono::steady_clock::now();
  CsrF X = cnmf_bench_counts(ctx, o);
  res.generate_seconds = seconds_since(t0);
  res.nnz = X.nnz();
  res.density = static_cast<double>(res.nnz) / (static_cast<double>(o.cells) * static_cast<double>(o.genes));
  t0 = std::chrono::steady_clock::now();
  cnmf_bench_scale(X);
  res.scale_seconds = seconds_since(t0);
  double normx = 0;
  for (const float v : X.data) normx += static_cast<double>(v) * v;
  normx = std::sqrt(normx);
  for (const int k : o.ks) {
    CnmfBenchK r;
    r.k = k;
    r.replicates = o.replicates > 0 ? o.replicates : 2;
    r.layout = "sparse";
    NmfOptions opt;
    opt.solver = NmfSolver::cd;
    opt.loss = NmfLoss::frobenius;
    opt.tol = 0;
    opt.max_iter = o.iterations;
    const NmfBatch init = nmf_random_init(X, k, nmf_replicate_seeds(o.seed + static_cast<uint64_t>(k), r.replicates));
    t0 = std::chrono::steady_clock::now();
    const NmfResult fit = nmf_fit(ctx, X, init, opt);
    r.seconds = seconds_since(t0);
    r.seconds_per_iteration = r.seconds / o.iterations;
    r.replicates_per_second = r.replicates / r.seconds;
    r.flops_per_iteration = 4.0 * static_cast<double>(o.cells) * static_cast<double>(o.genes) * k * r.replicates;
    r.achieved_flops = r.flops_per_iteration / r.seconds_per_iteration;
    for (const double e : fit.error) r.relative_error += e / normx / r.replicates;
    res.ks.push_back(r);
  }
  return res;
}

}  // namespace scurry
