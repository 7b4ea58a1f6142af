#include "core/error.hpp"
#include "exec/context.hpp"
#include "exec/parallel.hpp"
#include "testlib.hpp"

#include <atomic>
#include <vector>

using namespace scurry;

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
