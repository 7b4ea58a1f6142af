// GPU tests (ctest label `gpu`): skip with a message where no CUDA device is visible.
#include "core/error.hpp"
#include "exec/context.hpp"
#include "testlib.hpp"

using namespace scurry;

TEST(ContextGpu, CreatesCudaContextWhenAsked) {
  SCURRY_REQUIRE_GPU();
  ContextOptions o;
  o.device = "gpu";
  Context c = Context::create(o);
  EXPECT_EQ(c.backend(), Backend::cuda);
  EXPECT_NE(c.cuda(), nullptr);
  EXPECT_NE(c.describe().find("sm_"), std::string::npos) << c.describe();
}

TEST(ContextGpu, AutoPicksGpuWhenPresent) {
  SCURRY_REQUIRE_GPU();
  ContextOptions o;
  o.device = "auto";
  EXPECT_EQ(Context::create(o).backend(), Backend::cuda);
}
