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
  bool skip_density = false;              // k-selection: no density filter at all (and no reordering)
  bool keep_filtered_spectra = false;     // fill CnmfConsensus::filtered_l2 (for the clustergram)
  KMeansOptions kmeans;                   // cNMF: n_init 10, random_state 1
  NmfOptions refit;                       // the factorisation's solver, loss, tol, max_iter
};

// Unless skip_density, the programs are ordered as cNMF 1.7 orders them: by the column sums of the
// row-normalised usages, largest first (ties keep the cluster order).
struct CnmfConsensus {
  DenseF spectra;                     // k x g (factorised genes), rows sum to 1 (cNMF median_spectra)
  DenseF usages;                      // cells x k (cNMF rf_usages: the refit on the normalised counts)
  double stability = 0;               // silhouette score
  double prediction_error = 0;        // ||X - usages spectra||_F^2
  std::vector<double> local_density;  // per merged spectrum (empty when skipped)
  std::vector<uint8_t> kept;          // per merged spectrum: passed the density filter
  std::vector<int> labels;            // per kept spectrum: cluster 0..k-1 (before the reordering)
  DenseD filtered_l2;                 // the kept L2-normalised spectra (keep_filtered_spectra only)
};

// Whether consensus' and k_selection_plot's refits run on the device: a CUDA context and a loss the
// GPU NMF has (itakura-saito refits stay on the CPU).
bool cnmf_refits_on_device(const Context& ctx, const NmfOptions& refit);

// merged: (R * k) x g replicate spectra (rows iter-major as cNMF's combine); X: the normalised counts
// (cells x g). InputError when too few spectra survive the filter or the neighbourhood is empty.
// gpu: X held on the device (the usage refit and its error run there); otherwise the refit runs on
// the device of a CUDA context (X uploaded for it) or on the CPU.
CnmfConsensus cnmf_consensus(const Context& ctx, const DenseF& merged, int k, const CsrF& X,
                             const CnmfConsensusOptions& opt, NmfGpuRefits* gpu = nullptr);

// k x G: cNMF 1.7's efficient_ols_all_cols(usages, tpm, normalize_y=True): the OLS coefficients of
// the z-scored TPM on the usages, (U^T U)^+ (U^T T - (U^T 1) mean^T) / std with T sparse (no cells x
// genes temporary); std from the population variance floored at 1e-12 (StandardScaler's var_ with
// cNMF's eps), so genes with std 0 get 0.
DenseD cnmf_gene_spectra_score(const Context& ctx, const DenseF& usages, const CsrF& tpm,
                               const std::vector<double>& tpm_mean, const std::vector<double>& tpm_std);

// k x G: spectra in TPM units: W of tpm^T ~ W (usages / row sums)^T with the usages fixed.
// Cells whose usages sum to 0 contribute zeros (cNMF would divide by 0).
DenseF cnmf_gene_spectra_tpm(const Context& ctx, const DenseF& usages, const CsrF& tpm, const NmfOptions& refit);

// cNMF 1.7's final usage refit (consensus(refit_usage=True)): the TPM of the factorised genes scaled
// to unit variance without centring (scanpy scale(zero_center=False): ddof 1, 0 -> 1) fitted with the
// spectra fixed to gene_spectra_tpm[:, genes] / tpm_std[genes] (tpm_std: ddof 0, cNMF's __std).
// cells x k, float32 (cNMF's consensus usages).
DenseF cnmf_refit_usages_tpm(const Context& ctx, const CsrF& tpm, const std::vector<int64_t>& genes,
                             const DenseF& spectra_tpm, const std::vector<double>& tpm_std, const NmfOptions& refit);

// cNMF 1.7's build_reference (the starCAT reference): each gene_spectra_tpm row rescaled to sum to
// target_sum, divided by tpm_std, restricted to `genes` (k x genes.size()).
DenseD cnmf_starcat_reference(const DenseD& spectra_tpm, const std::vector<double>& tpm_std,
                              const std::vector<int64_t>& genes, double target_sum = 1e6);

}  // namespace scurry
