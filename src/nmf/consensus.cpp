// scurry: cNMF consensus (see consensus.hpp).
#include "nmf/consensus.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/env_laps.hpp"
#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "nmf/cnmf_prepare.hpp"
#include "pp/linalg.hpp"

namespace scurry {

namespace {

constexpr int64_t kDistanceChunk = 256;
constexpr int64_t kRowsPerBlock = 512;

double median_of(std::vector<double>& v) {
  const size_t m = v.size();
  std::sort(v.begin(), v.end());
  return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

}  // namespace

bool cnmf_refits_on_device(const Context& ctx, const NmfOptions& refit) {
  return ctx.backend() == Backend::cuda && refit.loss != NmfLoss::itakura_saito;
}

CnmfConsensus cnmf_consensus(const Context& ctx, const DenseF& merged, int k, const CsrF& X,
                             const CnmfConsensusOptions& opt, NmfGpuRefits* gpu) {
  const int64_t N = merged.n_rows, g = merged.n_cols;
  if (k < 1 || N < k || N % k != 0)
    fail_input("consensus", "the merged spectra have ", N, " rows, not a positive multiple of k = ", k);
  if (g != X.n_cols) fail("cnmf_consensus: spectra have ", g, " genes but X has ", X.n_cols);
  CnmfConsensus out;
  EnvLaps laps("SCURRY_CNMF_TIMES", "cnmf consensus k=" + std::to_string(k));
  // L2-normalised spectra (float64).
  DenseD l2(N, g);
  std::vector<double> sq(N);
  for (int64_t i = 0; i < N; ++i) {
    double s = 0;
    for (int64_t j = 0; j < g; ++j) s += static_cast<double>(merged(i, j)) * merged(i, j);
    const double nrm = std::sqrt(s);
    double s2 = 0;
    for (int64_t j = 0; j < g; ++j) {
      l2(i, j) = nrm > 0 ? merged(i, j) / nrm : 0.0;
      s2 += l2(i, j) * l2(i, j);
    }
    sq[i] = s2;
  }
  out.kept.assign(N, 1);
  if (!opt.skip_density) {
    const int64_t nn = static_cast<int64_t>(opt.local_neighborhood_size * static_cast<double>(N) / k);
    if (nn < 1 || nn + 1 > N)
      fail_input("consensus", "the local neighbourhood holds ", nn, " spectra (", opt.local_neighborhood_size,
                 " x ", N / k, " replicates); use more replicates (--n-iter) or a larger --local-neighborhood-size");
    out.local_density.assign(N, 0.0);
    const RowBlocks rb = RowBlocks::uniform(N, kDistanceChunk);
    linalg::SingleThreadedBlas st;
    parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
      std::vector<double> D;
      euclidean_rows(l2, sq, rb.begin(b), rb.end(b), D);
      for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
        double* row = D.data() + (i - rb.begin(b)) * N;
        std::nth_element(row, row + nn, row + N);
        double s = 0;
        for (int64_t q = 0; q <= nn; ++q) s += row[q];  // the nn + 1 nearest, self (0) included
        out.local_density[i] = s / static_cast<double>(nn);
      }
    });
    for (int64_t i = 0; i < N; ++i) out.kept[i] = out.local_density[i] < opt.density_threshold;
    laps.lap("local density");
  }
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < N; ++i)
    if (out.kept[i]) keep.push_back(i);
  if (static_cast<int64_t>(keep.size()) < k + 1)
    fail_input("consensus", "only ", keep.size(), " of ", N, " spectra pass --local-density-threshold ",
               opt.density_threshold, "; k = ", k, " clusters need more: raise the threshold");
  DenseD kept(static_cast<int64_t>(keep.size()), g);
  for (size_t q = 0; q < keep.size(); ++q) std::copy(l2.row(keep[q]), l2.row(keep[q]) + g, kept.row(q));
  laps.lap("l2 and filter");
  KMeansResult km = kmeans(ctx, kept, k, opt.kmeans);
  out.labels = km.labels;
  laps.lap("kmeans");
  // Cluster medians, normalised to sum 1.
  out.spectra = DenseF(k, g);
  {
    std::vector<std::vector<int64_t>> members(k);
    for (size_t q = 0; q < keep.size(); ++q) members[km.labels[q]].push_back(static_cast<int64_t>(q));
    parallel_for(ctx.threads(), k, [&](int64_t c) {
      std::vector<double> v, med(g);
      double tot = 0;
      for (int64_t j = 0; j < g; ++j) {
        v.clear();
        for (const int64_t q : members[c]) v.push_back(kept(q, j));
        med[j] = v.empty() ? 0.0 : median_of(v);
        tot += med[j];
      }
      for (int64_t j = 0; j < g; ++j) out.spectra(c, j) = static_cast<float>(tot > 0 ? med[j] / tot : 0.0);
    });
  }
  laps.lap("medians");
  out.stability = silhouette_score(ctx, kept, km.labels);
  laps.lap("silhouette");
  // The usage refits over every cell run on the device of a CUDA context (k_selection_plot refits every
  // k: at 2.4M cells the CPU's passes would take minutes per k), here and in consensus' TPM refits.
  if (gpu) {
    out.usages = gpu->refit(out.spectra, &out.prediction_error);
    laps.lap("usage refit and error on the device");
  } else {
    out.usages = nmf_fit_w_fixed_h(ctx, X, out.spectra, opt.refit, nullptr, cnmf_refits_on_device(ctx, opt.refit));
    laps.lap("usage refit");
    out.prediction_error = frobenius_error_sq(ctx, X, out.usages, out.spectra);
    laps.lap("error");
  }
  if (opt.keep_filtered_spectra) out.filtered_l2 = std::move(kept);
  if (!opt.skip_density) {
    // cNMF: norm_usages = rf_usages / row sums; programs sorted by norm_usages' column sums, descending.
    const int64_t n = out.usages.n_rows;
    std::vector<double> tot(k, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int c = 0; c < k; ++c) s += out.usages(i, c);
      if (s > 0)
        for (int c = 0; c < k; ++c) tot[c] += out.usages(i, c) / s;
    }
    std::vector<int> ord(k);
    for (int c = 0; c < k; ++c) ord[c] = c;
    std::stable_sort(ord.begin(), ord.end(), [&](int a, int b) { return tot[a] > tot[b]; });
    DenseF sp(k, g), us(n, k);
    for (int c = 0; c < k; ++c) {
      std::copy(out.spectra.row(ord[c]), out.spectra.row(ord[c]) + g, sp.row(c));
      for (int64_t i = 0; i < n; ++i) us(i, c) = out.usages(i, ord[c]);
    }
    out.spectra = std::move(sp);
    out.usages = std::move(us);
  }
  return out;
}

DenseD cnmf_gene_spectra_score(const Context& ctx, const DenseF& usages, const CsrF& tpm,
                               const std::vector<double>& tpm_mean, const std::vector<double>& tpm_std) {
  const int64_t n = tpm.n_rows, G = tpm.n_cols, k = usages.n_cols;
  if (usages.n_rows != n) fail("cnmf_gene_spectra_score: usages have ", usages.n_rows, " rows, tpm ", n);
  // U^T U and U^T 1.
  DenseD M(k, k);
  std::vector<double> colsum(k, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t a = 0; a < k; ++a) {
      const double ua = usages(i, a);
      colsum[a] += ua;
      for (int64_t b = 0; b < k; ++b) M(a, b) += ua * usages(i, b);
    }
  // (U^T U)^+ by eigen-decomposition (numpy pinv's cutoff: singular values > 1e-15 * largest).
  DenseD Mc = M;
  const linalg::SymEigen e = linalg::eigh_top(Mc, k);
  DenseD P(k, k);
  const double lmax = e.values.empty() ? 0.0 : e.values[0];
  for (int64_t q = 0; q < k; ++q) {
    const double l = e.values[q];
    if (!(l > 0) || std::sqrt(l) <= 1e-15 * std::sqrt(lmax)) continue;
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = 0; b < k; ++b) P(a, b) += e.vectors(a, q) * e.vectors(b, q) / l;
  }
  // U^T T (k x G) by row blocks, combined in block order.
  const RowBlocks rb = RowBlocks::uniform(n, kRowsPerBlock);
  std::vector<double> utt;
  reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(k * G), utt, [&](int64_t b, double* p) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i)
      for (int64_t q = tpm.indptr[i]; q < tpm.indptr[i + 1]; ++q) {
        const double t = tpm.data[q];
        const int64_t j = tpm.indices[q];
        for (int64_t a = 0; a < k; ++a) p[a * G + j] += usages(i, a) * t;
      }
  });
  DenseD out(k, G);
  std::vector<double> z(k);
  for (int64_t j = 0; j < G; ++j) {
    const double sd = std::sqrt(std::max(tpm_std[j] * tpm_std[j], 1e-12));  // cNMF: var < 1e-12 -> 1e-12
    for (int64_t a = 0; a < k; ++a) z[a] = (utt[a * G + j] - colsum[a] * tpm_mean[j]) / sd;
    for (int64_t a = 0; a < k; ++a) {
      double s = 0;
      for (int64_t b = 0; b < k; ++b) s += P(a, b) * z[b];
      out(a, j) = s;
    }
  }
  return out;
}

DenseF cnmf_gene_spectra_tpm(const Context& ctx, const DenseF& usages, const CsrF& tpm, const NmfOptions& refit) {
  const int64_t n = tpm.n_rows, k = usages.n_cols;
  DenseF H(k, n);  // normalised usages, transposed
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t a = 0; a < k; ++a) s += usages(i, a);
    for (int64_t a = 0; a < k; ++a) H(a, i) = static_cast<float>(s > 0 ? usages(i, a) / s : 0.0);
  }
  const CsrF tt = transpose(tpm, ctx.threads());
  const DenseF W = nmf_fit_w_fixed_h(ctx, tt, H, refit, nullptr, cnmf_refits_on_device(ctx, refit));  // G x k
  DenseF out(k, tpm.n_cols);
  for (int64_t j = 0; j < tpm.n_cols; ++j)
    for (int64_t a = 0; a < k; ++a) out(a, j) = W(j, a);
  return out;
}

DenseF cnmf_refit_usages_tpm(const Context& ctx, const CsrF& tpm, const std::vector<int64_t>& genes,
                             const DenseF& spectra_tpm, const std::vector<double>& tpm_std, const NmfOptions& refit) {
  const int64_t n = tpm.n_rows, k = spectra_tpm.n_rows, h = static_cast<int64_t>(genes.size());
  std::vector<int64_t> pos(tpm.n_cols, -1);
  for (int64_t q = 0; q < h; ++q) pos[genes[q]] = q;
  // tpm[:, genes] in gene-list order, as CSR: rows counted, then filled, by blocks of rows on all
  // threads (at 2.4M cells one thread took several seconds).
  CsrF T;
  T.n_rows = n, T.n_cols = h;
  T.indptr.assign(n + 1, 0);
  const RowBlocks rb = RowBlocks::uniform(n, kRowsPerBlock);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
      int64_t c = 0;
      for (int64_t p = tpm.indptr[i]; p < tpm.indptr[i + 1]; ++p) c += pos[tpm.indices[p]] >= 0;
      T.indptr[i + 1] = c;
    }
  });
  for (int64_t i = 0; i < n; ++i) T.indptr[i + 1] += T.indptr[i];
  T.indices.resize(static_cast<size_t>(T.indptr[n]));
  T.data.resize(static_cast<size_t>(T.indptr[n]));
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    std::vector<std::pair<int32_t, float>> row;
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
      row.clear();
      for (int64_t p = tpm.indptr[i]; p < tpm.indptr[i + 1]; ++p)
        if (pos[tpm.indices[p]] >= 0) row.emplace_back(static_cast<int32_t>(pos[tpm.indices[p]]), tpm.data[p]);
      std::sort(row.begin(), row.end());
      int64_t q = T.indptr[i];
      for (const auto& [j, v] : row) T.indices[q] = j, T.data[q] = v, ++q;
    }
  });
  // Column std with ddof 1 (0 -> 1), then scale.
  std::vector<double> mean, sd;
  column_mean_std(T, mean, sd);
  const double nn = static_cast<double>(n);
  for (double& s : sd) {
    s = n > 1 ? std::sqrt(s * s * nn / (nn - 1)) : 0.0;
    if (s == 0) s = 1;
  }
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t p = T.indptr[rb.begin(b)]; p < T.indptr[rb.end(b)]; ++p)
      T.data[p] = static_cast<float>(T.data[p] / sd[T.indices[p]]);
  });
  DenseF H(k, h);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t q = 0; q < h; ++q) H(a, q) = static_cast<float>(spectra_tpm(a, genes[q]) / tpm_std[genes[q]]);
  return nmf_fit_w_fixed_h(ctx, T, H, refit, nullptr, cnmf_refits_on_device(ctx, refit));
}

DenseD cnmf_starcat_reference(const DenseD& spectra_tpm, const std::vector<double>& tpm_std,
                              const std::vector<int64_t>& genes, double target_sum) {
  const int64_t k = spectra_tpm.n_rows, h = static_cast<int64_t>(genes.size());
  DenseD out(k, h);
  for (int64_t a = 0; a < k; ++a) {
    double s = 0;
    for (int64_t j = 0; j < spectra_tpm.n_cols; ++j) s += spectra_tpm(a, j);
    for (int64_t q = 0; q < h; ++q) out(a, q) = spectra_tpm(a, genes[q]) / s * target_sum / tpm_std[genes[q]];
  }
  return out;
}

}  // namespace scurry
