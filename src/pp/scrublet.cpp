#include "pp/scrublet.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <cmath>
#include <limits>
#include <random>
#include <unordered_set>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "graph/knn.hpp"
#include "graph/knn_gpu.hpp"
#include "pp/filter.hpp"
#include "pp/hvg.hpp"
#include "pp/linalg.hpp"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "pp/obs_groups.hpp"
#include "pp/pca.hpp"
#include "pp/scrublet_detail.hpp"
#include "pp/scrublet_gpu.hpp"
#include "pp/scrublet_knn_gpu.hpp"

namespace scurry {
namespace {

constexpr int64_t kGpuKnnMaxK = 513;  // knn_exact_gpu's largest k
using scrublet_detail::kIvfCandidatesPerK;
using scrublet_detail::kIvfMinCells;

constexpr int64_t kRowsPerBlock = 2048;

// Sum of two rows (sorted indices), appended to out.
void add_rows(const CsrF& X, int64_t a, int64_t b, std::vector<int32_t>& idx, std::vector<float>& val) {
  int64_t p = X.indptr[a], q = X.indptr[b];
  const int64_t pe = X.indptr[a + 1], qe = X.indptr[b + 1];
  while (p < pe || q < qe) {
    if (q >= qe || (p < pe && X.indices[p] < X.indices[q])) {
      idx.push_back(X.indices[p]);
      val.push_back(X.data[p++]);
    } else if (p >= pe || X.indices[q] < X.indices[p]) {
      idx.push_back(X.indices[q]);
      val.push_back(X.data[q++]);
    } else {
      idx.push_back(X.indices[p]);
      val.push_back(X.data[p++] + X.data[q++]);
    }
  }
}

// Each stored value v becomes (v - mu_j) / sd_j, densified (z-score), or v / sd_j (sparse), per opt.
struct Scaling {
  std::vector<double> mean, sd;
};

// Per-gene mean and std (ddof 1) of the rows of X (float64, block-ordered sums).
Scaling gene_stats(const Context& ctx, const CsrF& X) {
  const size_t g = static_cast<size_t>(X.n_cols);
  const RowBlocks rb = RowBlocks::uniform(X.n_rows, kRowsPerBlock);
  std::vector<double> acc;
  reduce_blocks(ctx.threads(), rb.n_blocks(), 2 * g, acc, [&](int64_t b, double* p) {
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r)
      for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) {
        const double v = X.data[k];
        p[X.indices[k]] += v;
        p[g + X.indices[k]] += v * v;
      }
  });
  Scaling s;
  s.mean.resize(g);
  s.sd.resize(g);
  const double n = static_cast<double>(X.n_rows);
  for (size_t j = 0; j < g; ++j) {
    s.mean[j] = acc[j] / n;
    const double var = std::max(0.0, (acc[g + j] / n - s.mean[j] * s.mean[j]) * n / (n - 1));
    s.sd[j] = std::sqrt(var);
  }
  return s;
}

// Dense float32 projection (rows x k) of (X D^-1 - 1 c^T) W, W g x k (D = diag(sd) or 1, c the
// centre of the scaled columns or 0).
DenseF project(const Context& ctx, const CsrF& X, const std::vector<double>& inv_sd, const std::vector<double>& centre,
               const DenseD& W) {
  const int64_t n = X.n_rows, k = W.n_cols;
  std::vector<double> cw(static_cast<size_t>(k), 0.0);  // c^T W
  for (int64_t j = 0; j < W.n_rows; ++j)
    for (int64_t c = 0; c < k; ++c) cw[c] += centre[j] * W(j, c);
  DenseF out(n, k);
  const RowBlocks rb = RowBlocks::uniform(n, kRowsPerBlock);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    std::vector<double> acc(static_cast<size_t>(k));
    for (int64_t r = rb.begin(b); r < rb.end(b); ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = X.indptr[r]; p < X.indptr[r + 1]; ++p) {
        const int32_t j = X.indices[p];
        const double v = static_cast<double>(X.data[p]) * inv_sd[j];
        const double* w = W.row(j);
        for (int64_t c = 0; c < k; ++c) acc[c] += v * w[c];
      }
      for (int64_t c = 0; c < k; ++c) out(r, c) = static_cast<float>(acc[c] - cw[c]);
    }
  });
  return out;
}

// Rows scaled to a total of `target` (float32 result, float64 arithmetic; all-zero rows stay).
void scale_rows_to(CsrF& X, double target) {
  for (int64_t r = 0; r < X.n_rows; ++r) {
    double s = 0;
    for (int64_t p = X.indptr[r]; p < X.indptr[r + 1]; ++p) s += X.data[p];
    if (s <= 0) continue;
    const float f = static_cast<float>(target / s);
    for (int64_t p = X.indptr[r]; p < X.indptr[r + 1]; ++p) X.data[p] *= f;
  }
}

void log1p_values(CsrF& X) {
  for (auto& v : X.data) v = static_cast<float>(std::log1p(static_cast<double>(v)));
}

}  // namespace

std::optional<double> threshold_minimum(const std::vector<double>& values, int nbins, int max_iter) {
  if (values.empty()) return std::nullopt;
  const double lo = *std::min_element(values.begin(), values.end());
  const double hi = *std::max_element(values.begin(), values.end());
  // numpy.histogram(values, bins=nbins, range=(lo, hi)): equal bins, the last one closed; a
  // constant input gets the range (lo - 0.5, hi + 0.5).
  double a = lo, b = hi;
  if (a == b) a -= 0.5, b += 0.5;
  std::vector<double> hist(static_cast<size_t>(nbins), 0.0), centres(static_cast<size_t>(nbins));
  const double width = (b - a) / nbins;
  for (int i = 0; i < nbins; ++i) centres[i] = a + (i + 0.5) * width;
  for (double v : values) {
    int64_t bin = static_cast<int64_t>((v - a) / (b - a) * nbins);
    bin = std::clamp<int64_t>(bin, 0, nbins - 1);
    hist[bin] += 1;
  }
  auto maxima = [](const std::vector<double>& h) {
    std::vector<int> idx;
    int direction = 1;
    for (size_t i = 0; i + 1 < h.size(); ++i) {
      if (direction > 0) {
        if (h[i + 1] < h[i]) {
          direction = -1;
          idx.push_back(static_cast<int>(i));
        }
      } else if (h[i + 1] > h[i]) {
        direction = 1;
      }
    }
    return idx;
  };
  std::vector<int> mx;
  std::vector<double> sm(hist.size());
  int counter = 0;
  for (; counter < max_iter; ++counter) {
    // scipy.ndimage.uniform_filter1d(size=3, mode='reflect'): edges repeat the end value.
    const size_t n = hist.size();
    for (size_t i = 0; i < n; ++i) {
      const double l = hist[i == 0 ? 0 : i - 1], r = hist[i + 1 == n ? n - 1 : i + 1];
      sm[i] = (l + hist[i] + r) / 3.0;
    }
    hist.swap(sm);
    mx = maxima(hist);
    if (mx.size() < 3) break;
  }
  if (mx.size() != 2 || counter == max_iter - 1) return std::nullopt;
  int best = mx[0];
  for (int i = mx[0]; i <= mx[1]; ++i)
    if (hist[i] < hist[best]) best = i;
  return centres[best];
}

ScrubletBatchResult scrublet_counts(const Context& ctx_in, const CsrF& counts0, const ScrubletOptions& opt,
                                    uint64_t seed) {
  const char* where = "scrublet";
  // On a CUDA context, above kIvfMinCells cells (or with SCURRY_SCRUBLET_PIPELINE=device), every step
  // over the cells on the device (scrublet_gpu.hpp) where it takes the options; SCURRY_SCRUBLET_PIPELINE
  // =host keeps this host pipeline. Small inputs stay here: their exact search then gives the CPU's
  // scores (the device PCA's rounding would move a few cells across the k_adj-th neighbour).
  if (ctx_in.backend() == Backend::cuda && scrublet_gpu_supported(opt)) {
    const char* e = std::getenv("SCURRY_SCRUBLET_PIPELINE");
    const std::string mode = e ? e : "";
    if (!mode.empty() && mode != "host" && mode != "device")
      fail_input(where, "SCURRY_SCRUBLET_PIPELINE=", mode, " is not host or device");
    if (mode == "device" || (mode.empty() && counts0.n_rows > kIvfMinCells))
      return scrublet_counts_gpu(ctx_in, counts0, opt, seed);
  }
  // Every step on the host but the neighbour count, which runs on ctx_in's GPU when it has one
  // (below: the count search, or knn_exact_gpu for cosine where k_adj <= kGpuKnnMaxK).
  const Context host = Context::cpu(ctx_in.threads());
  const Context& ctx = host;
  EnvLaps laps("SCURRY_SCRUBLET_TIMES", "scrublet");  // SCURRY_SCRUBLET_TIMES=1: phase times on stderr
  ScrubletBatchResult res;
  const int64_t n_in = counts0.n_rows;
  res.doublet_scores_obs.assign(static_cast<size_t>(n_in), std::numeric_limits<double>::quiet_NaN());
  res.predicted_doublets.assign(static_cast<size_t>(n_in), 0);
  // filter_genes(min_cells=3), then filter_cells(min_genes=3).
  FilterGenesOptions fg;
  fg.min_cells = 3;
  const FilterGenesResult gr = filter_genes(ctx, counts0, fg);
  if (gr.kept.empty()) fail_input(where, "no gene is expressed in 3 or more cells (", n_in, " cells)");
  CsrF counts = take_cols(counts0, gr.kept);
  FilterCellsOptions fc;
  fc.min_genes = 3;
  const FilterCellsResult cr = filter_cells(ctx, counts, fc);
  if (cr.kept.size() < 3) fail_input(where, "fewer than 3 cells express 3 or more genes");
  if (cr.kept.size() != static_cast<size_t>(n_in)) counts = take_rows(counts, cr.kept);
  const int64_t n = counts.n_rows;
  laps.lap("filters");
  // HVGs: seurat on log1p(normalize_total(counts)).
  CsrF norm = counts;
  normalize_total(ctx, norm, NormalizeTotalOptions{});
  CsrF logn = norm;
  log1p(ctx, logn, Log1pOptions{});
  const HvgResult hv = highly_variable_genes(ctx, logn, HvgOptions{});
  std::vector<int64_t> hvg;
  for (size_t j = 0; j < hv.highly_variable.size(); ++j)
    if (hv.highly_variable[j]) hvg.push_back(static_cast<int64_t>(j));
  if (hvg.size() < 2) fail_input(where, "only ", hvg.size(), " highly variable gene(s) found among ", n, " cells");
  res.n_genes_used = static_cast<int64_t>(hvg.size());
  laps.lap("normalize + log1p + hvg");
  const CsrF raw = take_cols(counts, hvg);
  CsrF obs = take_cols(norm, hvg);
  const int64_t n_sim = scrublet_detail::n_simulated(n, opt);
  res.doublet_parents = scrublet_detail::draw_parents(n, n_sim, seed);
  laps.lap("doublet pairs");
  std::mt19937_64 rng(seed);
  CsrF sim = CsrF::zeros(n_sim, raw.n_cols);
  sim.indptr[0] = 0;
  for (int64_t s = 0; s < n_sim; ++s) {
    add_rows(raw, res.doublet_parents[2 * s], res.doublet_parents[2 * s + 1], sim.indices, sim.data);
    sim.indptr[s + 1] = static_cast<int64_t>(sim.data.size());
  }
  if (opt.synthetic_doublet_umi_subsampling < 1.0) {
    // scrublet's subsample_counts: each count thinned binomially at the rate.
    for (auto& v : sim.data)
      v = static_cast<float>(std::binomial_distribution<int64_t>(static_cast<int64_t>(v), opt.synthetic_doublet_umi_subsampling)(rng));
  }
  laps.lap("simulated doublets");
  if (opt.log_transform) {
    log1p_values(obs);
    log1p_values(sim);
  }
  scale_rows_to(obs, 1e6);
  scale_rows_to(sim, 1e6);
  // z-score / centre / scale with the observed cells' statistics, then PCA fitted on the observed.
  const Scaling st = gene_stats(ctx, obs);
  const size_t g = hvg.size();
  std::vector<double> inv_sd(g, 1.0), centre(g, 0.0);
  for (size_t j = 0; j < g; ++j) {
    if (opt.normalize_variance) inv_sd[j] = st.sd[j] > 0 ? 1.0 / st.sd[j] : 0.0;
    if (opt.mean_center) centre[j] = st.mean[j] * inv_sd[j];
  }
  CsrF obs_scaled = obs;
  for (int64_t r = 0; r < obs_scaled.n_rows; ++r)
    for (int64_t p = obs_scaled.indptr[r]; p < obs_scaled.indptr[r + 1]; ++p)
      obs_scaled.data[p] = static_cast<float>(obs_scaled.data[p] * inv_sd[obs_scaled.indices[p]]);
  PcaOptions po;
  po.n_comps = std::min<int64_t>(opt.n_prin_comps, std::min<int64_t>(n, static_cast<int64_t>(g)) - 1);
  po.zero_center = opt.mean_center;
  po.svd_solver = "arpack";
  laps.lap("scale + z-score stats");
  const PcaResult pr = pca(ctx, obs_scaled, po);
  laps.lap("pca");
  const DenseF m_obs = project(ctx, obs, inv_sd, centre, pr.components);
  const DenseF m_sim = project(ctx, sim, inv_sd, centre, pr.components);
  laps.lap("projection");
  // kNN over observed + simulated.
  const int64_t k_comp = m_obs.n_cols;
  DenseF all(n + n_sim, k_comp);
  std::copy(m_obs.data.begin(), m_obs.data.end(), all.data.begin());
  std::copy(m_sim.data.begin(), m_sim.data.end(), all.data.begin() + n * k_comp);
  res.n_neighbors = scrublet_detail::neighbours_k(n, opt);
  const int64_t k_adj = scrublet_detail::k_adjusted(res.n_neighbors, n, n_sim);
  const KnnMetric metric = parse_knn_metric(opt.knn_dist_metric, where);
  const bool approx = opt.use_approx_neighbors.value_or(false);
  // On a CUDA context (euclidean): the GPU count search (scrublet_knn_gpu.hpp), which returns the
  // number of simulated neighbours directly, for any k_adj: exact (every list) when asked or up to
  // kIvfMinCells observed cells, as the CPU's choice; above that its IVF lists, with candidates
  // enough for ~kIvfCandidatesPerK k_adj each.
  const bool gpu_count = !approx && ctx_in.backend() == Backend::cuda && metric == KnnMetric::euclidean &&
                         k_comp <= kScrubletKnnMaxDims && k_adj >= 2 && k_adj < n + n_sim;
  const bool gpu_knn = !approx && !gpu_count && ctx_in.backend() == Backend::cuda && k_adj <= kGpuKnnMaxK &&
                       k_adj < n + n_sim;
  // Unset, on the CPU, above kIvfMinCells observed cells (where scanpy's neighbors switch to
  // pynndescent): IVF-Flat, with probes enough for ~kIvfCandidatesPerK k_adj candidates (the exact
  // search is O(n^2 d): 300,000 points at 100,000 cells). Recall checked in test_scrublet.
  const bool ivf = !opt.use_approx_neighbors.has_value() && !gpu_count && !gpu_knn && n > kIvfMinCells &&
                   k_adj < n + n_sim;
  // The number of simulated cells among each point's k_adj - 1 nearest others: the cell itself
  // (column 0 of a search) is not counted: scanpy 1.10.4's scores of the simulated doublets are those
  // of their k_adj - 1 other neighbours (checked against its stored scores), N stays k_adj.
  std::vector<int32_t> n_dbl;
  if (gpu_count) {
    n_dbl = scrublet_sim_neighbor_counts_gpu(ctx_in, all, n, k_adj, scrublet_detail::count_options(opt, n, seed));
  } else {
    IvfCpuOptions io;
    if (ivf) {
      const int64_t tot = n + n_sim;
      io.n_lists = std::clamp<int64_t>(std::llround(std::sqrt(static_cast<double>(tot))), 1, tot);
      const double per_list = static_cast<double>(tot) / static_cast<double>(io.n_lists);
      io.n_probes = std::clamp<int64_t>(
          std::max<int64_t>(8, static_cast<int64_t>(std::ceil(kIvfCandidatesPerK * static_cast<double>(k_adj) / per_list))),
          1, io.n_lists);
      io.seed = seed;
    }
    const Knn nn = approx    ? knn_hnsw(ctx, all, k_adj, metric, HnswOptions{16, 200, 0, seed})
                   : gpu_knn ? knn_exact_gpu(ctx_in, all, k_adj, metric)
                   : ivf     ? knn_ivf(ctx, all, k_adj, metric, io)
                             : knn_exact(ctx, all, k_adj, metric);
    n_dbl.assign(static_cast<size_t>(n + n_sim), 0);
    for (int64_t i = 0; i < n + n_sim; ++i)
      for (int64_t j = 1; j < k_adj; ++j) n_dbl[i] += nn.index(i, j) >= n;
  }
  laps.lap(gpu_count ? "neighbour count (gpu)" : "neighbour search");
  scrublet_detail::finish(res, n_dbl, n, n_sim, k_adj, opt, cr.kept, n_in);
  laps.lap("scores + threshold");
  return res;
}

bool scrublet_gpu_supported(const ScrubletOptions& opt) {
  return opt.knn_dist_metric == "euclidean" && !opt.log_transform && opt.synthetic_doublet_umi_subsampling == 1.0 &&
         opt.normalize_variance && opt.mean_center && opt.n_prin_comps <= kScrubletKnnMaxDims &&
         !opt.use_approx_neighbors.value_or(false);
}

namespace scrublet_detail {

int64_t n_simulated(int64_t n, const ScrubletOptions& opt) {
  const char* where = "scrublet";
  const int64_t n_sim = static_cast<int64_t>(static_cast<double>(n) * opt.sim_doublet_ratio);
  if (n_sim < 1) fail_input(where, "sim_doublet_ratio=", opt.sim_doublet_ratio, " simulates no doublet");
  const double n2 = static_cast<double>(n) * static_cast<double>(n);
  if (static_cast<double>(n_sim) > n2) fail_input(where, "cannot simulate ", n_sim, " doublets from ", n, " cells");
  return n_sim;
}

std::vector<int64_t> draw_parents(int64_t n, int64_t n_sim, uint64_t seed) {
  // Simulated doublets: n_sim distinct ordered pairs of [0, n)^2 (sklearn's
  // sample_without_replacement over n^2 codes, tracking selection), parents = code / n, code % n.
  // numpy's legacy RandomState(seed) is MT19937 seeded by init_genrand(seed & 0xffffffff), which is
  // std::mt19937(seed); RandomState.randint(m) for m - 1 < 2^32 draws 32-bit words masked to the
  // smallest 2^b - 1 >= m - 1 until one is <= m - 1. sklearn's tracking selection redraws repeats.
  // So the pairs are scanpy's own (scanpy 1.10 seeds a fresh RandomState(random_state) per batch).
  std::mt19937 mt(static_cast<uint32_t>(seed & 0xffffffffu));
  std::unordered_set<uint64_t> seen;
  seen.reserve(static_cast<size_t>(2 * n_sim));
  std::vector<int64_t> parents;
  parents.resize(static_cast<size_t>(2 * n_sim));
  const uint64_t total = static_cast<uint64_t>(n) * static_cast<uint64_t>(n);
  auto randint = [&](uint64_t m) -> uint64_t {
    const uint64_t hi = m - 1;
    if (hi == 0) return 0;
    uint64_t mask = hi;
    for (int sh = 1; sh < 64; sh <<= 1) mask |= mask >> sh;
    if (hi <= 0xffffffffu) {
      uint64_t v;
      do v = static_cast<uint64_t>(mt()) & mask;
      while (v > hi);
      return v;
    }
    uint64_t v;  // numpy: two 32-bit words, high first
    do v = ((static_cast<uint64_t>(mt()) << 32) | mt()) & mask;
    while (v > hi);
    return v;
  };
  for (int64_t s = 0; s < n_sim; ++s) {
    uint64_t code;
    do code = randint(total);
    while (!seen.insert(code).second);
    parents[2 * s] = static_cast<int64_t>(code / static_cast<uint64_t>(n));
    parents[2 * s + 1] = static_cast<int64_t>(code % static_cast<uint64_t>(n));
  }
  return parents;
}

int neighbours_k(int64_t n, const ScrubletOptions& opt) {
  const int k = opt.n_neighbors ? *opt.n_neighbors : static_cast<int>(std::nearbyint(0.5 * std::sqrt(static_cast<double>(n))));
  if (k < 1) fail_input("scrublet", "n_neighbors=", k, " must be at least 1");
  return k;
}

int64_t k_adjusted(int k, int64_t n, int64_t n_sim) {
  const double r = static_cast<double>(n_sim) / static_cast<double>(n);
  return std::min<int64_t>(static_cast<int64_t>(std::nearbyint(k * (1 + r))), n + n_sim);
}

ScrubletKnnOptions count_options(const ScrubletOptions& opt, int64_t n, uint64_t seed) {
  ScrubletKnnOptions so;
  // Exact where asked, up to kIvfMinCells cells (the CPU's choice), and wherever the exact search
  // costs little on the device (n_points^2 <= kGpuExactPairs: ~0.3 s on an H200 at the bound); IVF
  // lists above. SCURRY_SCRUBLET_KNN=exact|ivf overrides it (tests, benchmarks).
  const double pts = static_cast<double>(n) * (1.0 + opt.sim_doublet_ratio);
  so.exact = opt.use_approx_neighbors.has_value() || n <= kIvfMinCells || pts * pts <= kGpuExactPairs;
  if (const char* e = std::getenv("SCURRY_SCRUBLET_KNN")) {
    const std::string m = e;
    if (m != "exact" && m != "ivf") fail_input("scrublet", "SCURRY_SCRUBLET_KNN=", m, " is not exact or ivf");
    so.exact = m == "exact";
  }
  so.candidates_per_k = kIvfCandidatesPerK;
  if (const char* e = std::getenv("SCURRY_SCRUBLET_CANDIDATES_PER_K")) {  // the IVF lists' size (benchmarks)
    char* end = nullptr;
    const double v = std::strtod(e, &end);
    if (end == e || *end != '\0' || !(v >= 1 && v <= 1024))
      fail_input("scrublet", "SCURRY_SCRUBLET_CANDIDATES_PER_K=", e, " is not a number in [1, 1024]");
    so.candidates_per_k = v;
  }
  so.seed = seed;
  return so;
}

void finish(ScrubletBatchResult& res, const std::vector<int32_t>& n_dbl, int64_t n, int64_t n_sim, int64_t k_adj,
            const ScrubletOptions& opt, const std::vector<int64_t>& kept, int64_t n_in) {
  const double rho = opt.expected_doublet_rate, N = static_cast<double>(k_adj);
  const double r = static_cast<double>(n_sim) / static_cast<double>(n);
  std::vector<double> score(static_cast<size_t>(n + n_sim));
  for (int64_t i = 0; i < n + n_sim; ++i) {
    const double q = (static_cast<double>(n_dbl[i]) + 1) / (N + 2);
    score[i] = q * rho / r / (1 - rho - q * (1 - rho - rho / r));
  }
  res.doublet_scores_sim.assign(score.begin() + n, score.end());
  res.threshold = opt.threshold ? opt.threshold : threshold_minimum(res.doublet_scores_sim);
  if (!res.threshold)
    log::warn("scrublet: failed to find the doublet threshold automatically (no two modes in the simulated "
              "scores' histogram); no cell is predicted a doublet; give a threshold");
  for (int64_t t = 0; t < n; ++t) {
    const int64_t i = kept.size() == static_cast<size_t>(n_in) ? t : kept[t];
    res.doublet_scores_obs[i] = score[t];
    res.predicted_doublets[i] = res.threshold && score[t] > *res.threshold;
  }
}

}  // namespace scrublet_detail

namespace {
Dict batch_uns(const ScrubletBatchResult& r, const ScrubletOptions& opt) {
  Dict u;
  NumArray sim;
  sim.shape = {static_cast<int64_t>(r.doublet_scores_sim.size())};
  sim.data = r.doublet_scores_sim;
  u["doublet_scores_sim"] = Value(sim);
  NumArray par;
  par.shape = {static_cast<int64_t>(r.doublet_parents.size() / 2), 2};
  par.data.assign(r.doublet_parents.begin(), r.doublet_parents.end());
  par.dtype = DType::i64;
  u["doublet_parents"] = Value(par);
  Dict p;
  p["expected_doublet_rate"] = Value(opt.expected_doublet_rate);
  p["sim_doublet_ratio"] = Value(opt.sim_doublet_ratio);
  p["n_neighbors"] = Value(static_cast<int64_t>(r.n_neighbors));
  p["random_state"] = Value(static_cast<int64_t>(opt.random_state));
  u["parameters"] = Value(p);
  if (r.threshold) u["threshold"] = Value(*r.threshold);
  return u;
}
}  // namespace

void scrublet(const Context& ctx, Dataset& d, const ScrubletOptions& opt) {
  const char* where = "scrublet";
  if (opt.get_doublet_neighbor_parents) fail_input(where, "get_doublet_neighbor_parents is not supported");
  if (!(opt.expected_doublet_rate > 0 && opt.expected_doublet_rate < 1))
    fail_input(where, "expected_doublet_rate=", opt.expected_doublet_rate, " must be in (0, 1)");
  if (!(opt.sim_doublet_ratio > 0)) fail_input(where, "sim_doublet_ratio=", opt.sim_doublet_ratio, " must be positive");
  if (!(opt.synthetic_doublet_umi_subsampling > 0 && opt.synthetic_doublet_umi_subsampling <= 1))
    fail_input(where, "synthetic_doublet_umi_subsampling must be in (0, 1]");
  if (opt.n_prin_comps < 1) fail_input(where, "n_prin_comps must be at least 1");
  if (d.X.empty()) fail_input(where, "X is empty");
  CsrF owned;  // X as CSR float32: d.X itself when it is one (no copy of a 1.3M-cell matrix)
  if (!std::holds_alternative<CsrF>(d.X.m)) owned = to_csr_f(d.X);
  const CsrF& X = std::holds_alternative<CsrF>(d.X.m) ? std::get<CsrF>(d.X.m) : owned;
  {  // the first value (storage order) that is not a count, found over fixed blocks of values
    const int64_t nv = static_cast<int64_t>(X.data.size()), bs = int64_t{1} << 20;
    const int64_t nb = (nv + bs - 1) / bs;
    std::vector<int64_t> first_bad(static_cast<size_t>(nb), -1);
    parallel_for(ctx.threads(), nb, [&](int64_t b) {
      for (int64_t p = b * bs; p < std::min(nv, (b + 1) * bs); ++p) {
        const float v = X.data[p];
        if (!(v >= 0) || v != std::floor(v)) {
          first_bad[b] = p;
          return;
        }
      }
    });
    for (int64_t p : first_bad)
      if (p >= 0)
        fail_input(where, "X holds non-count values (e.g. ", X.data[p],
                   "); Scrublet needs the raw counts, before normalisation");
  }
  const int64_t n = X.n_rows;
  std::vector<double> score(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
  std::vector<uint8_t> pred(static_cast<size_t>(n), 0);
  if (opt.batch_key.empty()) {
    const ScrubletBatchResult r = scrublet_counts(ctx, X, opt, opt.random_state);
    score = r.doublet_scores_obs;
    pred = r.predicted_doublets;
    d.uns["scrublet"] = Value(batch_uns(r, opt));
  } else {
    const ObsGroups g = obs_groups(d.obs, opt.batch_key, where);
    Dict batches;
    for (int32_t b = 0; b < g.n(); ++b) {
      std::vector<int64_t> cells;
      for (int64_t i = 0; i < n; ++i)
        if (g.codes[i] == b) cells.push_back(i);
      const ScrubletBatchResult r = scrublet_counts(ctx, take_rows(X, cells), opt, opt.random_state);
      for (size_t t = 0; t < cells.size(); ++t) {
        score[cells[t]] = r.doublet_scores_obs[t];
        pred[cells[t]] = r.predicted_doublets[t];
      }
      batches[g.names[b]] = Value(batch_uns(r, opt));
    }
    Dict u;
    u["batches"] = Value(batches);
    u["batched_by"] = Value(opt.batch_key);
    d.uns["scrublet"] = Value(u);
  }
  d.obs.set("doublet_score", Column::numeric(score));
  d.obs.set("predicted_doublet", Column::boolean(pred));
}

}  // namespace scurry
