#include "testlib.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "exec/context.hpp"

namespace scurry::test {

// SCURRY_SHARED_DATA in the environment overrides the path compiled in (tests run on another machine).
std::string shared_data(const std::string& rel) {
  const char* env = std::getenv("SCURRY_SHARED_DATA");
  return std::string(env && *env ? env : SCURRY_SHARED_DATA) + "/" + rel;
}
std::string repo_data(const std::string& rel) { return std::string(SCURRY_REPO_DATA) + "/" + rel; }
std::string scurry_binary() { return SCURRY_BINARY; }

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  auto base = std::filesystem::temp_directory_path();
  std::random_device rd;
  for (;;) {
    dir_ = base / ("scurry_test_" + std::to_string(rd()) + "_" + std::to_string(counter++));
    if (std::filesystem::create_directory(dir_)) break;
  }
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

uint64_t fresh_seed() {
  uint64_t seed;
  if (const char* s = std::getenv("SCURRY_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  else seed = std::random_device{}() ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::fprintf(stderr, "[seed] %s.%s SCURRY_TEST_SEED=%llu\n", info ? info->test_suite_name() : "?",
               info ? info->name() : "?", static_cast<unsigned long long>(seed));
  return seed;
}

CsrF random_counts(int64_t rows, int64_t cols, double density, uint64_t seed, int max_count) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> v(1, max_count);
  CsrF m = CsrF::zeros(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      if (u(rng) < density) {
        m.indices.push_back(static_cast<int32_t>(c));
        m.data.push_back(static_cast<float>(v(rng)));
      }
    m.indptr[r + 1] = static_cast<int64_t>(m.data.size());
  }
  return m;
}

bool have_gpu() { return cuda_built() && cuda_device_count() > 0; }

}  // namespace scurry::test
