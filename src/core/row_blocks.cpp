#include "core/row_blocks.hpp"

#include <algorithm>

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
  RowBlocks b;
  const int64_t n = static_cast<int64_t>(indptr.size()) - 1;
  int64_t start = 0;
  for (int64_t r = 0; r < n; ++r)
    if (indptr[r + 1] - indptr[start] >= nnz_per_block) {
      b.bounds.push_back(r + 1);
      start = r + 1;
    }
  if (n > 0 && b.bounds.back() != n) b.bounds.push_back(n);
  return b;
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

}  // namespace scurry
