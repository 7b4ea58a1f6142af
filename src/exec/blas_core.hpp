// scurry: the OpenBLAS kernel for this CPU.
//
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels from the CPU model at load time and
// falls back to its oldest x86-64 kernels ("Prescott": SSE3) when it does not know the model, as on
// Sapphire Rapids (family 6, model 143) or a VM that reports a generic "Intel Xeon Processor": every
// sgemm then runs 4-5x below the core's AVX-512 rate (bench/RESULTS.md sections 21 and 35).
// OpenBLAS reads OPENBLAS_CORETYPE in gotoblas_dynamic_init(), which it runs when it loads and which
// (with gotoblas_dynamic_quit()) it exports: calling the pair again with the variable set switches
// the kernel table in place, with the bits of a process started with that variable (checked:
// sgemm on 1 and 2 threads). The CLI (main) and the Python package (module import) both call
// use_fast_blas_core() before any BLAS call of theirs, so both run the same kernels by the same rule.
#pragma once

#include <string>

namespace scurry {

// When OpenBLAS is linked, SCURRY_FAST_BLAS is not "0", OPENBLAS_CORETYPE is unset and OpenBLAS chose
// a generic pre-AVX2 kernel set although the CPU has AVX-512 (F, BW, DQ, VL) or AVX2 + FMA: switches
// OpenBLAS to its SkylakeX or Haswell kernels (for the whole process: numpy too, where it uses the same
// libopenblas). Otherwise nothing changes. Idempotent; call while no BLAS call runs (first thing in
// main(); at the package's import).
void use_fast_blas_core();

// OpenBLAS's core name ("" when the BLAS is not OpenBLAS).
const char* blas_core_name();

// One line: the kernel set in use and why (what use_fast_blas_core() did), for scurry.settings.
std::string blas_core_status();

}  // namespace scurry
