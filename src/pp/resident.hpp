// scurry: the preprocessing steps over a matrix resident on one GPU (issue 17 point 9). Each step is
// one entry point over a ResidentX (the dataset's X on the device) and the host Dataset that holds
// its obs/var and receives the step's slots, with the CPU steps' host math (src/pp/*.cpp) turning
// the device's statistics into decisions. The in-memory chain (preprocess_gpu.cu), the chain over
// several GPUs (one rank per GPU, preprocess_gpus.cu) and the Python package's device='gpu' all
// compose these steps; the package calls them one at a time with X resident between the calls.
//
// Ranks: every decision combines the ranks' statistics through ctx.comm() (rank-ordered sums; the
// normalisation median over every rank's totals); with one rank each collective is the identity.
//
// What one step leaves for the next: QC's per-cell numbers (for filter_cells) and per-gene counts
// of nonzero entries (for filter_genes on min_cells/max_cells: QC's counts less those of the cells
// filter_cells removed, no pass over the matrix). Each step that changes the values drops them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/matrix.hpp"

namespace scurry {

class Context;
struct Dataset;
struct QcOptions;
struct FilterCellsOptions;
struct FilterGenesOptions;
struct NormalizeTotalOptions;
struct HvgOptions;
struct ScaleOptions;
struct PcaOptions;

class ResidentX {
 public:
  struct State;  // the device side (pp/resident_state.cuh)
  explicit ResidentX(std::unique_ptr<State> s);
  ~ResidentX();
  ResidentX(const ResidentX&) = delete;
  ResidentX& operator=(const ResidentX&) = delete;
  int64_t n_rows() const;
  int64_t n_cols() const;
  bool dense() const;    // dense row-major float32 (after a centred scale), else CSR float32
  int64_t nnz() const;   // stored entries (dense: n_rows x n_cols)
  int device() const;    // the CUDA device it lives on
  State& state() { return *s_; }
  const State& state() const { return *s_; }

 private:
  std::unique_ptr<State> s_;
};

namespace resident {

// X on ctx's GPU: a CSR or dense matrix of any value type, as float32 CSR (dense zeros dropped).
// InputError on a context without CUDA.
std::unique_ptr<ResidentX> upload(Context& ctx, const Matrix& x);
// X on ctx's GPU from the caller's own CSR buffers (the Python package's scipy matrix), without a host
// copy of the matrix: row pointers int32 or int64 (index_bytes / indptr_bytes 4 or 8), values float32
// or float64 (value_bytes), each copied to the device through pinned staging; int64 column indices and
// float64 values are converted on the host one chunk at a time on the way. InputError (naming `where`)
// on a structure that is not CSR: row pointers not starting at 0, decreasing or not ending at nnz, a
// column index outside [0, n_cols), more than 2^31 - 1 columns.
struct CsrParts {
  int64_t n_rows = 0, n_cols = 0, nnz = 0;
  const void* indptr = nullptr;
  int indptr_bytes = 8;
  const void* indices = nullptr;
  int index_bytes = 4;
  const void* data = nullptr;
  int value_bytes = 4;
};
std::unique_ptr<ResidentX> upload(Context& ctx, const CsrParts& x, const std::string& where);
// The matrix back in host memory: CSR or dense float32, as resident.
Matrix download(Context& ctx, const ResidentX& x);
// A copy on the device of the rows `rows` (ascending; empty vector with all_rows: every row) and the
// columns `cols` (ascending; all_cols: every column): the package's views (adata[mask]) of a
// resident AnnData. CSR only.
std::unique_ptr<ResidentX> subset_copy(Context& ctx, const ResidentX& x, const std::vector<int64_t>& rows, bool all_rows,
                                       const std::vector<int64_t>& cols, bool all_cols);

// The package's counts check before a step that needs raw counts (as io/h5ad.hpp's check_counts on the
// host, the same message): InputError after `where` on the first NaN, infinite or negative value, with
// its row and column. Remembered until a step changes the values. CSR only.
void check_counts(Context& ctx, ResidentX& x, const std::string& where);
// The same scan, remembering only a pass (no error; a later check_counts finds and reports a bad
// value): the package's upload runs it, so that its steps on counts find the check done, as the
// CLI's chain checks the counts while it reads them. CSR only (a dense X is left unchecked).
void note_counts(Context& ctx, ResidentX& x);
// calculate_qc_metrics on X: d.var holds the boolean columns named in q.qc_vars (at most 8); writes
// the obs/var columns as the CPU step (float32 matrix). CSR only.
void qc(Context& ctx, ResidentX& x, Dataset& d, const QcOptions& q);
// filter_cells / filter_genes: the obs/var count columns, then the passing rows / columns kept in X
// (in place on the device) and in every slot of d (apply_filter_*). InputError when none passes.
// Returns the mask over the rows / columns as they were (1: kept), for the caller's own slots.
std::vector<uint8_t> filter_cells(Context& ctx, ResidentX& x, Dataset& d, const FilterCellsOptions& o);
std::vector<uint8_t> filter_genes(Context& ctx, ResidentX& x, Dataset& d, const FilterGenesOptions& o);
// normalize_total (target_sum, key_added; not exclude_highly_expressed), then log1p when
// `then_log1p` (one pass over the values: the chain's fused step). CSR only.
void normalize_total(Context& ctx, ResidentX& x, Dataset& d, const NormalizeTotalOptions& o, bool then_log1p = false);
// log1p (natural; uns['log1p'] = {}). CSR only.
void log1p(Context& ctx, ResidentX& x, Dataset& d);
// highly_variable_genes, flavours seurat and cell_ranger on one batch: var columns and uns['hvg'] as
// the CPU step; with o.subset the selected genes are kept in X and d. CSR only.
void highly_variable_genes(Context& ctx, ResidentX& x, Dataset& d, const HvgOptions& o);
// The columns `keep` (ascending gene numbers) of X, in place; d.subset_vars(keep) when d is given.
void subset_vars(Context& ctx, ResidentX& x, Dataset* d, const std::vector<int64_t>& keep);
// scale: var 'mean' and 'std' (float64, as the CPU step). zero_center: X becomes dense, centred,
// scaled and clipped above at max_value (and below at -max_value with clip_below); without it X
// stays sparse, each stored value divided by its gene's std and clipped. Needs 2 cells.
void scale(Context& ctx, ResidentX& x, Dataset& d, const ScaleOptions& o);
// pca (the Gram matrix on the device, cuSOLVER's eigenpairs): obsm['X_pca'], varm['PCs'],
// uns['pca'] as the CPU step, over every rank's cells. On a CSR X each block of rows is densified
// and centred on the fly (the dense matrix is never held whole). use_highly_variable as the CPU
// step (the Dataset's var['highly_variable']). `device_sum` (may be empty): the Gram matrix summed
// over the ranks on the devices (NCCL), else through ctx.comm() on the host.
using DeviceSumFn = std::function<void(double* d, size_t n, void* stream)>;
void pca(Context& ctx, ResidentX& x, Dataset& d, const PcaOptions& o, const DeviceSumFn& device_sum = {});

}  // namespace resident

// The tutorial chain as the Python package runs it with device='gpu' (scurry bench --stepwise): each
// step its own call on the resident X, normalize_total and log1p apart, the HVG subset inside
// highly_variable_genes (subset=True), on a copy of a matrix simulated on the device (consume: the
// simulated matrix itself). Timed per step into `timings` as the fused chain (steps "normalize_total"
// and "log1p" apart); no raw, no counts layer, X left on the device.
struct DeviceSimulated;
struct PreprocessOptions;
class Timings;
void stepwise_chain_simulated(Context& ctx, DeviceSimulated& sim, Dataset& d, const PreprocessOptions& o,
                              Timings* timings, bool consume = false);

}  // namespace scurry
