// scurry: cNMF's prepare step (dylkot/cNMF cnmf.py: compute_tpm, get_highvar_genes_sparse,
// get_norm_counts): TPM normalisation, over-dispersed genes by the Fano-factor model, and the
// selected genes' raw counts scaled to unit variance without centring.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

struct CnmfPrepareOptions {
  int64_t num_highvar_genes = 2000;  // cNMF --numgenes: this many most over-dispersed genes
  std::vector<std::string> genes;    // cNMF --genes-file: use exactly these genes, in this order
  double tpm_target = 1e6;           // counts per cell after TPM normalisation
};

// get_highvar_genes_sparse on TPM values: per gene mean, population variance (ddof 0), Fano factor
// var/mean; A = min over the 20 highest-mean genes of sqrt(var)/mean; B^2 = median Fano of the genes
// strictly inside the 10%..90% quantiles of both mean and Fano (pandas' linear quantiles);
// expected Fano = A^2 mean + B^2; the `numgenes` genes of largest fano / expected (NaN last, ties in
// gene order) are high_var. Genes with mean 0 have NaN Fano and ratio, as in pandas.
struct CnmfHighVar {
  std::vector<double> mean, var, fano, expected_fano, fano_ratio;
  std::vector<uint8_t> high_var;
  double A = 0, B = 0;
};
CnmfHighVar cnmf_highvar_genes(const CsrF& tpm, int64_t numgenes);

// Per gene mean and population standard deviation (ddof 0) of a CSR matrix (cNMF's tpm_stats).
void column_mean_std(const CsrF& m, std::vector<double>& mean, std::vector<double>& std_);

struct CnmfPrepared {
  CsrF tpm;                               // cells x genes, every cell scaled to tpm_target
  std::vector<double> tpm_mean, tpm_std;  // per gene over cells, population std (cNMF's __mean/__std)
  std::vector<int64_t> genes;             // the factorised genes (indices into the input), cNMF's order
  CsrF norm_counts;                       // cells x genes.size(): counts / std (ddof 1; 0 -> 1)
};

// Throws InputError (naming `where` and the cells) for cells with zero total counts or zero counts
// over the selected genes, and for --genes-file genes that are not in `gene_names`.
// given_tpm (cNMF --tpm): use this TPM matrix (same shape as counts) instead of computing it.
CnmfPrepared cnmf_prepare(const Context& ctx, const CsrF& counts, const std::vector<std::string>& cell_names,
                          const std::vector<std::string>& gene_names, const CnmfPrepareOptions& opt,
                          const std::string& where, const CsrF* given_tpm = nullptr);

}  // namespace scurry
