// scurry: the preprocessing chain streamed over row blocks ("out of core", issue 7 point 5): the count
// matrix is never held whole on the device, nor the dense scaled n x g matrix. Blocks of rows come from
// any RowSource (host memory, or lazily from an h5ad/zarr file through BlockPrefetcher, which reads and
// decompresses ahead on a thread of its own), are copied into pinned staging buffers and uploaded on a
// copy stream (three slots: one being staged, one uploading, one computed on), while the compute stream
// works on the block before (CUDA events
// between the two). The passes follow ARCHITECTURE.md's map/reduce over row blocks:
//   1. QC per cell and per gene (row_qc, gene_sums); the cell filters are per-cell thresholds, so each
//      block's kept cells are known at once and the per-gene counts over the kept cells (what
//      filter_genes decides on: scanpy filters cells before genes) come from the same pass.
//   2. (only when normalize_total has no target_sum) the per-cell totals after the filters: the median.
//   3. normalize_total + log1p, per-gene moments: the HVG choice and the scale statistics.
//   4. normalize + log1p + HVG subset, then per dense chunk of rows: scale (centre, divide, clip) and
//      the chunk's Gram matrix added in float64 (GramAccumulator, pca.cu). The filtered, normalised
//      HVG rows are kept in pinned host memory while they fit (HostCsrStore), so that
//   5. after one eigen-solve, the projection pass reads them instead of the source (blocks that did not
//      fit are read and recomputed again).
// The kernels are the in-memory chain's (src/pp/*.cu), so the results are the in-memory chain's up to
// the order of floating-point additions. Every decision combines the ranks' statistics through
// ctx.comm() at the same points as the in-memory chain (a rank streams its own rows).
//
// What the Dataset gets: obs/var QC and filter columns, the HVG columns, var mean/std, obsm X_pca,
// varm PCs, uns pca/hvg/log1p, as the in-memory chain writes them. X is left empty (the scaled dense
// matrix is what streaming avoids), and layers['counts'] and raw are not kept (each is a matrix the
// size of the input); PreprocessOptions' counts_layer, raw and scaled_x are ignored (logged).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/row_blocks.hpp"
#include "pp/filter.hpp"
#include "pp/preprocess.hpp"

namespace scurry {

struct StreamOptions {
  // Nonzeros per row block (blocks balanced by nonzeros: RowBlocks::by_nnz). 0: from the device budget
  // (stream_block_nnz).
  int64_t block_nnz = 0;
  // Rows densified at once for scale + Gram + projection. 0: from the device budget.
  int64_t dense_rows = 0;
  // Blocks the reader thread reads ahead (BlockPrefetcher depth).
  int prefetch = 2;
  // Pinned host bytes for the filtered, normalised HVG rows kept between passes 4 and 5. < 0: a quarter
  // of the physical memory; 0: keep none (pass 5 reads the source again).
  int64_t host_store_bytes = -1;
  // Device bytes the streamed blocks may use. 0: what --max-pool-size leaves (or the free memory),
  // times 0.8.
  size_t device_budget = 0;
};

// The blocks of a streamed pass over rows with the given row pointers, and the largest block's nonzeros
// and rows (what the staging and device buffers are sized for).
struct StreamPlan {
  RowBlocks blocks;
  int64_t max_nnz = 0, max_rows = 0;
};
StreamPlan plan_stream_blocks(const std::vector<int64_t>& indptr, int64_t block_nnz);
// Nonzeros per block for a device budget: each nonzero of a block in flight costs three upload slots
// (8 bytes each) plus the in-place filters' scratch and the per-row QC outputs; a quarter of the budget
// is left to the dense chunks and the Gram matrix. At least 2^16.
int64_t stream_block_nnz(size_t device_budget);
// Rows of a dense chunk of g columns for a device budget: a quarter of the budget over the dense chunk
// and its fp16 high/low split (8 bytes an element); between 256 and 65,536 (the Gram chunk).
int64_t stream_dense_rows(size_t device_budget, int64_t g);

// Whether one cell passes filter_cells' thresholds (every criterion given; n_genes = nonzero entries,
// total = its total as float32, what filter_cells_from_stats decides on): the per-block cell mask of
// pass 1. filter_cells_from_stats then decides for all cells and its mask must equal these.
bool cell_passes(const FilterCellsOptions& o, int64_t n_genes, double total);

// Host copies of CSR row blocks (rows with local row pointers from 0) kept until a later pass, up to a
// byte cap: the blocks stored are a prefix of those offered (after the first that does not fit, none
// is stored). Memory from `alloc` (the GPU path: pinned, cudaMallocHost), freed by `release`.
class HostCsrStore {
 public:
  struct Block {
    int64_t rows = 0, nnz = 0;
    int64_t* indptr = nullptr;  // rows + 1
    int32_t* indices = nullptr;
    float* data = nullptr;
  };
  using Alloc = std::function<void*(size_t)>;
  using Free = std::function<void(void*)>;
  HostCsrStore(int64_t cap_bytes, Alloc alloc = {}, Free release = {});
  ~HostCsrStore();
  HostCsrStore(const HostCsrStore&) = delete;
  HostCsrStore& operator=(const HostCsrStore&) = delete;
  // Room for block `b` (b = the number of blocks stored so far) of rows x nnz: the buffers to fill, or
  // null when it does not fit (then every later block is refused too).
  Block* reserve(int64_t b, int64_t rows, int64_t nnz);
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }  // the prefix stored
  const Block& block(int64_t b) const { return blocks_.at(static_cast<size_t>(b)); }
  int64_t bytes() const { return used_; }
  static int64_t block_bytes(int64_t rows, int64_t nnz) { return (rows + 1) * 8 + nnz * 8 + 64; }

 private:
  int64_t cap_, used_ = 0;
  bool full_ = false;
  Alloc alloc_;
  Free free_;
  std::vector<Block> blocks_;
  std::vector<void*> mem_;
};

// The device bytes a streamed run may use by default (StreamOptions::device_budget = 0): what
// --max-pool-size leaves (or the free memory), times 0.8. 0 without CUDA.
size_t stream_device_budget(Context& ctx);
// The pinned host-to-device copy rate in GB/s (CUDA events, the median of `reps` copies of `bytes`): the
// PCIe ceiling of a streamed pass. 0 without CUDA.
double measure_h2d_gbps(Context& ctx, size_t bytes, int reps = 5);

// Runs the chain streamed over `X` (this rank's rows; d holds their obs and all genes' var, X empty).
// Throws InputError on bad input or options (as preprocess_gpu), Error in builds without CUDA.
// Timings: one step a pass (stream_qc, stream_totals, stream_hvg, stream_scale_gram, pca_eigen,
// stream_project) and meta "<step>_read_bytes" (CSR bytes read from the source), "<step>_h2d_bytes",
// "<step>_wait_s" (time the compute stream waited for blocks), "stream_blocks", "gpu_peak_bytes".
void preprocess_stream(Context& ctx, RowSource& X, Dataset& d, const PreprocessOptions& opt, const StreamOptions& so,
                       Timings* timings = nullptr);

// The same over several GPUs of this host (the first is gpus[0]; one: preprocess_stream): the cells
// split into ranges of near-equal nonzeros, one thread per GPU streaming its range of X (reads of the
// shared source take turns), statistics combined over a ThreadComm as in preprocess_gpu_sharded, the
// PCA Gram through the host; rank 0 gathers the cells into d. d holds every cell's obs, X empty.
void preprocess_stream_sharded(const std::vector<Context*>& gpus, RowSource& X, Dataset& d,
                               const PreprocessOptions& opt, const StreamOptions& so, Timings* timings = nullptr);

}  // namespace scurry
