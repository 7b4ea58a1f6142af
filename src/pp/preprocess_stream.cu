// The streamed GPU preprocessing chain (preprocess_stream.hpp): row blocks uploaded through pinned
// staging buffers on a copy stream, double-buffered, while the compute stream runs the in-memory
// chain's kernels on the block before; five passes of map/reduce (ARCHITECTURE.md).
//
// The pipeline of one pass, three stages on three threads:
//   reader (BlockPrefetcher's thread: read + decompress from the file; skipped for a source resident in
//   host memory) -> stager (this file: parallel memcpy into a free slot's pinned buffers, then
//   cudaMemcpyAsync on the copy stream, a `copied` event) -> compute (the calling thread: waits on the
//   event on r.stream, runs the kernels, records `consumed`; the stager's next upload into that slot
//   waits on it on the copy stream). With two slots, the upload of block b + 1 overlaps the compute of
//   block b, and the read of blocks b + 2.. overlaps both.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unistd.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/device_csr.cuh"
#include "pp/chain_steps.hpp"
#include "pp/kernels.cuh"
#include "pp/preprocess_stream.hpp"

namespace scurry {

namespace {

// Upload slots: with three, the stager copies block b + 2 into pinned memory while block b + 1 is in
// flight over PCIe and block b is computed on (with two, measured on an H200 at 1.3M cells: the QC pass
// at 31 GB/s, 57% of the pinned H2D rate, the staging copy serialised with the upload).
constexpr int kSlots = 3;
constexpr size_t kCopyChunk = size_t{8} << 20;  // bytes per thread task of the staging memcpy

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }


void pmemcpy(void* dst, const void* src, size_t len) {
  const int64_t chunks = static_cast<int64_t>((len + kCopyChunk - 1) / kCopyChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t off = static_cast<size_t>(c) * kCopyChunk;
    std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, std::min(kCopyChunk, len - off));
  }
}

template <class T>
DeviceArray<T> to_device(CudaResources& r, const T* h, size_t n, const char* what) {
  DeviceArray<T> d(r, n, what);
  if (n) SCURRY_CUDA(cudaMemcpyAsync(d.data(), h, n * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  return d;
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the error: the caller falls back (host store) or fails (staging)
    return nullptr;
  }
  return p;
}

// One upload slot: pinned staging buffers and the device block they are copied into.
struct Slot {
  int64_t* h_indptr = nullptr;
  int32_t* h_indices = nullptr;
  float* h_data = nullptr;
  DeviceCsr dev;
  cudaEvent_t copied{}, consumed{};
  bool consumed_recorded = false;
};

// The slots and the copy stream, made once and reused by every pass.
class StreamBuffers {
 public:
  StreamBuffers(CudaResources& res, int64_t cap_rows, int64_t cap_nnz) : r(res), rows(cap_rows), nnz(std::max<int64_t>(1, cap_nnz)) {
    SCURRY_CUDA(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    for (Slot& s : slot) {
      const size_t bytes = static_cast<size_t>(rows + 1) * 8 + static_cast<size_t>(nnz) * 8;
      char* p = static_cast<char*>(pinned_alloc(bytes));
      if (!p) fail("streamed preprocessing: cannot pin ", bytes >> 20, " MiB of host memory for the upload buffers");
      s.h_indptr = reinterpret_cast<int64_t*>(p);
      s.h_data = reinterpret_cast<float*>(p + (rows + 1) * 8);
      s.h_indices = reinterpret_cast<int32_t*>(p + (rows + 1) * 8 + nnz * 4);
      s.dev.indptr = DeviceArray<int64_t>(r, rows + 1, "stream block row pointers");
      s.dev.indices = DeviceArray<int32_t>(r, nnz, "stream block column indices");
      s.dev.data = DeviceArray<float>(r, nnz, "stream block values");
      SCURRY_CUDA(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
      SCURRY_CUDA(cudaEventCreateWithFlags(&s.consumed, cudaEventDisableTiming));
    }
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // the device buffers exist before the copy stream uses them
  }
  ~StreamBuffers() {
    cudaStreamSynchronize(copy);
    cudaStreamSynchronize(r.stream);
    for (Slot& s : slot) {
      cudaFreeHost(s.h_indptr);
      cudaEventDestroy(s.copied);
      cudaEventDestroy(s.consumed);
    }
    cudaStreamDestroy(copy);
  }
  StreamBuffers(const StreamBuffers&) = delete;
  StreamBuffers& operator=(const StreamBuffers&) = delete;
  // filter_inplace replaces the row pointers of a block whose rows it drops: give the slot back its
  // full-size array (stream-ordered on r.stream, before `consumed` is recorded).
  void restore(Slot& s) {
    if (s.dev.indptr.size() < static_cast<size_t>(rows + 1))
      s.dev.indptr = DeviceArray<int64_t>(r, rows + 1, "stream block row pointers");
  }
  CudaResources& r;
  int64_t rows, nnz;
  cudaStream_t copy{};
  Slot slot[kSlots];
};

// One block on the host, ready to upload.
struct HostBlock {
  int64_t rows = 0, nnz = 0;
  const int64_t* indptr = nullptr;  // rows + 1 entries; the block's offsets are indptr[i] - base
  int64_t base = 0;
  const int32_t* indices = nullptr;
  const float* data = nullptr;
  bool pinned = false;  // upload straight from these pointers (pinned host store; base 0)
  CsrF owned;           // a block read by the prefetcher, kept alive until it is staged
};
// Hands out the blocks of a pass in order on the stager thread; false after the last.
using Feed = std::function<bool(int64_t& b, HostBlock& hb)>;

struct PassCounters {
  double read_bytes = 0, store_bytes = 0, h2d_bytes = 0, wait_s = 0;
  int64_t blocks = 0;
};

// Uploads the blocks of a feed through the slots, on a stager thread of its own.
class Uploader {
 public:
  Uploader(StreamBuffers& sb, Feed feed, int64_t n_cols, PassCounters& c) : sb_(sb), feed_(std::move(feed)), n_cols_(n_cols), c_(c) {
    for (bool& f : free_) f = true;
    thread_ = std::thread([this] { stage(); });
  }
  ~Uploader() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
    cudaStreamSynchronize(sb_.copy);
  }
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  // The next block, on the device and ordered before what is enqueued on r.stream after this call;
  // false after the last. The block before is released (its slot reused once r.stream is past it).
  bool next(int64_t& b, DeviceCsr*& m) {
    release_current();
    const auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || done_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return false;
    }
    int s = 0;
    std::tie(b, s) = ready_.front();
    ready_.pop_front();
    lock.unlock();
    c_.wait_s += since(t0);
    SCURRY_CUDA(cudaStreamWaitEvent(sb_.r.stream, sb_.slot[s].copied, 0));
    current_ = s;
    m = &sb_.slot[s].dev;
    ++c_.blocks;
    return true;
  }

 private:
  void release_current() {
    if (current_ < 0) return;
    Slot& sl = sb_.slot[current_];
    sb_.restore(sl);
    SCURRY_CUDA(cudaEventRecord(sl.consumed, sb_.r.stream));
    sl.consumed_recorded = true;
    std::lock_guard<std::mutex> lock(mu_);
    free_[current_] = true;
    current_ = -1;
    cv_.notify_all();
  }

  void stage() {
    try {
      SCURRY_CUDA(cudaSetDevice(sb_.r.device));
      int s = 0;
      for (;;) {
        int64_t b = 0;
        HostBlock hb;
        if (!feed_(b, hb)) break;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return stop_ || free_[s]; });
          if (stop_) break;
          free_[s] = false;
        }
        Slot& sl = sb_.slot[s];
        if (hb.rows > sb_.rows || hb.nnz > sb_.nnz)
          fail("internal: stream block ", b, " (", hb.rows, " rows, ", hb.nnz, " nonzeros) exceeds the buffers (", sb_.rows,
               ", ", sb_.nnz, ")");
        if (sl.consumed_recorded) SCURRY_CUDA(cudaStreamWaitEvent(sb_.copy, sl.consumed, 0));
        SCURRY_CUDA(cudaEventSynchronize(sl.copied));  // the staging buffers' last upload is done
        const int64_t* ip = hb.indptr;
        const int32_t* ix = hb.indices;
        const float* dv = hb.data;
        if (!hb.pinned) {
          const int64_t base = hb.base;
          const int64_t* src = hb.indptr;
          int64_t* dst = sl.h_indptr;
#pragma omp parallel for schedule(static) if (hb.rows > (1 << 16))
          for (int64_t i = 0; i <= hb.rows; ++i) dst[i] = src[i] - base;
          pmemcpy(sl.h_indices, hb.indices, static_cast<size_t>(hb.nnz) * 4);
          pmemcpy(sl.h_data, hb.data, static_cast<size_t>(hb.nnz) * 4);
          ip = sl.h_indptr, ix = sl.h_indices, dv = sl.h_data;
        }
        hb.owned = CsrF();  // staged: the prefetched copy is no longer needed
        cudaStream_t cs = sb_.copy;
        SCURRY_CUDA(cudaMemcpyAsync(sl.dev.indptr.data(), ip, static_cast<size_t>(hb.rows + 1) * 8, cudaMemcpyHostToDevice, cs));
        if (hb.nnz) {
          SCURRY_CUDA(cudaMemcpyAsync(sl.dev.indices.data(), ix, static_cast<size_t>(hb.nnz) * 4, cudaMemcpyHostToDevice, cs));
          SCURRY_CUDA(cudaMemcpyAsync(sl.dev.data.data(), dv, static_cast<size_t>(hb.nnz) * 4, cudaMemcpyHostToDevice, cs));
        }
        SCURRY_CUDA(cudaEventRecord(sl.copied, cs));
        sl.dev.n_rows = hb.rows, sl.dev.n_cols = n_cols_, sl.dev.nnz = hb.nnz;
        c_.h2d_bytes += static_cast<double>(hb.rows + 1) * 8 + static_cast<double>(hb.nnz) * 8;
        std::lock_guard<std::mutex> lock(mu_);
        ready_.emplace_back(b, s);
        cv_.notify_all();
        s = (s + 1) % kSlots;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  StreamBuffers& sb_;
  Feed feed_;
  int64_t n_cols_;
  PassCounters& c_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, int>> ready_;
  bool free_[kSlots];
  bool stop_ = false, done_ = false;
  std::exception_ptr error_;
  int current_ = -1;
  std::thread thread_;
};

// The blocks of `blocks` from the source: straight from a resident matrix, or read ahead by a
// BlockPrefetcher (ids offset by `first`: a suffix of the blocks).
Feed source_feed(RowSource& src, const RowBlocks& blocks, int depth, PassCounters& c, int64_t first = 0) {
  if (const CsrF* m = src.resident()) {
    auto next = std::make_shared<int64_t>(0);
    return [m, blocks, next, first, &c](int64_t& b, HostBlock& hb) {
      if (*next >= blocks.n_blocks()) return false;
      const int64_t i = (*next)++;
      const int64_t r0 = blocks.begin(i), r1 = blocks.end(i);
      b = first + i;
      hb.rows = r1 - r0;
      hb.base = m->indptr[r0];
      hb.nnz = m->indptr[r1] - hb.base;
      hb.indptr = m->indptr.data() + r0;
      hb.indices = m->indices.data() + hb.base;
      hb.data = m->data.data() + hb.base;
      c.read_bytes += static_cast<double>(hb.rows + 1) * 8 + static_cast<double>(hb.nnz) * 8;
      return true;
    };
  }
  auto pf = std::make_shared<BlockPrefetcher>(src, blocks, depth);
  return [pf, first, n_cols = src.n_cols(), &c](int64_t& b, HostBlock& hb) {
    int64_t i = 0;
    CsrF rows;
    if (!pf->next(i, rows)) return false;
    if (rows.n_cols != n_cols || static_cast<int64_t>(rows.indptr.size()) != rows.n_rows + 1)
      fail("internal: a row block of the source has the wrong shape");
    b = first + i;
    hb.owned = std::move(rows);
    hb.rows = hb.owned.n_rows;
    hb.nnz = hb.owned.nnz();
    hb.base = hb.owned.indptr[0];
    hb.indptr = hb.owned.indptr.data();
    hb.indices = hb.owned.indices.data();
    hb.data = hb.owned.data.data();
    c.read_bytes += static_cast<double>(hb.rows + 1) * 8 + static_cast<double>(hb.nnz) * 8;
    return true;
  };
}

size_t device_budget(CudaResources& r, const StreamOptions& so) {
  if (so.device_budget) return so.device_budget;
  size_t free_b = 0, total_b = 0;
  SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
  size_t avail = free_b;
  const size_t cap = r.memory->max_bytes();
  if (cap) avail = std::min(avail, cap > r.memory->in_use() ? cap - r.memory->in_use() : size_t{0});
  return static_cast<size_t>(0.8 * static_cast<double>(avail));
}

int64_t default_store_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return int64_t{4} << 30;
  return static_cast<int64_t>(pages) * page / 4;
}

}  // namespace

size_t stream_device_budget(Context& ctx) {
  if (!ctx.cuda()) return 0;
  return device_budget(*ctx.cuda(), StreamOptions{});
}

double measure_h2d_gbps(Context& ctx, size_t bytes, int reps) {
  if (!ctx.cuda() || bytes == 0 || reps < 1) return 0;
  CudaResources& r = *ctx.cuda();
  void* h = pinned_alloc(bytes);
  if (!h) fail("measure_h2d_gbps: cannot pin ", bytes >> 20, " MiB");
  std::memset(h, 1, bytes);
  std::vector<double> rates;
  {
    DeviceArray<char> d(r, bytes, "H2D probe");
    cudaEvent_t e0, e1;
    SCURRY_CUDA(cudaEventCreate(&e0));
    SCURRY_CUDA(cudaEventCreate(&e1));
    for (int i = 0; i <= reps; ++i) {  // the first is a warm-up
      SCURRY_CUDA(cudaEventRecord(e0, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(d.data(), h, bytes, cudaMemcpyHostToDevice, r.stream));
      SCURRY_CUDA(cudaEventRecord(e1, r.stream));
      SCURRY_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      SCURRY_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (i > 0) rates.push_back(static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  cudaFreeHost(h);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

void preprocess_stream(Context& ctx, RowSource& X, Dataset& d, const PreprocessOptions& o, const StreamOptions& so,
                       Timings* timings) {
  if (!ctx.cuda()) throw InputError("--stream needs --device gpu");
  CudaResources& r = *ctx.cuda();
  Comm& comm = ctx.comm();
  Timings local;
  Timings& t = timings ? *timings : local;
  gpu::check_chain_options(o, "--device gpu --stream");
  if (o.scale.max_value && !(*o.scale.max_value > 0)) throw InputError("scale: max_value must be > 0");
  if (so.prefetch < 1) throw InputError("--stream: the prefetch depth must be at least 1");
  const int64_t n_src = X.n_rows(), g0 = X.n_cols();
  if (d.n_obs() != n_src || d.n_vars() != g0)
    throw InputError(detail::concat("--stream: the input's X is ", n_src, " x ", g0, " but obs/var are ", d.n_obs(), " x ",
                                    d.n_vars()));
  if (o.counts_layer || o.raw || o.scaled_x)
    log::info("--stream: layers['counts'], raw and the scaled X are not kept (each is a matrix the size of the input)");
  r.memory->reset_peak();

  // Blocks balanced by nonzeros, sized from the device budget.
  const size_t budget = device_budget(r, so);
  const std::vector<int64_t> indptr = X.row_pointers();
  if (static_cast<int64_t>(indptr.size()) != n_src + 1 || indptr.front() != 0)
    throw InputError("--stream: the input's row pointers are malformed (" + std::to_string(indptr.size()) + " for " +
                     std::to_string(n_src) + " rows)");
  const int64_t block_nnz = so.block_nnz > 0 ? so.block_nnz : stream_block_nnz(budget);
  const StreamPlan plan = plan_stream_blocks(indptr, block_nnz);
  const RowBlocks& blocks = plan.blocks;
  const int64_t nb = blocks.n_blocks();
  const int64_t nnz_all = sum_ranks(comm, indptr.back());
  t.set_meta("nnz_input", std::to_string(nnz_all));
  t.set_meta("stream_blocks", std::to_string(sum_ranks(comm, nb)));
  t.set_meta("stream_block_nnz", std::to_string(block_nnz));
  if (comm.rank() == 0)
    log::info(detail::concat("--stream: ", nb, " row blocks of about ", block_nnz, " nonzeros (largest ", plan.max_nnz,
                             " nonzeros, ", plan.max_rows, " rows); device budget ", budget >> 20, " MiB"));
  StreamBuffers sb(r, std::max<int64_t>(1, plan.max_rows), plan.max_nnz);
  DeviceArray<uint8_t> d_keep(r, static_cast<size_t>(std::max<int64_t>(1, plan.max_rows)), "stream cell mask");

  // One pass: the blocks of make_feed(counters) through fn(b, m) on the compute stream; counters into
  // the meta.
  using MakeFeed = std::function<Feed(PassCounters&)>;
  auto pass = [&](const std::string& name, const MakeFeed& make_feed, const std::function<void(int64_t, DeviceCsr&)>& fn) {
    auto scope = t.scope(name);
    PassCounters c;
    {
      Uploader up(sb, make_feed(c), g0, c);
      int64_t b = 0;
      DeviceCsr* m = nullptr;
      while (up.next(b, m)) fn(b, *m);
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    }
    t.set_meta(name + "_read_bytes", std::to_string(static_cast<int64_t>(c.read_bytes)));
    t.set_meta(name + "_h2d_bytes", std::to_string(static_cast<int64_t>(c.h2d_bytes)));
    t.set_meta(name + "_wait_s", std::to_string(c.wait_s));
    if (c.store_bytes > 0) t.set_meta(name + "_store_bytes", std::to_string(static_cast<int64_t>(c.store_bytes)));
    scope.set_extra(detail::concat(c.blocks, " blocks, ", static_cast<int64_t>(c.h2d_bytes) >> 20, " MiB up"));
    return c;
  };
  const MakeFeed src_feed = [&](PassCounters& c) { return source_feed(X, blocks, so.prefetch, c); };

  // ---- pass 1: QC, the cell mask, per-gene sums over all cells and over the kept cells ----------------
  const gpu::QcSetup qs = gpu::qc_setup(d, o, g0);
  DeviceArray<uint8_t> d_bits = to_device(r, qs.bits.data(), qs.bits.size(), "QC gene sets");
  gpu::RowQc rq;  // every cell of this rank, in order
  rq.total.resize(n_src), rq.n_genes.resize(n_src);
  rq.set_total.assign(qs.n_sets, std::vector<double>(n_src));
  rq.top_sum.assign(qs.top.size(), std::vector<double>(n_src));
  gpu::GeneSums gs_all, gs_kept;
  gs_all.sum.assign(g0, 0.0), gs_all.nnz.assign(g0, 0.0);
  gs_kept.sum.assign(g0, 0.0), gs_kept.nnz.assign(g0, 0.0);
  std::vector<uint8_t> keep_mine(static_cast<size_t>(n_src), 1);
  auto add_into = [](std::vector<double>& acc, const std::vector<double>& v) {
    for (size_t j = 0; j < acc.size(); ++j) acc[j] += v[j];
  };
  pass("stream_qc", src_feed, [&](int64_t b, DeviceCsr& m) {
    const int64_t r0 = blocks.begin(b), rows = m.n_rows;
    gpu::RowQc q = gpu::row_qc(r, m, qs.n_sets ? d_bits.data() : nullptr, qs.n_sets, qs.top);
    std::copy(q.total.begin(), q.total.end(), rq.total.begin() + r0);
    std::copy(q.n_genes.begin(), q.n_genes.end(), rq.n_genes.begin() + r0);
    for (int s = 0; s < qs.n_sets; ++s) std::copy(q.set_total[s].begin(), q.set_total[s].end(), rq.set_total[s].begin() + r0);
    for (size_t k = 0; k < qs.top.size(); ++k) std::copy(q.top_sum[k].begin(), q.top_sum[k].end(), rq.top_sum[k].begin() + r0);
    gpu::GeneSums a = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
    add_into(gs_all.sum, a.sum), add_into(gs_all.nnz, a.nnz);
    int64_t removed = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const bool k = cell_passes(o.filter_cells, static_cast<int64_t>(q.n_genes[i]), static_cast<double>(static_cast<float>(q.total[i])));
      keep_mine[r0 + i] = k ? 1 : 0;
      removed += k ? 0 : 1;
    }
    if (removed == 0) {
      add_into(gs_kept.sum, a.sum), add_into(gs_kept.nnz, a.nnz);
    } else if (removed < rows) {
      SCURRY_CUDA(cudaMemcpyAsync(d_keep.data(), keep_mine.data() + r0, rows, cudaMemcpyHostToDevice, r.stream));
      filter_inplace(r, m, d_keep.data(), nullptr, m.n_cols);
      gpu::GeneSums k = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
      add_into(gs_kept.sum, k.sum), add_into(gs_kept.nnz, k.nnz);
    }
  });

  const int64_t n_cells = sum_ranks(comm, n_src);
  FilterCellsResult fcr;
  FilterGenesResult fgr;
  {
    auto scope = t.scope("stream_filters");
    sum_ranks(comm, gs_all.sum), sum_ranks(comm, gs_all.nnz);
    sum_ranks(comm, gs_kept.sum), sum_ranks(comm, gs_kept.nnz);
    chain::CellStats cs = chain::cell_stats(rq.n_genes, rq.total);
    gpu::write_qc_columns(d, qs, std::move(rq), gs_all, n_cells);
    fcr = filter_cells_from_stats(std::move(cs.n_genes), std::move(cs.total_f32), o.filter_cells, &comm);
    if (fcr.keep != keep_mine) fail("internal: the streamed cell mask differs from filter_cells'");
    chain::check_every_rank_keeps(comm, static_cast<int64_t>(fcr.kept.size()));
    apply_filter_cells(d, fcr, true);
    std::vector<int64_t> cells(gs_kept.nnz.begin(), gs_kept.nnz.end());
    fgr = filter_genes_from_stats(std::move(cells), gs_kept.sum, o.filter_genes);
    apply_filter_genes(d, fgr, true);
  }
  const int64_t n_kept = static_cast<int64_t>(fcr.kept.size());  // this rank's
  const int64_t n1 = sum_ranks(comm, n_kept);
  const int64_t g1 = static_cast<int64_t>(fgr.kept.size());
  if (n1 < 2) throw InputError("scale: needs at least 2 cells");
  // Kept cells before each block; the gene map of the filter.
  std::vector<int64_t> kept_before(static_cast<size_t>(nb) + 1, 0);
  for (int64_t b = 0; b < nb; ++b) {
    int64_t k = 0;
    for (int64_t i = blocks.begin(b); i < blocks.end(b); ++i) k += fcr.keep[i];
    kept_before[b + 1] = kept_before[b] + k;
  }
  std::vector<int32_t> gene_map(static_cast<size_t>(g0), -1);
  for (size_t u = 0; u < fgr.kept.size(); ++u) gene_map[fgr.kept[u]] = static_cast<int32_t>(u);
  DeviceArray<int32_t> d_gene_map = to_device(r, gene_map.data(), gene_map.size(), "gene filter");
  const bool genes_identity = g1 == g0;
  // The filters on one block: its removed cells and genes dropped, in place.
  auto filter_block = [&](int64_t b, DeviceCsr& m) {
    const int64_t r0 = blocks.begin(b), rows = m.n_rows;
    const bool all_rows = kept_before[b + 1] - kept_before[b] == rows;
    if (all_rows && genes_identity) return;
    if (!all_rows)
      SCURRY_CUDA(cudaMemcpyAsync(d_keep.data(), fcr.keep.data() + r0, rows, cudaMemcpyHostToDevice, r.stream));
    filter_inplace(r, m, all_rows ? nullptr : d_keep.data(), genes_identity ? nullptr : d_gene_map.data(), g1);
  };

  // ---- pass 2 (no target_sum): the totals after the filters; their median is the target ---------------
  const double target = chain::normalize_target(comm, o.normalize.target_sum, [&] {
    std::vector<double> totals(static_cast<size_t>(n_kept));
    DeviceArray<double> dt(r, static_cast<size_t>(std::max<int64_t>(1, plan.max_rows)), "row totals");
    pass("stream_totals", src_feed, [&](int64_t b, DeviceCsr& m) {
      filter_block(b, m);
      if (m.n_rows == 0) return;
      gpu::row_totals(r, m, dt.data());
      SCURRY_CUDA(cudaMemcpyAsync(totals.data() + kept_before[b], dt.data(), m.n_rows * 8, cudaMemcpyDeviceToHost, r.stream));
    });
    return totals;
  });

  // ---- pass 3: normalize_total + log1p, per-gene moments: the HVG choice and the scale statistics --------
  const bool seurat = o.hvg.flavor == "seurat";
  gpu::GeneSums hv, sc;  // HVG moments (expm1 for seurat), scale moments (of the log data)
  hv.sum.assign(g1, 0.0), hv.sumsq.assign(g1, 0.0);
  sc.sum.assign(g1, 0.0), sc.sumsq.assign(g1, 0.0);
  std::vector<double> key_totals(o.normalize.key_added.empty() ? 0 : static_cast<size_t>(n_kept));
  int64_t nnz_filtered = 0;
  pass("stream_hvg", src_feed, [&](int64_t b, DeviceCsr& m) {
    filter_block(b, m);
    nnz_filtered += m.nnz;
    if (m.n_rows == 0) return;
    std::vector<double> tot;
    gpu::normalize_log1p(r, m, target, true, key_totals.empty() ? nullptr : &tot);
    if (!key_totals.empty()) std::copy(tot.begin(), tot.end(), key_totals.begin() + kept_before[b]);
    gpu::GeneSums a = gpu::gene_sums(r, m, seurat ? gpu::GeneTransform::expm1 : gpu::GeneTransform::identity, nullptr,
                                     gpu::SecondStat::squares);
    add_into(hv.sum, a.sum), add_into(hv.sumsq, a.sumsq);
    if (seurat) a = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::squares);
    add_into(sc.sum, a.sum), add_into(sc.sumsq, a.sumsq);
  });
  t.set_meta("nnz_filtered", std::to_string(sum_ranks(comm, nnz_filtered)));
  std::vector<int64_t> hvg_genes;  // filtered-gene indices of the HVGs
  std::vector<double> mean, sd;
  {
    auto scope = t.scope("stream_hvg_choice");
    sum_ranks(comm, hv.sum), sum_ranks(comm, hv.sumsq), sum_ranks(comm, sc.sum), sum_ranks(comm, sc.sumsq);
    if (!key_totals.empty()) chain::write_totals(d, o.normalize.key_added, key_totals);
    d.uns["log1p"] = Value(Dict{});
    hvg_genes = chain::choose_hvg(d, o.hvg, hv.sum, hv.sumsq, n1);
    d.subset_vars(hvg_genes);
    // scale's statistics of the HVGs: the pass-3 moments of the log data, restricted to them. Without
    // zero_center, the CPU path's sparse variance (scale.cpp) is the same quantity (its two-pass form).
    chain::ScaleStats st = chain::scale_stats(d, sc.sum, sc.sumsq, n1, hvg_genes);
    mean = std::move(st.mean), sd = std::move(st.sd);
  }
  const int64_t g = static_cast<int64_t>(hvg_genes.size());
  std::vector<int32_t> hvg_map(static_cast<size_t>(g1), -1);
  for (size_t u = 0; u < hvg_genes.size(); ++u) hvg_map[hvg_genes[u]] = static_cast<int32_t>(u);
  DeviceArray<int32_t> d_hvg_map = to_device(r, hvg_map.data(), hvg_map.size(), "HVG subset");
  std::vector<float> mf(mean.begin(), mean.end()), sf(sd.begin(), sd.end());
  DeviceArray<float> d_mean = to_device(r, mf.data(), mf.size(), "scale means"), d_sd = to_device(r, sf.data(), sf.size(), "scale std");
  const bool scale_zc = o.scale.zero_center;  // scale: centre each gene before dividing
  const bool zc = o.pca.zero_center;          // PCA: centre (folded into the Gram matrix) or not
  const float maxv = o.scale.max_value ? static_cast<float>(*o.scale.max_value) : 0.f;
  const int64_t k = o.pca.n_comps ? *o.pca.n_comps : std::min<int64_t>(50, std::min(n1, g) - 1);
  if (k < 1 || k >= std::min(n1, g))
    throw InputError(detail::concat("pca: n_comps must be in [1, min(n_cells, n_genes) - 1] = [1, ", std::min(n1, g) - 1,
                                    "], got ", k));
  // Sparse scale, centred PCA: the dense chunks shifted by mean / std (kernels.cuh, subtract_columns).
  const bool pca_shift = zc && !scale_zc;
  DeviceArray<float> d_pca_shift;
  if (pca_shift) {
    std::vector<float> sh(static_cast<size_t>(g));
    for (int64_t j = 0; j < g; ++j) sh[j] = static_cast<float>(mean[j] / sd[j]);
    d_pca_shift = to_device(r, sh.data(), sh.size(), "PCA chunk shift");
  }
  const int64_t dense_rows = so.dense_rows > 0 ? so.dense_rows : stream_dense_rows(budget, g);
  DeviceArray<float> dense(r, static_cast<size_t>(dense_rows) * g, "dense scaled rows");
  // The filtered, normalised HVG rows of a source block: filters, normalize + log1p, HVG subset.
  auto hvg_block = [&](int64_t b, DeviceCsr& m) {
    filter_block(b, m);
    if (m.n_rows == 0) return;
    gpu::normalize_log1p(r, m, target, true, nullptr);
    filter_inplace(r, m, nullptr, d_hvg_map.data(), g);
  };
  // fn(a, rows) on each dense chunk of the block's scaled rows (in `dense`).
  auto for_dense = [&](DeviceCsr& m, const std::function<void(int64_t, int64_t)>& fn) {
    for (int64_t a = 0; a < m.n_rows; a += dense_rows) {
      const int64_t rows = std::min(dense_rows, m.n_rows - a);
      gpu::CsrView<float, int32_t> v = gpu::view(m);
      v.n_rows = rows;
      v.indptr += a;
      gpu::scale_to_dense(r, v, d_mean.data(), d_sd.data(), scale_zc, maxv, dense.data());
      if (pca_shift) gpu::subtract_columns(r, dense.data(), rows, g, d_pca_shift.data());
      fn(a, rows);
    }
  };

  // ---- pass 4: the HVG rows scaled chunk by chunk, their Gram matrix; the rows kept on the host -----------
  const int64_t store_cap = so.host_store_bytes < 0 ? default_store_bytes() : so.host_store_bytes;
  HostCsrStore store(store_cap, pinned_alloc, [](void* p) { cudaFreeHost(p); });
  int64_t nnz_hvg = 0;
  gpu::GramEigen eig;
  {
    gpu::GramAccumulator gram(r, g, dense_rows);
    pass("stream_scale_gram", src_feed, [&](int64_t b, DeviceCsr& m) {
      hvg_block(b, m);
      nnz_hvg += m.nnz;
      if (HostCsrStore::Block* blk = store.reserve(b, m.n_rows, m.nnz)) {
        SCURRY_CUDA(cudaMemcpyAsync(blk->indptr, m.indptr.data(), (m.n_rows + 1) * 8, cudaMemcpyDeviceToHost, r.stream));
        if (m.nnz) {
          SCURRY_CUDA(cudaMemcpyAsync(blk->indices, m.indices.data(), m.nnz * 4, cudaMemcpyDeviceToHost, r.stream));
          SCURRY_CUDA(cudaMemcpyAsync(blk->data, m.data.data(), m.nnz * 4, cudaMemcpyDeviceToHost, r.stream));
        }
      }
      for_dense(m, [&](int64_t, int64_t rows) { gram.add(dense.data(), rows); });
    });
    t.set_meta("nnz_hvg", std::to_string(sum_ranks(comm, nnz_hvg)));
    t.set_meta("stream_store_blocks", std::to_string(store.n_blocks()));
    t.set_meta("stream_store_bytes", std::to_string(store.bytes()));
    auto scope = t.scope("pca_eigen");
    gpu::PcaRanks ranks;
    ranks.comm = &comm;
    eig = gram.finish(n1, static_cast<int>(k), zc, &ranks);
  }
  // Components, centre, variances and the projection's shift (pca.cu's pca_solution, as pca_rows).
  const gpu::PcaSolution sol = gpu::pca_solution(eig, g, static_cast<int>(k), n1, zc);
  DeviceArray<float> d_V = to_device(r, sol.Vf.data(), sol.Vf.size(), "PCA components");
  DeviceArray<float> d_shift = to_device(r, sol.shift.data(), sol.shift.size(), "PCA shift");

  // ---- pass 5: the projection, block by block (stored blocks from the host store, the rest read again) ---
  DenseF xp(n_kept, k);
  {
    DeviceArray<float> d_x(r, static_cast<size_t>(dense_rows) * k, "X_pca rows");
    const int64_t stored = store.n_blocks();
    // The stored blocks from the pinned store (uploaded from it directly), then the rest from the source.
    const MakeFeed both = [&, stored](PassCounters& c) -> Feed {
      Feed rest;
      if (stored < nb) {
        RowBlocks suffix;  // blocks [stored, nb): bounds need not start at row 0
        suffix.bounds.assign(blocks.bounds.begin() + stored, blocks.bounds.end());
        rest = source_feed(X, suffix, so.prefetch, c, stored);
      }
      return [&store, &c, stored, rest, next = int64_t{0}](int64_t& b, HostBlock& hb) mutable {
        if (next >= stored) return rest ? rest(b, hb) : false;
        const HostCsrStore::Block& s = store.block(next);
        b = next++;
        hb.rows = s.rows, hb.nnz = s.nnz, hb.indptr = s.indptr, hb.indices = s.indices, hb.data = s.data, hb.pinned = true;
        c.store_bytes += static_cast<double>(s.rows + 1) * 8 + static_cast<double>(s.nnz) * 8;
        return true;
      };
    };
    if (stored < nb && comm.rank() == 0)
      log::info(detail::concat("--stream: ", nb - stored, " of ", nb, " blocks did not fit the host store (",
                               store_cap >> 20, " MiB); the projection reads them again"));
    pass("stream_project", both, [&](int64_t b, DeviceCsr& m) {
      if (b >= stored) hvg_block(b, m);
      else m.n_cols = g;  // the stored rows hold the HVG columns
      const int64_t row0 = kept_before[b];
      for_dense(m, [&](int64_t a, int64_t rows) {
        gpu::pca_project(r, dense.data(), rows, g, static_cast<int>(k), d_V.data(), d_shift.data(), d_x.data());
        copy_to_host(r, xp.data.data() + (row0 + a) * k, d_x.data(), static_cast<size_t>(rows) * k * 4);
      });
    });
  }

  // ---- the signs (sklearn's svd_flip, u-based: the largest-|.| entry of each column positive, the first
  // row among ties, over every rank's rows in order) and the results -------------------------------------
  {
    auto scope = t.scope("pca_finish");
    Comm* cm = comm.size() > 1 ? &comm : nullptr;
    const std::vector<float> sign =
        gpu::pca_signs(gpu::host_column_max_abs(xp.data.data(), n_kept, static_cast<int>(k)), n_kept, cm);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n_kept; ++i)
      for (int64_t j = 0; j < k; ++j) xp.data[i * k + j] *= sign[j];
    PcaResult res;
    res.components = DenseD(g, k);
    res.components.data = gpu::signed_components(eig.V, sign, g, static_cast<int>(k));
    res.variance = zc ? sol.variance : gpu::xpca_column_variance(xp.data.data(), n_kept, static_cast<int>(k), n1, cm);
    res.total_variance = sol.total_variance;
    for (double v : res.variance) res.variance_ratio.push_back(v / sol.total_variance);
    res.solver = "gram (cuSOLVER, streamed)";
    res.use_highly_variable = d.var.has("highly_variable");
    res.genes.resize(g);
    for (int64_t j = 0; j < g; ++j) res.genes[j] = j;
    write_pca(d, res, o.pca);
    d.obsm["X_pca"] = Matrix(std::move(xp), DType::f32);
  }
  size_t peak = r.memory->peak();
  if (comm.size() > 1)
    for (int64_t p : allgather_count(comm, static_cast<int64_t>(peak))) peak = std::max(peak, static_cast<size_t>(p));
  t.set_meta("gpu_peak_bytes", std::to_string(peak));
}

}  // namespace scurry
