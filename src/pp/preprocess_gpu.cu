// The preprocessing chain on the GPU: the count matrix is uploaded once and stays on the device
// through QC, filters, normalize_total + log1p, HVG statistics, the HVG subset, scale and PCA. Only
// per-cell and per-gene statistics come back to the host, where the same code as the CPU path
// (src/pp/*.cpp) turns them into decisions and into the Dataset's slots. The matrix is filtered
// in place, and the sparse matrix is released once the dense scaled one exists, so the peak device
// memory is about the input plus the dense HVG matrix.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/device_csr.cuh"
#include "pp/kernels.cuh"
#include "pp/preprocess.hpp"

namespace scurry {

namespace {

template <class T>
DeviceArray<T> to_device(CudaResources& r, const std::vector<T>& h, const char* what) {
  DeviceArray<T> d(r, h.size(), what);
  if (!h.empty()) SCURRY_CUDA(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  return d;
}

void unsupported(bool cond, const std::string& what) {
  if (cond) throw InputError("--device gpu: " + what + " is not available on the GPU yet; use --device cpu");
}

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

}  // namespace

void preprocess_gpu(Context& ctx, Dataset& d, const PreprocessOptions& o, Timings* timings) {
  CudaResources& r = *ctx.cuda();
  Timings local;
  Timings& t = timings ? *timings : local;
  unsupported(!o.skip.empty(), "--skip");
  unsupported(!o.qc.layer.empty() || !o.normalize.layer.empty() || !o.scale.layer.empty(), "a layer as input");
  unsupported(o.normalize.exclude_highly_expressed, "exclude_highly_expressed");
  unsupported(o.log1p.base.has_value(), "log1p with a base");
  unsupported(o.hvg.flavor != "seurat" && o.hvg.flavor != "cell_ranger", "highly_variable_genes flavor " + o.hvg.flavor);
  unsupported(!o.hvg.batch_key.empty(), "highly_variable_genes with batch_key");
  unsupported(!o.scale.zero_center, "scale without zero_center");
  unsupported(o.scale.clip_below, "scale with clip_below");
  unsupported(!o.subset_hvg, "PCA without the HVG subset");
  if (d.X.empty()) throw InputError("preprocess: X is empty");

  // SCURRY_PROFILE=1: wall time of the phases inside the steps, on stderr.
  const bool profile = std::getenv("SCURRY_PROFILE") != nullptr;
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
    fn();
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    scope.set_extra(detail::concat(d.n_obs(), " x ", d.n_vars()));
  };
  r.memory->reset_peak();

  DeviceCsr m;
  t.set_meta("nnz_input", std::to_string(std::holds_alternative<CsrF>(d.X.m) ? d.X.nnz() : 0));
  step("upload", [&] {
    if (std::holds_alternative<CsrF>(d.X.m)) m = upload(r, std::get<CsrF>(d.X.m));
    else m = upload(r, to_csr_f(d.X));
    d.X = Matrix();  // the matrix lives on the device from here on
  });

  step("qc", [&] {
    mark_qc_vars(d, o.qc_vars);
    QcOptions q = o.qc;
    q.qc_vars = qc_var_names(o.qc_vars);
    const auto masks = qc_var_masks(d, q);
    if (masks.size() > 8) throw InputError("--device gpu: at most 8 --qc-vars sets");
    std::vector<uint8_t> bits(static_cast<size_t>(m.n_cols), 0);
    for (size_t s = 0; s < masks.size(); ++s)
      for (size_t g = 0; g < bits.size(); ++g)
        if (masks[s][g]) bits[g] |= static_cast<uint8_t>(1u << s);
    DeviceArray<uint8_t> dbits = to_device(r, bits, "QC gene sets");
    QcResult res;
    res.percent_top = qc_percent_top(q, m.n_cols);
    const std::vector<int> top(res.percent_top.begin(), res.percent_top.end());
    mark("qc: setup");
    gpu::RowQc rq = gpu::row_qc(r, m, masks.empty() ? nullptr : dbits.data(), static_cast<int>(masks.size()), top);
    mark("qc: row_qc (+download)");
    gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
    mark("qc: gene_sums");
    const int64_t n = m.n_rows, g = m.n_cols;
    res.n_genes_by_counts.assign(rq.n_genes.begin(), rq.n_genes.end());
    res.total_counts = rq.total;
    for (size_t k = 0; k < top.size(); ++k) {
      std::vector<double> pct(n);
      for (int64_t i = 0; i < n; ++i) pct[i] = rq.total[i] != 0 ? rq.top_sum[k][i] / rq.total[i] * 100.0 : 0.0;
      res.pct_counts_in_top.push_back(std::move(pct));
    }
    for (size_t s = 0; s < masks.size(); ++s) {
      std::vector<double> pct(n);
      for (int64_t i = 0; i < n; ++i) pct[i] = rq.total[i] != 0 ? rq.set_total[s][i] / rq.total[i] * 100.0 : 0.0;
      res.total_counts_qc.push_back(rq.set_total[s]);
      res.pct_counts_qc.push_back(std::move(pct));
    }
    const double dn = static_cast<double>(n);
    res.n_cells_by_counts.resize(g);
    res.mean_counts.resize(g);
    res.pct_dropout_by_counts.resize(g);
    res.var_total_counts = gs.sum;
    for (int64_t j = 0; j < g; ++j) {
      res.n_cells_by_counts[j] = static_cast<int64_t>(gs.nnz[j]);
      res.mean_counts[j] = gs.sum[j] / dn;
      res.pct_dropout_by_counts[j] = (1.0 - gs.nnz[j] / dn) * 100.0;
    }
    write_qc_metrics(d, res, q, true);
    mark("qc: host columns");
  });

  step("filter_cells", [&] {
    const auto& ng = d.obs.numeric("n_" + o.qc.var_type + "_by_" + o.qc.expr_type);
    const auto& tc = d.obs.numeric("total_" + o.qc.expr_type);
    std::vector<int64_t> n_genes(ng.begin(), ng.end());
    FilterCellsResult fr = filter_cells_from_stats(std::move(n_genes), tc, o.filter_cells);
    if (static_cast<int64_t>(fr.kept.size()) != m.n_rows) {
      DeviceArray<uint8_t> keep = to_device(r, fr.keep, "cell filter");
      filter_inplace(r, m, keep.data(), nullptr, m.n_cols);
    }
    apply_filter_cells(d, fr, true);
  });

  step("filter_genes", [&] {
    mark("filter_genes: start");
    gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
    mark("filter_genes: gene_sums");
    std::vector<int64_t> n_cells(gs.nnz.begin(), gs.nnz.end());
    FilterGenesResult fr = filter_genes_from_stats(std::move(n_cells), gs.sum, o.filter_genes);
    if (static_cast<int64_t>(fr.kept.size()) != m.n_cols) {
      std::vector<int32_t> map(static_cast<size_t>(m.n_cols), -1);
      for (size_t u = 0; u < fr.kept.size(); ++u) map[fr.kept[u]] = static_cast<int32_t>(u);
      DeviceArray<int32_t> dmap = to_device(r, map, "gene filter");
      filter_inplace(r, m, nullptr, dmap.data(), static_cast<int64_t>(fr.kept.size()));
    }
    mark("filter_genes: filter_inplace");
    apply_filter_genes(d, fr, true);
    t.set_meta("nnz_filtered", std::to_string(m.nnz));
  });

  if (o.counts_layer) step("counts_layer", [&] { d.layers["counts"] = Matrix(download(r, m), DType::f32); });

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
      target = median_of_positive(totals);
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
    mark("hvg: gene_sums");
    // scanpy's _get_mean_var: mean, (mean of squares - mean^2) * n / (n - 1), clamped at 0.
    const double n = static_cast<double>(m.n_rows);
    std::vector<double> mean(m.n_cols), var(m.n_cols);
    for (int64_t g = 0; g < m.n_cols; ++g) {
      mean[g] = gs.sum[g] / n;
      var[g] = std::max(0.0, (gs.sumsq[g] / n - mean[g] * mean[g]) * (n / (n - 1)));
    }
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
    t.set_meta("nnz_hvg", std::to_string(m.nnz));
  });

  const int64_t n = m.n_rows, g = m.n_cols;
  if (n < 2) throw InputError("scale: needs at least 2 cells");
  DeviceArray<float> dense;
  step("scale", [&] {
    gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::squares);
    const double dn = static_cast<double>(n);
    std::vector<double> mean(g), sd(g);
    for (int64_t j = 0; j < g; ++j) {
      mean[j] = gs.sum[j] / dn;
      const double v = std::max(0.0, (gs.sumsq[j] / dn - mean[j] * mean[j]) * (dn / (dn - 1)));
      sd[j] = v > 0 ? std::sqrt(v) : 1.0;
    }
    std::vector<float> mf(mean.begin(), mean.end()), sf(sd.begin(), sd.end());
    DeviceArray<float> dm = to_device(r, mf, "scale means"), ds = to_device(r, sf, "scale std");
    dense = DeviceArray<float>(r, static_cast<size_t>(n) * g, "dense scaled matrix");
    const float maxv = o.scale.max_value ? static_cast<float>(*o.scale.max_value) : 0.f;
    if (o.scale.max_value && !(*o.scale.max_value > 0)) throw InputError("scale: max_value must be > 0");
    gpu::scale_to_dense(r, m, dm.data(), ds.data(), true, maxv, dense.data());
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    m = DeviceCsr();  // the sparse matrix is no longer needed
    d.var.set("mean", Column::numeric(mean));
    d.var.set("std", Column::numeric(sd));
  });

  step("pca", [&] {
    const int64_t k = o.pca.n_comps ? *o.pca.n_comps : std::min<int64_t>(50, std::min(n, g) - 1);
    if (k < 1 || k >= std::min(n, g))
      throw InputError(detail::concat("pca: n_comps must be in [1, min(n_cells, n_genes) - 1] = [1, ",
                                      std::min(n, g) - 1, "], got ", k));
    DeviceArray<float> xpca(r, static_cast<size_t>(n) * k, "X_pca");
    mark("pca: start");
    gpu::PcaGpuResult pr = gpu::pca_dense(r, dense.data(), n, g, static_cast<int>(k), o.pca.zero_center, xpca.data());
    PcaResult res;
    DenseF x(n, k);
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

  if (o.scaled_x)
    step("download_x", [&] {
      DenseF x(n, g);
      copy_to_host(r, x.data.data(), dense.data(), x.data.size() * 4);
      d.X = Matrix(std::move(x), DType::f32);
    });
  t.set_meta("gpu_peak_bytes", std::to_string(r.memory->peak()));
}

}  // namespace scurry
