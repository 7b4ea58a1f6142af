// scurry: row blocks, the unit of streaming, GPU placement and distribution. A RowBlocks is a
// partition of [0, n_rows) into contiguous blocks; a RowSource hands out CSR row blocks, from memory
// or lazily from a file, so that algorithms never care where the rows live.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/matrix.hpp"

namespace scurry {

struct RowBlocks {
  std::vector<int64_t> bounds{0};  // n_blocks + 1 entries, bounds[0] = 0, bounds.back() = n_rows

  int64_t n_blocks() const { return static_cast<int64_t>(bounds.size()) - 1; }
  int64_t begin(int64_t b) const { return bounds[b]; }
  int64_t end(int64_t b) const { return bounds[b + 1]; }
  int64_t n_rows() const { return bounds.back(); }

  // Blocks of `rows_per_block` rows (the last may be shorter).
  static RowBlocks uniform(int64_t n_rows, int64_t rows_per_block);
  // Blocks holding about `nnz_per_block` nonzeros each (load balance by nonzeros, not rows).
  static RowBlocks by_nnz(const std::vector<int64_t>& indptr, int64_t nnz_per_block);
  // `parts` blocks of near-equal nonzeros (for ranks/GPUs).
  static RowBlocks split_nnz(const std::vector<int64_t>& indptr, int64_t parts);
};

// A source of CSR row blocks.
class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual int64_t n_rows() const = 0;
  virtual int64_t n_cols() const = 0;
  virtual int64_t nnz() const = 0;
  // Rows [begin, end) as a CSR matrix of end-begin rows, float values.
  virtual CsrF read_rows(int64_t begin, int64_t end) = 0;
  // Nonzeros per row (size n_rows): lets callers balance blocks by nonzeros without reading values.
  virtual std::vector<int64_t> row_pointers() = 0;
  // The whole matrix when it is held in host memory (null for lazy file readers): a streamed pass then
  // copies its blocks straight from it into the upload buffers, with no intermediate copy.
  virtual const CsrF* resident() const { return nullptr; }
};

// Rows of a CSR matrix held in memory (not owned: it must outlive the source).
class MemoryRowSource : public RowSource {
 public:
  explicit MemoryRowSource(const CsrF& m) : m_(m) {}
  int64_t n_rows() const override { return m_.n_rows; }
  int64_t n_cols() const override { return m_.n_cols; }
  int64_t nnz() const override { return m_.nnz(); }
  CsrF read_rows(int64_t begin, int64_t end) override;
  std::vector<int64_t> row_pointers() override { return m_.indptr; }
  const CsrF* resident() const override { return &m_; }

 private:
  const CsrF& m_;
};

// Reads the blocks of `blocks` from `src` in order on a background thread, up to `depth` blocks
// ahead of the consumer, so that reading and decompressing the next blocks overlaps the work on the
// current one (the streaming passes over a matrix larger than memory: read, then upload and compute).
// next() hands out the blocks in order (false after the last); an error of the reader is rethrown by
// the next() that would have returned its block. The source must not be used by anyone else while
// the prefetcher lives; destroying it early stops the reader after the block in flight.
class BlockPrefetcher {
 public:
  BlockPrefetcher(RowSource& src, RowBlocks blocks, int depth = 2);
  ~BlockPrefetcher();
  BlockPrefetcher(const BlockPrefetcher&) = delete;
  BlockPrefetcher& operator=(const BlockPrefetcher&) = delete;
  // The next block in order: its index and rows; false when every block has been handed out.
  bool next(int64_t& block, CsrF& rows);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace scurry
