// scurry: elapsed device time between two points of a stream (CUDA events), for the optional
// device_seconds outputs of the batch tools' GPU paths. Included by .cu files only.
#pragma once
#include <cuda_runtime.h>

#include "exec/cuda_check.hpp"

namespace scurry::gpu {

class StreamTimer {
 public:
  explicit StreamTimer(cudaStream_t s) : s_(s) {
    SCURRY_CUDA(cudaEventCreate(&a_));
    if (cudaEventCreate(&b_) != cudaSuccess) {
      cudaEventDestroy(a_);
      ::scurry::fail("CUDA error: cudaEventCreate failed");
    }
  }
  ~StreamTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  void start() { SCURRY_CUDA(cudaEventRecord(a_, s_)); }
  // Seconds since start(), waiting for the stream's work so far.
  double stop() {
    SCURRY_CUDA(cudaEventRecord(b_, s_));
    SCURRY_CUDA(cudaEventSynchronize(b_));
    float ms = 0;
    SCURRY_CUDA(cudaEventElapsedTime(&ms, a_, b_));
    return ms / 1000.0;
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

}  // namespace scurry::gpu
