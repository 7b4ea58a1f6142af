// The BLAS rate for the FLOP floors of bench/RESULTS.md section 54: OpenBLAS's cblas_sgemm and
// cblas_dgemm on 4096 x 4096 matrices, median of a few repeats (the memory bandwidth comes from
// bench/mem_triad.c). Build and run (Debian: g++, libopenblas-dev):
//   g++ -O2 bench/blas_rate.cpp -o /tmp/blas_rate -lopenblas && OPENBLAS_NUM_THREADS=2 /tmp/blas_rate
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

template <class T, class Gemm>
double rate(Gemm gemm, int m, int reps) {
  std::vector<T> a(size_t(m) * m, T(0.5)), b(size_t(m) * m, T(0.25)), c(size_t(m) * m);
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, T(1), a.data(), m, b.data(), m, T(0), c.data(), m);
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  return 2.0 * m * m * m / ts[ts.size() / 2] / 1e9;
}

int main() {
  const int m = 4096;
  std::printf("sgemm %d: %.1f GFLOP/s\n", m, rate<float>(cblas_sgemm, m, 5));
  std::printf("dgemm %d: %.1f GFLOP/s\n", m, rate<double>(cblas_dgemm, m, 3));
}
