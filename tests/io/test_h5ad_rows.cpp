// read_h5ad_rows (a rank's share of a sharded run) against the whole file read and subset.
#include <random>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "testlib.hpp"

using namespace scurry;

TEST(H5adRows, EqualsWholeFileSubset) {
  const std::string path = test::test_data("pbmc3k_first1000.h5ad");
  const Dataset whole = read_h5ad(path);
  std::mt19937_64 rng(test::fresh_seed());
  const int64_t n = whole.n_obs();
  for (int trial = 0; trial < 4; ++trial) {
    int64_t b = static_cast<int64_t>(rng() % static_cast<uint64_t>(n)), e = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
    if (b > e) std::swap(b, e);
    if (trial == 0) b = 0, e = n;  // the whole range
    if (trial == 1) e = b;         // an empty range
    const Dataset part = read_h5ad_rows(path, b, e);
    std::vector<int64_t> keep;
    for (int64_t i = b; i < e; ++i) keep.push_back(i);
    Dataset ref = whole;
    ref.obsp.clear();
    ref.layers.clear();
    ref.subset_obs(keep);
    ASSERT_EQ(part.n_obs(), e - b);
    EXPECT_EQ(part.obs.index, ref.obs.index);
    EXPECT_EQ(part.obs.names(), ref.obs.names());
    EXPECT_EQ(part.var.index, ref.var.index);
    EXPECT_EQ(part.X.dtype, ref.X.dtype);
    const CsrF& px = part.X.csr_f();
    const CsrF& rx = ref.X.csr_f();
    EXPECT_EQ(px.n_rows, rx.n_rows);
    EXPECT_EQ(px.n_cols, rx.n_cols);
    EXPECT_EQ(px.indptr, rx.indptr);
    EXPECT_EQ(px.indices, rx.indices);
    EXPECT_EQ(px.data, rx.data);
    for (const auto& [k, m] : ref.obsm) {
      ASSERT_TRUE(part.obsm.count(k)) << k;
      EXPECT_EQ(part.obsm.at(k).n_rows(), m.n_rows()) << k;
    }
  }
}

TEST(H5adRows, RangeOutsideTheFileIsAnInputError) {
  const std::string path = test::test_data("pbmc3k_first1000.h5ad");
  EXPECT_THROW(read_h5ad_rows(path, 0, 1001), InputError);
  EXPECT_THROW(read_h5ad_rows(path, 5, 4), InputError);
  EXPECT_THROW(read_h5ad_rows(path, -1, 4), InputError);
}
