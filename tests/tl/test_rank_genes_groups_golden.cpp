// rank_genes_groups against scanpy 1.9.6's own output on pbmc3k (tests/data/golden/
// pbmc3k_first1000.scanpy_tl.h5: sc.tl.rank_genes_groups(adata, 'leiden', method=M, use_raw=True),
// the top 300 genes of each of the 7 groups, stored as float32), on the CPU (rgg_golden.hpp: the checks).
#include <gtest/gtest.h>

#include "tl/rgg_golden.hpp"

using namespace scurry;
using namespace scurry::test;

TEST(RankGenesGroupsGolden, TTest) { rgg_golden_compare("t-test", "rgg_t_test", Context::cpu(2)); }
TEST(RankGenesGroupsGolden, TTestOverestimVar) {
  rgg_golden_compare("t-test_overestim_var", "rgg_t_test_overestim_var", Context::cpu(2));
}
TEST(RankGenesGroupsGolden, Wilcoxon) { rgg_golden_compare("wilcoxon", "rgg_wilcoxon", Context::cpu(2)); }

TEST(RankGenesGroupsGolden, LogregTop25) { rgg_golden_logreg_top25(Context::cpu(2)); }
