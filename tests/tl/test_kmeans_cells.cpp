// tl kmeans: planted, well-separated clusters in X_pca are recovered exactly (adjusted Rand index 1
// against the planted labels), labels are numbered by decreasing size, and bad n_clusters is an
// InputError.
#include <gtest/gtest.h>

#include <random>

#include "core/error.hpp"
#include "graph/leiden.hpp"
#include "tl/kmeans.hpp"

using namespace scurry;

TEST(KmeansCells, RecoversPlantedClusters) {
  std::mt19937_64 rng(21);
  std::normal_distribution<double> nd(0, 1);
  const int64_t n = 900, dims = 8;
  const int64_t sizes[3] = {450, 300, 150};
  Dataset d;
  DenseF x(n, dims);
  std::vector<int32_t> truth;
  int64_t row = 0;
  for (int c = 0; c < 3; ++c)
    for (int64_t t = 0; t < sizes[c]; ++t, ++row) {
      truth.push_back(c);
      for (int64_t j = 0; j < dims; ++j) x(row, j) = static_cast<float>(nd(rng) + (j == c ? 25.0 : 0.0));
    }
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  d.obsm["X_pca"] = Matrix(x);
  KmeansClusterOptions o;
  o.n_clusters = 3;
  const KmeansClusterResult r = kmeans_cluster(Context::cpu(2), d, o);
  EXPECT_DOUBLE_EQ(adjusted_rand_index(r.labels, truth), 1.0);
  EXPECT_EQ(r.labels, truth);  // numbered by size: 450 -> "0", 300 -> "1", 150 -> "2"
  const auto& col = std::get<CategoricalColumn>(d.obs.at("kmeans").c);
  EXPECT_EQ(col.categories, (std::vector<std::string>{"0", "1", "2"}));
  o.n_clusters = 0;
  EXPECT_THROW(kmeans_cluster(Context::cpu(1), d, o), InputError);
}
