// rank_genes_groups on the GPU against scanpy 1.9.6's own output on pbmc3k, the same checks as the
// CPU's (rgg_golden.hpp): t-tests and wilcoxon within 1e-3 with the top 100 genes the same, logreg's
// top 25 at least 20 in common with scanpy's.
#include <gtest/gtest.h>

#include "tl/rgg_golden.hpp"

using namespace scurry;
using namespace scurry::test;

TEST(RankGenesGroupsGoldenGpu, TTest) {
  SCURRY_REQUIRE_GPU();
  rgg_golden_compare("t-test", "rgg_t_test", gpu_context());
}
TEST(RankGenesGroupsGoldenGpu, TTestOverestimVar) {
  SCURRY_REQUIRE_GPU();
  rgg_golden_compare("t-test_overestim_var", "rgg_t_test_overestim_var", gpu_context());
}
TEST(RankGenesGroupsGoldenGpu, Wilcoxon) {
  SCURRY_REQUIRE_GPU();
  rgg_golden_compare("wilcoxon", "rgg_wilcoxon", gpu_context());
}
TEST(RankGenesGroupsGoldenGpu, LogregTop25) {
  SCURRY_REQUIRE_GPU();
  rgg_golden_logreg_top25(gpu_context());
}
