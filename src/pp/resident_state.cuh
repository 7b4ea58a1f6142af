// The device side of a ResidentX (pp/resident.hpp): CSR float32 (int32 column indices, int64 row
// pointers) or, after a centred scale, dense row-major float32; and what one step leaves for the next.
#pragma once
#include <memory>
#include <vector>

#include "exec/cuda_resources.cuh"
#include "exec/device_csr.cuh"
#include "pp/kernels.cuh"
#include "pp/resident.hpp"

namespace scurry {

struct ResidentX::State {
  CudaResources* r = nullptr;  // the owning Context's (it must outlive the ResidentX)
  bool is_dense = false;
  DeviceCsr m;                                  // !is_dense
  std::shared_ptr<DeviceArray<float>> dense;    // is_dense: n_rows x n_cols row-major
  int64_t dense_rows = 0, dense_cols = 0;
  // QC's numbers, valid until a step changes the values or the rows: per cell (this rank's) the
  // number of stored entries and the total as float32 holds it; per gene the stored entries over
  // every rank's cells (kept up to date by filter_cells and filter_genes).
  bool have_row_stats = false;
  std::vector<int64_t> row_n_genes;
  std::vector<double> row_total_f32;
  bool have_gene_nnz = false;
  std::vector<int64_t> gene_nnz;
  bool counts_checked = false;  // check_counts found every value finite and >= 0
  void values_changed() { have_row_stats = false, counts_checked = false; }  // the counts of stored entries stay
  void forget() { have_row_stats = false, have_gene_nnz = false, counts_checked = false; }
};

namespace gpu {
// The QC gene sets of q.qc_vars (boolean var columns of d; at most 8) and ranks (preprocess_gpu.cu).
QcSetup qc_setup(const Dataset& d, const QcOptions& q, int64_t n_genes);
}  // namespace gpu

}  // namespace scurry
