#pragma once
// SCURRY_TRACE_EXIT=1: one line on stderr at the named moments of a process (its main, the contexts
// made, the steps begun and ended, main returning), with the wall clock's time since the epoch, so a
// script that also records its own time before the launch and after the exit can tell the loader's,
// the CUDA start-up's and the exit's shares of the wall time from the process's own timings.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace scurry {

inline void trace_point(const std::string& what) {
  static const bool on = std::getenv("SCURRY_TRACE_EXIT") != nullptr;
  if (!on) return;
  std::fprintf(stderr, "[trace] %s (realtime %.3f)\n", what.c_str(),
               std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace scurry
