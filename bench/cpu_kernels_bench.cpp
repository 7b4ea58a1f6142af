// Micro-benchmark of the CPU graph and PCA kernels (not run by the tests; bench/RESULTS.md section 21):
//   scurry_cpu_kernels_bench sgemm                      sgemm/dgemm GFLOP/s, 1 thread and all threads
//   scurry_cpu_kernels_bench knn SRC [options]          kNN search times and recall@k against exact
//     SRC: an h5ad with obsm['X_pca'], or mix:N:D (a seeded Gaussian mixture of 12 clusters in D
//     dims whose per-dimension spread falls off like a PCA spectrum)
//     --methods exact,ivf,hnsw  --probes P1,P2,..  --lists-per-sqrt F  --recall-sample S  --k K
//   scurry_cpu_kernels_bench pca SRC [--solver S] [--comps K]   PCA of the dense scaled HVG matrix
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
#include "exec/context.hpp"
#include "graph/knn.hpp"
#include "io/read.hpp"
#include "pp/pca.hpp"

extern "C" void openblas_set_num_threads(int);

using namespace scurry;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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

}  // namespace

int main(int argc, char** argv) {
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
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string o = argv[i], v = argv[i + 1];
      if (o == "--methods") methods = v;
      else if (o == "--probes") probes = split(v);
      else if (o == "--lists-per-sqrt") lps = std::atof(v.c_str());
      else if (o == "--recall-sample") sample = std::atol(v.c_str());
      else if (o == "--k") k = std::atol(v.c_str());
      else if (o == "--threads") threads = std::atoi(v.c_str());
    }
    double t0 = now();
    const DenseF x = load_embedding(argv[2]);
    std::printf("embedding %ld x %ld (%.2f s to load)\n", x.n_rows, x.n_cols, now() - t0);
    const Context ctx = Context::cpu(threads);
    const int64_t n = x.n_rows;
    sample = std::min(sample, n);
    // The exact rows used for recall: [0, sample).
    t0 = now();
    Knn exact_rows = knn_exact(ctx, x, k, KnnMetric::euclidean, 0, sample);
    const double t_rows = now() - t0;
    std::printf("exact on %ld query rows: %.2f s (full exact extrapolated %.1f s)\n", sample, t_rows,
                t_rows * static_cast<double>(n) / static_cast<double>(sample));
    for (const std::string& m : split(methods)) {
      if (m == "exact") {
        t0 = now();
        Knn e = knn_exact(ctx, x, k, KnnMetric::euclidean);
        std::printf("exact: %.2f s, recall %.4f (%.1f GFLOP/s of GEMM work)\n", now() - t0, recall(e, exact_rows, 0, sample),
                    2.0 * n * n * x.n_cols / (now() - t0) / 1e9);
      } else if (m == "hnsw") {
        t0 = now();
        Knn h = knn_hnsw(ctx, x, k, KnnMetric::euclidean);
        std::printf("hnsw: %.2f s, recall %.4f\n", now() - t0, recall(h, exact_rows, 0, sample));
      } else if (m == "ivf") {
        for (const std::string& p : probes) {
          IvfCpuOptions o;
          o.n_probes = std::atol(p.c_str());
          o.lists_per_sqrt_n = lps;
          t0 = now();
          Knn v = knn_ivf(ctx, x, k, KnnMetric::euclidean, o);
          std::printf("ivf lists/sqrt(n) %.2f probes %s: %.2f s, recall %.4f\n", lps, p.c_str(), now() - t0,
                      recall(v, exact_rows, 0, sample));
        }
      }
    }
    return 0;
  }
  std::fprintf(stderr, "unknown mode\n");
  return 2;
}
