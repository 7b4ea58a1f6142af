// scurry: X copied to the GPU while it is read (issue 15). A DeviceCsrTap is a CsrTap
// (core/array_tap.hpp) whose pieces go to device arrays through pinned staging buffers, on the
// reading threads, as each piece lands: the upload overlaps the read, which the disk or the
// decompression bounds. It also tests every value it copies the way check_counts does (finite, not
// negative), so a clean matrix needs no second pass. The GPU chain then takes the device matrix
// instead of uploading (preprocess_gpu.cu, take_tapped in device_csr.cuh); when the tap saw
// anything else than the matrix the chain is given (a CSC or float64 X, a reader's error), the chain
// uploads as before.
#pragma once
#include <memory>

#include "core/array_tap.hpp"
#include "core/matrix.hpp"
#include "exec/context.hpp"

namespace scurry {

class DeviceCsrTap;  // (device_tap.cu)

// A tap onto ctx's GPU; null without a CUDA context (or a build without CUDA).
std::shared_ptr<DeviceCsrTap> make_device_csr_tap(const Context& ctx);
// Its three array taps, for H5adReadOptions::x_tap (empty for null).
CsrTap csr_tap_of(const std::shared_ptr<DeviceCsrTap>& tap);
// True when the tap saw all of X (a float32 CSR with X's sizes) and every value was finite and not
// negative: check_counts(X) would pass. False for null.
bool tapped_counts_clean(const std::shared_ptr<DeviceCsrTap>& tap, const Matrix& X);

}  // namespace scurry
