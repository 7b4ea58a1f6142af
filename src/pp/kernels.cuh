// scurry: CUDA kernels of the preprocessing steps, as host-callable primitives on device matrices.
// The host math that turns their statistics into decisions (HVG selection, PCA post-processing)
// is shared with the CPU path.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "exec/device_csr.cuh"

namespace scurry::gpu {

// The kernels are templated on the value type V (float, double) and the column-index type I (int32_t,
// int64_t), and the templated launchers below are explicitly instantiated, in the .cu that holds the
// kernel (no kernel is instantiated in a header), for <float, int32_t> (what DeviceCsr holds and the
// pipeline runs), <double, int32_t>, <float, int64_t> and <double, int64_t>. Every other combination
// fails at link time.
//
// Row pointers stay int64_t in every instantiation (no third parameter): the number of entries passes
// 2^31 at ~1M cells x 2,000 genes, the row-pointer array has n_rows + 1 entries (bytes negligible next
// to the nnz indices and values, so 32-bit row pointers would save no bandwidth), and one type keeps the
// instantiations at four. Kernels that never read the column indices (row totals, normalize) are
// templated on V only; their launchers take the same CsrView<V, I> for a uniform interface.
// Accumulations are float64 whatever V is; gene_sums adds 64-bit fixed-point integers (the same bits on
// every run; gene_sums.cu says how).

// T in a parameter that must not take part in template argument deduction (std::type_identity_t; the
// CUDA sources are C++17): a literal or nullptr passed for it converts to the V of the matrix.
template <class T>
struct NonDeducedT {
  using type = T;
};
template <class T>
using NonDeduced = typename NonDeducedT<T>::type;

// A non-owning view of a device CSR matrix (n_rows + 1 row pointers; nnz indices and values).
template <class V, class I>
struct CsrView {
  int64_t n_rows = 0, n_cols = 0, nnz = 0;
  const int64_t* indptr = nullptr;
  const I* indices = nullptr;
  V* data = nullptr;  // written only by normalize_log1p
};
inline CsrView<float, int32_t> view(const DeviceCsr& m) {
  return {m.n_rows, m.n_cols, m.nnz, m.indptr.data(), m.indices.data(), m.data.data()};
}

// Per-cell QC sums (one block per row): total, number of nonzero entries, the sum over genes of each
// qc set (set s holds gene g when bit s of gene_sets[g] is set; up to 8 sets), and the sum of the
// n largest values for each n in `top_n` (ascending). Results are copied to the host vectors.
struct RowQc {
  std::vector<double> total, n_genes;
  std::vector<std::vector<double>> set_total;  // [set][row]
  std::vector<std::vector<double>> top_sum;    // [i][row] for top_n[i]
};
template <class V, class I>
RowQc row_qc(CudaResources& r, const CsrView<V, I>& m, const uint8_t* gene_sets, int n_sets, const std::vector<int>& top_n);
inline RowQc row_qc(CudaResources& r, const DeviceCsr& m, const uint8_t* gene_sets, int n_sets, const std::vector<int>& top_n) {
  return row_qc(r, view(m), gene_sets, n_sets, top_n);
}

// Per-gene sums over rows of f(value): sum, sum of squares, number of nonzero entries (float64).
enum class GeneTransform { identity, expm1, clip };  // clip: min(v, clip[g])
struct GeneSums {
  std::vector<double> sum, sumsq, nnz;
};
// `second`: which statistic besides the sum is needed (the one not asked for is left at 0): the count
// comes with the bounds pass of gene_sums.cu, the squares take one more pass.
// The results are the same bits on every run, whatever the order the GPU adds in.
enum class SecondStat { count, squares, both };
template <class V, class I>
GeneSums gene_sums(CudaResources& r, const CsrView<V, I>& m, GeneTransform f,
                   const NonDeduced<V>* clip = nullptr, SecondStat second = SecondStat::both);
inline GeneSums gene_sums(CudaResources& r, const DeviceCsr& m, GeneTransform f, const float* clip = nullptr,
                          SecondStat second = SecondStat::both) {
  return gene_sums(r, view(m), f, clip, second);
}
// Per gene, the number of nonzero entries in the rows d_rows[0, n_sel) (device array of row numbers),
// added to d_cnt (device array of n_cols; exact integer atomics). Asynchronous on r.stream.
template <class V, class I>
void rows_gene_nnz(CudaResources& r, const CsrView<V, I>& m, const int64_t* d_rows, int64_t n_sel,
                   unsigned long long* d_cnt);

// Per row: total over the row; rows rescaled to target_sum (rows with total 0 untouched), then
// log1p when `log1p` is set. In place.
template <class V, class I>
void normalize_log1p(CudaResources& r, const CsrView<V, I>& m, double target_sum, bool log1p,
                     std::vector<double>* totals_out);
inline void normalize_log1p(CudaResources& r, DeviceCsr& m, double target_sum, bool log1p,
                            std::vector<double>* totals_out) {
  normalize_log1p(r, view(m), target_sum, log1p, totals_out);
}
// Row totals (float64) on the device.
template <class V, class I>
void row_totals(CudaResources& r, const CsrView<V, I>& m, double* d_totals);
inline void row_totals(CudaResources& r, const DeviceCsr& m, double* d_totals) { row_totals(r, view(m), d_totals); }

// Dense row-major n_rows x n_cols output: (x - mean[g]) / std[g] (zero_center) or x / std[g],
// clipped to max_value (max_value <= 0: no clipping).
template <class V, class I>
void scale_to_dense(CudaResources& r, const CsrView<V, I>& m, const V* mean, const V* std_, bool zero_center,
                    NonDeduced<V> max_value, V* out);
inline void scale_to_dense(CudaResources& r, const DeviceCsr& m, const float* mean, const float* std_, bool zero_center,
                           float max_value, float* out) {
  scale_to_dense(r, view(m), mean, std_, zero_center, max_value, out);
}

}  // namespace scurry::gpu

namespace scurry::gpu {

// PCA of a dense row-major n x g float matrix on the device: the Gram matrix by fp32 SYRK over row
// chunks accumulated in float64, centring folded in (G - n mu mu^T), the eigenpairs by cuSOLVER
// (float64), X_pca = (X - 1 mu^T) V written to d_xpca (n x k row-major), signs as sklearn's svd_flip
// (the largest-|.| entry of each X_pca column positive).
struct PcaGpuResult {
  std::vector<double> variance;     // eigenvalue / (n - 1), descending (no zero_center: X_pca's column variances, ddof 0)
  std::vector<double> components;   // g x k row-major (varm['PCs'] layout)
  std::vector<double> mean;         // per gene (0 without zero_center)
  double total_variance = 0;        // sum of the per-gene variances (ddof 1; ddof 0 without zero_center)
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
// pca_dense of a matrix that is never held whole: rows(a, m) returns a device pointer to its dense
// row-major rows [a, a + m) (m <= chunk_rows), valid until the next call (e.g. a sparse matrix scaled
// into one chunk buffer). It is called twice per chunk: for the Gram matrix, then for the projection.
using DenseRows = std::function<const float*(int64_t a, int64_t m)>;
PcaGpuResult pca_rows(CudaResources& r, const DenseRows& rows, int64_t n, int64_t g, int64_t chunk_rows, int k,
                      bool zero_center, float* d_xpca, const PcaRanks* ranks = nullptr);

// scale without zero_center on the sparse matrix in place: x / sd[gene], clipped above at max_value
// (> 0; 0: no clipping). A zero stays zero, so the matrix stays sparse (scanpy's sparse scale).
void scale_sparse_inplace(CudaResources& r, DeviceCsr& m, const float* sd, float max_value);
// x[i, j] -= shift[j] on a dense row-major rows x g device matrix. The PCA of the sparse-scaled matrix
// (scale without zero_center, PCA centred) shifts each densified chunk by mean / std, the scaled
// column means up to clipping: a centred PCA does not depend on a shift of the columns, and the Gram
// matrix of near-centred rows loses far less to the cancellation in G - n mu mu^T (measured on the
// H200: variance ratios 1.3e-4 off the CPU's without it).
void subtract_columns(CudaResources& r, float* x, int64_t rows, int64_t g, const float* shift);

// The Gram half of pca_dense as a block-wise accumulator (the streamed chain adds one densified row
// block at a time, so the dense n x g matrix never exists): add() puts A^T A and A^T 1 of a dense
// row-major rows x g device block into float64 accumulators (fp32/fp16x2/tf32x3 products over chunks
// of at most min(max_rows, 65,536) rows, SCURRY_PCA_GRAM as pca_dense), asynchronously on r.stream.
// finish() sums the accumulators over the ranks (PcaRanks as pca_dense), centres them when zero_center
// (G - s s^T / n), and returns the top k eigenpairs (the solve on rank 0, broadcast): collective.
struct GramEigen {
  std::vector<double> eig;   // k eigenvalues of the (centred) Gram matrix, descending (not divided by n)
  std::vector<double> V;     // g x k column-major eigenvectors, in the order of eig
  std::vector<double> sum;   // per gene, the column sum over every rank's rows
  std::vector<double> diag;  // the diagonal of the (centred when zero_center) Gram matrix
};
class GramAccumulator {
 public:
  GramAccumulator(CudaResources& r, int64_t g, int64_t max_rows);
  ~GramAccumulator();
  GramAccumulator(const GramAccumulator&) = delete;
  GramAccumulator& operator=(const GramAccumulator&) = delete;
  void add(const float* X, int64_t rows);
  int64_t n_genes() const;
  // n_all: the rows added over every rank. Frees the scratch and the accumulators; add() after it fails.
  GramEigen finish(int64_t n_all, int k, bool zero_center, const PcaRanks* ranks = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// d_xpca (n x k row-major) = X (n x g row-major) dV (g x k column-major, float) - dshift (k; null: none).
void pca_project(CudaResources& r, const float* X, int64_t n, int64_t g, int k, const float* dV, const float* dshift,
                 float* d_xpca);

// The post-processing of X_pca (pca.cu) on a dense row-major n x k matrix of V (float, double; explicit
// instantiations in pca.cu; element offsets int64_t, there is no column index): x[i, j] -= shift[j];
// x[i, j] *= factor[j]; per column, the entry of largest |value| (the first row among ties; abs -1 and
// row INT64_MAX for a column with no rows), reduced over row chunks on the device and on the host.
template <class V>
void subtract_columns(CudaResources& r, V* x, int64_t n, int k, const V* d_shift);
template <class V>
void scale_columns(CudaResources& r, V* x, int64_t n, int k, const V* d_factor);
struct ColumnMaxAbs {
  double abs, val;  // the value, exactly (V converts to double without rounding)
  int64_t row;
};
template <class V>
std::vector<ColumnMaxAbs> column_max_abs(CudaResources& r, const V* x, int64_t n, int k);
// The same over a host matrix (this rank's n rows; row = the local row).
std::vector<ColumnMaxAbs> host_column_max_abs(const float* x, int64_t n, int k);

// The steps of a Gram PCA after the eigen-solve, shared by pca_rows and the streamed chain
// (pp/preprocess_stream.cu), with pca.cpp's semantics. pca_solution: per gene the centre (0 without
// zero_center), the total variance (ddof 1 centred, else ddof 0; InputError when 0), the variances when
// centred (eigenvalue / (n - 1); without centring they are X_pca's column variances,
// xpca_column_variance, after the projection), and the projection X_pca = X V - mu^T V as float
// components (column-major g x k) and shift. pca_signs: sklearn's svd_flip (u-based), the largest-|.|
// entry of each X_pca column positive (the first row among ties), from this rank's column_max_abs over
// its n rows, over every rank's rows in rank order (comm may be null: one rank). signed_components:
// varm['PCs'] (g x k row-major) with those signs.
struct PcaSolution {
  std::vector<double> mean, variance;
  double total_variance = 0;
  std::vector<float> Vf, shift;
};
PcaSolution pca_solution(const GramEigen& e, int64_t g, int k, int64_t n_all, bool zero_center);
std::vector<double> xpca_column_variance(const float* hx, int64_t n, int k, int64_t n_all, Comm* comm);
std::vector<float> pca_signs(std::vector<ColumnMaxAbs> best, int64_t n, Comm* comm);
std::vector<double> signed_components(const std::vector<double>& V, const std::vector<float>& sign, int64_t g, int k);

}  // namespace scurry::gpu

#include "pp/qc.hpp"
namespace scurry {
struct Dataset;
struct PreprocessOptions;
class Timings;
}  // namespace scurry

namespace scurry::gpu {

// Pieces of the chain shared with the streamed one (preprocess_gpu.cu; the host decisions are in
// pp/chain_steps.hpp): the QC gene sets (var columns marked, bit k of bits[g] = gene g in
// set k; at most 8) and ranks, and the QC obs/var columns from the per-cell sums of every cell (rq, this
// rank's cells in order) and the per-gene sums over every rank's n_cells cells.
struct QcSetup {
  QcOptions q;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<uint8_t> bits;
  int n_sets = 0;
  std::vector<int64_t> percent_top;
  std::vector<int> top;
};
QcSetup qc_setup(Dataset& d, const PreprocessOptions& o, int64_t n_genes);
void write_qc_columns(Dataset& d, const QcSetup& s, RowQc&& rq, const GeneSums& gs, int64_t n_cells);

// The GPU preprocessing chain on one rank's cells (preprocess_gpu.cu): `acquire` puts this rank's
// counts on the device (timed as the step `acquire_step`); d holds this rank's cells (obs rows) and
// all genes. Every decision combines the ranks' statistics through ctx.comm() (rank-ordered sums);
// the PCA Gram matrix through device_sum when given. With one rank: preprocess_gpu's chain.
// The options the GPU chains (in memory and streamed) do not take: InputError naming the first, after
// `where` ("--device gpu").
void check_chain_options(const PreprocessOptions& o, const std::string& where);

void preprocess_chain(Context& ctx, Dataset& d, const PreprocessOptions& o, Timings* timings, const char* acquire_step,
                      const std::function<DeviceCsr()>& acquire, const DeviceSum& device_sum = {});

}  // namespace scurry::gpu
