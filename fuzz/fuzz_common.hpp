// scurry fuzz targets: what they share. Each target (fuzz_<reader>.cpp) turns libFuzzer's input
// into a file or directory in a private scratch directory (on tmpfs when /dev/shm exists: HDF5
// and the zarr and mtx readers take paths, so the input goes through the same open/read code as
// the CLI), runs the reader the CLI runs on it, and counts a scurry::Error (a clean, one-line
// rejection) as success. Anything else -- a crash, a sanitizer report, an uncaught exception of
// another type (std::length_error, nlohmann::json's), a hang (-timeout) or an allocation past
// -rss_limit_mb / -malloc_limit_mb -- is a finding.
//
// The CLI's HDF5 crash guard (io/hdf5_guard.hpp) is NOT armed here: its handler would turn a
// SIGSEGV inside libhdf5 into a clean exit 2, and the fuzzer must see it as the crash it is.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <omp.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace scurry::fuzz {

// One thread: the readers' OpenMP loops (h5ad's index checks) would otherwise start a team of
// nproc threads in every fuzzing process, and with -fork=K on many cores those teams' spinning
// waits take the cores the other jobs fuzz on. Set before LLVMFuzzerTestOneInput first runs.
inline const bool g_one_thread = [] {
  omp_set_num_threads(1);
  return true;
}();

// A scratch directory for this process, removed at exit (never destroyed: the exit handler reads it).
inline const std::string& scratch() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : (tmp ? tmp : "/tmp");
    auto* d = new std::string(std::string(base) + "/scurry-fuzz-" + std::to_string(getpid()));
    std::filesystem::remove_all(*d);
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return d;
  }();
  return *dir;
}

inline void write_bytes(const std::string& path, const uint8_t* p, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (n && std::fwrite(p, 1, n, f) != n) std::abort();
  std::fclose(f);
}

// A small directory tree in one input, easy for a mutator to work on: records
//   "=== NAME\n" followed by the file's bytes up to the next "\n=== " (or the end).
// NAME is relative ("X/.zarray"); names with "..", a leading '/', or more than 8 levels are skipped.
// Returns the number of files written under `dir` (created empty first).
inline int unpack_tree(const uint8_t* data, size_t size, const std::string& dir, int max_files = 64) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::string_view mark = "=== ";
  size_t pos = in.rfind(mark, 0) == 0 ? 0 : in.find("\n=== ");
  if (pos != 0 && pos != std::string_view::npos) ++pos;
  int files = 0;
  while (pos != std::string_view::npos && files < max_files) {
    const size_t name_begin = pos + mark.size();
    const size_t nl = in.find('\n', name_begin);
    if (nl == std::string_view::npos) break;
    const std::string name(in.substr(name_begin, nl - name_begin));
    size_t next = in.find("\n=== ", nl + 1);
    const size_t body_end = next == std::string_view::npos ? in.size() : next;
    const std::string_view body = in.substr(nl + 1, body_end - (nl + 1));
    pos = next == std::string_view::npos ? next : next + 1;
    if (name.empty() || name.size() > 200 || name[0] == '/' || name.find("..") != std::string::npos ||
        name.find('\0') != std::string::npos || name.back() == '/')
      continue;
    if (std::count(name.begin(), name.end(), '/') > 8) continue;
    const std::filesystem::path p = std::filesystem::path(dir) / name;
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) continue;
    if (std::filesystem::is_directory(p, ec)) continue;
    write_bytes(p.string(), reinterpret_cast<const uint8_t*>(body.data()), body.size());
    ++files;
  }
  return files;
}

// SCURRY_FUZZ_MATERIALIZE=DEST: the target copies the file or directory it built from its input
// (the exact bytes its readers would open) to DEST and exits 0 without reading it: how
// fuzz/longrun.sh turns an artifact into an input for the CLI (`scurry convert DEST out.h5ad`).
inline void materialize_if_asked(const std::string& path) {
  const char* dest = std::getenv("SCURRY_FUZZ_MATERIALIZE");
  if (!dest || !*dest) return;
  std::error_code ec;
  std::filesystem::remove_all(dest, ec);
  std::filesystem::copy(path, dest, std::filesystem::copy_options::recursive, ec);
  std::exit(ec ? 1 : 0);
}

// Runs `f`; a scurry::Error is a clean rejection. Warnings are silenced once.
template <class F>
int run_clean(F&& f) {
  static const bool quiet = [] {
    log::set_quiet(true);  // warnings still go to stderr (run with -close_fd_mask=2 to hide them)
    return true;
  }();
  (void)quiet;
  try {
    f();
  } catch (const scurry::Error&) {
  }
  return 0;
}

}  // namespace scurry::fuzz
