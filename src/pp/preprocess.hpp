// scurry: the preprocessing chain of the scanpy tutorial, QC -> filters -> normalize_total -> log1p
// -> highly variable genes -> (raw, subset) -> scale -> PCA, on the Context's backend (CPU steps in
// src/pp/*.cpp; the GPU path in preprocess_gpu.cu keeps the matrix on the device from start to PCA
// and shares every piece of host math with the CPU steps). Each step is timed into `timings`.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/timings.hpp"
#include "exec/context.hpp"
#include "pp/filter.hpp"
#include "pp/hvg.hpp"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "pp/pca.hpp"
#include "pp/qc.hpp"
#include "pp/scale.hpp"

namespace scurry {

class DeviceCsrTap;  // exec/device_tap.hpp

struct PreprocessOptions {
  // --qc-vars: names of gene sets for QC. "mt" marks genes whose names start with MT- or mt- (as
  // scanpy users do), "ribo" RPS/RPL (any case), "hb" HB[^P] ; any other name must be a bool var column.
  std::vector<std::string> qc_vars;
  QcOptions qc;                                       // qc.qc_vars is filled from qc_vars
  FilterCellsOptions filter_cells = [] { FilterCellsOptions o; o.min_genes = 200; return o; }();
  FilterGenesOptions filter_genes = [] { FilterGenesOptions o; o.min_cells = 3; return o; }();
  NormalizeTotalOptions normalize = [] { NormalizeTotalOptions o; o.target_sum = 1e4; return o; }();
  Log1pOptions log1p;
  HvgOptions hvg = [] { HvgOptions o; o.n_top_genes = 2000; return o; }();
  bool subset_hvg = true;  // keep only the highly variable genes after HVG (raw keeps all)
  ScaleOptions scale = [] { ScaleOptions o; o.max_value = 10; return o; }();
  PcaOptions pca = [] { PcaOptions o; o.n_comps = 50; return o; }();
  bool counts_layer = true;  // layers['counts'] = the filtered counts
  bool raw = true;           // raw = the log-normalised matrix of all genes (before the HVG subset)
  bool scaled_x = true;      // GPU: bring the scaled X back to the host (the benchmark skips it)
  // GPU, one device, dense scaled X: the copy back runs in the background; the chain returns with X
  // empty and Dataset::pending_x set (settle() moves X in). `scurry run` sets it, so that the copy
  // overlaps the graph steps.
  bool background_x = false;
  // With background_x: also keep the scaled X on the device (Dataset::device_x) for a later step on
  // the GPU (run's markers test X there when it does not test raw), where it takes at most a quarter
  // of the device's memory.
  bool keep_device_x = false;
  // With background_x: called on the copy's own thread with the host X being filled and a function
  // that returns once its first b bytes are final (the copy runs beside it), so that the caller's
  // write follows the copy (`scurry run`'s early write of X). Its error is the copy's.
  std::function<void(const DenseF& x, const std::function<void(size_t)>& ready)> follow_x;
  // CPU chain, with a CSR X and the HVG subset (issue 19 point 5): called with raw/X (the
  // log-normalised matrix of all genes, just before the subset) and layers/counts (the HVGs'
  // counts, just after it) as soon as each is final. When it returns true (it wrote the matrix:
  // `scurry run`'s H5adWriter), the chain keeps no copy: d.raw holds var only, d.layers no
  // "counts". Empty (the default): both are kept in d.
  std::function<bool(const std::string& slot, const Matrix& m)> early_write;
  // GPU, one device: X as a DeviceCsrTap copied it to the device during the read
  // (exec/device_tap.hpp); the chain takes it instead of uploading X when the tap saw exactly d.X.
  std::shared_ptr<DeviceCsrTap> tapped_x;
  // Steps to leave out (by name: qc, filter_cells, filter_genes, normalize_total, log1p,
  // highly_variable_genes, scale, pca).
  std::vector<std::string> skip;
};

// Runs the chain on d (X = counts, CSR or dense). Throws InputError on bad input or options.
void preprocess(Context& ctx, Dataset& d, const PreprocessOptions& opt, Timings* timings = nullptr);

// The GPU chain (preprocess_gpu.cu; a stub throwing Error in builds without CUDA).
void preprocess_gpu(Context& ctx, Dataset& d, const PreprocessOptions& opt, Timings* timings);

// The GPU chain on a copy of a matrix simulated on the device (benchmarks): d gets the frame's
// metadata and the results; the device copy is timed as the step "device_copy". consume: the
// simulated matrix itself is used (moved out of sim), no copy.
struct DeviceSimulated;
void preprocess_simulated(Context& ctx, DeviceSimulated& sim, Dataset& d, const PreprocessOptions& opt,
                          Timings* timings, bool consume = false);

// The GPU chain over several GPUs of this host (preprocess_gpus.cu), one CUDA context per GPU (a
// device may repeat: two ranks on one GPU, what the tests do). The cells are split into contiguous
// ranges of near-equal nonzeros, one host thread per context runs the chain on its range, and every
// decision combines the ranks' statistics in rank order (ThreadComm: the same bits on every rank);
// the PCA Gram matrix is summed by NCCL when the GPUs are distinct and NCCL is built in (environment
// SCURRY_NCCL=0: through the host). d then holds every cell again, in order (rank 0 gathers them): the
// result of preprocess_gpu up to the order of floating-point additions. obsp is dropped (warning).
// Timings are rank 0's plus the step "gather"; meta "gpus", "gram_sum" (nccl | host), and
// "gpu_peak_bytes" is the largest over the GPUs. InputError when a GPU would get no cell (before or
// after filter_cells). One context: preprocess_gpu.
void preprocess_gpu_sharded(const std::vector<Context*>& gpus, Dataset& d, const PreprocessOptions& opt,
                            Timings* timings);
// The same from a matrix simulated on a device (benchmarks): each GPU copies its rows from the
// simulating one (timed as "device_copy"); consume: the simulated matrix is freed once every GPU has
// its copy. One context: preprocess_simulated.
void preprocess_simulated_sharded(const std::vector<Context*>& gpus, DeviceSimulated& sim, Dataset& d,
                                  const PreprocessOptions& opt, Timings* timings, bool consume = false);

// The --qc-vars names without the empty ones and "none".
std::vector<std::string> qc_var_names(const std::vector<std::string>& names);
// Marks var[name] for the gene sets of --qc-vars that are known prefixes (mt, ribo, hb).
void mark_qc_vars(Dataset& d, const std::vector<std::string>& names);

}  // namespace scurry
