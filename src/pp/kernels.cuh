// scurry: CUDA kernels of the preprocessing steps, as host-callable primitives on device matrices.
// The host math that turns their statistics into decisions (HVG selection, PCA post-processing)
// is shared with the CPU path.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "exec/device_csr.cuh"

namespace scurry::gpu {

// Per-cell QC sums (one block per row): total, number of nonzero entries, the sum over genes of each
// qc set (set s holds gene g when bit s of gene_sets[g] is set; up to 8 sets), and the sum of the
// n largest values for each n in `top_n` (ascending). Results are copied to the host vectors.
struct RowQc {
  std::vector<double> total, n_genes;
  std::vector<std::vector<double>> set_total;  // [set][row]
  std::vector<std::vector<double>> top_sum;    // [i][row] for top_n[i]
};
RowQc row_qc(CudaResources& r, const DeviceCsr& m, const uint8_t* gene_sets, int n_sets, const std::vector<int>& top_n);

// Per-gene sums over rows of f(value): sum, sum of squares, number of nonzero entries (float64).
enum class GeneTransform { identity, expm1, clip };  // clip: min(v, clip[g])
struct GeneSums {
  std::vector<double> sum, sumsq, nnz;
};
// `second`: which statistic besides the sum is needed (one pass each; `both` makes two passes on the
// default shared-memory path). The one not asked for is left at 0.
enum class SecondStat { count, squares, both };
GeneSums gene_sums(CudaResources& r, const DeviceCsr& m, GeneTransform f, const float* clip = nullptr,
                   SecondStat second = SecondStat::both);

// Per row: total over the row; rows rescaled to target_sum (rows with total 0 untouched), then
// log1p when `log1p` is set. In place.
void normalize_log1p(CudaResources& r, DeviceCsr& m, double target_sum, bool log1p, std::vector<double>* totals_out);
// Row totals (float64) on the device.
void row_totals(CudaResources& r, const DeviceCsr& m, double* d_totals);

// Dense row-major n_rows x n_cols output: (x - mean[g]) / std[g] (zero_center) or x / std[g],
// clipped to max_value (max_value <= 0: no clipping).
void scale_to_dense(CudaResources& r, const DeviceCsr& m, const float* mean, const float* std_, bool zero_center,
                    float max_value, float* out);

}  // namespace scurry::gpu

namespace scurry::gpu {

// PCA of a dense row-major n x g float matrix on the device: the Gram matrix by fp32 SYRK over row
// chunks accumulated in float64, centring folded in (G - n mu mu^T), the eigenpairs by cuSOLVER
// (float64), X_pca = (X - 1 mu^T) V written to d_xpca (n x k row-major), signs as sklearn's svd_flip
// (the largest-|.| entry of each X_pca column positive).
struct PcaGpuResult {
  std::vector<double> variance;     // eigenvalue / (n - 1), descending
  std::vector<double> components;   // g x k row-major (varm['PCs'] layout)
  std::vector<double> mean;         // per gene
  double total_variance = 0;        // sum of the per-gene variances (ddof 1)
};
// Several ranks (a sharded run, one rank per GPU or per thread): X holds this rank's n rows, in rank
// order over the ranks. The Gram matrix and the column sums are summed over the ranks (device_sum, or
// through `comm` on the host when device_sum is empty), rank 0 solves the eigenproblem and broadcasts
// it, the projection is local, and the sign flip looks at every rank's rows (first global row among
// ties). The results are those of one rank up to the order of the additions.
using DeviceSum = std::function<void(double* d, size_t n, cudaStream_t stream)>;  // in place, over ranks
struct PcaRanks {
  Comm* comm = nullptr;  // null or one rank: pca_dense as without PcaRanks
  DeviceSum device_sum;  // optional (NCCL)
};
PcaGpuResult pca_dense(CudaResources& r, const float* X, int64_t n, int64_t g, int k, bool zero_center, float* d_xpca,
                       const PcaRanks* ranks = nullptr);

}  // namespace scurry::gpu

namespace scurry {
struct Dataset;
struct PreprocessOptions;
class Timings;
}  // namespace scurry

namespace scurry::gpu {

// The GPU preprocessing chain on one rank's cells (preprocess_gpu.cu): `acquire` puts this rank's
// counts on the device (timed as the step `acquire_step`); d holds this rank's cells (obs rows) and
// all genes. Every decision combines the ranks' statistics through ctx.comm() (rank-ordered sums);
// the PCA Gram matrix through device_sum when given. With one rank: preprocess_gpu's chain.
void preprocess_chain(Context& ctx, Dataset& d, const PreprocessOptions& o, Timings* timings, const char* acquire_step,
                      const std::function<DeviceCsr()>& acquire, const DeviceSum& device_sum = {});

}  // namespace scurry::gpu
