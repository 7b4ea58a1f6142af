// scurry: the one place CUDA status codes become scurry::Error.
#pragma once
#include <cuda_runtime.h>

#include "core/error.hpp"

#define SCURRY_CUDA(call)                                                                            \
  do {                                                                                               \
    cudaError_t scurry_err_ = (call);                                                                \
    if (scurry_err_ != cudaSuccess)                                                                  \
      ::scurry::fail("CUDA error in ", #call, " (", __FILE__, ":", __LINE__, "): ",                  \
                     cudaGetErrorString(scurry_err_));                                               \
  } while (0)

// After every kernel launch.
#define SCURRY_CUDA_LAUNCH() SCURRY_CUDA(cudaGetLastError())
