// Timings: scopes record real elapsed wall and CPU time; the JSON holds every step, the total and the
// machine; the table lists every step and a total line.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/timings.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

// Busy work the optimiser cannot drop; runs at least `min_s` seconds of wall time.
double busy(double min_s) {
  const double t0 = Timings::wall_now();
  volatile double acc = 0;
  while (Timings::wall_now() - t0 < min_s)
    for (int i = 0; i < 10000; ++i) acc = acc + std::sqrt(static_cast<double>(i) + acc);
  return acc;
}

TEST(Timings, ScopeRecordsBusyLoop) {
  Timings t;
  {
    Timings::Scope s = t.scope("busy");
    busy(0.05);
    s.set_extra("10 x 20");
  }
  {
    auto s = t.scope("second");
    busy(0.02);
  }
  ASSERT_EQ(t.steps().size(), 2u);
  EXPECT_EQ(t.steps()[0].name, "busy");
  EXPECT_EQ(t.steps()[0].extra, "10 x 20");
  EXPECT_GE(t.steps()[0].wall_s, 0.05);
  EXPECT_GT(t.steps()[0].cpu_s, 0.0);  // the loop spins on this thread
  EXPECT_GT(t.steps()[0].peak_rss_mb, 0.0);
  EXPECT_GE(t.steps()[1].wall_s, 0.02);
  EXPECT_DOUBLE_EQ(t.total_wall_s(), t.steps()[0].wall_s + t.steps()[1].wall_s);
}

TEST(Timings, FinishRecordsOnce) {
  Timings t;
  {
    auto s = t.scope("x");
    busy(0.001);
    s.finish();
    s.finish();
  }
  EXPECT_EQ(t.steps().size(), 1u);
}

TEST(Timings, JsonHasStepsTotalAndMachine) {
  Timings t;
  { auto s = t.scope("read"); busy(0.01); }
  { auto s = t.scope("write"); busy(0.01); }
  t.set_argv({"scurry", "run", "in", "-o", "out.h5ad"});
  t.set_meta("device", "cpu, 2 threads");
  const auto j = nlohmann::json::parse(t.to_json());
  ASSERT_EQ(j.at("steps").size(), 2u);
  EXPECT_EQ(j["steps"][0]["name"], "read");
  EXPECT_EQ(j["steps"][1]["name"], "write");
  EXPECT_EQ(j["steps"][0]["wall_s"].get<double>(), t.steps()[0].wall_s);
  EXPECT_GE(j["steps"][1]["wall_s"].get<double>(), 0.01);
  EXPECT_NEAR(j["total"]["wall_s"].get<double>(), t.steps()[0].wall_s + t.steps()[1].wall_s, 1e-12);
  EXPECT_EQ(j["scurry_version"], SCURRY_VERSION);
  EXPECT_EQ(j["argv"][4], "out.h5ad");
  EXPECT_EQ(j["meta"]["device"], "cpu, 2 threads");
  EXPECT_GT(j["machine"]["cores"].get<int>(), 0);
  EXPECT_TRUE(j["machine"]["hostname"].is_string());
}

TEST(Timings, TableListsStepsAndTotal) {
  Timings t;
  { auto s = t.scope("normalize_total"); busy(0.001); }
  { auto s = t.scope("log1p"); busy(0.001); }
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ASSERT_NE(f, nullptr);
  t.print_table(f);
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  EXPECT_NE(out.find("normalize_total"), std::string::npos) << out;
  EXPECT_NE(out.find("log1p"), std::string::npos) << out;
  EXPECT_NE(out.find("\ntotal"), std::string::npos) << out;
  int lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 5);  // header, 2 steps, rule, total
}

}  // namespace
}  // namespace scurry
