// scurry test helpers: paths to the shared real data, temporary directories, seeded random inputs.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/matrix.hpp"

namespace scurry::test {

// ../shared/data/<rel> (the scanpy golden outputs and the pbmc3k subset).
std::string shared_data(const std::string& rel);
// data/<rel> inside the repository.
std::string repo_data(const std::string& rel);
// The built `scurry` executable.
std::string scurry_binary();

// A fresh empty directory, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

// A seed that differs run to run unless SCURRY_TEST_SEED is set; printed so a failure can be replayed.
uint64_t fresh_seed();

// A random CSR count matrix: each entry nonzero with probability `density`, values 1..max_count
// (integers stored as float), sorted column indices.
CsrF random_counts(int64_t rows, int64_t cols, double density, uint64_t seed, int max_count = 20);

// True if a CUDA device is usable; GPU tests call GTEST_SKIP() with a message otherwise.
bool have_gpu();

}  // namespace scurry::test

#define SCURRY_REQUIRE_GPU()                                                   \
  do {                                                                         \
    if (!::scurry::test::have_gpu()) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)
