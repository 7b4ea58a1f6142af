// The Harmony GPU tests' data and comparison (test_integrate_gpu.cpp: GPU vs CPU;
// test_harmony_gpus_gpu.cpp: several GPUs vs one):
// - batches: n cells x d dims, 6 planted cell types, nb batches and a second variable (donor);
// - expect_harmony_close: two corrected embeddings agree statistically: the 15-NN shared >= 0.95,
//   batch mixing (iLISI, 30-NN) and cell-type purity within 2%, the largest coordinate difference
//   <= 2% of the reference's spread.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "core/matrix.hpp"
#include "integration_metrics.hpp"

namespace scurry::test {

struct Batches {
  DenseD Z;
  std::vector<int32_t> batch, donor, type;
};

// n cells x d dims: 6 cell types (centres 3 N(0,1)), each of nb batches shifted by 1.5 N(0,1) per
// dim, a second variable (donor, 2 levels) shifted by 0.5 N(0,1), unit noise.
inline Batches batches(uint64_t seed, int64_t n, int64_t d, int nb) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  Batches b{DenseD(n, d), {}, {}, {}};
  std::vector<double> centre(static_cast<size_t>(6 * d)), shift(static_cast<size_t>(nb * d)), dsh(static_cast<size_t>(2 * d));
  for (auto& x : centre) x = 3 * nd(rng);
  for (auto& x : shift) x = 1.5 * nd(rng);
  for (auto& x : dsh) x = 0.5 * nd(rng);
  for (int64_t i = 0; i < n; ++i) {
    b.batch.push_back(static_cast<int32_t>(rng() % nb));
    b.donor.push_back(static_cast<int32_t>(rng() % 2));
    b.type.push_back(static_cast<int32_t>(rng() % 6));
    for (int64_t q = 0; q < d; ++q)
      b.Z(i, q) = centre[b.type[i] * d + q] + shift[b.batch[i] * d + q] + dsh[b.donor[i] * d + q] + nd(rng);
  }
  return b;
}

inline double spread(const DenseD& x) {
  const auto [lo, hi] = std::minmax_element(x.data.begin(), x.data.end());
  return *hi - *lo;
}

inline double max_abs_diff(const DenseD& a, const DenseD& b) {
  double m = 0;
  for (size_t k = 0; k < a.data.size(); ++k) m = std::max(m, std::fabs(a.data[k] - b.data[k]));
  return m;
}

inline void expect_harmony_close(const DenseD& gpu, const DenseD& cpu, const std::vector<int32_t>& batch,
                          const std::vector<int32_t>& type, const char* what) {
  ASSERT_EQ(gpu.n_rows, cpu.n_rows);
  ASSERT_EQ(gpu.n_cols, cpu.n_cols);
  for (double v : gpu.data) ASSERT_TRUE(std::isfinite(v)) << what;
  const auto a = exact_knn(gpu, 15), b = exact_knn(cpu, 15);
  const auto a30 = exact_knn(gpu, 30), b30 = exact_knn(cpu, 30);
  const double overlap = knn_overlap(a, b);
  const double ilisi_g = ilisi(a30, batch), ilisi_c = ilisi(b30, batch);
  const double pur_g = knn_purity(a, type), pur_c = knn_purity(b, type);
  const double rel = max_abs_diff(gpu, cpu) / spread(cpu);
  EXPECT_GE(overlap, 0.95) << what;
  EXPECT_NEAR(ilisi_g, ilisi_c, 0.02 * ilisi_c) << what;
  EXPECT_NEAR(pur_g, pur_c, 0.02 * pur_c) << what;
  EXPECT_LE(rel, 0.02) << what;
  std::printf("%s: 15-NN overlap %.4f, iLISI %.4f vs %.4f, purity %.4f vs %.4f, max |diff| / spread %.4f\n", what,
              overlap, ilisi_g, ilisi_c, pur_g, pur_c, rel);
}

}  // namespace scurry::test
