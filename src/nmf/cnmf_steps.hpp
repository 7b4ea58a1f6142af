// scurry: cNMF's verbs over a run folder (dylkot/cNMF 1.7 cnmf.py: prepare, factorize, combine,
// k_selection_plot, consensus), one entry point each, so the command line (src/cli/cmd_cnmf.cpp) and
// a Python binding are thin. Every file read and written has cNMF's name and format
// (nmf/cnmf_files.hpp, io/npz.hpp): scurry resumes from a folder cNMF wrote, and cNMF's Python reads
// a folder scurry wrote. The defaults here are cNMF's command-line defaults.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "nmf/cnmf_files.hpp"

namespace scurry {

struct CnmfPrepareArgs {
  std::vector<int> components;         // -k: numbers of components
  int n_iter = 100;                    // -n/--n-iter: replicates per k
  std::optional<uint64_t> seed;        // --seed (cNMF's default None: a seed is drawn and logged)
  int64_t numgenes = 2000;             // --numgenes
  std::string genes_file;              // --genes-file: factorise these genes (one a line)
  std::string beta_loss = "frobenius"; // --beta-loss: frobenius | kullback-leibler | itakura-saito
  std::string init = "random";         // --init: random | nndsvd
  int max_nmf_iter = 1000;             // --max-nmf-iter
  double tol = 1e-4;                   // sklearn's tol (cNMF fixes it at 1e-4)
  std::string tpm_file;                // --tpm: precomputed TPM (.h5ad, .df.npz or TSV)
  bool densify = false;                // --densify: store the normalised counts and TPM dense
};

// Reads the counts (.h5ad, 10x .h5 / mtx directory, zarr, cNMF's .df.npz, or a cells x genes TSV)
// and writes tpm.h5ad, tpm_stats, norm_counts.h5ad, overdispersed_genes.txt, nmf_params and the
// yaml run parameters.
void cnmf_prepare_step(const Context& ctx, const CnmfPaths& p, const std::string& counts_path,
                       const CnmfPrepareArgs& a);

struct CnmfFactorizeArgs {
  int worker_index = 0, total_workers = 1;  // replicate i runs on worker i % total_workers
  bool skip_completed_runs = false;         // skip replicates marked completed or whose spectra file exists
  std::vector<int> gpus;                    // with a CUDA context: the devices the replicates spread over
  CudaOptions cuda;                         // resources of the extra GPUs
  bool tf32 = false;                        // GPU dense layout: GEMMs on TF32 tensor cores
  int gpu_batch = 0;                        // GPU: replicates per batch (0: R * k ~ gpu_batch_rk per device)
  int gpu_batch_rk = 1200;                  // GPU: components per batch and device (`cnmf bench`'s auto_rk)
};
void cnmf_factorize_step(const Context& ctx, const CnmfPaths& p, const CnmfFactorizeArgs& a);

// ks empty: every prepared k. skip_missing_files: leave out replicates whose spectra are missing.
// threads: k's merged on this many threads (the files are the same for any count).
void cnmf_combine_step(const CnmfPaths& p, const std::vector<int>& ks, bool skip_missing_files = false,
                       int threads = 1);

struct CnmfConsensusArgs {
  std::vector<int> components;            // -k (empty: every prepared k)
  double local_density_threshold = 0.5;   // --local-density-threshold (2.0: no filter)
  double local_neighborhood_size = 0.30;  // --local-neighborhood-size
  bool show_clustering = false;           // --show-clustering: NAME.clustering.k_K.dt_X.png
  bool build_reference = false;           // --build-reference: the starCAT reference spectra
};
// Returns the consensus usages per k (cells x k, as written).
std::map<int, DenseF> cnmf_consensus_step(const Context& ctx, const CnmfPaths& p, const CnmfConsensusArgs& a);

// k_selection_stats.df.npz and k_selection.png over every prepared k.
void cnmf_k_selection_step(const Context& ctx, const CnmfPaths& p, double local_neighborhood_size = 0.30);

// A k_selection_stats table for other readers (the run report): cNMF's .df.npz (columns k,
// local_density_threshold, silhouette, prediction_error) or a TSV of the same columns (older scurry
// wrote k_selection_stats.df.txt with the column 'stability' for 'silhouette'). InputError naming the
// path when a column is missing.
struct CnmfKSelectionStats {
  std::vector<int> k;
  std::vector<double> stability, prediction_error;
};
CnmfKSelectionStats read_k_selection_stats(const std::string& path);

}  // namespace scurry
