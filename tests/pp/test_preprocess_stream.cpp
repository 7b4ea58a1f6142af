// CPU tests of the streamed chain's host-side pieces (preprocess_stream.hpp): block planning, the
// per-cell filter predicate against filter_cells_from_stats, the host store of row blocks.
#include <numeric>
#include <random>

#include "core/error.hpp"
#include "pp/preprocess_stream.hpp"
#include "testlib.hpp"

using namespace scurry;

TEST(PreprocessStream, PlanCoversRowsAndSizesTheBuffers) {
  const CsrF m = test::random_counts(3000, 400, 0.05, test::fresh_seed());
  const StreamPlan p = plan_stream_blocks(m.indptr, 5000);
  ASSERT_GT(p.blocks.n_blocks(), 5);
  EXPECT_EQ(p.blocks.bounds.front(), 0);
  EXPECT_EQ(p.blocks.n_rows(), m.n_rows);
  int64_t max_nnz = 0, max_rows = 0;
  for (int64_t b = 0; b < p.blocks.n_blocks(); ++b) {
    ASSERT_LT(p.blocks.begin(b), p.blocks.end(b));
    const int64_t nnz = m.indptr[p.blocks.end(b)] - m.indptr[p.blocks.begin(b)];
    max_nnz = std::max(max_nnz, nnz), max_rows = std::max(max_rows, p.blocks.end(b) - p.blocks.begin(b));
    // by_nnz closes a block at the row that reaches the target: less than the target plus one row
    if (b + 1 < p.blocks.n_blocks()) {
      EXPECT_GE(nnz, 5000);
    }
    EXPECT_LT(nnz, 5000 + 400);
  }
  EXPECT_EQ(p.max_nnz, max_nnz);
  EXPECT_EQ(p.max_rows, max_rows);
  // One block when the target exceeds the matrix; an empty matrix has none.
  EXPECT_EQ(plan_stream_blocks(m.indptr, m.nnz() * 2).blocks.n_blocks(), 1);
  EXPECT_EQ(plan_stream_blocks(std::vector<int64_t>{0}, 100).blocks.n_blocks(), 0);
}

TEST(PreprocessStream, BudgetSizes) {
  // 7 GiB: over 100M nonzeros a block; never below 2^16.
  EXPECT_GT(stream_block_nnz(size_t{7} << 30), int64_t{100} << 20);  // ~141M
  EXPECT_EQ(stream_block_nnz(1000), int64_t{1} << 16);
  EXPECT_EQ(stream_dense_rows(size_t{7} << 30, 2000), int64_t{1} << 16);
  EXPECT_EQ(stream_dense_rows(1000, 2000), 256);
  const int64_t rows = stream_dense_rows(size_t{64} << 20, 2000);  // 64 MiB: a quarter over 16 kB a row
  EXPECT_EQ(rows, static_cast<int64_t>(0.25 * (64 << 20) / 16000.0));
}

TEST(PreprocessStream, CellPredicateEqualsFilterCells) {
  std::mt19937_64 rng(test::fresh_seed());
  const int64_t n = 5000;
  std::vector<int64_t> genes(n);
  std::vector<double> total(n);
  for (int64_t i = 0; i < n; ++i) {
    genes[i] = static_cast<int64_t>(rng() % 600);
    total[i] = static_cast<double>(static_cast<float>((rng() % 100000) / 7.0));
  }
  genes[0] = 200;  // at the threshold exactly
  std::vector<FilterCellsOptions> opts(4);
  opts[0].min_genes = 200;
  opts[1].min_counts = 3000, opts[1].max_genes = 500;
  opts[2].max_counts = 9000, opts[2].min_genes = 100;
  opts[3].min_counts = 100, opts[3].max_counts = 12000, opts[3].min_genes = 50, opts[3].max_genes = 550;
  for (const auto& o : opts) {
    const FilterCellsResult r = filter_cells_from_stats(genes, total, o);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(cell_passes(o, genes[i], total[i]), r.keep[i] != 0) << "cell " << i;
  }
}

TEST(PreprocessStream, HostStoreKeepsAPrefixUpToItsCap) {
  const int64_t per = HostCsrStore::block_bytes(10, 100);
  int allocs = 0, frees = 0;
  {
    HostCsrStore s(
        per * 3 + 5, [&](size_t n) { ++allocs; return std::malloc(n); }, [&](void* p) { ++frees; std::free(p); });
    for (int64_t b = 0; b < 3; ++b) {
      HostCsrStore::Block* blk = s.reserve(b, 10, 100);
      ASSERT_NE(blk, nullptr);
      std::iota(blk->indptr, blk->indptr + 11, b);
      for (int i = 0; i < 100; ++i) blk->indices[i] = static_cast<int32_t>(i + b), blk->data[i] = static_cast<float>(i * b);
    }
    EXPECT_EQ(s.reserve(3, 10, 100), nullptr);  // over the cap
    EXPECT_EQ(s.reserve(3, 0, 0), nullptr);     // and every later block too
    EXPECT_EQ(s.n_blocks(), 3);
    EXPECT_EQ(s.bytes(), 3 * per);
    for (int64_t b = 0; b < 3; ++b) {  // the buffers do not overlap: each block reads back what it got
      const auto& blk = s.block(b);
      EXPECT_EQ(blk.indptr[10], 10 + b);
      EXPECT_EQ(blk.indices[99], 99 + b);
      EXPECT_EQ(blk.data[99], static_cast<float>(99 * b));
    }
    EXPECT_EQ(s.reserve(9, 0, 0), nullptr);  // (full: later blocks are refused, not errors)
    EXPECT_THROW(s.reserve(1, 1, 1), Error);  // a block stored already
  }
  {
    HostCsrStore s(1 << 20);
    EXPECT_THROW(s.reserve(2, 1, 1), Error);  // out of order
  }
  EXPECT_EQ(allocs, 3);
  EXPECT_EQ(frees, 3);
  HostCsrStore none(0);
  EXPECT_EQ(none.reserve(0, 1, 1), nullptr);
}
