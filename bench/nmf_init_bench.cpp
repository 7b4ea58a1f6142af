// Micro-benchmark of sklearn's init='random' as cNMF factorize draws it (nmf_random_init: numpy's
// legacy stream per replicate, Marsaglia's polar method), not run by the tests:
//   scurry_nmf_init_bench N G K R THREADS [REPS [check]]
// an N x G matrix (only its shape and sum matter), k = K, R replicates, THREADS host threads; REPS
// timed calls (the median quoted); `check` compares every value with the serial loop over
// NumpyRandomState::standard_normal. Also times that serial loop on one thread for one replicate, W's
// allocation alone, and the init into the previous W's storage (w_storage, as the GPU batches do).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/matrix.hpp"
#include "core/memory.hpp"
#include "nmf/nmf.hpp"
#include "nmf/numpy_random.hpp"

using namespace scurry;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s N G K R THREADS [REPS [check]]\n", argv[0]);
    return 2;
  }
  const int64_t n = std::atoll(argv[1]), g = std::atoll(argv[2]);
  const int k = std::atoi(argv[3]), R = std::atoi(argv[4]), threads = std::atoi(argv[5]);
  const int reps = argc > 6 ? std::atoi(argv[6]) : 3;
  const bool check = argc > 7 && std::string(argv[7]) == "check";
  const CsrF X = CsrF::zeros(n, g);
  const double x_sum = 0.37 * static_cast<double>(n) * static_cast<double>(g);  // mean 0.37
  const std::vector<uint64_t> seeds = nmf_replicate_seeds(14 + static_cast<uint64_t>(k), R);
  const double normals = static_cast<double>(R) * k * static_cast<double>(n + g);

  // The serial reference rate: one replicate's normals through standard_normal, one thread.
  {
    const int64_t m = std::min<int64_t>(static_cast<int64_t>(k) * (n + g), 50'000'000);
    NumpyRandomState rng(static_cast<uint32_t>(seeds[0]));
    const double avg = 0.11;
    std::vector<float> out(static_cast<size_t>(m));
    const double c0 = cpu_now(), t0 = now();
    for (int64_t t = 0; t < m; ++t) out[t] = static_cast<float>(std::fabs(avg * rng.standard_normal()));
    const double c1 = cpu_now(), t1 = now();
    std::printf("serial standard_normal loop (1 thread, %lld normals): %.2f CPU s per 1e9 normals (wall %.3f s)\n",
                static_cast<long long>(m), (c1 - c0) / m * 1e9, t1 - t0);
  }

  auto alloc_alone = [&] {  // W's allocation alone (resize_large: pages faulted on the threads, then the zero fill)
    std::vector<float> w;
    const double c0 = cpu_now(), t0 = now();
    resize_large(w, static_cast<size_t>(n) * R * k);
    const double c1 = cpu_now(), t1 = now();
    std::printf("W's allocation alone (%.2f GB): wall %.3f s, CPU %.3f s\n", 4e-9 * n * R * k, t1 - t0, c1 - c0);
  };
  alloc_alone();
  std::vector<double> walls, cpus;
  NmfBatch b;
  for (int q = 0; q < reps; ++q) {
    b = NmfBatch();  // a fresh W each time
    const double c0 = cpu_now(), t0 = now();
    b = nmf_random_init(X, k, seeds, threads, x_sum);
    const double c1 = cpu_now(), t1 = now();
    walls.push_back(t1 - t0), cpus.push_back(c1 - c0);
    std::printf("nmf_random_init n=%lld g=%lld k=%d R=%d threads=%d: wall %.3f s, CPU %.3f s\n",
                static_cast<long long>(n), static_cast<long long>(g), k, R, threads, t1 - t0, c1 - c0);
  }
  auto median = [&](const char* what) {
    std::sort(walls.begin(), walls.end());
    std::sort(cpus.begin(), cpus.end());
    const double w = walls[walls.size() / 2], c = cpus[cpus.size() / 2];
    std::printf("%s, median of %d: wall %.3f s, CPU %.3f s; %.3g normals: %.2f CPU s per 1e9 normals, %.2f wall s per 1e9\n",
                what, reps, w, c, normals, c / normals * 1e9, w / normals * 1e9);
    walls.clear(), cpus.clear();
  };
  median("fresh W");
  // Into the previous W's storage (w_storage), as cNMF factorize's GPU batches do.
  for (int q = 0; q < reps; ++q) {
    std::vector<float> spare = std::move(b.W);
    const double c0 = cpu_now(), t0 = now();
    b = nmf_random_init(X, k, seeds, threads, x_sum, &spare);
    const double c1 = cpu_now(), t1 = now();
    walls.push_back(t1 - t0), cpus.push_back(c1 - c0);
  }
  median("into the previous W");

  if (check) {
    const double avg = std::sqrt(x_sum / (static_cast<double>(n) * static_cast<double>(g)) / k);
    int64_t bad = 0;
    for (int r = 0; r < R; ++r) {
      NumpyRandomState rng(static_cast<uint32_t>(seeds[r]));
      for (int c2 = 0; c2 < k; ++c2)
        for (int64_t j = 0; j < g; ++j) bad += b.h(r, c2, j) != static_cast<float>(std::fabs(avg * rng.standard_normal()));
      for (int64_t i = 0; i < n; ++i)
        for (int c2 = 0; c2 < k; ++c2) bad += b.w(r, i, c2) != static_cast<float>(std::fabs(avg * rng.standard_normal()));
    }
    std::printf("check against the serial draw: %lld values differ\n", static_cast<long long>(bad));
    if (bad) return 1;
  }
  b = NmfBatch();
  alloc_alone();  // warm: the pages were the process's before
  return 0;
}
