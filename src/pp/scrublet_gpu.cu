// Scrublet of one batch on the GPU (scrublet_gpu.hpp): the same steps as scrublet.cpp's host
// pipeline, over the cells on the device.
//
// The simulated doublets are never built: a doublet's row is (x_a + x_b) scaled to 1e6, and the
// embedding is linear in the row, so with R_i = (x_i / sd) W (the raw HVG counts of observed cell i
// projected by the PCA components W, genes scaled by the observed cells' sd) and t_i its HVG total,
// observed cell i sits at (1e6 / t_i) R_i - c W and doublet (a, b) at 1e6 / (t_a + t_b) (R_a + R_b)
// - c W (c the observed cells' mean / sd): n x k work instead of a 2n x g matrix. Row-sum order
// aside, the same float64 values as the host's projection of the doublet matrix.
#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <vector>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "exec/device_csr.cuh"
#include "pp/filter.hpp"
#include "pp/hvg.hpp"
#include "pp/chain_steps.hpp"
#include "pp/kernels.cuh"
#include "pp/scrublet_detail.hpp"
#include "pp/scrublet_gpu.hpp"
#include "pp/scrublet_knn_gpu.cuh"

namespace scurry {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int64_t kChunkFloats = int64_t{1} << 28;  // dense scaled rows per PCA chunk (1 GiB)

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <class T>
DeviceArray<T> on_device(CudaResources& r, const std::vector<T>& h, const char* what) {
  DeviceArray<T> d(r, h.size(), what);
  if (!h.empty())
    SCURRY_CUDA(cudaMemcpyAsync(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, r.stream));
  return d;
}

// R[i, c] = sum over row i's entries (j, v) of v Wp[j, c] (float64, entry order); a warp per row,
// lanes over the k <= 64 components.
__global__ void project_rows_kernel(const int64_t* indptr, const int32_t* idx, const float* val, int64_t n,
                                    const double* Wp, int k, double* R) {
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= n) return;
  double a0 = 0, a1 = 0;
  const int c0 = lane, c1 = lane + kWarp;
  for (int64_t p = indptr[row]; p < indptr[row + 1]; ++p) {
    const double v = val[p];
    const double* w = Wp + static_cast<int64_t>(idx[p]) * k;
    if (c0 < k) a0 += v * w[c0];
    if (c1 < k) a1 += v * w[c1];
  }
  if (c0 < k) R[row * k + c0] = a0;
  if (c1 < k) R[row * k + c1] = a1;
}

// The embedding: rows i < n observed, f_i R_i - cw; rows n + s simulated, f_s (R_a + R_b) - cw with
// parents (a, b) = par[2s], par[2s + 1]; f = 1e6 / total (0 for an all-zero row, as the host leaves it).
__global__ void embed_kernel(const double* R, const double* tot, int64_t n, int64_t n_sim, const int64_t* par, int k,
                             const double* cw, float* out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= (n + n_sim) * k) return;
  const int64_t i = e / k;
  const int c = static_cast<int>(e - i * k);
  double v;
  if (i < n) {
    const double t = tot[i];
    v = t > 0 ? 1e6 / t * R[i * k + c] : 0.0;
  } else {
    const int64_t a = par[2 * (i - n)], b = par[2 * (i - n) + 1];
    const double t = tot[a] + tot[b];
    v = t > 0 ? 1e6 / t * (R[a * k + c] + R[b * k + c]) : 0.0;
  }
  out[e] = static_cast<float>(v - cw[c]);
}

}  // namespace

ScrubletBatchResult scrublet_counts_gpu(const Context& ctx, const CsrF& counts0, const ScrubletOptions& opt,
                                        uint64_t seed) {
  const char* where = "scrublet";
  if (ctx.backend() != Backend::cuda || ctx.cuda() == nullptr) fail_input(where, "the GPU pipeline needs a CUDA context");
  if (!scrublet_gpu_supported(opt)) fail_input(where, "these options are not available on the GPU pipeline");
  CudaResources& r = *ctx.cuda();
  EnvLaps laps("SCURRY_SCRUBLET_TIMES", "scrublet gpu");  // the stream synchronised at each lap
  auto lap = [&](const char* what) {
    if (!laps.on()) return;
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    laps.lap(what);
  };
  ScrubletBatchResult res;
  const int64_t n_in = counts0.n_rows;
  res.doublet_scores_obs.assign(static_cast<size_t>(n_in), std::numeric_limits<double>::quiet_NaN());
  res.predicted_doublets.assign(static_cast<size_t>(n_in), 0);
  // The doublet pairs (scanpy's RNG, sequential: ~0.5 s at 1.3M cells) on a host thread while the
  // device works, started before the upload for the n_in cells (the filters rarely drop a cell;
  // drawn again for the cells left when they do).
  auto draw = [seed, &opt](int64_t nc) {
    return std::async(std::launch::async, [nc, seed, n_sim = scrublet_detail::n_simulated(nc, opt)] {
      return scrublet_detail::draw_parents(nc, n_sim, seed);
    });
  };
  std::future<std::vector<int64_t>> pairs;
  try {
    if (n_in >= 3) pairs = draw(n_in);
  } catch (const InputError&) {  // no doublet to simulate: said below, for the cells the filters leave
  }
  DeviceCsr m = upload(r, counts0);
  lap("upload");

  // filter_genes(min_cells=3), then filter_cells(min_genes=3), decided by the host code of the CPU path.
  {
    const gpu::GeneSums gs = gpu::gene_sums(r, m, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::count);
    FilterGenesOptions fg;
    fg.min_cells = 3;
    const FilterGenesResult gr = filter_genes_from_stats(std::vector<int64_t>(gs.nnz.begin(), gs.nnz.end()), gs.sum, fg);
    if (gr.kept.empty()) fail_input(where, "no gene is expressed in 3 or more cells (", n_in, " cells)");
    if (static_cast<int64_t>(gr.kept.size()) != m.n_cols) {
      std::vector<int32_t> map(static_cast<size_t>(m.n_cols), -1);
      for (size_t u = 0; u < gr.kept.size(); ++u) map[gr.kept[u]] = static_cast<int32_t>(u);
      DeviceArray<int32_t> dmap = on_device(r, map, "scrublet gene filter");
      filter_inplace(r, m, nullptr, dmap.data(), static_cast<int64_t>(gr.kept.size()));
    }
  }
  FilterCellsResult cr;
  {
    gpu::RowQc rq = gpu::row_qc(r, m, nullptr, 0, {});
    FilterCellsOptions fc;
    fc.min_genes = 3;
    cr = filter_cells_from_stats(std::vector<int64_t>(rq.n_genes.begin(), rq.n_genes.end()), std::move(rq.total), fc);
    if (cr.kept.size() < 3) fail_input(where, "fewer than 3 cells express 3 or more genes");
    if (cr.kept.size() != static_cast<size_t>(n_in)) {
      DeviceArray<uint8_t> keep = on_device(r, cr.keep, "scrublet cell filter");
      filter_inplace(r, m, keep.data(), nullptr, m.n_cols);
    }
  }
  const int64_t n = m.n_rows;
  const int64_t n_sim = scrublet_detail::n_simulated(n, opt);
  res.n_neighbors = scrublet_detail::neighbours_k(n, opt);
  if (n != n_in) {
    if (pairs.valid()) pairs.wait();
    pairs = draw(n);
  }
  lap("filters");

  // HVGs: seurat on log1p(normalize_total(counts)); the raw counts kept for the HVG columns.
  DeviceCsr raw = copy_on_device(r, m);
  std::vector<int64_t> hvg;
  {
    DeviceArray<double> dt(r, static_cast<size_t>(n), "scrublet row totals");
    gpu::row_totals(r, m, dt.data());
    std::vector<double> totals(static_cast<size_t>(n));
    SCURRY_CUDA(cudaMemcpyAsync(totals.data(), dt.data(), totals.size() * 8, cudaMemcpyDeviceToHost, r.stream));
    SCURRY_CUDA(cudaStreamSynchronize(r.stream));
    gpu::normalize_log1p(r, m, chain::median_of_positive(totals), true, nullptr);
    const gpu::GeneSums hs = gpu::gene_sums(r, m, gpu::GeneTransform::expm1, nullptr, gpu::SecondStat::squares);
    m = DeviceCsr();
    std::vector<double> mean, var;
    mean_var_from_sums(hs.sum, hs.sumsq, static_cast<double>(n), mean, var);
    const HvgResult hv = hvg_dispersion_from_moments(mean, var, HvgOptions{});
    std::vector<int32_t> map(hv.highly_variable.size(), -1);
    for (size_t j = 0; j < hv.highly_variable.size(); ++j)
      if (hv.highly_variable[j]) map[j] = static_cast<int32_t>(hvg.size()), hvg.push_back(static_cast<int64_t>(j));
    if (hvg.size() < 2) fail_input(where, "only ", hvg.size(), " highly variable gene(s) found among ", n, " cells");
    DeviceArray<int32_t> dmap = on_device(r, map, "scrublet HVG subset");
    filter_inplace(r, raw, nullptr, dmap.data(), static_cast<int64_t>(hvg.size()));
  }
  const int64_t g = static_cast<int64_t>(hvg.size());
  res.n_genes_used = g;
  lap("normalize + log1p + hvg");

  // Observed rows scaled to 1e6 (a copy; the raw HVG counts stay for the projection), their per-gene
  // mean and sd (ddof 1), as the host's gene_stats.
  std::vector<double> tot;
  DeviceCsr obs = copy_on_device(r, raw);
  gpu::normalize_log1p(r, obs, 1e6, false, &tot);  // tot: the raw HVG totals
  const gpu::GeneSums os = gpu::gene_sums(r, obs, gpu::GeneTransform::identity, nullptr, gpu::SecondStat::squares);
  std::vector<double> mu, var;
  mean_var_from_sums(os.sum, os.sumsq, static_cast<double>(n), mu, var);
  std::vector<double> inv_sd(static_cast<size_t>(g)), centre(static_cast<size_t>(g));
  std::vector<float> sd_f(static_cast<size_t>(g)), centre_f(static_cast<size_t>(g));
  for (int64_t j = 0; j < g; ++j) {
    const double sd = std::sqrt(var[j]);
    inv_sd[j] = sd > 0 ? 1.0 / sd : 0.0;
    centre[j] = mu[j] * inv_sd[j];
    sd_f[j] = sd > 0 ? static_cast<float>(sd) : std::numeric_limits<float>::infinity();  // x / inf = 0
    centre_f[j] = static_cast<float>(centre[j]);
  }
  lap("scale + z-score stats");

  // PCA fitted on the z-scored observed rows (dense chunks: x / sd - mean / sd), Gram + cuSOLVER.
  const int k = static_cast<int>(std::min<int64_t>(opt.n_prin_comps, std::min<int64_t>(n, g) - 1));
  std::vector<double> V;  // g x k column-major
  {
    DeviceArray<float> d_sd = on_device(r, sd_f, "scrublet gene sd");
    DeviceArray<float> d_centre = on_device(r, centre_f, "scrublet gene centre");
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n, kChunkFloats / g));
    DeviceArray<float> buf(r, static_cast<size_t>(chunk * g), "scrublet z-scored rows (one chunk)");
    gpu::GramAccumulator acc(r, g, chunk);
    for (int64_t a = 0; a < n; a += chunk) {
      gpu::CsrView<float, int32_t> v = gpu::view(obs);
      v.n_rows = std::min(chunk, n - a);
      v.indptr += a;
      gpu::scale_to_dense(r, v, d_centre.data(), d_sd.data(), false, 0.f, buf.data());
      gpu::subtract_columns(r, buf.data(), v.n_rows, g, d_centre.data());
      acc.add(buf.data(), v.n_rows);
    }
    V = acc.finish(n, k, true).V;
  }
  obs = DeviceCsr();
  lap("pca");

  // R = (raw / sd) W, then the embedding of the observed cells and of the doublets.
  std::vector<double> Wp(static_cast<size_t>(g * k)), cw(static_cast<size_t>(k), 0.0);
  for (int64_t j = 0; j < g; ++j)
    for (int c = 0; c < k; ++c) {
      const double w = V[static_cast<size_t>(c) * g + j];
      Wp[j * k + c] = inv_sd[j] * w;
      cw[c] += centre[j] * w;
    }
  DeviceArray<double> d_Wp = on_device(r, Wp, "scrublet scaled components");
  DeviceArray<double> d_cw = on_device(r, cw, "scrublet centre projection");
  DeviceArray<double> d_tot = on_device(r, tot, "scrublet HVG totals");
  DeviceArray<double> R(r, static_cast<size_t>(n * k), "scrublet raw projections");
  project_rows_kernel<<<blocks_for(n * kWarp), kThreads, 0, r.stream>>>(raw.indptr.data(), raw.indices.data(),
                                                                         raw.data.data(), n, d_Wp.data(), k, R.data());
  SCURRY_CUDA_LAUNCH();
  raw = DeviceCsr();
  lap("projection");
  res.doublet_parents = pairs.get();
  lap("doublet pairs (wait)");
  DeviceArray<int64_t> d_par = on_device(r, res.doublet_parents, "scrublet doublet parents");
  DeviceArray<float> pts(r, static_cast<size_t>((n + n_sim) * k), "scrublet embedding");
  embed_kernel<<<blocks_for((n + n_sim) * k), kThreads, 0, r.stream>>>(R.data(), d_tot.data(), n, n_sim, d_par.data(),
                                                                      k, d_cw.data(), pts.data());
  SCURRY_CUDA_LAUNCH();
  R.release();
  d_par.release();
  lap("embedding");

  const int64_t k_adj = scrublet_detail::k_adjusted(res.n_neighbors, n, n_sim);
  std::vector<int32_t> n_dbl;
  if (k_adj >= 2 && k_adj < n + n_sim) {
    n_dbl = gpu::scrublet_sim_neighbor_counts(r, pts.data(), n + n_sim, k, n, k_adj,
                                              scrublet_detail::count_options(opt, n, seed), nullptr);
  } else {  // k_adj - 1 = every other point, or none
    n_dbl.assign(static_cast<size_t>(n + n_sim), 0);
    if (k_adj >= 2)
      for (int64_t i = 0; i < n + n_sim; ++i) n_dbl[i] = static_cast<int32_t>(n_sim - (i >= n ? 1 : 0));
  }
  lap("neighbour count");
  scrublet_detail::finish(res, n_dbl, n, n_sim, k_adj, opt, cr.kept, n_in);
  lap("scores + threshold");
  return res;
}

}  // namespace scurry
