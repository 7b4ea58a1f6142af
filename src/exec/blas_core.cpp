#include "exec/blas_core.hpp"

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

extern "C" char* openblas_get_corename(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace scurry {

namespace {

std::string g_status = "use_fast_blas_core() not called: OpenBLAS's own choice";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// OpenBLAS's generic choices for an x86-64 model it does not know (pre-AVX2 kernels).
bool generic_core(const std::string& core) {
  static const char* const kGeneric[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                                         "sandybridge", "katmai", "coppermine", "northwood", "banias"};
  for (const char* g : kGeneric)
    if (core == g) return true;
  return false;
}

void choose() {
  if (!openblas_get_corename) {
    g_status = "the BLAS is not OpenBLAS: its own kernels";
    return;
  }
  const std::string was = openblas_get_corename();
  const char* fast = std::getenv("SCURRY_FAST_BLAS");
  if (fast && std::string(fast) == "0") {
    g_status = was + " (OpenBLAS's choice; SCURRY_FAST_BLAS=0)";
    return;
  }
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    g_status = was + " (OPENBLAS_CORETYPE=" + forced + ")";
    return;
  }
  if (!generic_core(lower(was))) {
    g_status = was + " (OpenBLAS's choice for this CPU)";
    return;
  }
#if defined(__x86_64__)
  const char* want = nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    want = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    want = "Haswell";
  if (!want) {
    g_status = was + " (OpenBLAS's choice: the CPU has neither AVX-512 nor AVX2 + FMA)";
    return;
  }
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) {
    g_status = was + " (OpenBLAS's choice: this OpenBLAS cannot switch kernels; set OPENBLAS_CORETYPE=" + want + ")";
    return;
  }
  // The variable only for OpenBLAS's init: afterwards the environment is as it was, so a child
  // process makes its own choice by this same rule.
  if (setenv("OPENBLAS_CORETYPE", want, 1) != 0) {
    g_status = was + " (OpenBLAS's choice: setenv failed)";
    return;
  }
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  g_status = std::string(openblas_get_corename()) + " (switched from OpenBLAS's generic " + was +
             " kernels for this CPU's " + (std::string(want) == "SkylakeX" ? "AVX-512" : "AVX2") +
             "; SCURRY_FAST_BLAS=0 keeps them)";
#else
  g_status = was + " (OpenBLAS's choice)";
#endif
}

}  // namespace

const char* blas_core_name() { return openblas_get_corename ? openblas_get_corename() : ""; }

void use_fast_blas_core() {
  static std::once_flag once;
  std::call_once(once, choose);
}

std::string blas_core_status() { return g_status; }

}  // namespace scurry
