// scurry: cNMF's consensus step (dylkot/cNMF cnmf.py: consensus, k_selection_plot): the replicates'
// spectra L2-normalised, filtered by local density, clustered by k-means; the cluster medians
// normalised to sum 1 are the consensus spectra; usages refit with the spectra fixed; stability is the
// silhouette score of the clustering and the error the squared Frobenius error of the refit. Then
// the per-gene outputs over all genes: gene_spectra_score (OLS of z-scored TPM on the usages) and
// gene_spectra_tpm (spectra refit on TPM with the normalised usages fixed).
#pragma once
#include <cstdint>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "nmf/kmeans.hpp"
#include "nmf/nmf.hpp"

namespace scurry {

struct CnmfConsensusOptions {
  double density_threshold = 0.5;         // cNMF --local-density-threshold: keep spectra whose mean
                                          // distance to their neighbours is < this (2.0: keep all)
  double local_neighborhood_size = 0.30;  // cNMF --local-neighborhood-size: neighbours = int(this * R)
  bool skip_density = false;              // k-selection: no density filter at all
  KMeansOptions kmeans;                   // cNMF: n_init 10, random_state 1
  NmfOptions refit;                       // the factorisation's solver, loss, tol, max_iter
};

struct CnmfConsensus {
  DenseF spectra;                     // k x g (factorised genes), rows sum to 1 (cNMF median_spectra)
  DenseF usages;                      // cells x k (cNMF rf_usages)
  double stability = 0;               // silhouette score
  double prediction_error = 0;        // ||X - usages spectra||_F^2
  std::vector<double> local_density;  // per merged spectrum (empty when skipped)
  std::vector<uint8_t> kept;          // per merged spectrum: passed the density filter
  std::vector<int> labels;            // per kept spectrum: cluster 0..k-1
};

// merged: (R * k) x g replicate spectra (rows iter-major as cNMF's combine); X: the normalised counts
// (cells x g). InputError when too few spectra survive the filter or the neighbourhood is empty.
CnmfConsensus cnmf_consensus(const Context& ctx, const DenseF& merged, int k, const CsrF& X,
                             const CnmfConsensusOptions& opt);

// k x G: pinv(usages) (tpm - mean) / std, computed as (U^T U)^+ (U^T T - (U^T 1) mean^T) / std with
// T sparse (no cells x genes temporary). Genes with std 0 get NaN (cNMF divides by 0 there).
DenseD cnmf_gene_spectra_score(const Context& ctx, const DenseF& usages, const CsrF& tpm,
                               const std::vector<double>& tpm_mean, const std::vector<double>& tpm_std);

// k x G: spectra in TPM units: W of tpm^T ~ W (usages / row sums)^T with the usages fixed.
// Cells whose usages sum to 0 contribute zeros (cNMF would divide by 0).
DenseF cnmf_gene_spectra_tpm(const Context& ctx, const DenseF& usages, const CsrF& tpm, const NmfOptions& refit);

}  // namespace scurry
