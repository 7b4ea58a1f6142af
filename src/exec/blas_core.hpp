// scurry: the OpenBLAS kernel for this CPU.
//
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels from the CPU model at load time and
// falls back to its oldest x86-64 kernels ("Prescott": SSE3) when it does not know the model, as on
// Sapphire Rapids (family 6, model 143) or a VM that reports a generic "Intel Xeon Processor": every
// sgemm then runs 4-5x below the core's AVX-512 rate (bench/RESULTS.md section 21). OpenBLAS reads
// OPENBLAS_CORETYPE only when it loads, so the fix is to set it and re-execute the program.
#pragma once

namespace scurry {

// When SCURRY_FAST_BLAS=1 (opt-in: see blas_core.cpp), OpenBLAS is linked, OPENBLAS_CORETYPE is unset and OpenBLAS chose a generic pre-AVX2 kernel
// although the CPU has AVX-512 (F, BW, DQ, VL) or AVX2 + FMA: sets OPENBLAS_CORETYPE to SkylakeX or
// Haswell and execv's /proc/self/exe with argv (never returns on success). Otherwise, or if the
// exec fails, returns and nothing changes. Call first thing in main().
void reexec_with_fast_blas_core(char** argv);

// OpenBLAS's core name ("" when the BLAS is not OpenBLAS).
const char* blas_core_name();

}  // namespace scurry
