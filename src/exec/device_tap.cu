// scurry: X copied to the GPU while it is read (exec/device_tap.hpp).
//
// Each piece a reading thread finishes is copied, on that thread, into one of kSlots pinned staging
// buffers and sent to the device by cudaMemcpyAsync on the buffer's own stream; the thread then goes
// back to reading while the DMA runs. A buffer is reused once its last copy has finished (its event).
// When piece() returns, the source is no longer read, so the reader's buffer may die at any time
// after (an error later in the read). The values of X's data are tested as they are staged: the
// first position (lowest index) of a value that is NaN, infinite or negative is kept, as check_counts
// finds it.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/cuda_check.hpp"
#include "exec/device_csr.cuh"
#include "exec/device_tap.hpp"

namespace scurry {

namespace {
constexpr int kSlots = 12;
constexpr size_t kSlotBytes = size_t(8) << 20;
constexpr size_t kNone = std::numeric_limits<size_t>::max();
}  // namespace

class DeviceCsrTap {
 public:
  explicit DeviceCsrTap(CudaResources& r) : r_(r), indptr_(*this, 8, false), indices_(*this, 4, false), data_(*this, 4, true) {
    slots_.resize(kSlots);
    for (int i = 0; i < kSlots; ++i) {
      Slot& s = slots_[i];
      SCURRY_CUDA(cudaMallocHost(reinterpret_cast<void**>(&s.buf), kSlotBytes));
      SCURRY_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
      SCURRY_CUDA(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
      free_.push_back(i);
    }
  }
  ~DeviceCsrTap() {
    for (Slot& s : slots_) {
      if (s.stream) cudaStreamSynchronize(s.stream);
      if (s.done) cudaEventDestroy(s.done);
      if (s.stream) cudaStreamDestroy(s.stream);
      if (s.buf) cudaFreeHost(s.buf);
    }
  }
  DeviceCsrTap(const DeviceCsrTap&) = delete;
  DeviceCsrTap& operator=(const DeviceCsrTap&) = delete;

  CsrTap taps() { return CsrTap{&indptr_, &indices_, &data_}; }

  // Every copy finished (throws a CUDA error of one).
  void drain() {
    for (Slot& s : slots_) SCURRY_CUDA(cudaStreamSynchronize(s.stream));
  }

  bool take(const CsrF& host, DeviceCsr& out) {
    drain();
    const size_t nnz = static_cast<size_t>(host.nnz());
    if (!indptr_.complete(host.indptr.size()) || !indices_.complete(nnz) || !data_.complete(nnz)) return false;
    out.n_rows = host.n_rows, out.n_cols = host.n_cols, out.nnz = host.nnz();
    out.indptr = std::move(indptr_.d64);
    out.indices = std::move(indices_.d32);
    out.data = std::move(data_.df);
    indptr_.reset(), indices_.reset(), data_.reset();
    return true;
  }

  bool counts_clean(const Matrix& X) const {
    const CsrF* m = std::get_if<CsrF>(&X.m);
    return m && data_.complete(static_cast<size_t>(m->nnz())) && data_.first_bad.load() == kNone &&
           indptr_.complete(m->indptr.size()) && indices_.complete(static_cast<size_t>(m->nnz()));
  }

 private:
  struct Slot {
    char* buf = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };

  class Array final : public ArrayTap {
   public:
    Array(DeviceCsrTap& owner, size_t elem, bool check) : owner_(owner), elem_(elem), check_(check) {}
    void begin(size_t n, size_t elem_size) override {
      reset();
      if (elem_size != elem_) return;  // (not the type the GPU chain takes: not tapped)
      try {
        CudaResources& r = owner_.r_;
        if (elem_ == 8) d64 = DeviceArray<int64_t>(r, n, "CSR row pointers (read)");
        else if (check_) df = DeviceArray<float>(r, n, "CSR values (read)");
        else d32 = DeviceArray<int32_t>(r, n, "CSR column indices (read)");
        SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // (usable from the slots' streams)
      } catch (const std::exception& e) {
        log::warn(std::string("the GPU copy during the read is off (") + e.what() + "); X is uploaded after the read");
        reset();
        return;
      }
      n_ = n;
      on_ = true;
    }
    void piece(const void* src, size_t e0, size_t e1) override {
      if (!on_) return;
      if (e1 < e0 || e1 > n_) fail("internal: a read's piece [", e0, ", ", e1, ") outside its array of ", n_);
      char* dst = static_cast<char*>(device()) + e0 * elem_;
      const char* in = static_cast<const char*>(src);
      const size_t bytes = (e1 - e0) * elem_;
      SCURRY_CUDA(cudaSetDevice(owner_.r_.device));
      for (size_t off = 0; off < bytes; off += kSlotBytes) {
        const size_t len = std::min(kSlotBytes, bytes - off);
        if (check_) check(reinterpret_cast<const float*>(in + off), len / 4, e0 + off / 4);
        owner_.send(dst + off, in + off, len);
      }
      got_.fetch_add(e1 - e0);
    }
    bool complete(size_t n) const { return on_ && n_ == n && got_.load() == n; }
    void reset() {
      d64.release(), d32.release(), df.release();
      on_ = false;
      n_ = 0;
      got_ = 0;
      first_bad = kNone;
    }
    DeviceArray<int64_t> d64;
    DeviceArray<int32_t> d32;
    DeviceArray<float> df;
    std::atomic<size_t> first_bad{kNone};

   private:
    void* device() const { return elem_ == 8 ? static_cast<void*>(d64.data()) : check_ ? static_cast<void*>(df.data()) : static_cast<void*>(d32.data()); }
    // check_counts' test (finite and not negative: v >= 0 && v <= max fails for NaN, -Inf, +Inf and
    // negatives), branch-free over the block; the first failing position, if any, kept as the lowest.
    void check(const float* v, size_t n, size_t base) {
      bool ok = true;
      for (size_t i = 0; i < n; ++i) ok &= (v[i] >= 0.f) & (v[i] <= std::numeric_limits<float>::max());
      if (ok) return;
      size_t i = 0;
      while (v[i] >= 0.f && v[i] <= std::numeric_limits<float>::max()) ++i;
      size_t at = base + i, cur = first_bad.load();
      while (at < cur && !first_bad.compare_exchange_weak(cur, at)) {
      }
    }
    DeviceCsrTap& owner_;
    size_t elem_;
    bool check_;
    bool on_ = false;
    size_t n_ = 0;
    std::atomic<size_t> got_{0};
  };

  // src -> pinned slot -> dst (asynchronous DMA); src is not read after this returns.
  void send(char* dst, const char* src, size_t len) {
    int i;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return !free_.empty(); });
      i = free_.back();
      free_.pop_back();
    }
    struct Back {  // the slot goes back to the pool whatever happens
      DeviceCsrTap& t;
      int i;
      ~Back() {
        {
          std::lock_guard<std::mutex> lock(t.m_);
          t.free_.push_back(i);
        }
        t.cv_.notify_one();
      }
    } back{*this, i};
    Slot& s = slots_[i];
    if (s.pending) SCURRY_CUDA(cudaEventSynchronize(s.done));  // its previous DMA has finished
    s.pending = false;
    std::memcpy(s.buf, src, len);
    SCURRY_CUDA(cudaMemcpyAsync(dst, s.buf, len, cudaMemcpyHostToDevice, s.stream));
    SCURRY_CUDA(cudaEventRecord(s.done, s.stream));
    s.pending = true;
  }

  CudaResources& r_;
  Array indptr_, indices_, data_;
  std::vector<Slot> slots_;
  std::vector<int> free_;
  std::mutex m_;
  std::condition_variable cv_;
};

std::shared_ptr<DeviceCsrTap> make_device_csr_tap(const Context& ctx) {
  if (!ctx.cuda()) return nullptr;
  return std::make_shared<DeviceCsrTap>(*ctx.cuda());
}

CsrTap csr_tap_of(const std::shared_ptr<DeviceCsrTap>& tap) { return tap ? tap->taps() : CsrTap{}; }

bool tapped_counts_clean(const std::shared_ptr<DeviceCsrTap>& tap, const Matrix& X) {
  return tap && tap->counts_clean(X);
}

bool take_tapped(const std::shared_ptr<DeviceCsrTap>& tap, const CsrF& host, DeviceCsr& out) {
  return tap && tap->take(host, out);
}

}  // namespace scurry
