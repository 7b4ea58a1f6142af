#include "core/error.hpp"
#include "exec/context.hpp"
#include "exec/parallel.hpp"
#include "testlib.hpp"

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace scurry;

#ifdef SCURRY_WITH_CUDA
#include "exec/cuda_libs.hpp"

namespace {
std::string mapped_files() {
  std::ifstream f("/proc/self/maps");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
}  // namespace
#endif

// CUDA's math libraries are not loaded by a CPU process (src/exec/cuda_libs.cpp): not mapped after a
// CPU Context's work; mapped, with their versions, once called. No GPU needed.
TEST(CudaLibs, LoadedAtFirstUseOnly) {
#ifndef SCURRY_WITH_CUDA
  GTEST_SKIP() << "CPU-only build: no CUDA libraries";
#else
  Context c = Context::cpu(2);
  std::vector<double> x(1000, 1.0);
  parallel_for(c.threads(), 10, [&](int64_t b) { x[static_cast<size_t>(b)] += 1; });
  for (const char* lib : {"cublas", "cusolver", "cufft", "nccl"}) {
    EXPECT_FALSE(cuda_math_library_loaded(lib)) << lib;
    EXPECT_EQ(mapped_files().find(std::string("lib") + lib), std::string::npos) << lib << " mapped before first use";
  }
  const std::string v = cuda_math_library_versions();
  std::printf("%s\n", v.c_str());
  for (const char* lib : {"cublas", "cusolver", "cufft"}) {
    EXPECT_TRUE(cuda_math_library_loaded(lib)) << lib;
    EXPECT_NE(mapped_files().find(std::string("lib") + lib), std::string::npos) << lib << " not mapped after use";
  }
  for (const char* name : {"cuBLAS ", "cuSOLVER ", "cuFFT "}) {
    const size_t at = v.find(name);
    ASSERT_NE(at, std::string::npos) << v;
    EXPECT_GT(std::stol(v.substr(at + std::string(name).size())), 0) << v;
  }
  EXPECT_FALSE(cuda_math_library_loaded("cusparse"));
#endif
}

TEST(Context, CpuAndErrors) {
  Context c = Context::cpu(2);
  EXPECT_EQ(c.backend(), Backend::cpu);
  EXPECT_EQ(c.threads(), 2);
  EXPECT_EQ(c.comm().size(), 1);
  ContextOptions o;
  o.device = "tpu";
  EXPECT_THROW(Context::create(o), InputError);
  if (!test::have_gpu()) {
    o.device = "gpu";
    EXPECT_THROW(Context::create(o), InputError);  // asked for a GPU, none usable: a clear error
    o.device = "auto";
    EXPECT_EQ(Context::create(o).backend(), Backend::cpu);
  }
}

TEST(Parallel, VisitsEveryBlockOnceAndPropagatesErrors) {
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(2, 1000, [&](int64_t b) { hits[b]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(parallel_for(2, 100, [](int64_t b) { if (b == 57) throw InputError("boom"); }), InputError);
}

TEST(Comm, LocalAllgatherCopies) {
  auto comm = make_local_comm();
  double x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  comm->allgather(x, sizeof x, y);
  EXPECT_EQ(y[2], 3);
  comm->allreduce_sum(x, 3);
  EXPECT_EQ(x[1], 2);
}
