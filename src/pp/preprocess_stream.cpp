// The host-side pieces of the streamed chain (preprocess_stream.hpp): block planning, the per-cell
// filter predicate, and the host store of row blocks kept between passes.
#include "pp/preprocess_stream.hpp"

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"

namespace scurry {

StreamPlan plan_stream_blocks(const std::vector<int64_t>& indptr, int64_t block_nnz) {
  if (indptr.empty()) fail("internal: plan_stream_blocks needs n_rows + 1 row pointers");
  StreamPlan p;
  p.blocks = RowBlocks::by_nnz(indptr, std::max<int64_t>(1, block_nnz));
  for (int64_t b = 0; b < p.blocks.n_blocks(); ++b) {
    const int64_t r0 = p.blocks.begin(b), r1 = p.blocks.end(b);
    p.max_nnz = std::max(p.max_nnz, indptr[r1] - indptr[r0]);
    p.max_rows = std::max(p.max_rows, r1 - r0);
  }
  return p;
}

int64_t stream_block_nnz(size_t device_budget) {
  // Per nonzero in flight: 3 slots x (4 B index + 4 B value) + the filter scratch and the compacted copy
  // (~8 B) + slack for the per-row arrays: ~40 B; three quarters of the budget.
  const double per_nnz = 40.0;
  const int64_t n = static_cast<int64_t>(0.75 * static_cast<double>(device_budget) / per_nnz);
  return std::max<int64_t>(int64_t{1} << 16, n);
}

int64_t stream_dense_rows(size_t device_budget, int64_t g) {
  const double per_row = 8.0 * static_cast<double>(std::max<int64_t>(1, g));
  const int64_t rows = static_cast<int64_t>(0.25 * static_cast<double>(device_budget) / per_row);
  return std::clamp<int64_t>(rows, 256, int64_t{1} << 16);
}

bool cell_passes(const FilterCellsOptions& o, int64_t n_genes, double total) {
  // filter.cpp's criteria: min_counts, min_genes (>=), max_counts, max_genes (<=).
  if (o.min_counts && !(total >= *o.min_counts)) return false;
  if (o.min_genes && !(static_cast<double>(n_genes) >= static_cast<double>(*o.min_genes))) return false;
  if (o.max_counts && !(total <= *o.max_counts)) return false;
  if (o.max_genes && !(static_cast<double>(n_genes) <= static_cast<double>(*o.max_genes))) return false;
  return true;
}

HostCsrStore::HostCsrStore(int64_t cap_bytes, Alloc alloc, Free release)
    : cap_(std::max<int64_t>(0, cap_bytes)), alloc_(std::move(alloc)), free_(std::move(release)) {
  if (!alloc_) alloc_ = [](size_t n) { return std::malloc(n); };
  if (!free_) free_ = [](void* p) { std::free(p); };
}

HostCsrStore::~HostCsrStore() {
  for (void* p : mem_) free_(p);
}

HostCsrStore::Block* HostCsrStore::reserve(int64_t b, int64_t rows, int64_t nnz) {
  // Once full, every later block is refused (blocks after the stored prefix are read again).
  if (b < n_blocks() || (!full_ && b != n_blocks()))
    fail("internal: HostCsrStore blocks must come in order (got ", b, ", expected ", n_blocks(), ")");
  if (rows < 0 || nnz < 0) fail("internal: HostCsrStore block of negative size");
  const int64_t bytes = block_bytes(rows, nnz);
  if (full_ || used_ + bytes > cap_) {
    full_ = true;
    return nullptr;
  }
  void* m = alloc_(static_cast<size_t>(bytes));
  if (!m) {  // no memory: the rest is read again
    full_ = true;
    return nullptr;
  }
  mem_.push_back(m);
  used_ += bytes;
  char* p = static_cast<char*>(m);
  Block blk;
  blk.rows = rows, blk.nnz = nnz;
  blk.indptr = reinterpret_cast<int64_t*>(p);
  p += (rows + 1) * 8;
  blk.data = reinterpret_cast<float*>(p);
  p += nnz * 4;
  blk.indices = reinterpret_cast<int32_t*>(p);
  blocks_.push_back(blk);
  return &blocks_.back();
}

}  // namespace scurry
