// Scrublet tests' inputs (test_scrublet.cpp, test_scrublet_gpu.cu): seeded counts with planted
// doublets, and the Pearson correlation of two score vectors.
#pragma once
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dataset.hpp"
#include "testlib.hpp"

namespace scurry::test {

inline double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i] / n, mb += b[i] / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

// Seeded counts with planted doublets: cells from a few expression programmes, 6% of them sums of
// two cells of different programmes.
struct Planted {
  CsrF counts;
  std::vector<uint8_t> doublet;
  std::vector<std::string> batch;
};

inline Planted planted(uint64_t seed, int64_t n, int64_t g) {
  std::mt19937_64 rng(seed);
  const int programmes = 5;
  std::gamma_distribution<double> gam(0.4, 1.0);
  std::vector<std::vector<double>> rate(programmes, std::vector<double>(g));
  for (auto& r : rate)
    for (auto& v : r) v = gam(rng) * 0.5;
  for (int p = 0; p < programmes; ++p)
    for (int64_t j = p * 40; j < p * 40 + 40; ++j) rate[p][j] *= 15;  // marker genes
  std::uniform_int_distribution<int> pick(0, programmes - 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<std::pair<int32_t, float>>> rows(n);
  Planted out;
  auto cell = [&](int p, std::vector<double>& acc) {
    const double depth = std::exp(std::normal_distribution<double>(0, 0.3)(rng));
    for (int64_t j = 0; j < g; ++j) acc[j] += std::poisson_distribution<int>(rate[p][j] * depth)(rng);
  };
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> acc(g, 0.0);
    const bool dbl = u(rng) < 0.06;
    const int p1 = pick(rng);
    cell(p1, acc);
    if (dbl) {
      int p2 = pick(rng);
      while (p2 == p1) p2 = pick(rng);
      cell(p2, acc);
    }
    out.doublet.push_back(dbl);
    out.batch.push_back(i % 3 == 0 ? "s1" : "s0");
    for (int64_t j = 0; j < g; ++j)
      if (acc[j] > 0) rows[i].push_back({static_cast<int32_t>(j), static_cast<float>(acc[j])});
  }
  out.counts = test::csr_from_rows(rows, g);
  return out;
}

inline Dataset dataset_of(const Planted& p) {
  Dataset d;
  d.X = Matrix(p.counts);
  d.obs.index.resize(p.counts.n_rows);
  for (size_t i = 0; i < d.obs.index.size(); ++i) d.obs.index[i] = "c" + std::to_string(i);
  d.var.index.resize(p.counts.n_cols);
  for (size_t j = 0; j < d.var.index.size(); ++j) d.var.index[j] = "g" + std::to_string(j);
  d.obs.set("sample", Column::strings(p.batch));
  return d;
}

}  // namespace scurry::test
