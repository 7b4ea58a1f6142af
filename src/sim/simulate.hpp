// scurry: a seeded simulator of UMI count matrices with cluster structure, for tests and benchmarks
// at any size (`scurry simulate`, `scurry bench --synthetic`).
//
// Model: gene base expression proportions are log-normal (a few genes dominate, most are rare, as in
// real 3' data); each cluster multiplies a random subset of genes by log-normal fold changes; each
// cell picks a cluster and a log-normal library size L, and its counts are L multinomial draws from
// its cluster's gene proportions. Counts are thus Poisson given the cell's mean; the mixture over
// library sizes and clusters makes each gene overdispersed (negative-binomial-like). The library
// scale is calibrated analytically so that the mean number of nonzeros per cell hits the target.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "exec/context.hpp"

namespace scurry {

struct SimulateOptions {
  int64_t n_cells = 10000;
  int64_t n_genes = 20000;
  double nnz_per_cell = 2000;   // target mean number of detected genes per cell
  int n_clusters = 10;
  double de_fraction = 0.05;    // share of genes changed in each cluster
  double de_log_fc_sd = 1.0;    // sd of a cluster's log fold changes (natural log)
  double gene_log_sd = 1.8;     // sd of the genes' log base proportions
  double library_log_sd = 0.4;  // sd of the cells' log library sizes
  int n_mito_genes = 13;        // the first genes are named MT-1 ... (as human mitochondrial genes)
  uint64_t seed = 0;
};

// X: CsrF counts (cells x genes, float32 integers; dtype float32); obs index "cell<i>", obs
// 'cluster' (categorical, the true labels); var index gene names, var 'gene_ids'.
Dataset simulate(const Context& ctx, const SimulateOptions& opt);

// The pieces shared with the GPU generator (simulate_gpu.cu):
// each cluster's gene proportions (summing to 1), [cluster][gene];
std::vector<std::vector<double>> simulate_cluster_proportions(const SimulateOptions& opt);
// Walker/Vose alias table of the distribution p (O(1) draws: slot i uniform, kept when a uniform
// is below prob[i], else alias[i]).
void simulate_alias_table(const std::vector<double>& p, std::vector<double>& prob, std::vector<int32_t>& alias);
// obs (index "cell<i>", 'cluster'), var (names, 'gene_ids') and uns['simulate'] of a simulated set.
void simulate_frame(Dataset& d, const SimulateOptions& opt, std::vector<int32_t> cluster_codes, double library_scale);

// The library scale L0 (median draws per cell) that gives opt.nnz_per_cell expected nonzeros.
double calibrate_library_size(const SimulateOptions& opt);

// The same model generated on the GPU (src/sim/simulate_gpu.cu): the matrix is made and kept on the
// device; only the metadata is on the host. Not bit-identical with simulate() (other random
// streams), the same distribution. Needs a CUDA context; throws Error otherwise.
struct DeviceSimulated {
  Dataset frame;                  // obs, var, uns; X empty
  std::shared_ptr<void> matrix;   // the device CSR (opaque outside CUDA code)
  int64_t nnz = 0;
  // simulate_on_devices: the rows [part_begin[q], part_begin[q + 1]) on GPU q instead of `matrix`.
  std::vector<std::shared_ptr<void>> parts;
  std::vector<int64_t> part_begin;
};
DeviceSimulated simulate_on_device(Context& ctx, const SimulateOptions& opt);
// The same matrix (every cell's counts come from its own random streams) made in row parts, one per
// GPU of gpus (equal row counts), each on its own device and thread: nothing crosses between GPUs,
// and no GPU holds more than its share (the 11.4M-cell atlas on several GPUs).
DeviceSimulated simulate_on_devices(const std::vector<Context*>& gpus, const SimulateOptions& opt);

}  // namespace scurry
