#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "testlib.hpp"

using namespace scurry;

TEST(Matrix, TransposeTwiceIsIdentityAndMatchesDense) {
  const uint64_t seed = test::fresh_seed();
  CsrF a = test::random_counts(37, 53, 0.2, seed);
  CsrF t = transpose(a);
  DenseD da = to_dense_d(Matrix(a)), dt = to_dense_d(Matrix(t));
  for (int64_t r = 0; r < a.n_rows; ++r)
    for (int64_t c = 0; c < a.n_cols; ++c) ASSERT_EQ(da(r, c), dt(c, r));
  CsrF tt = transpose(t);
  EXPECT_EQ(tt.indptr, a.indptr);
  EXPECT_EQ(tt.indices, a.indices);
  EXPECT_EQ(tt.data, a.data);
}

TEST(Matrix, TransposeOnThreadsIsTheSameMatrix) {
  const CsrF a = test::random_counts(1003, 71, 0.15, test::fresh_seed());
  const CsrF t = transpose(a);
  for (const int threads : {2, 3}) {  // (no OpenMP team above ~2x the cores: libomp's records leak under LSan)
    const CsrF p = transpose(a, threads);
    EXPECT_EQ(p.n_rows, t.n_rows);
    EXPECT_EQ(p.n_cols, t.n_cols);
    EXPECT_EQ(p.indptr, t.indptr) << threads << " threads";
    EXPECT_EQ(p.indices, t.indices) << threads << " threads";
    EXPECT_EQ(p.data, t.data) << threads << " threads";
  }
  const CsrF empty = transpose(CsrF{}, 4);
  EXPECT_EQ(empty.nnz(), 0);
}

TEST(Matrix, ValidateRejectsBadStructure) {
  CsrF a = test::random_counts(10, 8, 0.3, test::fresh_seed());
  ASSERT_GT(a.nnz(), 2);
  EXPECT_NO_THROW(validate_csr(a, "m"));
  CsrF b = a;
  b.indices[1] = 8;
  EXPECT_THROW(validate_csr(b, "m"), InputError);
  b = a;
  std::swap(b.indptr[3], b.indptr[4]);
  if (b.indptr[3] != b.indptr[4]) {
    EXPECT_THROW(validate_csr(b, "m"), InputError);
  }
  b = a;
  b.indptr.pop_back();
  EXPECT_THROW(validate_csr(b, "m"), InputError);
}

TEST(Dataset, SubsetRowsAndColumnsMatchDense) {
  const uint64_t seed = test::fresh_seed();
  Dataset d;
  d.X = Matrix(test::random_counts(20, 15, 0.3, seed));
  for (int i = 0; i < 20; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int i = 0; i < 15; ++i) d.var.index.push_back("g" + std::to_string(i));
  std::vector<double> v(20);
  for (int i = 0; i < 20; ++i) v[i] = i * 1.5;
  d.obs.set("x", Column::numeric(v));
  DenseD full = to_dense_d(d.X);
  std::vector<int64_t> rows = {3, 0, 7, 19}, cols = {1, 4, 14};
  d.subset_obs(rows);
  d.subset_vars(cols);
  d.check_shapes("test");
  DenseD sub = to_dense_d(d.X);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j) EXPECT_EQ(sub(i, j), full(rows[i], cols[j]));
  EXPECT_EQ(d.obs.index[0], "c3");
  EXPECT_EQ(d.obs.numeric("x")[2], 7 * 1.5);
  EXPECT_EQ(d.var.index[2], "g14");
}

TEST(RowBlocks, PartitionsCoverAllRows) {
  std::mt19937_64 rng(test::fresh_seed());
  CsrF a = test::random_counts(101, 30, 0.25, rng());
  for (int64_t parts : {1, 2, 3, 7}) {
    RowBlocks b = RowBlocks::split_nnz(a.indptr, parts);
    ASSERT_EQ(b.n_blocks(), parts);
    EXPECT_EQ(b.n_rows(), 101);
    for (int64_t i = 0; i < b.n_blocks(); ++i) EXPECT_LE(b.begin(i), b.end(i));
  }
  RowBlocks u = RowBlocks::uniform(101, 10);
  EXPECT_EQ(u.n_blocks(), 11);
  RowBlocks z = RowBlocks::by_nnz(a.indptr, 100);
  EXPECT_EQ(z.n_rows(), 101);
  MemoryRowSource src(a);
  int64_t total = 0;
  for (int64_t i = 0; i < z.n_blocks(); ++i) total += src.read_rows(z.begin(i), z.end(i)).nnz();
  EXPECT_EQ(total, a.nnz());
}

namespace {
// A source that reads from memory slowly (so the prefetcher runs ahead) and fails at one block.
class SlowSource : public RowSource {
 public:
  SlowSource(const CsrF& m, int64_t fail_at) : mem_(m), fail_at_(fail_at) {}
  int64_t n_rows() const override { return mem_.n_rows(); }
  int64_t n_cols() const override { return mem_.n_cols(); }
  int64_t nnz() const override { return mem_.nnz(); }
  CsrF read_rows(int64_t begin, int64_t end) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ++reads;
    if (begin == fail_at_) throw InputError("test.h5ad: block at row " + std::to_string(begin) + " is corrupt");
    return mem_.read_rows(begin, end);
  }
  std::vector<int64_t> row_pointers() override { return mem_.row_pointers(); }
  std::atomic<int> reads{0};

 private:
  MemoryRowSource mem_;
  int64_t fail_at_;
};
}  // namespace

// The prefetcher hands out every block in order, equal to a direct read, at any depth; a reader
// error reaches the consumer at the failing block (after the good ones); leaving early is clean.
TEST(RowBlocks, PrefetcherHandsOutTheBlocksInOrderAndPassesErrorsOn) {
  std::mt19937_64 rng(test::fresh_seed());
  const CsrF a = test::random_counts(1003, 40, 0.2, rng());
  const RowBlocks blocks = RowBlocks::by_nnz(a.indptr, 500);
  ASSERT_GT(blocks.n_blocks(), 5);
  MemoryRowSource direct(a);
  for (int depth : {1, 2, 4}) {
    SlowSource src(a, -1);
    BlockPrefetcher pf(src, blocks, depth);
    int64_t b = -1, seen = 0;
    CsrF rows;
    while (pf.next(b, rows)) {
      ASSERT_EQ(b, seen) << "depth " << depth;
      const CsrF want = direct.read_rows(blocks.begin(b), blocks.end(b));
      EXPECT_EQ(rows.indptr, want.indptr);
      EXPECT_EQ(rows.indices, want.indices);
      EXPECT_EQ(rows.data, want.data);
      ++seen;
    }
    EXPECT_EQ(seen, blocks.n_blocks());
    EXPECT_FALSE(pf.next(b, rows));
  }
  {  // an error at block 3: blocks 0..2 arrive, then the error, naming the file
    SlowSource src(a, blocks.begin(3));
    BlockPrefetcher pf(src, blocks, 2);
    int64_t b = -1;
    CsrF rows;
    for (int64_t i = 0; i < 3; ++i) ASSERT_TRUE(pf.next(b, rows));
    try {
      pf.next(b, rows);
      FAIL() << "expected the reader's error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("test.h5ad"), std::string::npos) << e.what();
    }
  }
  {  // the consumer leaves after one block: the reader stops within depth + 1 reads
    SlowSource src(a, -1);
    {
      BlockPrefetcher pf(src, blocks, 2);
      int64_t b = -1;
      CsrF rows;
      ASSERT_TRUE(pf.next(b, rows));
    }
    EXPECT_LE(src.reads.load(), 4);
  }
}
