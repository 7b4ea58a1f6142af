// GPU tests (label gpu): the device memory resource in each mode, and its out-of-memory message.
#include <vector>

#include "exec/cuda_resources.cuh"
#include "testlib.hpp"

using namespace scurry;

namespace {
__global__ void fill_kernel(float* p, size_t n, float v) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = v + static_cast<float>(i);
}
Context gpu_context(MemoryMode mode, size_t max_bytes = 0) {
  ContextOptions o;
  o.device = "gpu";
  o.cuda.memory = mode;
  o.cuda.max_pool_size = max_bytes;
  return Context::create(o);
}
}  // namespace

TEST(DeviceMemoryGpu, EveryModeAllocatesWritesAndReadsBack) {
  SCURRY_REQUIRE_GPU();
  for (MemoryMode m : {MemoryMode::pool, MemoryMode::plain, MemoryMode::managed, MemoryMode::managed_pool}) {
    Context ctx = gpu_context(m);
    CudaResources& r = *ctx.cuda();
    const size_t n = (1u << 20) + 17;
    {
      DeviceArray<float> a(r, n, "test array");
      fill_kernel<<<(n + 255) / 256, 256, 0, r.stream>>>(a.data(), n, 3.0f);
      SCURRY_CUDA_LAUNCH();
      std::vector<float> h(n);
      SCURRY_CUDA(cudaMemcpyAsync(h.data(), a.data(), n * sizeof(float), cudaMemcpyDeviceToHost, r.stream));
      SCURRY_CUDA(cudaStreamSynchronize(r.stream));
      for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(h[i], 3.0f + static_cast<float>(i));
      EXPECT_EQ(r.memory->in_use(), n * sizeof(float));
    }
    EXPECT_EQ(r.memory->in_use(), 0u);
    EXPECT_GE(r.memory->peak(), n * sizeof(float));
  }
}

TEST(DeviceMemoryGpu, OutOfMemoryNamesSizesAndAdvice) {
  SCURRY_REQUIRE_GPU();
  Context ctx = gpu_context(MemoryMode::pool, 64ull << 20);  // a 64 MiB cap
  CudaResources& r = *ctx.cuda();
  DeviceArray<float> ok(r, 1 << 20, "small");
  try {
    DeviceArray<float> big(r, 100ull << 20, "the big test array");
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("the big test array"), std::string::npos) << m;
    EXPECT_NE(m.find("GiB free"), std::string::npos) << m;
    EXPECT_NE(m.find("--memory managed"), std::string::npos) << m;
  }
}
