// The preprocessing chain on the GPU: the count matrix is uploaded once and stays on the device
// through QC, filters, normalize_total + log1p, HVG statistics, the HVG subset, scale and PCA. Only
// per-cell and per-gene statistics come back to the host, where the same code as the CPU path
// (src/pp/*.cpp) turns them into decisions and into the Dataset's slots. The matrix is filtered
// in place, and the sparse matrix is released once the dense scaled one exists, so the peak device
// memory is about the input plus the dense HVG matrix. Each step is a resident step of
// pp/resident.hpp (resident_gpu.cu), the same entry points the Python package calls one at a time.
//
// The chain runs on one rank's cells (several GPUs: preprocess_gpus.cu, one rank per GPU): every
// decision point combines the ranks' partial statistics through ctx.comm() (per-gene sums and counts
// summed in rank order, the normalisation median over all ranks' totals, the filters' "nothing left"
// checks), then the same host math runs on every rank; maps stay local. With one rank (LocalComm)
// every collective is the identity: the single-GPU chain.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "exec/comm_nccl.hpp"
#include "exec/device_csr.cuh"
#include "pp/kernels.cuh"
#include "pp/preprocess.hpp"
#include "pp/resident_state.cuh"
#include "core/timings.hpp"
#include "sim/simulate.hpp"

namespace scurry {

namespace gpu {

void check_chain_options(const PreprocessOptions& o, const std::string& where) {
  auto unsupported = [&](bool cond, const std::string& what) {
    if (cond) throw InputError(where + ": " + what + " is not available on the GPU yet; use --device cpu");
  };
  unsupported(!o.skip.empty(), "--skip");
  unsupported(!o.qc.layer.empty() || !o.normalize.layer.empty() || !o.scale.layer.empty(), "a layer as input");
  unsupported(o.normalize.exclude_highly_expressed, "exclude_highly_expressed");
  unsupported(o.log1p.base.has_value(), "log1p with a base");
  unsupported(o.hvg.flavor != "seurat" && o.hvg.flavor != "cell_ranger", "highly_variable_genes flavor " + o.hvg.flavor);
  unsupported(!o.hvg.batch_key.empty(), "highly_variable_genes with batch_key");
  unsupported(o.scale.clip_below, "scale with clip_below");
  unsupported(!o.subset_hvg, "PCA without the HVG subset");
}

QcSetup qc_setup(Dataset& d, const PreprocessOptions& o, int64_t n_genes) {
  mark_qc_vars(d, o.qc_vars);
  QcOptions q = o.qc;
  q.qc_vars = qc_var_names(o.qc_vars);
  return qc_setup(d, q, n_genes);
}

QcSetup qc_setup(const Dataset& d, const QcOptions& q, int64_t n_genes) {
  QcSetup s;
  s.q = q;
  s.masks = qc_var_masks(d, s.q);
  if (s.masks.size() > 8) throw InputError("--device gpu: at most 8 --qc-vars sets");
  s.n_sets = static_cast<int>(s.masks.size());
  s.bits.assign(static_cast<size_t>(n_genes), 0);
  for (size_t k = 0; k < s.masks.size(); ++k)
    for (size_t g = 0; g < s.bits.size(); ++g)
      if (s.masks[k][g]) s.bits[g] |= static_cast<uint8_t>(1u << k);
  s.percent_top = qc_percent_top(s.q, n_genes);
  s.top.assign(s.percent_top.begin(), s.percent_top.end());
  return s;
}

void write_qc_columns(Dataset& d, const QcSetup& s, RowQc&& rq, const GeneSums& gs, int64_t n_cells) {
  // The obs/var columns, on this thread (a thread of their own was measured slower: its new malloc
  // arena's fresh pages cost more than the work).
  QcResult res;
  res.percent_top = s.percent_top;
  const int64_t n = static_cast<int64_t>(rq.total.size()), g = static_cast<int64_t>(gs.sum.size());
  res.n_genes_by_counts.assign(rq.n_genes.begin(), rq.n_genes.end());
  res.total_counts = std::move(rq.total);
  const auto& total = res.total_counts;
  for (size_t k = 0; k < s.top.size(); ++k) {
    std::vector<double> pct(n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pct[i] = total[i] != 0 ? rq.top_sum[k][i] / total[i] * 100.0 : 0.0;
    res.pct_counts_in_top.push_back(std::move(pct));
  }
  for (size_t k = 0; k < s.masks.size(); ++k) {
    std::vector<double> pct(n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pct[i] = total[i] != 0 ? rq.set_total[k][i] / total[i] * 100.0 : 0.0;
    res.total_counts_qc.push_back(std::move(rq.set_total[k]));
    res.pct_counts_qc.push_back(std::move(pct));
  }
  const double dn = static_cast<double>(n_cells);
  res.n_cells_by_counts.resize(g);
  res.mean_counts.resize(g);
  res.pct_dropout_by_counts.resize(g);
  res.var_total_counts = gs.sum;
  for (int64_t j = 0; j < g; ++j) {
    res.n_cells_by_counts[j] = static_cast<int64_t>(gs.nnz[j]);
    res.mean_counts[j] = gs.sum[j] / dn;
    res.pct_dropout_by_counts[j] = (1.0 - gs.nnz[j] / dn) * 100.0;
  }
  write_qc_metrics(d, std::move(res), s.q, true);
}

// A copy that another thread follows: advance(b) from the copy (b bytes final), wait_for(b) from the
// follower (returns once b bytes are final; throws the copy's error, or when the copy ended short).
class FollowedCopy {
 public:
  template <class F>
  void run(F&& copy) {
    try {
      copy();
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(m_);
    ended_ = true;
    cv_.notify_all();
  }
  void advance(size_t b) {
    std::lock_guard<std::mutex> lock(m_);
    done_ = std::max(done_, b);
    cv_.notify_all();
  }
  void wait_for(size_t b) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return done_ >= b || ended_; });
    if (error_) std::rethrow_exception(error_);
    if (done_ < b) fail("internal: the copy of X back from the GPU ended at ", done_, " of ", b, " bytes");
  }
  void rethrow() {
    std::lock_guard<std::mutex> lock(m_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  size_t done_ = 0;
  bool ended_ = false;
  std::exception_ptr error_;
};

// The dense scaled X (src, `bytes`) copied back to the host buffer `host` gives, on a thread of its
// own, once r.stream's work so far has run; `follow` (may be empty) follows the copy.
std::shared_ptr<std::future<Matrix>> start_background_copy(
    CudaResources& r, const std::shared_ptr<DeviceArray<float>>& src, size_t bytes, std::future<DenseF> host,
    const std::function<void(const DenseF&, const std::function<void(size_t)>&)>& follow) {
  auto copy = deferred_copy_to_host(r, src->data(), bytes, src);
  return std::make_shared<std::future<Matrix>>(
      std::async(std::launch::async, [copy = std::move(copy), host = std::move(host), follow]() mutable {
        DenseF x = host.get();
        if (!follow) {
          copy(x.data.data(), {});
          return Matrix(std::move(x), DType::f32);
        }
        FollowedCopy fc;  // the copy on a thread of its own, the follower on this one
        std::thread copier([&] { fc.run([&] { copy(x.data.data(), [&](size_t b) { fc.advance(b); }); }); });
        try {
          follow(x, [&](size_t b) { fc.wait_for(b); });
        } catch (...) {
          copier.join();
          throw;
        }
        copier.join();
        fc.rethrow();
        return Matrix(std::move(x), DType::f32);
      }));
}

void preprocess_chain(Context& ctx, Dataset& d, const PreprocessOptions& o, Timings* timings, const char* acquire_step,
                      const std::function<DeviceCsr()>& acquire, const DeviceSum& device_sum) {
  // The chain composes the resident steps (pp/resident.hpp), the units the Python package calls one
  // at a time; what is the chain's own: the timings, the counts layer and raw copied back, the HVG
  // subset, the host buffers of X allocated beside the device's work, and X's copy back in the
  // background.
  CudaResources& r = *ctx.cuda();
  Comm& comm = ctx.comm();
  Timings local;
  Timings& t = timings ? *timings : local;
  check_chain_options(o, "--device gpu");
  std::unique_ptr<ResidentX> xp;
  auto step = [&](const std::string& name, auto&& fn) {
    auto scope = t.scope(name);
    fn();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    scope.set_extra(detail::concat(d.n_obs(), " x ", d.n_vars()));
  };
  r.memory->reset_peak();

  step(acquire_step, [&] {
    auto st = std::make_unique<ResidentX::State>();
    st->r = &r;
    st->m = acquire();
    xp = std::make_unique<ResidentX>(std::move(st));
  });
  ResidentX& x = *xp;
  t.set_meta("nnz_input", std::to_string(sum_ranks(comm, x.nnz())));

  step("qc", [&] {
    mark_qc_vars(d, o.qc_vars);
    QcOptions q = o.qc;
    q.qc_vars = qc_var_names(o.qc_vars);
    if (q.qc_vars.size() > 8) throw InputError("--device gpu: at most 8 --qc-vars sets");
    resident::qc(ctx, x, d, q);
  });
  step("filter_cells", [&] { resident::filter_cells(ctx, x, d, o.filter_cells); });
  step("filter_genes", [&] {
    resident::filter_genes(ctx, x, d, o.filter_genes);
    t.set_meta("nnz_filtered", std::to_string(sum_ranks(comm, x.nnz())));
  });
  if (o.counts_layer) step("counts_layer", [&] { d.layers["counts"] = resident::download(ctx, x); });
  step("normalize_total+log1p", [&] { resident::normalize_total(ctx, x, d, o.normalize, true); });
  step("highly_variable_genes", [&] {
    HvgOptions h = o.hvg;
    h.subset = false;
    resident::highly_variable_genes(ctx, x, d, h);
  });
  if (o.raw)
    step("raw", [&] {
      d.raw = std::make_shared<Dataset>();
      d.raw->X = resident::download(ctx, x);
      d.raw->var = d.var;
    });
  step("subset_hvg", [&] {
    const auto& hv = d.var.boolean("highly_variable");
    std::vector<int64_t> keep;
    for (size_t g = 0; g < hv.size(); ++g)
      if (hv[g]) keep.push_back(static_cast<int64_t>(g));
    if (keep.empty()) throw InputError("highly_variable_genes selected no gene; relax its cut-offs");
    resident::subset_vars(ctx, x, &d, keep);
    t.set_meta("nnz_hvg", std::to_string(sum_ranks(comm, x.nnz())));
  });

  const int64_t n = x.n_rows(), g = x.n_cols();  // this rank's cells
  const bool scale_zc = o.scale.zero_center;
  // The host copy of the dense scaled X is allocated and first touched (huge pages) on another thread
  // while the device scales and runs the PCA: the download is then only the copy.
  std::future<DenseF> host_dense;
  if (o.scaled_x && scale_zc)
    host_dense = std::async(std::launch::async, [n, g] {
      DenseF hx;
      hx.n_rows = n, hx.n_cols = g;
      resize_large(hx.data, static_cast<size_t>(n) * static_cast<size_t>(g));
      return hx;
    });
  step("scale", [&] { resident::scale(ctx, x, d, o.scale); });

  // A run's copy of the dense scaled X back to the host (PreprocessOptions::background_x) starts as
  // soon as X is final, here, and runs beside the PCA and the caller's graph steps.
  const bool background = o.scaled_x && scale_zc && o.background_x && comm.size() == 1;
  std::shared_ptr<std::future<Matrix>> background_copy;
  if (background)
    background_copy = start_background_copy(r, x.state().dense, static_cast<size_t>(n) * static_cast<size_t>(g) * 4,
                                            std::move(host_dense), o.follow_x);

  step("pca", [&] {
    resident::DeviceSumFn dsum;
    if (device_sum) dsum = [&device_sum](double* p, size_t m, void* st) { device_sum(p, m, static_cast<cudaStream_t>(st)); };
    resident::pca(ctx, x, d, o.pca, dsum);
  });

  if (o.scaled_x && !scale_zc)
    step("download_x", [&] {
      d.X = resident::download(ctx, x);
      xp.reset();
    });
  else if (background)
    step("download_x", [&] {  // started after the scale (the host buffer's allocation included), settled by the caller
      const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(g) * 4;
      if (o.keep_device_x) {
        size_t free_b = 0, total_b = 0;
        SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
        if (bytes <= total_b / 4) {
          auto dx = std::make_shared<DeviceMatrix>();
          dx->data = x.state().dense->data(), dx->n_rows = n, dx->n_cols = g, dx->device = r.device;
          dx->keep = x.state().dense;
          d.device_x = std::move(dx);
        }
      }
      d.X = Matrix();
      d.pending_x = std::move(background_copy);
      xp.reset();  // (the copy and device_x hold the matrix as long as they need it)
    });
  else if (o.scaled_x)
    step("download_x", [&] {
      DenseF hx = host_dense.get();
      copy_to_host(r, hx.data.data(), x.state().dense->data(), hx.data.size() * 4);
      d.X = Matrix(std::move(hx), DType::f32);
    });
  xp.reset();
  size_t peak = r.memory->peak();  // the largest over the ranks (GPUs)
  if (comm.size() > 1)
    for (int64_t p : allgather_count(comm, static_cast<int64_t>(peak))) peak = std::max(peak, static_cast<size_t>(p));
  t.set_meta("gpu_peak_bytes", std::to_string(peak));
  if (r.memory->host_peak())  // --memory managed: arrays over the device budget placed in host memory
    t.set_meta("gpu_host_peak_bytes", std::to_string(r.memory->host_peak()));
}

}  // namespace gpu

void preprocess_gpu(Context& ctx, Dataset& d, const PreprocessOptions& o, Timings* timings) {
  if (d.X.empty()) throw InputError("preprocess: X is empty");
  CudaResources& r = *ctx.cuda();
  // MPI ranks with GPUs of their own: the PCA Gram summed by NCCL (Context::device_comm).
  gpu::DeviceSum dsum;
  if (const auto& nc = ctx.device_comm(); nc && ctx.comm().size() > 1)
    dsum = [&ctx, nc](double* p, size_t n, cudaStream_t stream) {
      ctx.comm().barrier();  // no rank enters NCCL when another has failed
      nc->allreduce_sum_device(p, n, stream);
    };
  gpu::preprocess_chain(
      ctx, d, o, timings, "upload",
      [&] {
        DeviceCsr m;
        const CsrF* host = std::get_if<CsrF>(&d.X.m);
        const bool tapped = host && take_tapped(o.tapped_x, *host, m);  // (copied during the read: exec/device_tap.hpp)
        if (!tapped) m = host ? upload(r, *host) : upload(r, to_csr_f(d.X));
        if (timings) timings->set_meta("x_upload", tapped ? "during the read" : "after the read");
        d.X = Matrix();  // the matrix lives on the device from here on
        return m;
      },
      dsum);
}

void preprocess_simulated(Context& ctx, DeviceSimulated& sim, Dataset& d, const PreprocessOptions& o, Timings* timings,
                          bool consume) {
  if (!ctx.cuda()) throw Error("preprocess_simulated: needs a CUDA context");
  if (!sim.matrix) throw Error("preprocess_simulated: the simulated matrix was consumed already");
  CudaResources& r = *ctx.cuda();
  DeviceCsr& src = *std::static_pointer_cast<DeviceCsr>(sim.matrix);
  d = sim.frame;
  gpu::preprocess_chain(ctx, d, o, timings, "device_copy", [&] {
    if (consume) {
      DeviceCsr m = std::move(src);
      sim.matrix.reset();
      return m;
    }
    return copy_on_device(r, src);
  });
}

void stepwise_chain_simulated(Context& ctx, DeviceSimulated& sim, Dataset& d, const PreprocessOptions& o,
                              Timings* timings, bool consume) {
  if (!ctx.cuda()) throw Error("stepwise_chain_simulated: needs a CUDA context");
  if (!sim.matrix) throw Error("stepwise_chain_simulated: the simulated matrix was consumed already");
  gpu::check_chain_options(o, "--stepwise");
  CudaResources& r = *ctx.cuda();
  Timings local;
  Timings& t = timings ? *timings : local;
  DeviceCsr& src = *std::static_pointer_cast<DeviceCsr>(sim.matrix);
  d = sim.frame;
  r.memory->reset_peak();
  auto step = [&](const std::string& name, auto&& fn) {
    auto scope = t.scope(name);
    fn();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    scope.set_extra(detail::concat(d.n_obs(), " x ", d.n_vars()));
  };
  std::unique_ptr<ResidentX> xp;
  step("device_copy", [&] {
    auto st = std::make_unique<ResidentX::State>();
    st->r = &r;
    if (consume) {
      st->m = std::move(src);
      sim.matrix.reset();
    } else {
      st->m = copy_on_device(r, src);
    }
    xp = std::make_unique<ResidentX>(std::move(st));
  });
  ResidentX& x = *xp;
  mark_qc_vars(d, o.qc_vars);
  QcOptions q = o.qc;
  q.qc_vars = qc_var_names(o.qc_vars);
  step("qc", [&] { resident::qc(ctx, x, d, q); });
  step("filter_cells", [&] { resident::filter_cells(ctx, x, d, o.filter_cells); });
  step("filter_genes", [&] { resident::filter_genes(ctx, x, d, o.filter_genes); });
  step("normalize_total", [&] { resident::normalize_total(ctx, x, d, o.normalize, false); });
  step("log1p", [&] { resident::log1p(ctx, x, d); });
  step("highly_variable_genes", [&] {
    HvgOptions h = o.hvg;
    h.subset = true;
    resident::highly_variable_genes(ctx, x, d, h);
  });
  step("scale", [&] { resident::scale(ctx, x, d, o.scale); });
  step("pca", [&] { resident::pca(ctx, x, d, o.pca); });
  t.set_meta("gpu_peak_bytes", std::to_string(r.memory->peak()));
}

}  // namespace scurry
