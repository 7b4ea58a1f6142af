// GPU (label gpu): cNMF's factorize on one device (nmf_fit_gpu_batches: X laid out once, batches of
// replicates fitted in order, the next init drawn ahead) gives each batch the factors nmf_fit_gpu
// gives it alone: bit for bit in the sparse layout (a replicate's arithmetic does not depend on its
// batch mates or on the device copy of X), within float32 rounding in the dense one (the same
// cuBLAS shapes; 1e-5 of the largest entry allows for a different GEMM kernel choice).
#include <cmath>

#include "nmf/nmf.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

void check_layout(NmfGpuLayout layout, bool exact) {
  const Context gpu = test::gpu_context();
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(900, 140, 0.3, seed);
  NmfOptions opt;
  opt.gpu_layout = layout;
  opt.max_iter = 40;
  const std::vector<int> ks = {3, 7, 3, 12};
  std::vector<std::vector<uint64_t>> seeds;
  for (size_t b = 0; b < ks.size(); ++b) seeds.push_back(nmf_replicate_seeds(seed + b, 2 + static_cast<int64_t>(b)));
  // Each init into the previous batch's host W (the reuse nmf_fit_gpu_batches offers).
  auto make = [&](int b, std::vector<float>& spare) { return nmf_random_init(X, ks[b], seeds[b], 2, -1, &spare); };
  int seen = 0;
  nmf_fit_gpu_batches(gpu, X, static_cast<int>(ks.size()), 12 * 5, make, opt, [&](int b, NmfResult& got) {
    ASSERT_EQ(b, seen++);
    const NmfResult want = nmf_fit_gpu(gpu, X, nmf_random_init(X, ks[b], seeds[b], 2), opt);
    ASSERT_EQ(got.f.Ht.size(), want.f.Ht.size());
    EXPECT_TRUE(got.f.W.empty());
    EXPECT_EQ(got.n_iter, want.n_iter);
    double top = 0;
    for (const float v : want.f.Ht) top = std::max(top, static_cast<double>(v));
    ASSERT_GT(top, 0);
    for (size_t q = 0; q < want.f.Ht.size(); ++q) {
      if (exact) ASSERT_EQ(got.f.Ht[q], want.f.Ht[q]) << "batch " << b << " entry " << q;
      else ASSERT_NEAR(got.f.Ht[q], want.f.Ht[q], 1e-5 * top) << "batch " << b << " entry " << q;
    }
  });
  EXPECT_EQ(seen, static_cast<int>(ks.size()));
}

}  // namespace

TEST(NmfBatchesGpu, SparseEqualsOneBatchAtATime) {
  SCURRY_REQUIRE_GPU();
  check_layout(NmfGpuLayout::sparse, true);
}

TEST(NmfBatchesGpu, DenseEqualsOneBatchAtATime) {
  SCURRY_REQUIRE_GPU();
  check_layout(NmfGpuLayout::dense, false);
}
