// rank_genes_groups against scanpy 1.9.6's own output on pbmc3k (tests/data/golden/
// pbmc3k_first1000.scanpy_tl.h5: sc.tl.rank_genes_groups(adata, 'leiden', method=M, use_raw=True),
// the top 300 genes of each of the 7 groups, stored as float32): the checks, for any context (the
// CPU's in test_rank_genes_groups_golden.cpp, the GPU's in test_rank_genes_groups_golden_gpu.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/h5ad.hpp"
#include "io/hdf5.hpp"
#include "testlib.hpp"
#include "tl/rank_genes_groups.hpp"

namespace scurry::test {

struct RggGolden {
  std::vector<std::string> groups;
  int64_t rows = 0;
  // [rank * n_groups + group]
  std::vector<std::string> names;
  std::vector<double> scores, pvals_adj, lfc;
};

inline RggGolden rgg_golden_load(const std::string& method_key) {
  h5::File f = h5::File::open(test::test_data("golden/pbmc3k_first1000.scanpy_tl.h5"));
  h5::Group g = f.group(method_key);
  RggGolden out;
  out.groups = g.dataset("groups").read_strings();
  out.names = g.dataset("names").read_strings();
  out.rows = g.dataset("names").shape()[0];
  out.scores = g.dataset("scores").read<double>();
  if (g.has("pvals_adj")) out.pvals_adj = g.dataset("pvals_adj").read<double>();
  if (g.has("logfoldchanges")) out.lfc = g.dataset("logfoldchanges").read<double>();
  return out;
}

inline const Dataset& rgg_golden_pbmc() {
  static const Dataset d = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  return d;
}

inline RankGenesGroupsResult rgg_golden_run(const std::string& method, const Context& ctx) {
  RankGenesGroupsOptions o;
  o.groupby = "leiden";
  o.method = method;
  o.use_raw = true;
  return rank_genes_groups(rgg_golden_pbmc(), o, ctx);
}

// scores and log fold changes within 1e-3 (relative), adjusted p-values within 1e-3 where above
// 1e-30, the top 100 genes of every group the same (the bar).
inline void rgg_golden_compare(const std::string& method, const std::string& key, const Context& ctx) {
  const RggGolden gold = rgg_golden_load(key);
  const RankGenesGroupsResult r = rgg_golden_run(method, ctx);
  ASSERT_EQ(r.group_names, gold.groups);
  std::map<std::string, int64_t> gene;
  for (size_t j = 0; j < r.gene_names.size(); ++j) gene[r.gene_names[j]] = static_cast<int64_t>(j);
  const size_t ng = gold.groups.size();
  int64_t checked_p = 0;
  for (size_t g = 0; g < ng; ++g) {
    std::set<std::string> top_gold, top_ours;
    for (int64_t k = 0; k < 100; ++k) {
      top_gold.insert(gold.names[k * ng + g]);
      top_ours.insert(r.gene_names[r.order[g][k]]);
    }
    EXPECT_EQ(top_gold, top_ours) << method << " group " << gold.groups[g] << ": top 100 genes differ";
    for (int64_t k = 0; k < gold.rows; ++k) {
      const std::string& name = gold.names[k * ng + g];
      ASSERT_TRUE(gene.count(name)) << name;
      const int64_t j = gene[name];
      const double s = gold.scores[k * ng + g], l = gold.lfc[k * ng + g], p = gold.pvals_adj[k * ng + g];
      EXPECT_NEAR(r.scores[g][j], s, 1e-3 * std::fabs(s) + 1e-6) << method << " score " << name << " group " << g;
      EXPECT_NEAR(r.logfoldchanges[g][j], l, 1e-3 * std::fabs(l) + 1e-6) << method << " lfc " << name;
      // float32 storage: compare where the stored value is a normal float well above its floor
      if (p > 1e-30) {
        EXPECT_NEAR(r.pvals_adj[g][j], p, 1e-3 * p) << method << " pvals_adj " << name << " group " << g;
        ++checked_p;
      }
    }
  }
  EXPECT_GT(checked_p, 100);
}


// logreg: at least 20 of every group's top 25 genes in common with scanpy's (a different solver).
inline void rgg_golden_logreg_top25(const Context& ctx) {
  const RggGolden gold = rgg_golden_load("rgg_logreg");
  const RankGenesGroupsResult r = rgg_golden_run("logreg", ctx);
  ASSERT_EQ(r.group_names, gold.groups);
  const size_t ng = gold.groups.size();
  for (size_t g = 0; g < ng; ++g) {
    std::set<std::string> top_gold, top_ours;
    for (int64_t k = 0; k < 25; ++k) {
      top_gold.insert(gold.names[k * ng + g]);
      top_ours.insert(r.gene_names[r.order[g][k]]);
    }
    int common = 0;
    for (const auto& n : top_ours) common += top_gold.count(n);
    std::printf("logreg group %s: %d of 25 in common with scanpy\n", gold.groups[g].c_str(), common);
    EXPECT_GE(common, 20) << "group " << gold.groups[g];
  }
}

}  // namespace scurry::test
