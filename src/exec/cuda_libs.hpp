// scurry: CUDA's math libraries, loaded on first use (src/exec/cuda_libs.cpp says why and how).
// CUDA builds only.
#pragma once
#include <string>

namespace scurry {

// Whether "cublas", "cusolver", "cufft" or "nccl" has been loaded by this process's first call
// into it (false for any other name).
bool cuda_math_library_loaded(const std::string& which);
// "cuBLAS 130100, cuSOLVER ..., cuFFT ..., NCCL ...": loads each library (a GPU is not needed);
// Error naming the library when one cannot be loaded.
std::string cuda_math_library_versions();

}  // namespace scurry
