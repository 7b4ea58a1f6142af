// scurry: a CSR matrix in device memory (int64 row pointers, int32 column indices, float values),
// moved to and from the host, and filtered in place (rows and columns dropped, columns renumbered).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "core/matrix.hpp"
#include "exec/cuda_resources.cuh"

namespace scurry {

struct DeviceCsr {
  int64_t n_rows = 0, n_cols = 0, nnz = 0;
  DeviceArray<int64_t> indptr;   // n_rows + 1
  DeviceArray<int32_t> indices;  // capacity >= nnz (in-place filters keep the allocation)
  DeviceArray<float> data;
};

DeviceCsr upload(CudaResources& r, const CsrF& m);
// The matrix a DeviceCsrTap copied to the device during the read (exec/device_tap.hpp), when it saw
// exactly `host` (its sizes; every element): moved into out, true. Else false (out untouched).
class DeviceCsrTap;
bool take_tapped(const std::shared_ptr<DeviceCsrTap>& tap, const CsrF& host, DeviceCsr& out);
CsrF download(CudaResources& r, const DeviceCsr& m);
// A copy of m (on r's device, stream-ordered; m's nnz entries, not its spare capacity).
DeviceCsr copy_on_device(CudaResources& r, const DeviceCsr& m);
// Device to pageable host memory through pinned staging buffers (large copies ~7x faster than a
// plain cudaMemcpy from pageable memory); synchronous.
void copy_to_host(CudaResources& r, void* dst, const void* src, size_t bytes);
// Pageable host memory to the device the same way (pinned staging, filled on the CPU threads); synchronous.
void copy_to_device(CudaResources& r, void* dst, const void* src, size_t bytes);
// A copy like copy_to_host, to run later on any host thread: the returned function copies src to
// the dst it is given, on a stream and pinned staging buffers of its own, once the work queued on
// r.stream before this call has run (the copy engine then overlaps the kernels of later steps).
// `keep` holds what src lives in and is released after the copy. Throws a CUDA error of the copy.
// `progress` (may be empty) is told, after each staged chunk, how many leading bytes of dst are
// final (increasing; `bytes` at the end), so that another thread can follow the copy (the run's
// write of X: cli/cmd_run.cpp).
using CopyProgress = std::function<void(size_t bytes_done)>;
std::function<void(void* dst, const CopyProgress& progress)> deferred_copy_to_host(CudaResources& r, const void* src,
                                                                                   size_t bytes, std::shared_ptr<void> keep);

// Keeps the rows with keep_rows[r] != 0 (device array of n_rows bytes; null keeps all) and the
// columns with col_map[c] >= 0, renumbered to col_map[c] (device array of n_cols; null keeps all),
// new_cols columns in all. In place: entries are compacted chunk by chunk through a bounded scratch
// buffer, so the peak memory is the matrix plus that buffer, not two matrices.
void filter_inplace(CudaResources& r, DeviceCsr& m, const uint8_t* keep_rows, const int32_t* col_map, int64_t new_cols);

// Threads per block and rows per warp-per-row kernels.
constexpr int kWarpRowsBlock = 256;

}  // namespace scurry
