#include "exec/blas_core.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

extern "C" char* openblas_get_corename(void) __attribute__((weak));

namespace scurry {

const char* blas_core_name() { return openblas_get_corename ? openblas_get_corename() : ""; }

void reexec_with_fast_blas_core(char** argv) {
#if defined(__x86_64__)
  // Opt-in for now (SCURRY_FAST_BLAS=1): the Python package cannot re-execute, so with it on the CLI
  // and the package would run different kernels and their results (tests/python/test_vs_cli.py:
  // the same bits) would differ. OPENBLAS_CORETYPE=SkylakeX set by the user does the same for both.
  const char* want_fast = std::getenv("SCURRY_FAST_BLAS");
  if (!want_fast || std::string(want_fast) != "1") return;
  if (!openblas_get_corename || std::getenv("OPENBLAS_CORETYPE")) return;
  std::string core = openblas_get_corename();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // OpenBLAS's generic choices for an x86-64 model it does not know (pre-AVX2 kernels).
  static const char* const kGeneric[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                                         "sandybridge", "katmai", "coppermine", "northwood", "banias"};
  bool generic = false;
  for (const char* g : kGeneric) generic = generic || core == g;
  if (!generic) return;
  const char* want = nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    want = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    want = "Haswell";
  if (!want) return;
  if (setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with the generic kernels
#else
  (void)argv;
#endif
}

}  // namespace scurry
