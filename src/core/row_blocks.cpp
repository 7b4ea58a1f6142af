#include "core/row_blocks.hpp"

#include "core/matrix_view.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "core/dataset.hpp"
#include "core/error.hpp"

namespace scurry {

RowBlocks RowBlocks::uniform(int64_t n_rows, int64_t rows_per_block) {
  if (rows_per_block <= 0) fail("internal: rows_per_block must be positive");
  RowBlocks b;
  for (int64_t r = rows_per_block; r < n_rows; r += rows_per_block) b.bounds.push_back(r);
  if (n_rows > 0) b.bounds.push_back(n_rows);
  return b;
}

RowBlocks RowBlocks::by_nnz(const std::vector<int64_t>& indptr, int64_t nnz_per_block) {
  if (nnz_per_block <= 0) fail("internal: nnz_per_block must be positive");
  return row_blocks_by_nnz(indptr.data(), static_cast<int64_t>(indptr.size()) - 1, nnz_per_block);
}

RowBlocks RowBlocks::split_nnz(const std::vector<int64_t>& indptr, int64_t parts) {
  if (parts <= 0) fail("internal: parts must be positive");
  RowBlocks b;
  const int64_t n = static_cast<int64_t>(indptr.size()) - 1;
  const int64_t total = indptr.back();
  for (int64_t p = 1; p < parts; ++p) {
    // first row whose start reaches p/parts of the nonzeros; also at least p/parts of the rows
    // when there are no nonzeros at all.
    int64_t target = total == 0 ? -1 : (total * p) / parts;
    int64_t r = total == 0 ? (n * p) / parts
                           : std::lower_bound(indptr.begin(), indptr.end(), target) - indptr.begin();
    r = std::clamp<int64_t>(r, b.bounds.back(), n);
    b.bounds.push_back(r);
  }
  b.bounds.push_back(n);
  return b;
}

CsrF MemoryRowSource::read_rows(int64_t begin, int64_t end) {
  if (begin < 0 || end > m_.n_rows || begin > end) fail("internal: row range [", begin, ", ", end, ") out of bounds");
  return slice_rows(m_, begin, end);
}


struct BlockPrefetcher::State {
  RowSource& src;
  RowBlocks blocks;
  size_t depth;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int64_t, CsrF>> ready;  // read, not yet handed out (in order)
  std::exception_ptr error;                    // the reader's failure, after the blocks before it
  int64_t next_out = 0;                        // the block next() hands out next
  bool stop = false, done = false;             // stop: the consumer is gone; done: the reader ended
  std::thread reader;
  State(RowSource& s, RowBlocks b, int d) : src(s), blocks(std::move(b)), depth(static_cast<size_t>(std::max(1, d))) {}
};

BlockPrefetcher::BlockPrefetcher(RowSource& src, RowBlocks blocks, int depth)
    : s_(std::make_unique<State>(src, std::move(blocks), depth)) {
  State* s = s_.get();
  s->reader = std::thread([s] {
    try {
      for (int64_t b = 0; b < s->blocks.n_blocks(); ++b) {
        {
          std::unique_lock<std::mutex> lock(s->mu);
          s->cv.wait(lock, [&] { return s->stop || s->ready.size() < s->depth; });
          if (s->stop) break;
        }
        CsrF rows = s->src.read_rows(s->blocks.begin(b), s->blocks.end(b));  // outside the lock
        std::lock_guard<std::mutex> lock(s->mu);
        s->ready.emplace_back(b, std::move(rows));
        s->cv.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(s->mu);
    s->done = true;
    s->cv.notify_all();
  });
}

BlockPrefetcher::~BlockPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
    s_->cv.notify_all();
  }
  s_->reader.join();
}

bool BlockPrefetcher::next(int64_t& block, CsrF& rows) {
  std::unique_lock<std::mutex> lock(s_->mu);
  if (s_->next_out >= s_->blocks.n_blocks()) return false;
  s_->cv.wait(lock, [&] { return !s_->ready.empty() || s_->done; });
  if (s_->ready.empty()) {  // the reader ended before this block: it failed
    if (s_->error) std::rethrow_exception(s_->error);
    fail("internal: the block prefetcher ended before block ", s_->next_out);
  }
  block = s_->ready.front().first;
  rows = std::move(s_->ready.front().second);
  s_->ready.pop_front();
  ++s_->next_out;
  s_->cv.notify_all();
  return true;
}

}  // namespace scurry
