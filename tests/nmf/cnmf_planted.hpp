// Planted-program data and the end-to-end recovery check shared by the CPU and GPU cNMF tests:
// prepare, a batched factorisation (the caller's: CPU or GPU), consensus, gene_spectra_tpm; each
// consensus program matched to a planted one with Pearson r >= 0.95.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "exec/context.hpp"
#include "nmf/cnmf_prepare.hpp"
#include "nmf/consensus.hpp"
#include "nmf/nmf.hpp"
#include "testlib.hpp"

namespace scurry::test_cnmf {

struct Planted {
  CsrF counts;
  DenseD spectra;  // K x G, rows sum to 1
  std::vector<std::string> cells, genes;
};

// Usages Dirichlet(0.3), spectra sparse gamma (30% of genes active per program, Gamma(0.6)), library
// sizes log-normal around `lib`, counts Poisson.
inline Planted planted(int64_t n, int64_t G, int K, double lib, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> ga(0.6, 1.0), gu(0.3, 1.0);
  std::bernoulli_distribution on(0.3);
  std::normal_distribution<double> nd(0.0, 0.3);
  Planted p;
  p.spectra = DenseD(K, G);
  for (int c = 0; c < K; ++c) {
    double s = 0;
    for (int64_t j = 0; j < G; ++j) s += (p.spectra(c, j) = on(rng) ? ga(rng) : 0.0);
    for (int64_t j = 0; j < G; ++j) p.spectra(c, j) /= s;
  }
  p.counts.n_rows = n, p.counts.n_cols = G;
  p.counts.indptr.assign(1, 0);
  std::vector<double> u(K);
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int c = 0; c < K; ++c) s += (u[c] = gu(rng) + 1e-3);
    const double L = lib * std::exp(nd(rng));
    for (int64_t j = 0; j < G; ++j) {
      double m = 0;
      for (int c = 0; c < K; ++c) m += u[c] / s * p.spectra(c, j);
      if (m <= 0) continue;
      std::poisson_distribution<int> po(L * m);
      const int x = po(rng);
      if (x > 0) {
        p.counts.indices.push_back(static_cast<int32_t>(j));
        p.counts.data.push_back(static_cast<float>(x));
      }
    }
    p.counts.indptr.push_back(static_cast<int64_t>(p.counts.data.size()));
    p.cells.push_back("cell" + std::to_string(i));
  }
  for (int64_t j = 0; j < G; ++j) p.genes.push_back("g" + std::to_string(j));
  return p;
}

inline double pearson(const double* a, const double* b, int64_t n) {
  double ma = 0, mb = 0;
  for (int64_t q = 0; q < n; ++q) ma += a[q], mb += b[q];
  ma /= n, mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (int64_t q = 0; q < n; ++q) sab += (a[q] - ma) * (b[q] - mb), saa += (a[q] - ma) * (a[q] - ma), sbb += (b[q] - mb) * (b[q] - mb);
  return sab / std::sqrt(saa * sbb);
}

// The R replicates' spectra of res stacked as cNMF's combine does ((R * K) x g, replicate-major).
inline DenseF merged_spectra(const NmfResult& res, int R, int K, int64_t g) {
  DenseF merged(static_cast<int64_t>(R) * K, g);
  for (int r = 0; r < R; ++r) {
    const DenseF h = res.f.h_of(r);
    std::copy(h.data.begin(), h.data.end(), merged.data.begin() + static_cast<size_t>(r) * K * h.n_cols);
  }
  return merged;
}

using FitFn = std::function<NmfResult(const CsrF& X, NmfBatch init, const NmfOptions& opt)>;

// The whole chain on planted data with `fit` for the replicates (consensus and refits on the CPU).
inline void check_planted_recovery(const FitFn& fit, uint64_t seed) {
  constexpr int K = 8, R = 6;
  const Planted p = planted(3000, 800, K, 2000, seed);
  const Context ctx = Context::cpu(2);
  CnmfPrepareOptions po;
  po.num_highvar_genes = 800;
  const CnmfPrepared pr = cnmf_prepare(ctx, p.counts, p.cells, p.genes, po, "planted");
  NmfOptions nmf;  // cNMF's defaults: cd, frobenius, tol 1e-4, max_iter 1000
  const NmfResult res = fit(pr.norm_counts, nmf_random_init(pr.norm_counts, K, nmf_replicate_seeds(seed, R)), nmf);
  const DenseF merged = merged_spectra(res, R, K, pr.norm_counts.n_cols);
  CnmfConsensusOptions co;
  co.refit = nmf;
  const CnmfConsensus c = cnmf_consensus(ctx, merged, K, pr.norm_counts, co);
  EXPECT_GT(c.stability, 0.8);
  const DenseF tpm_spectra = cnmf_gene_spectra_tpm(ctx, c.usages, pr.tpm, nmf);
  // Greedy matching of the consensus programs to the planted ones by Pearson r.
  std::vector<uint8_t> used(K, 0);
  const int64_t G = p.spectra.n_cols;
  std::vector<double> row(G);
  for (int a = 0; a < K; ++a) {
    std::vector<int64_t> genes_of_hvg = pr.genes;
    for (int64_t j = 0; j < G; ++j) row[j] = tpm_spectra(a, j);
    int best = -1;
    double br = -2;
    for (int b = 0; b < K; ++b) {
      if (used[b]) continue;
      const double r = pearson(row.data(), p.spectra.row(b), G);
      if (r > br) br = r, best = b;
    }
    used[best] = 1;
    EXPECT_GE(br, 0.95) << "consensus program " << a << " best matches planted " << best;
  }
  // The usages' prediction error is the squared Frobenius error of the refit.
  EXPECT_NEAR(c.prediction_error, frobenius_error_sq(ctx, pr.norm_counts, c.usages, c.spectra), 1e-9 * c.prediction_error);
  for (int a = 0; a < K; ++a) {
    double s = 0;
    for (int64_t j = 0; j < c.spectra.n_cols; ++j) s += c.spectra(a, j);
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

}  // namespace scurry::test_cnmf
