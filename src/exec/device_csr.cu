#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "exec/device_csr.cuh"

namespace scurry {

namespace {

constexpr size_t kStageBytes = size_t(256) << 20;  // pinned staging buffer (two of them)
constexpr size_t kDirectBytes = size_t(4) << 20;   // smaller copies go straight (pageable cudaMemcpy)

// Two pinned staging buffers and an event each, made once per device on first use and kept for the
// process (pinning 512 MiB costs ~0.1 s: too much to pay on every copy). Copies through them are
// serialised per device.
struct Staging {
  char* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  Staging() {
    for (int i = 0; i < 2; ++i) {
      SCURRY_CUDA(cudaMallocHost(reinterpret_cast<void**>(&buf[i]), kStageBytes));
      SCURRY_CUDA(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }
  }
  ~Staging() {
    for (int i = 0; i < 2; ++i) {
      if (buf[i]) cudaFreeHost(buf[i]);
      if (done[i]) cudaEventDestroy(done[i]);
    }
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  std::mutex busy;
};

// set 0: the synchronous copies; set 1: copy_to_host_background's (so that a background copy never
// holds up the synchronous ones of the steps running meanwhile).
Staging& staging_for(int device, int set = 0) {
  static std::mutex m;
  static std::map<std::pair<int, int>, std::unique_ptr<Staging>>* all =
      new std::map<std::pair<int, int>, std::unique_ptr<Staging>>();  // never freed
  std::lock_guard<std::mutex> lock(m);
  auto& s = (*all)[{device, set}];
  if (!s) s = std::make_unique<Staging>();
  return *s;
}

// Copies [0, len) of src to dst on all CPU threads (pinned staging buffers are filled and drained
// faster than one thread's memcpy).
void parallel_memcpy(char* dst, const char* src, size_t len) {
  constexpr int64_t kPieces = 64;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < kPieces; ++p) {
    const size_t a = len * p / kPieces, b = len * (p + 1) / kPieces;
    std::memcpy(dst + a, src + a, b - a);
  }
}

// Copies below kDirectBytes go straight (pageable cudaMemcpy, synchronous); returns whether it did.
bool copied_directly(CudaResources& r, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes >= kDirectBytes) return false;
  SCURRY_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  return true;
}

}  // namespace

// Host (pageable) to device through two pinned staging buffers: the copy into one buffer (spread over
// the CPU threads) overlaps the DMA of the other. Pageable cudaMemcpy runs at ~7 GB/s on the H200
// machine; pinned DMA at ~50 GB/s.
void copy_to_device(CudaResources& r, void* dst, const void* src, size_t bytes) {
  if (copied_directly(r, dst, src, bytes, cudaMemcpyHostToDevice)) return;
  Staging& st = staging_for(r.device);
  std::lock_guard<std::mutex> lock(st.busy);
  char** stage = st.buf;
  cudaEvent_t* done = st.done;
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  for (size_t off = 0, i = 0; off < bytes; off += kStageBytes, ++i) {
    const size_t len = std::min(kStageBytes, bytes - off);
    char* buf = stage[i % 2];
    if (i >= 2) SCURRY_CUDA(cudaEventSynchronize(done[i % 2]));  // its previous DMA has finished
    parallel_memcpy(buf, in + off, len);
    SCURRY_CUDA(cudaMemcpyAsync(out + off, buf, len, cudaMemcpyHostToDevice, r.stream));
    SCURRY_CUDA(cudaEventRecord(done[i % 2], r.stream));
  }
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
}


void copy_to_host(CudaResources& r, void* dst, const void* src, size_t bytes) {
  if (copied_directly(r, dst, src, bytes, cudaMemcpyDeviceToHost)) return;
  Staging& st = staging_for(r.device);
  std::lock_guard<std::mutex> lock(st.busy);
  char** stage = st.buf;
  cudaEvent_t* done = st.done;
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  const size_t n_chunks = (bytes + kStageBytes - 1) / kStageBytes;
  auto issue = [&](size_t i) {
    const size_t off = i * kStageBytes, len = std::min(kStageBytes, bytes - off);
    SCURRY_CUDA(cudaMemcpyAsync(stage[i % 2], in + off, len, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaEventRecord(done[i % 2], r.stream));
  };
  issue(0);
  for (size_t i = 0; i < n_chunks; ++i) {
    SCURRY_CUDA(cudaEventSynchronize(done[i % 2]));
    if (i + 1 < n_chunks) issue(i + 1);  // the next DMA overlaps this chunk's copy out
    const size_t off = i * kStageBytes, len = std::min(kStageBytes, bytes - off);
    const char* buf = stage[i % 2];
    parallel_memcpy(out + off, buf, len);
  }
}

std::function<void(void*, const CopyProgress&)> deferred_copy_to_host(CudaResources& r, const void* src, size_t bytes,
                                                                      std::shared_ptr<void> keep) {
  cudaEvent_t ev = nullptr;  // src is complete once r.stream's work so far has run
  SCURRY_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::shared_ptr<CUevent_st> ready(ev, [](cudaEvent_t e) { cudaEventDestroy(e); });
  SCURRY_CUDA(cudaEventRecord(ev, r.stream));
  const int device = r.device;
  return [=](void* dst, const CopyProgress& progress) mutable {
    SCURRY_CUDA(cudaSetDevice(device));
    cudaStream_t raw = nullptr;
    SCURRY_CUDA(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking));
    std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> stream(raw, [](cudaStream_t s) { cudaStreamDestroy(s); });
    SCURRY_CUDA(cudaStreamWaitEvent(raw, ready.get(), 0));
    Staging& st = staging_for(device, 1);
    std::lock_guard<std::mutex> lock(st.busy);
    const char* in = static_cast<const char*>(src);
    char* out = static_cast<char*>(dst);
    const size_t n_chunks = (bytes + kStageBytes - 1) / kStageBytes;
    auto issue = [&](size_t i) {
      const size_t off = i * kStageBytes, len = std::min(kStageBytes, bytes - off);
      SCURRY_CUDA(cudaMemcpyAsync(st.buf[i % 2], in + off, len, cudaMemcpyDeviceToHost, raw));
      SCURRY_CUDA(cudaEventRecord(st.done[i % 2], raw));
    };
    if (n_chunks) issue(0);
    for (size_t i = 0; i < n_chunks; ++i) {
      SCURRY_CUDA(cudaEventSynchronize(st.done[i % 2]));
      if (i + 1 < n_chunks) issue(i + 1);
      const size_t off = i * kStageBytes, len = std::min(kStageBytes, bytes - off);
      // a few threads only: the steps running meanwhile have the others
      constexpr int64_t kPieces = 16;
#pragma omp parallel for schedule(static) num_threads(4)
      for (int64_t p = 0; p < kPieces; ++p) {
        const size_t a = len * p / kPieces, b = len * (p + 1) / kPieces;
        std::memcpy(out + off + a, st.buf[i % 2] + a, b - a);
      }
      if (progress) progress(off + len);
    }
    SCURRY_CUDA(cudaStreamSynchronize(raw));
    keep.reset();  // the source's device memory, freed once the copy has read it
  };
}

DeviceCsr copy_on_device(CudaResources& r, const DeviceCsr& src) {
  DeviceCsr m;
  m.n_rows = src.n_rows, m.n_cols = src.n_cols, m.nnz = src.nnz;
  m.indptr = DeviceArray<int64_t>(r, static_cast<size_t>(src.n_rows) + 1, "count matrix (row pointers)");
  m.indices = DeviceArray<int32_t>(r, static_cast<size_t>(std::max<int64_t>(src.nnz, 1)), "count matrix (indices)");
  m.data = DeviceArray<float>(r, static_cast<size_t>(std::max<int64_t>(src.nnz, 1)), "count matrix (values)");
  SCURRY_CUDA(cudaMemcpyAsync(m.indptr.data(), src.indptr.data(), (static_cast<size_t>(src.n_rows) + 1) * 8,
                              cudaMemcpyDeviceToDevice, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(m.indices.data(), src.indices.data(), static_cast<size_t>(src.nnz) * 4,
                              cudaMemcpyDeviceToDevice, r.stream));
  SCURRY_CUDA(cudaMemcpyAsync(m.data.data(), src.data.data(), static_cast<size_t>(src.nnz) * 4,
                              cudaMemcpyDeviceToDevice, r.stream));
  return m;
}

DeviceCsr upload(CudaResources& r, const CsrF& m) {
  DeviceCsr d;
  d.n_rows = m.n_rows, d.n_cols = m.n_cols, d.nnz = m.nnz();
  d.indptr = DeviceArray<int64_t>(r, m.indptr.size(), "CSR row pointers");
  d.indices = DeviceArray<int32_t>(r, m.indices.size(), "CSR column indices");
  d.data = DeviceArray<float>(r, m.data.size(), "CSR values");
  copy_to_device(r, d.indptr.data(), m.indptr.data(), m.indptr.size() * 8);
  copy_to_device(r, d.indices.data(), m.indices.data(), m.indices.size() * 4);
  copy_to_device(r, d.data.data(), m.data.data(), m.data.size() * 4);
  return d;
}

CsrF download(CudaResources& r, const DeviceCsr& d) {
  CsrF m;
  m.n_rows = d.n_rows, m.n_cols = d.n_cols;
  m.indptr.resize(static_cast<size_t>(d.n_rows) + 1);
  m.indices.resize(static_cast<size_t>(d.nnz));
  m.data.resize(static_cast<size_t>(d.nnz));
  copy_to_host(r, m.indptr.data(), d.indptr.data(), m.indptr.size() * 8);
  copy_to_host(r, m.indices.data(), d.indices.data(), m.indices.size() * 4);
  copy_to_host(r, m.data.data(), d.data.data(), m.data.size() * 4);
  return m;
}

namespace {

constexpr int64_t kFilterScratchEntries = int64_t(1) << 26;  // 64M entries (512 MB) per chunk

// Per row: the number of entries kept (0 for dropped rows). One warp per row.
__global__ void count_kept(const int64_t* indptr, const int32_t* idx, int64_t n_rows, const uint8_t* keep_rows,
                           const int32_t* col_map, int64_t* counts) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n_rows) return;
  int64_t c = 0;
  if (!keep_rows || keep_rows[row]) {
    const int64_t s = indptr[row], e = indptr[row + 1];
    if (!col_map) c = lane == 0 ? e - s : 0;  // summed over the warp below
    else
      for (int64_t p = s + lane; p < e; p += 32) c += col_map[idx[p]] >= 0;
  }
  for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
  if (lane == 0) counts[row] = c;
}

// Copies the kept entries of rows [r0, r1) into scratch at new_off[row] - base, in order. One warp per row.
__global__ void gather_kept(const int64_t* indptr, const int32_t* idx, const float* val, int64_t r0, int64_t r1,
                            const uint8_t* keep_rows, const int32_t* col_map, const int64_t* new_off, int64_t base,
                            int32_t* out_idx, float* out_val) {
  const int64_t row = r0 + (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= r1) return;
  if (keep_rows && !keep_rows[row]) return;
  const int64_t s = indptr[row], e = indptr[row + 1];
  int64_t dst = new_off[row] - base;
  for (int64_t p0 = s; p0 < e; p0 += 32) {
    const int64_t p = p0 + lane;
    int32_t j = -1;
    float v = 0.f;
    if (p < e) {
      j = col_map ? col_map[idx[p]] : idx[p];
      v = val[p];
    }
    const unsigned keep = __ballot_sync(0xffffffffu, j >= 0);
    if (j >= 0) {
      const int64_t q = dst + __popc(keep & ((1u << lane) - 1u));
      out_idx[q] = j;
      out_val[q] = v;
    }
    dst += __popc(keep);
  }
}

// new_indptr[new_row + 1] = new_off[row + 1] for kept rows, where new_row = row_rank[row].
__global__ void compact_indptr(const int64_t* new_off, const int64_t* row_rank, const uint8_t* keep_rows,
                               int64_t n_rows, int64_t* new_indptr) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= n_rows) return;
  if (row == 0) new_indptr[0] = 0;
  if (!keep_rows || keep_rows[row]) new_indptr[row_rank[row] + 1] = new_off[row + 1];
}

__global__ void bytes_to_i64(const uint8_t* in, int64_t n, int64_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in ? in[i] != 0 : 1;
}

int blocks_for(int64_t threads, int per_block) { return static_cast<int>((threads + per_block - 1) / per_block); }

void exclusive_scan(CudaResources& r, const int64_t* in, int64_t* out, int64_t n) {
  size_t tmp = 0;
  SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, tmp, in, out, n, r.stream));
  DeviceArray<uint8_t> scratch(r, tmp, "scan scratch");
  SCURRY_CUDA(cub::DeviceScan::ExclusiveSum(scratch.data(), tmp, in, out, n, r.stream));
}

}  // namespace

void filter_inplace(CudaResources& r, DeviceCsr& m, const uint8_t* keep_rows, const int32_t* col_map, int64_t new_cols) {
  const int64_t n = m.n_rows;
  // new_off[row] = offset of the row's kept entries in the compacted arrays (n + 1 entries).
  DeviceArray<int64_t> counts(r, n + 1, "filter counts"), new_off(r, n + 1, "filter offsets");
  SCURRY_CUDA(cudaMemsetAsync(counts.data() + n, 0, 8, r.stream));
  count_kept<<<blocks_for(n * 32, kWarpRowsBlock), kWarpRowsBlock, 0, r.stream>>>(
      m.indptr.data(), m.indices.data(), n, keep_rows, col_map, counts.data());
  SCURRY_CUDA_LAUNCH();
  exclusive_scan(r, counts.data(), new_off.data(), n + 1);

  // Chunks of rows whose old entries fit the scratch buffer; processed in order, each chunk's
  // destination lies below the sources of every later chunk, so in-place compaction is safe.
  std::vector<int64_t> h_indptr(static_cast<size_t>(n) + 1);
  SCURRY_CUDA(cudaMemcpyAsync(h_indptr.data(), m.indptr.data(), h_indptr.size() * 8, cudaMemcpyDeviceToHost, r.stream));
  int64_t h_new_nnz = 0;
  SCURRY_CUDA(cudaMemcpyAsync(&h_new_nnz, new_off.data() + n, 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  const int64_t scratch_n = std::max<int64_t>(1, std::min<int64_t>(kFilterScratchEntries, m.nnz));
  DeviceArray<int32_t> s_idx(r, scratch_n, "filter scratch indices");
  DeviceArray<float> s_val(r, scratch_n, "filter scratch values");
  std::vector<int64_t> h_off(static_cast<size_t>(n) + 1);
  SCURRY_CUDA(cudaMemcpyAsync(h_off.data(), new_off.data(), h_off.size() * 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  int64_t r0 = 0;
  while (r0 < n) {
    int64_t r1 = r0 + 1;
    // Grow the chunk while its old entries fit the scratch buffer.
    while (r1 < n && h_indptr[r1 + 1] - h_indptr[r0] <= scratch_n) ++r1;
    const int64_t base = h_off[r0], len = h_off[r1] - base;
    if (h_indptr[r1] - h_indptr[r0] > scratch_n || len < 0 || len > h_indptr[r1] - h_indptr[r0])
      fail("internal: filter chunk [", r0, ", ", r1, ") keeps ", len, " of ", h_indptr[r1] - h_indptr[r0], " entries");
    gather_kept<<<blocks_for((r1 - r0) * 32, kWarpRowsBlock), kWarpRowsBlock, 0, r.stream>>>(
        m.indptr.data(), m.indices.data(), m.data.data(), r0, r1, keep_rows, col_map, new_off.data(), base,
        s_idx.data(), s_val.data());
    SCURRY_CUDA_LAUNCH();
    if (len > 0) {
      SCURRY_CUDA(cudaMemcpyAsync(m.indices.data() + base, s_idx.data(), len * 4, cudaMemcpyDeviceToDevice, r.stream));
      SCURRY_CUDA(cudaMemcpyAsync(m.data.data() + base, s_val.data(), len * 4, cudaMemcpyDeviceToDevice, r.stream));
    }
    r0 = r1;
  }
  // Row pointers of the kept rows: rank of each row among kept rows by a scan of the keep flags.
  DeviceArray<int64_t> flags(r, n + 1, "row flags"), rank(r, n + 1, "row ranks");
  bytes_to_i64<<<blocks_for(n, 256), 256, 0, r.stream>>>(keep_rows, n, flags.data());
  SCURRY_CUDA_LAUNCH();
  SCURRY_CUDA(cudaMemsetAsync(flags.data() + n, 0, 8, r.stream));
  exclusive_scan(r, flags.data(), rank.data(), n + 1);
  int64_t new_rows = 0;
  SCURRY_CUDA(cudaMemcpyAsync(&new_rows, rank.data() + n, 8, cudaMemcpyDeviceToHost, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  DeviceArray<int64_t> new_indptr(r, new_rows + 1, "CSR row pointers");
  compact_indptr<<<blocks_for(n, 256), 256, 0, r.stream>>>(new_off.data(), rank.data(), keep_rows, n, new_indptr.data());
  SCURRY_CUDA_LAUNCH();
  if (n == 0) SCURRY_CUDA(cudaMemsetAsync(new_indptr.data(), 0, 8, r.stream));
  SCURRY_CUDA(cudaStreamSynchronize(r.stream));
  m.indptr = std::move(new_indptr);
  m.n_rows = new_rows;
  m.n_cols = new_cols;
  m.nnz = h_new_nnz;
}

}  // namespace scurry
