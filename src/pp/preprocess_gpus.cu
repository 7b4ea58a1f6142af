// The GPU preprocessing chain over several GPUs of this host (preprocess.hpp: preprocess_gpu_sharded):
// the cells split into contiguous ranges of near-equal nonzeros, one host thread per GPU running the
// one-rank chain of preprocess_gpu.cu on its range (gpu::preprocess_chain) with a ThreadComm as the
// communicator, then rank 0 gathering the cells (obs, obsm, layers, raw.X, X) in order.
//
// What crosses between the GPUs: per-gene statistics (a few g-vectors of doubles a step, through the
// host in rank order, so every rank decides the same), the cell totals once (8 bytes a cell, for the
// median target when no target_sum is given), the PCA Gram matrix once (g^2 doubles: 32 MB at
// g = 2000; NCCL when the GPUs are distinct, else through the host), and the results gathered on rank
// 0. Floor with R GPUs: the one-GPU floor / R for every map and per-gene reduction (each GPU reads
// nnz / R), plus the Gram sum (32 MB over NVLink, ~0.1 ms) and the gather of X_pca (n x 50 float32
// to the host, n * 200 B / ~50 GB/s).
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"
#include "exec/comm_nccl.hpp"
#include "exec/comm_thread.hpp"
#include "pp/kernels.cuh"
#include "pp/preprocess.hpp"
#include "pp/preprocess_stream.hpp"
#include "pp/shard.hpp"
#include "sim/simulate.hpp"

namespace scurry {

namespace {

// This rank's rows [rr.begin, rr.end) of every obs-indexed slot except X; the per-gene slots whole.
Dataset shard_of(const Dataset& d, RowRange rr) {
  std::vector<int64_t> keep(static_cast<size_t>(rr.end - rr.begin));
  std::iota(keep.begin(), keep.end(), rr.begin);
  Dataset s;
  s.obs = d.obs.take(keep);
  s.var = d.var;
  for (const auto& [k, m] : d.layers) s.layers[k] = take_rows(m, keep);
  for (const auto& [k, m] : d.obsm) s.obsm[k] = take_rows(m, keep);
  s.varm = d.varm;
  s.varp = d.varp;
  s.uns = d.uns;
  if (d.raw) {
    s.raw = std::make_shared<Dataset>();
    s.raw->var = d.raw->var;
    s.raw->varm = d.raw->varm;
    if (!d.raw->X.empty()) s.raw->X = d.raw->X.n_rows() == d.n_obs() ? take_rows(d.raw->X, keep) : d.raw->X;
  }
  return s;
}

// Contiguous ranges of near-equal nonzeros, one per GPU; InputError when one would be empty.
std::vector<RowRange> split_cells(const std::vector<int64_t>& indptr, int ranks) {
  const RowBlocks b = RowBlocks::split_nnz(indptr, ranks);
  std::vector<RowRange> out;
  for (int q = 0; q < ranks; ++q) {
    out.push_back({b.begin(q), b.end(q)});
    if (b.end(q) == b.begin(q))
      throw InputError(detail::concat("--gpus: ", b.n_rows(), " cells cannot be split over ", ranks,
                                      " GPUs (a GPU would get none); use fewer GPUs"));
  }
  return out;
}

void check_contexts(const std::vector<Context*>& gpus) {
  if (gpus.empty()) fail("internal: preprocess on GPUs: no context given");
  for (const Context* c : gpus)
    if (!c || !c->cuda()) fail("internal: preprocess on GPUs: every context must be a CUDA context");
}

using AcquireFn = std::function<DeviceCsr(int rank, CudaResources& r)>;
// One rank's chain on its own thread: its context (ThreadComm set), its cells' frame, its timings,
// the NCCL Gram sum (empty: through the host).
using ChainFn = std::function<void(int rank, Context& ctx, Dataset& s, Timings& t, const gpu::DeviceSum& dsum)>;

// `chain` on every context's thread, each on its rows of `frame`, then rank 0 gathers the cells into out.
void run_ranks(const std::vector<Context*>& gpus, const Dataset& frame, const std::vector<RowRange>& ranges,
               Timings* timings, const ChainFn& chain, Dataset& out) {
  const int R = static_cast<int>(gpus.size());
  const std::vector<std::shared_ptr<ThreadComm>> tc = make_thread_comms(R);

  // NCCL for the PCA Gram sum, when every rank has its own GPU (SCURRY_NCCL=0: through the host).
  std::vector<std::shared_ptr<NcclComm>> nccl;
  std::vector<int> devices;
  for (const Context* c : gpus) devices.push_back(c->cuda()->device);
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  const char* env = std::getenv("SCURRY_NCCL");
  const bool want_nccl = !(env && std::string(env) == "0");
  if (want_nccl && distinct && nccl_built()) {
    try {
      nccl = make_nccl_comms(devices, std::vector<std::shared_ptr<Comm>>(tc.begin(), tc.end()));
    } catch (const std::exception& e) {
      log::warn(std::string("NCCL could not start (") + e.what() + "); the PCA Gram matrix is summed through the host");
      nccl.clear();
    }
  }
  if (timings) {
    timings->set_meta("gpus", std::to_string(R));
    timings->set_meta("gram_sum", nccl.empty() ? "host" : "nccl");
  }

  Dataset gathered;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(R));
  std::vector<Timings> local(static_cast<size_t>(R));
  {
    std::vector<std::thread> workers;
    for (int q = 0; q < R; ++q)
      workers.emplace_back([&, q] {
        try {
          Context ctx = *gpus[q];
          ctx.set_comm(tc[q]);
          CudaResources& res = *ctx.cuda();
          SCURRY_CUDA(cudaSetDevice(res.device));  // the resources were made on another thread
          omp_set_num_threads(std::max(1, ctx.threads() / R));  // the host's threads shared by the ranks
          Timings& t = q == 0 && timings ? *timings : local[q];
          Dataset s = shard_of(frame, ranges[q]);
          gpu::DeviceSum dsum;
          if (!nccl.empty())
            dsum = [&, q](double* p, size_t n, cudaStream_t stream) {
              tc[q]->barrier();  // no rank enters NCCL when another has failed
              nccl[q]->allreduce_sum_device(p, n, stream);
            };
          chain(q, ctx, s, t, dsum);
          {
            auto scope = t.scope("gather");
            gather_rows(ctx, s, 0);
            if (q == 0) scope.set_extra(detail::concat(s.n_obs(), " x ", s.n_vars(), ", from ", R, " GPUs"));
          }
          tc[q]->barrier();  // every rank is past its last collective
          if (!nccl.empty()) nccl[q]->close(false);
          if (q == 0) gathered = std::move(s);
        } catch (...) {
          errors[q] = std::current_exception();
          tc[q]->fail_all();
        }
      });
    for (auto& w : workers) w.join();
  }
  nccl.clear();  // a communicator still open (a failed run) is aborted, never waited for
  rethrow_rank_errors(errors);  // the first error that is not another rank's "a rank failed"
  out = std::move(gathered);
}

// The in-memory chain (gpu::preprocess_chain) as a rank's chain: `acquire(rank, r)` puts that rank's
// counts on its device; `release_input` (optional) runs on rank 0 once every rank has its counts.
ChainFn in_memory_chain(const PreprocessOptions& o, const char* acquire_step, AcquireFn acquire,
                        std::function<void()> release_input) {
  return [&o, acquire_step, acquire = std::move(acquire), release_input = std::move(release_input)](
             int q, Context& ctx, Dataset& s, Timings& t, const gpu::DeviceSum& dsum) {
    CudaResources& res = *ctx.cuda();
    gpu::preprocess_chain(
        ctx, s, o, &t, acquire_step,
        [&] {
          DeviceCsr m = acquire(q, res);
          ctx.comm().barrier();  // every rank holds its counts on its device
          if (q == 0 && release_input) release_input();
          return m;
        },
        dsum);
  };
}

// Rows [begin, end) of a shared source, for one rank's thread. Reads go through one lock (HDF5 is not
// thread-safe; a file reader is one handle), so the ranks' read-aheads take turns on the source.
class RangeRowSource final : public RowSource {
 public:
  RangeRowSource(RowSource& src, std::mutex& lock, const std::vector<int64_t>& indptr, RowRange rr)
      : src_(src), lock_(lock), rr_(rr), nnz_(indptr[rr.end] - indptr[rr.begin]) {
    ptr_.assign(indptr.begin() + rr.begin, indptr.begin() + rr.end + 1);
    for (int64_t& v : ptr_) v -= indptr[rr.begin];
  }
  int64_t n_rows() const override { return rr_.end - rr_.begin; }
  int64_t n_cols() const override { return src_.n_cols(); }
  int64_t nnz() const override { return nnz_; }
  CsrF read_rows(int64_t b, int64_t e) override {
    std::lock_guard<std::mutex> g(lock_);
    return src_.read_rows(rr_.begin + b, rr_.begin + e);
  }
  std::vector<int64_t> row_pointers() override { return ptr_; }

 private:
  RowSource& src_;
  std::mutex& lock_;
  RowRange rr_;
  int64_t nnz_;
  std::vector<int64_t> ptr_;
};

}  // namespace

void preprocess_gpu_sharded(const std::vector<Context*>& gpus, Dataset& d, const PreprocessOptions& o,
                            Timings* timings) {
  check_contexts(gpus);
  if (gpus.size() == 1) return preprocess_gpu(*gpus[0], d, o, timings);
  if (d.X.empty()) throw InputError("preprocess: X is empty");
  if (!std::holds_alternative<CsrF>(d.X.m)) d.X = Matrix(to_csr_f(d.X), DType::f32);
  if (!d.obsp.empty()) {
    log::warn("the input's obsp slots (cells x cells) are dropped in a multi-GPU run");
    d.obsp.clear();
  }
  const CsrF& X = std::get<CsrF>(d.X.m);
  const std::vector<RowRange> ranges = split_cells(X.indptr, static_cast<int>(gpus.size()));
  run_ranks(
      gpus, d, ranges, timings,
      in_memory_chain(
          o, "upload", [&](int q, CudaResources& r) { return upload(r, slice_rows(X, ranges[q].begin, ranges[q].end)); },
          [&d] { d.X = Matrix(); }),  // the counts live on the devices from here on
      d);
}

void preprocess_simulated_sharded(const std::vector<Context*>& gpus, DeviceSimulated& sim, Dataset& d,
                                  const PreprocessOptions& o, Timings* timings, bool consume) {
  check_contexts(gpus);
  if (!sim.parts.empty()) {  // simulate_on_devices: each GPU already holds its rows
    if (sim.parts.size() != gpus.size()) throw Error(detail::concat("preprocess_simulated: ", sim.parts.size(), " parts for ", gpus.size(), " GPUs"));
    std::vector<RowRange> ranges;
    for (size_t q = 0; q < sim.parts.size(); ++q) {
      if (!sim.parts[q]) throw Error("preprocess_simulated: the simulated matrix was consumed already");
      ranges.push_back(RowRange{sim.part_begin[q], sim.part_begin[q + 1]});
    }
    run_ranks(
        gpus, sim.frame, ranges, timings, in_memory_chain(o, "device_copy",
        [&](int q, CudaResources& r) {
          DeviceCsr& src = *std::static_pointer_cast<DeviceCsr>(sim.parts[q]);
          if (consume) {
            DeviceCsr m = std::move(src);
            sim.parts[q].reset();
            return m;
          }
          // A copy on the same device (the next benchmark run starts from the simulated part again).
          return copy_on_device(r, src);
        },
        {}), d);
    return;
  }
  if (gpus.size() == 1) return preprocess_simulated(*gpus[0], sim, d, o, timings, consume);
  if (!sim.matrix) throw Error("preprocess_simulated: the simulated matrix was consumed already");
  const DeviceCsr& src = *std::static_pointer_cast<DeviceCsr>(sim.matrix);
  cudaPointerAttributes attr{};
  SCURRY_CUDA(cudaPointerGetAttributes(&attr, src.indptr.data()));
  const int src_dev = attr.device;
  std::vector<int64_t> ip(static_cast<size_t>(src.n_rows) + 1);
  SCURRY_CUDA(cudaSetDevice(src_dev));
  SCURRY_CUDA(cudaDeviceSynchronize());  // the simulation has finished
  SCURRY_CUDA(cudaMemcpy(ip.data(), src.indptr.data(), ip.size() * 8, cudaMemcpyDeviceToHost));
  const std::vector<RowRange> ranges = split_cells(ip, static_cast<int>(gpus.size()));
  const Dataset& frame = sim.frame;
  run_ranks(
      gpus, frame, ranges, timings, in_memory_chain(o, "device_copy",
      [&](int q, CudaResources& r) {
        // Rows [b, e) from the simulating GPU to this rank's (peer copies; staged by the driver when
        // the GPUs have no peer access), row pointers rebased on the host.
        const int64_t b = ranges[q].begin, e = ranges[q].end;
        DeviceCsr m;
        m.n_rows = e - b, m.n_cols = src.n_cols, m.nnz = ip[e] - ip[b];
        std::vector<int64_t> rows(ip.begin() + b, ip.begin() + e + 1);
        for (int64_t& v : rows) v -= ip[b];
        m.indptr = DeviceArray<int64_t>(r, rows.size(), "count matrix (row pointers)");
        m.indices = DeviceArray<int32_t>(r, static_cast<size_t>(std::max<int64_t>(m.nnz, 1)), "count matrix (indices)");
        m.data = DeviceArray<float>(r, static_cast<size_t>(std::max<int64_t>(m.nnz, 1)), "count matrix (values)");
        SCURRY_CUDA(cudaMemcpyAsync(m.indptr.data(), rows.data(), rows.size() * 8, cudaMemcpyHostToDevice, r.stream));
        if (m.nnz > 0) {
          SCURRY_CUDA(cudaMemcpyPeerAsync(m.indices.data(), r.device, src.indices.data() + ip[b], src_dev,
                                          static_cast<size_t>(m.nnz) * 4, r.stream));
          SCURRY_CUDA(cudaMemcpyPeerAsync(m.data.data(), r.device, src.data.data() + ip[b], src_dev,
                                          static_cast<size_t>(m.nnz) * 4, r.stream));
        }
        SCURRY_CUDA(cudaStreamSynchronize(r.stream));  // `rows` dies here
        return m;
      },
      [&, src_dev] {
        if (!consume) return;
        // The simulated matrix is freed on its own device, once every rank has copied its rows.
        int here = 0;
        SCURRY_CUDA(cudaGetDevice(&here));
        SCURRY_CUDA(cudaSetDevice(src_dev));
        sim.matrix.reset();
        SCURRY_CUDA(cudaSetDevice(here));
      }), d);
}

void preprocess_stream_sharded(const std::vector<Context*>& gpus, RowSource& X, Dataset& d,
                               const PreprocessOptions& o, const StreamOptions& so, Timings* timings) {
  check_contexts(gpus);
  if (gpus.size() == 1) return preprocess_stream(*gpus[0], X, d, o, so, timings);
  if (X.n_rows() != d.n_obs()) fail("internal: preprocess_stream_sharded: ", X.n_rows(), " rows for ", d.n_obs(), " cells");
  const std::vector<int64_t> indptr = X.row_pointers();
  const std::vector<RowRange> ranges = split_cells(indptr, static_cast<int>(gpus.size()));
  std::mutex lock;
  const Dataset frame = std::move(d);
  run_ranks(
      gpus, frame, ranges, timings,
      [&](int q, Context& ctx, Dataset& s, Timings& t, const gpu::DeviceSum&) {
        RangeRowSource src(X, lock, indptr, ranges[q]);
        preprocess_stream(ctx, src, s, o, so, &t);
      },
      d);
}

}  // namespace scurry
