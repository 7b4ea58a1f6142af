// GPU tests (label gpu): NcclComm between two GPUs of this host (skipped with fewer GPUs or without
// NCCL): host-buffer sums of doubles and int64, and the in-place device sum, against sums computed
// here; every rank must get the same result.
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <thread>

#include "exec/comm_nccl.hpp"
#include "exec/comm_thread.hpp"
#include "exec/context.hpp"
#include "testlib.hpp"

using namespace scurry;

TEST(NcclComm, SumsOverTwoGpus) {
  SCURRY_REQUIRE_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
  const int R = 2;
  const size_t n = 100000;
  const uint64_t seed = test::fresh_seed();
  auto part = [&](int r) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(r));
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(n);
    for (auto& x : v) x = u(rng);
    return v;
  };
  std::vector<double> want = part(0);
  {
    const auto p1 = part(1);
    for (size_t i = 0; i < n; ++i) want[i] += p1[i];  // two ranks: a + b is the same in either order
  }
  auto host = make_thread_comms(R);
  auto nccl = make_nccl_comms({0, 1}, std::vector<std::shared_ptr<Comm>>(host.begin(), host.end()));
  ASSERT_EQ(nccl.size(), 2u);
  std::vector<std::vector<double>> got_host(R), got_dev(R);
  std::vector<std::vector<int64_t>> got_i(R);
  std::vector<std::string> err(R);
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      try {
        if (cudaSetDevice(r) != cudaSuccess) throw Error("cudaSetDevice");
        EXPECT_EQ(nccl[r]->rank(), r);
        EXPECT_EQ(nccl[r]->device(), r);
        std::vector<double> v = part(r);
        nccl[r]->allreduce_sum(v.data(), v.size());
        got_host[r] = v;
        std::vector<int64_t> iv = {r + 1, (int64_t(1) << 50) + r};
        nccl[r]->allreduce_sum(iv.data(), iv.size());
        got_i[r] = iv;
        // device buffers
        std::vector<double> w = part(r);
        double* d = nullptr;
        cudaStream_t s = nullptr;
        if (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc(&d, n * 8) != cudaSuccess) throw Error("cuda alloc");
        cudaMemcpy(d, w.data(), n * 8, cudaMemcpyHostToDevice);
        nccl[r]->allreduce_sum_device(d, n, s);
        cudaStreamSynchronize(s);
        cudaMemcpy(w.data(), d, n * 8, cudaMemcpyDeviceToHost);
        cudaFree(d);
        cudaStreamDestroy(s);
        got_dev[r] = w;
        nccl[r]->barrier();
        nccl[r]->close(false);
      } catch (const std::exception& e) {
        err[r] = e.what();
        host[r]->fail_all();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < R; ++r) {
    ASSERT_EQ(err[r], "") << "rank " << r;
    ASSERT_EQ(got_host[r].size(), n);
    ASSERT_EQ(got_dev[r].size(), n);
    double worst_h = 0, worst_d = 0;
    for (size_t i = 0; i < n; ++i) {
      worst_h = std::max(worst_h, std::abs(got_host[r][i] - want[i]));
      worst_d = std::max(worst_d, std::abs(got_dev[r][i] - want[i]));
    }
    EXPECT_LE(worst_h, 1e-15) << "host-buffer sum, rank " << r;
    EXPECT_LE(worst_d, 1e-15) << "device sum, rank " << r;
    EXPECT_EQ(got_i[r], (std::vector<int64_t>{3, (int64_t(1) << 51) + 1})) << "rank " << r;
  }
  EXPECT_EQ(got_host[0], got_host[1]) << "every rank the same bits";
}
