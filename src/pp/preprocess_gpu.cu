// The preprocessing chain on the GPU: the count matrix is uploaded once and stays on the device
// through QC, filters, normalize_total + log1p, HVG statistics, the HVG subset, scale and PCA. Only
// per-cell and per-gene statistics come back to the host, where the same code as the CPU path
// (src/pp/*.cpp) turns them into decisions and into the Dataset's slots. The matrix is filtered
// in place, and the sparse matrix is released once the dense scaled one exists, so the peak device
// memory is about the input plus the dense HVG matrix.
//
// The chain runs on one rank's cells (several GPUs: preprocess_gpus.cu, one rank per GPU): every
// decision point combines the ranks' partial statistics through ctx.comm() (per-gene sums and counts
// summed in rank order, the normalisation median over all ranks' totals, the filters' "nothing left"
// checks), then the same host math runs on every rank; maps stay local. With one rank (LocalComm)
// every collective is the identity: the single-GPU chain.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "exec/comm_nccl.hpp"
#include "exec/device_csr.cuh"
#include "pp/kernels.cuh"
#include "pp/preprocess.hpp"
#include "sim/simulate.hpp"

namespace scurry {

namespace {

template <class T>
DeviceArray<T> to_device(CudaResources& r, const std::vector<T>& h, const char* what) {
  DeviceArray<T> d(r, h.size(), what);
  if (!h.empty()) SCURRY_CUDA(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  return d;
}

}  // namespace

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

}  // namespace gpu

namespace {

// In-place sums over the ranks (identity with one rank).
void sum_ranks(Comm& c, std::vector<double>& v) {
  if (c.size() > 1) c.allreduce_sum(v.data(), v.size());
}
int64_t sum_ranks(Comm& c, int64_t x) {
  if (c.size() > 1) c.allreduce_sum(&x, 1);
  return x;
}

}  // namespace

namespace gpu {

double median_of_positive(const std::vector<double>& v) {
  std::vector<double> p;
  for (double x : v)
    if (x > 0) p.push_back(x);
  if (p.empty()) throw InputError("normalize_total: every cell has a total of 0; nothing to normalise");
  const size_t m = p.size() / 2;
  std::nth_element(p.begin(), p.begin() + m, p.end());
  double hi = p[m];
  if (p.size() % 2) return hi;
  const double lo = *std::max_element(p.begin(), p.begin() + m);
  return 0.5 * (lo + hi);
}

QcSetup qc_setup(Dataset& d, const PreprocessOptions& o, int64_t n_genes) {
  QcSetup s;
  mark_qc_vars(d, o.qc_vars);
  s.q = o.qc;
  s.q.qc_vars = qc_var_names(o.qc_vars);
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
  write_qc_metrics(d, res, s.q, true);
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
  CudaResources& r = *ctx.cuda();
  Comm& comm = ctx.comm();
  Timings local;
  Timings& t = timings ? *timings : local;
  check_chain_options(o, "--device gpu");

  // SCURRY_PROFILE=1: wall time of the phases inside the steps, on stderr.
  const bool profile = std::getenv("SCURRY_PROFILE") != nullptr && comm.rank() == 0;
  auto mark_t = std::chrono::steady_clock::now();
  auto mark = [&](const char* what) {
    if (!profile) return;
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "  %-28s %8.3f ms\n", what, std::chrono::duration<double, std::milli>(now - mark_t).count());
    mark_t = now;
  };
  auto step = [&](const std::string& name, auto&& fn) {
    auto scope = t.scope(name);
    mark_t = std::chrono::steady_clock::now();
    fn();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    scope.set_extra(detail::concat(d.n_obs(), " x ", d.n_vars()));
  };
  r.memory->reset_peak();

  DeviceCsr m;
  step(acquire_step, [&] { m = acquire(); });
  t.set_meta("nnz_input", std::to_string(sum_ranks(comm, m.nnz)));

  std::vector<int64_t> qc_n_genes, qc_gene_cells;
  std::vector<double> qc_total_f32;
  step("qc", [&] {
    const QcSetup qs = qc_setup(d, o, m.n_cols);
    DeviceArray<uint8_t> dbits = to_device(r, qs.bits, "QC gene sets");
    mark("qc: setup");
    gpu::RowQc rq = gpu::row_qc(r, m, qs.n_sets ? dbits.data() : nullptr, qs.n_sets, qs.top);
    mark("qc: row_qc (+download)");
    gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
    sum_ranks(comm, gs.sum);  // per-gene sums and counts over all cells
    sum_ranks(comm, gs.nnz);
    mark("qc: gene_sums");
    // What the filters decide on, kept apart from the obs/var columns built below.
    const int64_t n_all = m.n_rows;                   // this rank's cells
    const int64_t n_cells = sum_ranks(comm, n_all);  // every rank's
    qc_n_genes.resize(static_cast<size_t>(n_all));
    qc_total_f32.resize(static_cast<size_t>(n_all));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n_all; ++i) {
      qc_n_genes[i] = static_cast<int64_t>(rq.n_genes[i]);
      qc_total_f32[i] = static_cast<double>(static_cast<float>(rq.total[i]));  // as the float32 obs column holds it
    }
    qc_gene_cells.assign(gs.nnz.begin(), gs.nnz.end());
    write_qc_columns(d, qs, std::move(rq), gs, n_cells);
    mark("qc: host columns");
  });

  // filter_genes on cell counts only (the default) needs no pass over the matrix: QC's per-gene counts
  // less those of the cells filter_cells removes.
  const bool genes_by_cells_only = !o.filter_genes.min_counts && !o.filter_genes.max_counts;
  std::vector<int64_t> gene_cells;  // QC's n_cells_by_counts, then less the removed cells
  step("filter_cells", [&] {
    FilterCellsResult fr = filter_cells_from_stats(std::move(qc_n_genes), std::move(qc_total_f32), o.filter_cells, &comm);
    if (genes_by_cells_only) gene_cells = std::move(qc_gene_cells);
    const int64_t removed_here = m.n_rows - static_cast<int64_t>(fr.kept.size());
    const int64_t removed_all = sum_ranks(comm, removed_here);
    if (genes_by_cells_only && removed_all > 0) {
      // Per gene, the removed cells' nonzero entries (this rank's; then summed over the ranks).
      std::vector<int64_t> sub(static_cast<size_t>(m.n_cols), 0);
      if (removed_here > 0) {
        std::vector<int64_t> removed;
        for (int64_t i = 0; i < m.n_rows; ++i)
          if (!fr.keep[i]) removed.push_back(i);
        DeviceArray<int64_t> drows = to_device(r, removed, "removed cells");
        DeviceArray<unsigned long long> cnt(r, static_cast<size_t>(m.n_cols), "removed cells' gene counts");
        SCURRY_CUDA(cudaMemsetAsync(cnt.data(), 0, static_cast<size_t>(m.n_cols) * 8, r.stream));
        gpu::rows_gene_nnz(r, gpu::view(m), drows.data(), static_cast<int64_t>(removed.size()), cnt.data());
        std::vector<unsigned long long> h(static_cast<size_t>(m.n_cols));
        SCURRY_CUDA(cudaMemcpyAsync(h.data(), cnt.data(), h.size() * 8, cudaMemcpyDeviceToHost, r.stream));
        SCURRY_CUDA(cudaStreamSynchronize(r.stream));
        for (size_t g = 0; g < h.size(); ++g) sub[g] = static_cast<int64_t>(h[g]);
      }
      if (comm.size() > 1) comm.allreduce_sum(sub.data(), sub.size());
      for (size_t g = 0; g < sub.size(); ++g) gene_cells[g] -= sub[g];
    }
    if (removed_here > 0) {
      DeviceArray<uint8_t> keep = to_device(r, fr.keep, "cell filter");
      filter_inplace(r, m, keep.data(), nullptr, m.n_cols);
    }
    if (comm.size() > 1) {
      // Every rank must keep a cell (the device steps after this one assume rows); decided together.
      const std::vector<int64_t> left = allgather_count(comm, m.n_rows);
      for (size_t q = 0; q < left.size(); ++q)
        if (left[q] == 0)
          throw InputError(detail::concat("--gpus: filter_cells left no cell on rank ", q, " of ", left.size(),
                                          " (its share of the cells); use fewer GPUs"));
    }
    apply_filter_cells(d, fr, true);
  });

  step("filter_genes", [&] {
    FilterGenesResult fr;
    if (genes_by_cells_only) {
      fr = filter_genes_from_stats(std::move(gene_cells), std::vector<double>(static_cast<size_t>(m.n_cols), 0.0),
                                   o.filter_genes);
    } else {
      gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
      sum_ranks(comm, gs.sum);
      sum_ranks(comm, gs.nnz);
      mark("filter_genes: gene_sums");
      std::vector<int64_t> n_cells(gs.nnz.begin(), gs.nnz.end());
      fr = filter_genes_from_stats(std::move(n_cells), gs.sum, o.filter_genes);
    }
    if (static_cast<int64_t>(fr.kept.size()) != m.n_cols) {
      std::vector<int32_t> map(static_cast<size_t>(m.n_cols), -1);
      for (size_t u = 0; u < fr.kept.size(); ++u) map[fr.kept[u]] = static_cast<int32_t>(u);
      DeviceArray<int32_t> dmap = to_device(r, map, "gene filter");
      filter_inplace(r, m, nullptr, dmap.data(), static_cast<int64_t>(fr.kept.size()));
    }
    mark("filter_genes: filter_inplace");
    apply_filter_genes(d, fr, true);
    t.set_meta("nnz_filtered", std::to_string(sum_ranks(comm, m.nnz)));
  });

  if (o.counts_layer)
    step("counts_layer", [&] { d.layers["counts"] = Matrix(download(r, m), DType::f32); });

  step("normalize_total+log1p", [&] {
    double target = 0;
    std::vector<double> totals;
    if (o.normalize.target_sum) {
      target = *o.normalize.target_sum;
      if (!(target > 0)) throw InputError("normalize_total: target_sum must be > 0");
    } else {
      DeviceArray<double> dt(r, m.n_rows, "row totals");
      gpu::row_totals(r, m, dt.data());
      totals.resize(m.n_rows);
      SCURRY_CUDA(cudaMemcpyAsync(totals.data(), dt.data(), m.n_rows * 8, cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      // The median over every rank's cells (the order of the totals does not matter to it).
      target = comm.size() > 1 ? median_of_positive(allgatherv(comm, totals)) : median_of_positive(totals);
    }
    gpu::normalize_log1p(r, m, target, true, o.normalize.key_added.empty() ? nullptr : &totals);
    if (!o.normalize.key_added.empty()) {
      std::vector<double> v(totals.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(totals[i]);
      d.obs.set(o.normalize.key_added, Column::numeric(std::move(v), DType::f32));
    }
    d.uns["log1p"] = Value(Dict{});
  });

  step("highly_variable_genes", [&] {
    const bool seurat = o.hvg.flavor == "seurat";
    mark("hvg: start");
    gpu::GeneSums gs = gpu::gene_sums(r, m, seurat ? gpu::GeneTransform::expm1 : gpu::GeneTransform::identity, nullptr,
                                      gpu::SecondStat::squares);
    sum_ranks(comm, gs.sum);
    sum_ranks(comm, gs.sumsq);
    mark("hvg: gene_sums");
    std::vector<double> mean, var;
    mean_var_from_sums(gs.sum, gs.sumsq, static_cast<double>(sum_ranks(comm, m.n_rows)), mean, var);
    HvgOptions h = o.hvg;
    h.subset = false;
    HvgResult hr = hvg_dispersion_from_moments(mean, var, h);
    write_hvg(d, hr, h);
  });

  if (o.raw)
    step("raw", [&] {
      d.raw = std::make_shared<Dataset>();
      d.raw->X = Matrix(download(r, m), DType::f32);
      d.raw->var = d.var;
    });

  step("subset_hvg", [&] {
    const auto& hv = d.var.boolean("highly_variable");
    std::vector<int64_t> keep;
    std::vector<int32_t> map(hv.size(), -1);
    for (size_t g = 0; g < hv.size(); ++g)
      if (hv[g]) map[g] = static_cast<int32_t>(keep.size()), keep.push_back(static_cast<int64_t>(g));
    if (keep.empty()) throw InputError("highly_variable_genes selected no gene; relax its cut-offs");
    DeviceArray<int32_t> dmap = to_device(r, map, "HVG subset");
    filter_inplace(r, m, nullptr, dmap.data(), static_cast<int64_t>(keep.size()));
    d.subset_vars(keep);
    t.set_meta("nnz_hvg", std::to_string(sum_ranks(comm, m.nnz)));
  });

  const int64_t n = m.n_rows, g = m.n_cols;  // this rank's cells
  const int64_t n_cells = sum_ranks(comm, n);  // every rank's
  if (n_cells < 2) throw InputError("scale: needs at least 2 cells");
  DeviceArray<float> dense;
  // scale without zero_center keeps the matrix sparse (as scanpy's sparse scale): the PCA densifies it
  // scaled, one chunk of rows at a time, and the scaled X is made in place at the end. With zero_center
  // the scaled matrix is dense and made here.
  const bool scale_zc = o.scale.zero_center;
  // The host copy of the dense scaled X is allocated and first touched (huge pages) on another thread
  // while the device scales and runs the PCA: the download is then only the copy.
  std::future<DenseF> host_dense;
  if (o.scaled_x && scale_zc)
    host_dense = std::async(std::launch::async, [n, g] {
      DenseF x;
      x.n_rows = n, x.n_cols = g;
      resize_large(x.data, static_cast<size_t>(n) * static_cast<size_t>(g));
      return x;
    });
  DeviceArray<float> d_mean, d_sd;
  std::vector<double> scale_mean, scale_sd;
  const float maxv = o.scale.max_value ? static_cast<float>(*o.scale.max_value) : 0.f;
  if (o.scale.max_value && !(*o.scale.max_value > 0)) throw InputError("scale: max_value must be > 0");
  step("scale", [&] {
    gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::squares);
    sum_ranks(comm, gs.sum);
    sum_ranks(comm, gs.sumsq);
    std::vector<double> mean, sd;
    mean_var_from_sums(gs.sum, gs.sumsq, static_cast<double>(n_cells), mean, sd);
    for (double& v : sd) v = v > 0 ? std::sqrt(v) : 1.0;
    std::vector<float> mf(mean.begin(), mean.end()), sf(sd.begin(), sd.end());
    d_mean = to_device(r, mf, "scale means");
    d_sd = to_device(r, sf, "scale std");
    if (scale_zc) {
      dense = DeviceArray<float>(r, static_cast<size_t>(n) * g, "dense scaled matrix");
      gpu::scale_to_dense(r, m, d_mean.data(), d_sd.data(), true, maxv, dense.data());
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      m = DeviceCsr();  // the sparse matrix is no longer needed
    }
    scale_mean = mean, scale_sd = sd;
    d.var.set("mean", Column::numeric(mean));
    d.var.set("std", Column::numeric(sd));
  });

  // A run's copy of the dense scaled X back to the host (PreprocessOptions::background_x) starts as
  // soon as X is final, here, and runs beside the PCA and the caller's graph steps.
  const bool background = o.scaled_x && scale_zc && o.background_x && comm.size() == 1;
  std::shared_ptr<DeviceArray<float>> dense_keep;
  std::shared_ptr<std::future<Matrix>> background_copy;
  if (background) {
    dense_keep = std::make_shared<DeviceArray<float>>(std::move(dense));
    background_copy = start_background_copy(r, dense_keep, static_cast<size_t>(n) * static_cast<size_t>(g) * 4,
                                            std::move(host_dense), o.follow_x);
  }
  const float* dense_ptr = background ? dense_keep->data() : dense.data();

  step("pca", [&] {
    const int64_t k = o.pca.n_comps ? *o.pca.n_comps : std::min<int64_t>(50, std::min(n_cells, g) - 1);
    if (k < 1 || k >= std::min(n_cells, g))
      throw InputError(detail::concat("pca: n_comps must be in [1, min(n_cells, n_genes) - 1] = [1, ",
                                      std::min(n_cells, g) - 1, "], got ", k));
    DeviceArray<float> xpca(r, static_cast<size_t>(n) * k, "X_pca");
    mark("pca: start");
    // The host X_pca is allocated and first touched on another thread while the device computes.
    auto host_x = std::async(std::launch::async, [n, k] {
      DenseF x;
      x.n_rows = n, x.n_cols = k;
      resize_large(x.data, static_cast<size_t>(n) * k);
      return x;
    });
    gpu::PcaRanks ranks;
    ranks.comm = &comm;
    ranks.device_sum = device_sum;
    gpu::PcaGpuResult pr;
    if (scale_zc) {
      pr = gpu::pca_dense(r, dense_ptr, n, g, static_cast<int>(k), o.pca.zero_center, xpca.data(), &ranks);
    } else {  // the sparse log data scaled into one chunk of dense rows at a time
      const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n, (int64_t{1} << 28) / std::max<int64_t>(g, 1)));
      DeviceArray<float> buf(r, static_cast<size_t>(chunk) * g, "scaled rows (one chunk)");
      DeviceArray<float> d_shift;  // centred PCA: each chunk shifted by mean / std (subtract_columns)
      if (o.pca.zero_center) {
        std::vector<float> sh(static_cast<size_t>(g));
        for (int64_t j = 0; j < g; ++j) sh[j] = static_cast<float>(scale_mean[j] / scale_sd[j]);
        d_shift = to_device(r, sh, "PCA chunk shift");
      }
      auto rows = [&](int64_t a, int64_t nr) -> const float* {
        gpu::CsrView<float, int32_t> v = gpu::view(m);
        v.n_rows = nr;
        v.indptr += a;
        gpu::scale_to_dense(r, v, d_mean.data(), d_sd.data(), false, maxv, buf.data());
        if (o.pca.zero_center) gpu::subtract_columns(r, buf.data(), nr, g, d_shift.data());
        return buf.data();
      };
      pr = gpu::pca_rows(r, rows, n, g, chunk, static_cast<int>(k), o.pca.zero_center, xpca.data(), &ranks);
    }
    PcaResult res;
    DenseF x = host_x.get();
    copy_to_host(r, x.data.data(), xpca.data(), x.data.size() * 4);
    res.components = DenseD(g, k);
    for (int64_t i = 0; i < g * k; ++i) res.components.data[i] = pr.components[i];
    res.variance = pr.variance;
    res.total_variance = pr.total_variance;
    for (double v : pr.variance) res.variance_ratio.push_back(v / pr.total_variance);
    res.solver = "gram (cuSOLVER)";
    res.use_highly_variable = d.var.has("highly_variable");
    res.genes.resize(g);
    for (int64_t j = 0; j < g; ++j) res.genes[j] = j;
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    mark("pca: device + download");
    write_pca(d, res, o.pca);  // res.x_pca is empty: X_pca is moved in below, not copied
    d.obsm["X_pca"] = Matrix(std::move(x), DType::f32);
    mark("pca: host slots");
  });

  if (o.scaled_x && !scale_zc)
    step("download_x", [&] {
      gpu::scale_sparse_inplace(r, m, d_sd.data(), maxv);
      d.X = Matrix(download(r, m), DType::f32);
      m = DeviceCsr();
    });
  else if (background)
    step("download_x", [&] {  // started after the scale (the host buffer's allocation included), settled by the caller
      const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(g) * 4;
      const float* sp = dense_keep->data();
      if (o.keep_device_x) {
        size_t free_b = 0, total_b = 0;
        SCURRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
        if (bytes <= total_b / 4) {
          auto dx = std::make_shared<DeviceMatrix>();
          dx->data = sp, dx->n_rows = n, dx->n_cols = g, dx->device = r.device, dx->keep = dense_keep;
          d.device_x = std::move(dx);
        }
      }
      d.X = Matrix();
      d.pending_x = std::move(background_copy);
      dense_keep.reset();  // (the copy and device_x hold the matrix as long as they need it)
    });
  else if (o.scaled_x)
    step("download_x", [&] {
      DenseF x = host_dense.get();
      copy_to_host(r, x.data.data(), dense.data(), x.data.size() * 4);
      d.X = Matrix(std::move(x), DType::f32);
    });
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

}  // namespace scurry
