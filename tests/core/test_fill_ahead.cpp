// fill_ahead_for (core/fill_ahead.hpp): the output sized and zero-filled on the caller's thread while
// workers write their items behind the fill. Against a plain serial loop, for random sizes, item
// lengths, thread counts and fill steps (small steps, so that the workers do wait for the fill), and
// a worker's exception reaching the caller after every thread stopped.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <stdexcept>

#include "core/fill_ahead.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

TEST(FillAhead, EqualsTheSerialLoopForAnyThreadsAndStep) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = std::uniform_int_distribution<size_t>(0, 20000)(rng);
    const int64_t per = std::uniform_int_distribution<int64_t>(1, 700)(rng);
    const int64_t items = static_cast<int64_t>((n + per - 1) / per);
    const int threads = std::uniform_int_distribution<int>(1, 6)(rng);
    // every third trial a step above the output's size: the one-step path (sized at once, no
    // thread started for a single item)
    const size_t step = trial % 3 == 2 ? size_t(1) << 20 : std::uniform_int_distribution<size_t>(1, 4096)(rng);
    const uint64_t salt = rng();
    SCOPED_TRACE("n " + std::to_string(n) + ", item " + std::to_string(per) + ", threads " + std::to_string(threads) +
                 ", step " + std::to_string(step) + " bytes");
    // every item leaves some elements as the fill made them (zero), writes the others; an item run
    // before its elements existed would have its values zeroed by the later fill: the check below
    auto value = [&](size_t i) { return (i * 2654435761u + salt) % 5 == 0 ? 0.0f : static_cast<float>(i % 977) + 1; };
    std::vector<float> out(3, 7.0f);  // stale contents are replaced
    fill_ahead_for(
        out, n, threads, items, [&](int64_t t) { return std::min(n, static_cast<size_t>((t + 1) * per)); },
        [&](int64_t t) {
          const size_t a = static_cast<size_t>(t * per), b = std::min(n, static_cast<size_t>((t + 1) * per));
          for (size_t i = a; i < b; ++i)
            if (value(i) != 0) out[i] = value(i);
        },
        step);
    ASSERT_EQ(out.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], value(i)) << "element " << i;
  }
}

TEST(FillAhead, AWorkersExceptionReachesTheCaller) {
  std::vector<int32_t> out;
  int64_t ran = 0;
  std::atomic<int64_t> count{0};
  try {
    fill_ahead_for(
        out, 100000, 3, 1000, [](int64_t t) { return static_cast<size_t>((t + 1) * 100); },
        [&](int64_t t) {
          ++count;
          if (t == 17) throw std::runtime_error("chunk 17 is corrupt");
        },
        256);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "chunk 17 is corrupt");
  }
  ran = count.load();
  EXPECT_GE(ran, 18);  // (items other workers had taken may still run: skipping the rest is not promised)
}

TEST(FillAhead, AnExceptionOnTheOneStepPathReachesTheCaller) {
  for (int threads : {1, 3}) {
    std::vector<int32_t> out;
    EXPECT_THROW(fill_ahead_for(
                     out, 1000, threads, 10, [](int64_t t) { return static_cast<size_t>((t + 1) * 100); },
                     [&](int64_t t) {
                       if (t == 4) throw std::runtime_error("chunk 4 is corrupt");
                     }),
                 std::runtime_error);
  }
}

}  // namespace
}  // namespace scurry
