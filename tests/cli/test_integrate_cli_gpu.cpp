// GPU test (label gpu): the batch-tool commands under `--device gpu` against the same commands on the
// CPU, from a file to a file (issue 21 point 5 of the GPU half): `harmony-integrate --key batch`
// (15-NN of X_pca_harmony shared >= 0.95 with the CPU's; two GPU runs the same bits), `regress-out
// --keys c1,c2` and `combat --key batch` (X within 1e-4 of the CPU's).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "io/h5ad.hpp"
#include "pp/integration_metrics.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// 2,000 cells: X (dense 2,000 x 40) with per-batch location effects and two numeric covariates;
// obsm X_pca (2,000 x 12) with batch shifts; obs batch (3 levels), c1, c2.
Dataset data(uint64_t seed) {
  const int64_t n = 2000, g = 40, d = 12;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  Dataset ds;
  ds.obs.index.resize(n);
  for (int64_t i = 0; i < n; ++i) ds.obs.index[i] = "c" + std::to_string(i);
  ds.var.index.resize(g);
  for (int64_t j = 0; j < g; ++j) ds.var.index[j] = "g" + std::to_string(j);
  CategoricalColumn batch;
  batch.categories = {"a", "b", "c"};
  NumericColumn c1, c2;
  std::vector<double> loc(3 * g), centre(5 * d), shift(3 * d);
  for (auto& x : loc) x = nd(rng);
  for (auto& x : centre) x = 3 * nd(rng);
  for (auto& x : shift) x = 1.5 * nd(rng);
  DenseF X(n, g), Z(n, d);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = static_cast<int32_t>(rng() % 3), t = static_cast<int32_t>(rng() % 5);
    batch.codes.push_back(b);
    c1.values.push_back(1000 + 200 * nd(rng));
    c2.values.push_back(3 + nd(rng));
    for (int64_t j = 0; j < g; ++j)
      X(i, j) = static_cast<float>(2 + loc[b * g + j] + nd(rng) + 1e-3 * c1.values[i] + 0.1 * c2.values[i]);
    for (int64_t q = 0; q < d; ++q) Z(i, q) = static_cast<float>(centre[t * d + q] + shift[b * d + q] + nd(rng));
  }
  ds.obs.set("batch", Column(batch));
  ds.obs.set("c1", Column(c1));
  ds.obs.set("c2", Column(c2));
  ds.X = Matrix(std::move(X));
  ds.obsm["X_pca"] = Matrix(std::move(Z));
  return ds;
}

void run(const std::string& args) {
  const std::string cmd = "'" + test::scurry_binary() + "' -q " + args;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

DenseD as_double(const Matrix& m) {
  const DenseF& f = m.dense_f();
  DenseD d(f.n_rows, f.n_cols);
  for (size_t k = 0; k < f.data.size(); ++k) d.data[k] = f.data[k];
  return d;
}

void expect_close(const DenseF& a, const DenseF& b, double tol, const char* what) {
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  double worst = 0;
  for (size_t k = 0; k < a.data.size(); ++k)
    worst = std::max(worst, std::fabs(static_cast<double>(a.data[k]) - b.data[k]) /
                                std::max(1.0, std::fabs(static_cast<double>(b.data[k]))));
  EXPECT_LE(worst, tol) << what;
}

}  // namespace

TEST(IntegrateCliGpu, CommandsOnTheGpuMatchTheCpu) {
  SCURRY_REQUIRE_GPU();
  test::TempDir dir;
  const std::string in = dir.path("in.h5ad");
  write_h5ad(data(test::fresh_seed()), in);
  const std::string q = "'" + in + "' -o '";
  run("--device gpu harmony-integrate " + q + dir.path("h_gpu.h5ad") + "' --key batch");
  run("--device gpu harmony-integrate " + q + dir.path("h_gpu2.h5ad") + "' --key batch");
  run("harmony-integrate " + q + dir.path("h_cpu.h5ad") + "' --key batch");
  const Dataset hg = read_h5ad(dir.path("h_gpu.h5ad")), hg2 = read_h5ad(dir.path("h_gpu2.h5ad")),
                hc = read_h5ad(dir.path("h_cpu.h5ad"));
  const DenseD a = as_double(hg.obsm.at("X_pca_harmony")), b = as_double(hc.obsm.at("X_pca_harmony"));
  EXPECT_GE(test::knn_overlap(test::exact_knn(a, 15), test::exact_knn(b, 15)), 0.95);
  const DenseF& a2 = hg2.obsm.at("X_pca_harmony").dense_f();
  EXPECT_TRUE(std::memcmp(a2.data.data(), hg.obsm.at("X_pca_harmony").dense_f().data.data(), a2.data.size() * 4) == 0)
      << "two GPU runs differ";
  run("--device gpu regress-out " + q + dir.path("r_gpu.h5ad") + "' --keys c1,c2");
  run("regress-out " + q + dir.path("r_cpu.h5ad") + "' --keys c1,c2");
  expect_close(read_h5ad(dir.path("r_gpu.h5ad")).X.dense_f(), read_h5ad(dir.path("r_cpu.h5ad")).X.dense_f(), 1e-4,
               "regress-out");
  run("--device gpu combat " + q + dir.path("c_gpu.h5ad") + "' --key batch");
  run("combat " + q + dir.path("c_cpu.h5ad") + "' --key batch");
  expect_close(read_h5ad(dir.path("c_gpu.h5ad")).X.dense_f(), read_h5ad(dir.path("c_cpu.h5ad")).X.dense_f(), 1e-4,
               "combat");
}
