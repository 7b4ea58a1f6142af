// The pieces of cNMF's batched factorize and of starCAT's fit that run on the host threads: the same
// bits for any thread count (sklearn's random init drawn per replicate in parallel; the query's
// overlap and scaling over row blocks), and the init equal to the serial draw of each replicate.
#include <cmath>
#include <vector>

#include "nmf/nmf.hpp"
#include "nmf/numpy_random.hpp"
#include "nmf/starcat.hpp"
#include "testlib.hpp"

using namespace scurry;

TEST(CnmfBatches, RandomInitAnyThreadCountEqualsSingleReplicates) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(300, 50, 0.2, seed);
  const auto seeds = nmf_replicate_seeds(seed & 0xffffffffu, 5);
  const NmfBatch one = nmf_random_init(X, 4, seeds, 1);
  const NmfBatch three = nmf_random_init(X, 4, seeds, 3);
  double sum = 0;
  for (const float v : X.data) sum += v;
  const NmfBatch given = nmf_random_init(X, 4, seeds, 2, sum);
  EXPECT_EQ(one.W, three.W);
  EXPECT_EQ(one.Ht, three.Ht);
  EXPECT_EQ(one.W, given.W);
  for (int r = 0; r < 5; ++r) {  // replicate r of the batch = a batch of that seed alone
    const NmfBatch alone = nmf_random_init(X, 4, {seeds[r]});
    EXPECT_EQ(one.w_of(r).data, alone.w_of(0).data) << r;
    EXPECT_EQ(one.h_of(r).data, alone.h_of(0).data) << r;
  }
}

// The init against sklearn's serial order written out here (H row by row, then W row by row, each
// replicate's own numpy stream), with more threads than replicates.
TEST(CnmfBatches, RandomInitEqualsTheSerialDraw) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(4500, 7, 0.3, seed);
  const auto seeds = nmf_replicate_seeds(seed & 0xffffffffu, 6);
  const int k = 3;
  const NmfBatch b = nmf_random_init(X, k, seeds, 4);
  double sum = 0;
  for (const float v : X.data) sum += v;
  const double avg = std::sqrt(sum / (4500.0 * 7.0) / k);
  for (int r = 0; r < 6; ++r) {
    NumpyRandomState rng(static_cast<uint32_t>(seeds[r]));  // cNMF's seeds are below 2^31
    for (int c = 0; c < k; ++c)
      for (int64_t j = 0; j < 7; ++j)
        ASSERT_EQ(b.h(r, c, j), static_cast<float>(std::fabs(avg * rng.standard_normal()))) << r << " " << c << " " << j;
    for (int64_t i = 0; i < 4500; ++i)
      for (int c = 0; c < k; ++c)
        ASSERT_EQ(b.w(r, i, c), static_cast<float>(std::fabs(avg * rng.standard_normal()))) << r << " " << i << " " << c;
  }
}

// The bulk init (Marsaglia's polar method split into the streams' sequential pairs and their
// conversion on any thread, over rounds of blocks and pieces) against a plain serial loop over
// NumpyRandomState::standard_normal per replicate: every value bit for bit. Shapes: several rounds
// (R = 1 and R = 40 blocks, n not a multiple of a block or a piece), an odd k g (numpy's cached f x1
// carried from H into W), odd k (pairs across rows), an odd total (the last pair's f x1 unused),
// k = 1, tiny matrices, R = 1, threads above R and threads = 1.
TEST(CnmfBatches, BulkInitEqualsTheSerialStandardNormalLoop) {
  const uint64_t seed = test::fresh_seed();
  struct Shape {
    int64_t n, g;
    int k, R, threads;
  };
  const Shape shapes[] = {{50001, 7, 3, 1, 4},  {33333, 11, 5, 3, 2}, {2001, 13, 7, 40, 3}, {70001, 3, 1, 40, 5},
                          {4097, 5, 2, 2, 1},   {1, 1, 1, 1, 3},      {2, 1, 1, 1, 2},      {3, 2, 3, 5, 8},
                          {9000, 1, 15, 7, 16}};
  uint64_t s = seed;
  for (const Shape& sh : shapes) {
    const CsrF X = test::random_counts(sh.n, sh.g, 0.3, ++s);
    const auto seeds = nmf_replicate_seeds(s & 0xffffffffu, sh.R);
    const NmfBatch b = nmf_random_init(X, sh.k, seeds, sh.threads);
    double sum = 0;
    for (const float v : X.data) sum += v;
    const double avg = std::sqrt(sum / (static_cast<double>(sh.n) * static_cast<double>(sh.g)) / sh.k);
    ASSERT_EQ(b.W.size(), static_cast<size_t>(sh.n * sh.R * sh.k));
    ASSERT_EQ(b.Ht.size(), static_cast<size_t>(sh.g * sh.R * sh.k));
    for (int r = 0; r < sh.R; ++r) {
      NumpyRandomState rng(static_cast<uint32_t>(seeds[r]));
      for (int c = 0; c < sh.k; ++c)
        for (int64_t j = 0; j < sh.g; ++j)
          ASSERT_EQ(b.h(r, c, j), static_cast<float>(std::fabs(avg * rng.standard_normal())))
              << "n " << sh.n << " R " << sh.R << ": H of replicate " << r << " at " << c << ", " << j;
      for (int64_t i = 0; i < sh.n; ++i)
        for (int c = 0; c < sh.k; ++c)
          ASSERT_EQ(b.w(r, i, c), static_cast<float>(std::fabs(avg * rng.standard_normal())))
              << "n " << sh.n << " R " << sh.R << ": W of replicate " << r << " at " << i << ", " << c;
    }
  }
}

// W's storage handed in (the previous batch's host W in the GPU batches): the same values as a
// fresh init, whatever the buffer held and whether it was larger, as large, or too small.
TEST(CnmfBatches, BulkInitIntoReusedStorage) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(3001, 9, 0.3, seed);
  const auto seeds = nmf_replicate_seeds(seed & 0xffffffffu, 4);
  const NmfBatch fresh = nmf_random_init(X, 5, seeds, 2);
  const size_t nw = fresh.W.size();
  for (const size_t have : {nw, nw + 777, nw / 2, size_t(0)}) {
    std::vector<float> spare(have, std::nanf(""));
    const float* storage = spare.data();
    const NmfBatch b = nmf_random_init(X, 5, seeds, 3, -1, &spare);
    EXPECT_EQ(b.W, fresh.W) << have;
    EXPECT_EQ(b.Ht, fresh.Ht) << have;
    EXPECT_TRUE(spare.empty()) << have;
    if (have >= nw) {
      EXPECT_EQ(b.W.data(), storage) << have;  // no new allocation
    }
  }
}

TEST(CnmfBatches, StarcatAnyThreadCountAndBlockSize) {
  const uint64_t seed = test::fresh_seed();
  const CsrF Q = test::random_counts(2100, 60, 0.3, seed);
  std::vector<std::string> genes;
  for (int j = 0; j < 60; ++j) genes.push_back("g" + std::to_string(j));
  std::vector<std::string> ref_genes(genes.rbegin(), genes.rbegin() + 40);
  const CsrF R = test::random_counts(6, 40, 0.7, seed + 1);
  DenseD ref(6, 40);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t p = R.indptr[i]; p < R.indptr[i + 1]; ++p) ref(i, R.indices[p]) = R.data[p];
  StarcatOptions a, b;
  b.rows_per_block = 37;
  const StarcatResult one = starcat_fit(Context::cpu(1), Q, genes, ref, ref_genes, a, "q");
  const StarcatResult three = starcat_fit(Context::cpu(3), Q, genes, ref, ref_genes, b, "q");
  ASSERT_EQ(one.genes.size(), 40u);
  EXPECT_EQ(one.usages.data, three.usages.data);
  int64_t positive = 0;
  for (const float v : one.usages.data) positive += v > 0;
  EXPECT_GT(positive, 2100);
}
