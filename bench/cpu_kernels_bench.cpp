// Micro-benchmark of the CPU graph and PCA kernels (not run by the tests; bench/RESULTS.md section 21):
//   scurry_cpu_kernels_bench sgemm                      sgemm/dgemm GFLOP/s, 1 thread and all threads
//   scurry_cpu_kernels_bench knn SRC [options]          kNN search times and recall@k against exact
//     SRC: an h5ad with obsm['X_pca'], or mix:N:D (a seeded Gaussian mixture of 12 clusters in D
//     dims whose per-dimension spread falls off like a PCA spectrum)
//     --methods exact,ivf,hnsw  --probes P1,P2,..  --lists-per-sqrt F  --recall-sample S  --k K
//     --scan blas|avx2|auto (the IVF list scan: sgemm, the fused AVX2 kernel, or the best the CPU has)
//     --scan blas (IVF: sgemm and a scan instead of the fused AVX2 scan)
//   scurry_cpu_kernels_bench pca N G [SOLVER [THREADS [REPS]]]   PCA of a scaled-like N x G matrix (REPS > 0: only the default PCA, timed REPS times)
//     written by `scurry run` ... not the default run; SRC an h5ad whose X is the scaled matrix.
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/blas_core.hpp"
#include "exec/context.hpp"
#include "graph/knn.hpp"
#include "io/read.hpp"
#include "pp/linalg.hpp"
#include "pp/pca.hpp"
#include <sys/resource.h>

extern "C" void openblas_set_num_threads(int);

using namespace scurry;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) v.push_back(t);
  return v;
}

DenseF load_embedding(const std::string& src) {
  if (src.rfind("mix:", 0) == 0) {
    int64_t n = 0, d = 0;
    std::sscanf(src.c_str() + 4, "%ld:%ld", &n, &d);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> g(0.f, 1.f);
    const int C = 12;
    std::vector<float> centre(static_cast<size_t>(C * d));
    for (int c = 0; c < C; ++c)
      for (int64_t j = 0; j < d; ++j) centre[c * d + j] = 6.f * g(rng) / std::sqrt(1.f + j);
    DenseF x(n, d);
    for (int64_t i = 0; i < n; ++i) {
      const int c = static_cast<int>(rng() % C);
      for (int64_t j = 0; j < d; ++j) x(i, j) = centre[c * d + j] + g(rng) * 2.f / std::sqrt(1.f + 0.3f * j);
    }
    return x;
  }
  Dataset ds = read_any(src);
  if (!ds.obsm.count("X_pca")) {
    std::fprintf(stderr, "%s has no obsm['X_pca']\n", src.c_str());
    std::exit(2);
  }
  return to_dense_f(ds.obsm.at("X_pca"));
}

double recall(const Knn& a, const Knn& exact, int64_t row0_exact, int64_t rows) {
  // a: full result; exact: rows [row0_exact, row0_exact + rows) of the exact search.
  int64_t hit = 0, tot = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::set<int32_t> want;
    for (int64_t j = 1; j < exact.k; ++j) want.insert(exact.index(r, j));
    for (int64_t j = 1; j < a.k; ++j) hit += want.count(a.index(row0_exact + r, j));
    tot += exact.k - 1;
  }
  return static_cast<double>(hit) / static_cast<double>(tot);
}

// n x g dense, scaled-like: 12 clusters on a 40-dim signal plus unit noise, columns centred and
// scaled to unit variance, clipped at 10 (as sc.pp.scale).
DenseF scaled_like(int64_t n, int64_t g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int C = 12, r = 40;
  std::vector<float> load(static_cast<size_t>(r * g)), cen(static_cast<size_t>(C * r));
  for (auto& v : load) v = nd(rng) * 0.3f;
  for (int c = 0; c < C; ++c)
    for (int j = 0; j < r; ++j) cen[c * r + j] = nd(rng) * 3.f / std::sqrt(1.f + j);
  DenseF x(n, g);
  std::vector<float> z(r);
  for (int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % C);
    for (int j = 0; j < r; ++j) z[j] = cen[c * r + j] + 0.5f * nd(rng);
    float* row = x.row(i);
    for (int64_t k = 0; k < g; ++k) row[k] = nd(rng);
    for (int j = 0; j < r; ++j) {
      const float* l = load.data() + j * g;
      for (int64_t k = 0; k < g; ++k) row[k] += z[j] * l[k];
    }
  }
  for (int64_t k = 0; k < g; ++k) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i) s += x(i, k), ss += double(x(i, k)) * x(i, k);
    const double m = s / n, sd = std::sqrt(std::max(1e-12, ss / n - m * m));
    for (int64_t i = 0; i < n; ++i) x(i, k) = static_cast<float>(std::min(10.0, (x(i, k) - m) / sd));
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  scurry::use_fast_blas_core();  // as the CLI (OPENBLAS_CORETYPE=Prescott for OpenBLAS's fallback)
  std::printf("BLAS: %s\n", scurry::blas_core_status().c_str());
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s sgemm | knn SRC [options] | pca SRC\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "sgemm") {
    for (int threads : {1, 2}) {
      openblas_set_num_threads(threads);
      const int64_t m = 2048;
      std::vector<float> a(m * m, 1.f), b(m * m, 0.5f), c(m * m);
      std::vector<double> ad(m * m, 1.), bd(m * m, 0.5), cd(m * m);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, m, 1.f, a.data(), m, b.data(), m, 0.f, c.data(), m);
      double t0 = now();
      for (int r = 0; r < 3; ++r)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, m, 1.f, a.data(), m, b.data(), m, 0.f, c.data(), m);
      const double ts = (now() - t0) / 3;
      t0 = now();
      for (int r = 0; r < 3; ++r)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, m, 1., ad.data(), m, bd.data(), m, 0., cd.data(), m);
      const double td = (now() - t0) / 3;
      // the kNN shape: 256 x 2048 x 50
      const int64_t q = 256, r = 2048, d = 50;
      t0 = now();
      for (int it = 0; it < 200; ++it)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q, r, d, 1.f, a.data(), d, b.data(), d, 0.f, c.data(), r);
      const double tk = (now() - t0) / 200;
      std::printf("threads %d: sgemm 2048^3 %.1f GFLOP/s, dgemm %.1f GFLOP/s, sgemm 256x2048x50 %.1f GFLOP/s\n", threads,
                  2.0 * m * m * m / ts / 1e9, 2.0 * m * m * m / td / 1e9, 2.0 * q * r * d / tk / 1e9);
    }
    return 0;
  }
  if (mode == "knn" && argc >= 3) {
    std::string methods = "exact,ivf";
    std::vector<std::string> probes{"0"};
    double lps = 1.0;
    int64_t sample = 4000, k = 15;
    int threads = 2;
    bool blas_scan = false;
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string o = argv[i], v = argv[i + 1];
      if (o == "--methods") methods = v;
      else if (o == "--probes") probes = split(v);
      else if (o == "--lists-per-sqrt") lps = std::atof(v.c_str());
      else if (o == "--recall-sample") sample = std::atol(v.c_str());
      else if (o == "--k") k = std::atol(v.c_str());
      else if (o == "--threads") threads = std::atoi(v.c_str());
      else if (o == "--scan") {
        blas_scan = v == "blas";
        knn_ivf_scan_isa(v == "avx2" ? 0 : -1);
      }
    }
    double t0 = now();
    const DenseF x = load_embedding(argv[2]);
    std::printf("embedding %ld x %ld (%.2f s to load)\n", x.n_rows, x.n_cols, now() - t0);
    const Context ctx = Context::cpu(threads);
    const int64_t n = x.n_rows;
    sample = std::min(sample, n);
    // The exact rows used for recall: [0, sample).
    t0 = now();
    const double c_rows0 = cpu_now();
    Knn exact_rows = knn_exact(ctx, x, k, KnnMetric::euclidean, 0, sample);
    const double t_rows = now() - t0, c_rows = cpu_now() - c_rows0;
    std::printf("exact on %ld query rows: %.2f s wall, %.2f s cpu (full exact extrapolated %.1f s wall, %.1f s cpu; "
                "GEMM floor at the measured sgemm rate: see sgemm)\n",
                sample, t_rows, c_rows, t_rows * static_cast<double>(n) / static_cast<double>(sample),
                c_rows * static_cast<double>(n) / static_cast<double>(sample));
    for (const std::string& m : split(methods)) {
      if (m == "exact") {
        t0 = now();
        Knn e = knn_exact(ctx, x, k, KnnMetric::euclidean);
        std::printf("exact: %.2f s wall, recall %.4f (%.1f GFLOP/s of GEMM work)\n", now() - t0, recall(e, exact_rows, 0, sample),
                    2.0 * n * n * x.n_cols / (now() - t0) / 1e9);
      } else if (m == "hnsw") {
        t0 = now();
        const double c0 = cpu_now();
        Knn h = knn_hnsw(ctx, x, k, KnnMetric::euclidean);
        std::printf("hnsw: %.2f s wall, %.2f s cpu, recall %.4f\n", now() - t0, cpu_now() - c0,
                    recall(h, exact_rows, 0, sample));
      } else if (m == "ivf") {
        for (const std::string& p : probes) {
          IvfCpuOptions o;
          o.n_probes = std::atol(p.c_str());
          o.lists_per_sqrt_n = lps;
          o.blas_scan = blas_scan;
          t0 = now();
          const double c0 = cpu_now();
          Knn v = knn_ivf(ctx, x, k, KnnMetric::euclidean, o);
          std::printf("ivf lists/sqrt(n) %.2f probes %s: %.2f s wall, %.2f s cpu, recall %.4f\n", lps, p.c_str(),
                      now() - t0, cpu_now() - c0, recall(v, exact_rows, 0, sample));
        }
      }
    }
    return 0;
  }
  if (mode == "pca" && argc >= 4) {
    const int64_t n = std::atol(argv[2]), g = std::atol(argv[3]);
    const std::string solver = argc >= 5 ? argv[4] : "auto";
    const int threads = argc >= 6 ? std::atoi(argv[5]) : 2;
    const int reps = argc >= 7 ? std::atoi(argv[6]) : 0;  // > 0: only time the default PCA, reps times
    double t0 = now();
    const DenseF x = scaled_like(n, g, 1);
    std::printf("data %ld x %ld: %.1f s\n", n, g, now() - t0);
    if (reps == 0) {
      std::mt19937_64 rng(3);
      std::normal_distribution<double> nd;
      DenseD a(g, g);
      for (auto& v : a.data) v = nd(rng);
      linalg::SingleThreadedBlas guard;
      t0 = now();
      const double c0 = cpu_now();
      linalg::SymEigen e = linalg::eigh_top(a, 50);
      std::printf("eigh_top(%ld, 50), 1 thread: %.2f s wall, %.2f s cpu\n", g, now() - t0, cpu_now() - c0);
      DenseD b(g, g);
      for (auto& v : b.data) v = nd(rng);
      t0 = now();
      const double c1 = cpu_now();
      linalg::SymEigen f = linalg::eigh_top_f32(b, 70);
      std::printf("eigh_top_f32(%ld, 70), 1 thread: %.2f s wall, %.2f s cpu\n", g, now() - t0, cpu_now() - c1);
    }
    const Context ctx0 = Context::cpu(threads);
    for (int rep = 0; rep < reps; ++rep) {
      PcaOptions o;
      o.svd_solver = solver;
      t0 = now();
      const double c0 = cpu_now();
      PcaResult r = pca(ctx0, x, o);
      std::printf("pca %s (%s), %d threads: %.2f s wall, %.2f s cpu; var[0] %.9g var[49] %.9g\n", solver.c_str(),
                  r.solver.c_str(), threads, now() - t0, cpu_now() - c0, r.variance[0], r.variance[49]);
    }
    if (reps > 0) return 0;
    const Context ctx = Context::cpu(threads);
    PcaOptions ref_opt;
    ref_opt.svd_solver = "gram";
    ref_opt.gram_float32 = false;
    t0 = now();
    double c0 = cpu_now();
    const PcaResult ref = pca(ctx, x, ref_opt);
    std::printf("pca gram float64 Gram (reference): %.2f s wall, %.2f s cpu\n", now() - t0, cpu_now() - c0);
    for (int refine : {0, 1}) {
      PcaOptions o;
      o.svd_solver = solver;
      o.gram_refine = refine;
      t0 = now();
      c0 = cpu_now();
      const PcaResult r = pca(ctx, x, o);
      const double tw = now() - t0, tc = cpu_now() - c0;
      double worst_var = 0, worst_r = 1;
      for (int64_t c = 0; c < 50; ++c) {
        worst_var = std::max(worst_var, std::fabs(r.variance[c] - ref.variance[c]) / ref.variance[c]);
        double dot = 0, na = 0, nb = 0;
        for (int64_t j = 0; j < g; ++j)
          dot += r.components(j, c) * ref.components(j, c), na += r.components(j, c) * r.components(j, c),
              nb += ref.components(j, c) * ref.components(j, c);
        if (c < 20) worst_r = std::min(worst_r, std::fabs(dot) / std::sqrt(na * nb));
      }
      std::printf("pca %s refine %d: %.2f s wall, %.2f s cpu; worst variance rel err (50) %.2e, worst |r| (top 20) %.7f\n",
                  r.solver.c_str(), refine, tw, tc, worst_var, worst_r);
    }
    return 0;
  }
  std::fprintf(stderr, "unknown mode\n");
  return 2;
}
