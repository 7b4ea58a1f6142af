// ThreadComm (ranks as threads of one process): every collective against an oracle computed here,
// with random delays before each call so the threads arrive in varying orders; sums must be
// bit-identical on every rank and equal to the rank-order sum (p0 + p1) + p2.
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "exec/comm_thread.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

constexpr int kRanks = 3;

// Runs body(comm, rank) on kRanks threads; returns each rank's error message ("" when none).
std::vector<std::string> run_ranks(const std::function<void(ThreadComm&, int)>& body, int ranks = kRanks) {
  auto comms = make_thread_comms(ranks);
  std::vector<std::string> err(static_cast<size_t>(ranks));
  std::vector<std::thread> th;
  for (int r = 0; r < ranks; ++r)
    th.emplace_back([&, r] {
      try {
        body(*comms[r], r);
      } catch (const std::exception& e) {
        err[r] = e.what();
        comms[r]->fail_all();
      }
    });
  for (auto& t : th) t.join();
  return err;
}

void jitter(std::mt19937_64& rng) {
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
}

// Values of wildly different magnitudes, so that the order of the additions shows in the bits.
std::vector<double> partial(uint64_t seed, int rank, size_t n) {
  std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(rank));
  std::uniform_real_distribution<double> u(-1, 1), e(-20, 20);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng) * std::pow(10.0, e(rng));
  return v;
}

}  // namespace

TEST(ThreadComm, AllreduceIsRankOrderedAndBitIdenticalOnEveryRank) {
  const uint64_t seed = test::fresh_seed();
  const size_t n = 5000;
  std::vector<double> oracle = partial(seed, 0, n);
  for (int r = 1; r < kRanks; ++r) {
    const auto p = partial(seed, r, n);
    for (size_t i = 0; i < n; ++i) oracle[i] += p[i];
  }
  // The oracle must differ from another order somewhere, or the test could not see a wrong order.
  {
    std::vector<double> other = partial(seed, 2, n);
    const auto p1 = partial(seed, 1, n), p0 = partial(seed, 0, n);
    for (size_t i = 0; i < n; ++i) other[i] = (other[i] + p1[i]) + p0[i];
    EXPECT_NE(std::memcmp(other.data(), oracle.data(), n * 8), 0);
  }
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::vector<double>> got(kRanks);
    std::vector<std::vector<int64_t>> got_i(kRanks);
    const auto err = run_ranks([&](ThreadComm& c, int r) {
      std::mt19937_64 rng(seed + 31 * trial + r);
      std::vector<double> v = partial(seed, r, n);
      jitter(rng);
      c.allreduce_sum(v.data(), v.size());
      got[r] = std::move(v);
      std::vector<int64_t> iv = {r + 1, int64_t(1) << 40, -r * int64_t(3)};
      jitter(rng);
      c.allreduce_sum(iv.data(), iv.size());
      got_i[r] = iv;
    });
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(err[r], "") << "rank " << r;
      ASSERT_EQ(got[r].size(), n);
      EXPECT_EQ(std::memcmp(got[r].data(), oracle.data(), n * 8), 0) << "rank " << r << " trial " << trial;
      EXPECT_EQ(got_i[r], (std::vector<int64_t>{1 + 2 + 3, 3 * (int64_t(1) << 40), -(0 + 3 + 6)})) << "rank " << r;
    }
  }
}

TEST(ThreadComm, GathersAndBroadcast) {
  const uint64_t seed = test::fresh_seed();
  for (int trial = 0; trial < 10; ++trial) {
    // Rank r sends r * 3 + trial % 2 int32 values (rank 0 may send none).
    auto local = [&](int r) {
      std::vector<int32_t> v(static_cast<size_t>(r * 3 + trial % 2));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(1000 * r + i + trial);
      return v;
    };
    std::vector<int32_t> all;
    for (int r = 0; r < kRanks; ++r) {
      const auto v = local(r);
      all.insert(all.end(), v.begin(), v.end());
    }
    std::vector<std::vector<int32_t>> ag(kRanks), gv(kRanks);
    std::vector<std::vector<int64_t>> counts(kRanks);
    std::vector<std::vector<double>> bc(kRanks);
    std::vector<std::vector<std::string>> strs(kRanks);
    const auto err = run_ranks([&](ThreadComm& c, int r) {
      std::mt19937_64 rng(seed + 17 * trial + r);
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), kRanks);
      jitter(rng);
      ag[r] = allgatherv(c, local(r));
      jitter(rng);
      gv[r] = gatherv(c, local(r), 1);
      jitter(rng);
      counts[r] = allgather_count(c, 10 * r + trial);
      std::vector<double> b(4, -1.0);
      if (r == 2) b = {1.5, -2.25, 1e300, 0.0};
      jitter(rng);
      c.broadcast(b.data(), b.size() * sizeof(double), 2);
      bc[r] = b;
      jitter(rng);
      strs[r] = allgatherv_strings(c, {"r" + std::to_string(r), std::string(static_cast<size_t>(r), 'x')});
      jitter(rng);
      c.barrier();
    });
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(err[r], "") << "rank " << r;
      EXPECT_EQ(ag[r], all) << "allgatherv, rank " << r;
      if (r == 1) EXPECT_EQ(gv[r], all) << "gatherv on the root";
      else EXPECT_TRUE(gv[r].empty()) << "gatherv off the root, rank " << r;
      EXPECT_EQ(counts[r], (std::vector<int64_t>{trial, 10 + trial, 20 + trial})) << "rank " << r;
      EXPECT_EQ(bc[r], (std::vector<double>{1.5, -2.25, 1e300, 0.0})) << "broadcast, rank " << r;
      EXPECT_EQ(strs[r], (std::vector<std::string>{"r0", "", "r1", "x", "r2", "xx"})) << "rank " << r;
    }
  }
}

TEST(ThreadComm, AFailedRankReleasesTheOthers) {
  // Rank 1 fails before the second collective; ranks 0 and 2 wait there and must get
  // ThreadCommAborted, not wait forever.
  std::vector<int> aborted(kRanks, 0);
  const auto err = run_ranks([&](ThreadComm& c, int r) {
    int64_t x = r;
    c.allreduce_sum(&x, 1);
    EXPECT_EQ(x, 0 + 1 + 2);
    if (r == 1) throw InputError("rank 1 broke");
    try {
      c.allreduce_sum(&x, 1);
    } catch (const ThreadCommAborted&) {
      aborted[r] = 1;
      throw;
    }
  });
  EXPECT_EQ(err[1], "rank 1 broke");
  EXPECT_EQ(aborted, (std::vector<int>{1, 0, 1}));
  EXPECT_NE(err[0].find("another rank"), std::string::npos) << err[0];
  EXPECT_NE(err[2].find("another rank"), std::string::npos) << err[2];
}

TEST(ThreadComm, OneRankIsTheIdentity) {
  const auto err = run_ranks(
      [&](ThreadComm& c, int) {
        std::vector<double> v = {1.0, -0.0, 3e-300};
        c.allreduce_sum(v.data(), v.size());
        EXPECT_EQ(v[0], 1.0);
        EXPECT_TRUE(std::signbit(v[1]));  // copied, not added to +0
        EXPECT_EQ(v[2], 3e-300);
        EXPECT_EQ(allgatherv(c, std::vector<int>{4, 5}), (std::vector<int>{4, 5}));
        EXPECT_EQ(c.describe(), "1 thread");
      },
      1);
  EXPECT_EQ(err[0], "");
}

TEST(ThreadComm, MismatchedReductionSizesFailOnEveryRank) {
  const auto err = run_ranks([&](ThreadComm& c, int r) {
    std::vector<double> v(static_cast<size_t>(r == 2 ? 4 : 5), 1.0);
    c.allreduce_sum(v.data(), v.size());
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_NE(err[r].find("disagree"), std::string::npos) << "rank " << r << ": " << err[r];
}
