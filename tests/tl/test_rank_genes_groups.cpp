// rank_genes_groups against simple exact oracles on fresh seeded random data: a dense two-pass
// Welch t-test, a Mann-Whitney U with average ranks over a full sort (ties included), BH by its
// definition; reference = a group, a groups subset, bonferroni, pts, n_genes / rankby_abs, thread
// count independence, errors, the uns layout and its h5ad round trip, filter_rank_genes_groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "io/zarr.hpp"
#include "testlib.hpp"
#include "tl/rank_genes_groups.hpp"
#include "tl/stats.hpp"

using namespace scurry;

namespace {

// Bit for bit, NaN held equal to the same NaN (a t-test score of a gene constant in both groups, or a log
// fold change of a gene below zero in both, is NaN, as scanpy's; `==` calls NaN unequal to itself).
bool same_bits(double u, double v) { return std::memcmp(&u, &v, sizeof(double)) == 0; }
bool same_bits(const std::vector<double>& u, const std::vector<double>& v) {
  return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(double)) == 0;
}
bool same_bits(const std::vector<std::vector<double>>& u, const std::vector<std::vector<double>>& v) {
  if (u.size() != v.size()) return false;
  for (size_t i = 0; i < u.size(); ++i)
    if (!same_bits(u[i], v[i])) return false;
  return true;
}

constexpr double kPi = 3.14159265358979323846;

// n cells x g genes: log1p of small counts (many ties, zeros), a few negative values in gene 0;
// groups a..d with some cells missing (-1).
Dataset rgg_data(uint64_t seed, int64_t n = 260, int64_t g = 30, bool dense = false) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DenseF x(n, g);
  CategoricalColumn cat;
  cat.categories = {"a", "b", "c", "d"};
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = u(rng) < 0.05 ? -1 : static_cast<int32_t>(rng() % 4);
    cat.codes.push_back(c);
    for (int64_t j = 0; j < g; ++j) {
      const double p = 0.15 + 0.5 * (c >= 0 && j % 4 == c ? 1 : 0) + 0.2 * u(rng);
      if (u(rng) < p) x(i, j) = static_cast<float>(std::log1p(1 + (rng() % (c >= 0 ? 3 + c : 2))));
    }
    if (u(rng) < 0.1) x(i, 0) = -static_cast<float>(1 + rng() % 2);
  }
  Dataset d;
  d.obs.index.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) d.obs.index[i] = "c" + std::to_string(i);
  d.var.index.resize(static_cast<size_t>(g));
  for (int64_t j = 0; j < g; ++j) d.var.index[j] = "g" + std::to_string(j);
  d.obs.set("grp", Column(cat));
  if (dense) d.X = Matrix(std::move(x));
  else d.X = Matrix(to_csr_f(Matrix(std::move(x))));
  return d;
}

DenseD dense(const Dataset& d) { return to_dense_d(d.X); }

struct Oracle {
  std::vector<double> score, p, lfc;
};

std::vector<double> bh_oracle(const std::vector<double>& p) {
  const size_t n = p.size();
  std::vector<size_t> o(n);
  std::iota(o.begin(), o.end(), size_t{0});
  std::stable_sort(o.begin(), o.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> out(n);
  for (size_t k = 0; k < n; ++k) {
    double m = 1.0;
    for (size_t l = k; l < n; ++l) m = std::min(m, p[o[l]] * n / (l + 1.0));
    out[o[k]] = m;
  }
  return out;
}

// in_g / in_r: membership of each cell in the group and in the comparison set.
Oracle welch_oracle(const DenseD& x, const std::vector<uint8_t>& in_g, const std::vector<uint8_t>& in_r,
                    bool overestim) {
  Oracle o;
  for (int64_t j = 0; j < x.n_cols; ++j) {
    double m[2] = {0, 0}, v[2] = {0, 0}, n[2] = {0, 0};
    for (int s = 0; s < 2; ++s) {
      const auto& in = s == 0 ? in_g : in_r;
      for (int64_t i = 0; i < x.n_rows; ++i)
        if (in[i]) m[s] += x(i, j), n[s] += 1;
      m[s] /= n[s];
      for (int64_t i = 0; i < x.n_rows; ++i)
        if (in[i]) v[s] += (x(i, j) - m[s]) * (x(i, j) - m[s]);
      v[s] /= n[s] - 1;
    }
    const double n2 = overestim ? n[0] : n[1];
    const double a = v[0] / n[0], b = v[1] / n2;
    double df = (a + b) * (a + b) / (a * a / (n[0] - 1) + b * b / (n2 - 1));
    if (std::isnan(df)) df = 1;
    double t = (m[0] - m[1]) / std::sqrt(a + b);
    double p = stats::t_two_sided_p(t, df);
    if (std::isnan(t)) t = 0;
    if (std::isnan(p)) p = 1;
    o.score.push_back(t);
    o.p.push_back(p);
    o.lfc.push_back(std::log2((std::expm1(m[0]) + 1e-9) / (std::expm1(m[1]) + 1e-9)));
  }
  return o;
}

Oracle mwu_oracle(const DenseD& x, const std::vector<uint8_t>& in_g, const std::vector<uint8_t>& in_r, bool tie) {
  Oracle o;
  for (int64_t j = 0; j < x.n_cols; ++j) {
    std::vector<std::pair<double, int>> v;  // value, 1 if in group
    for (int64_t i = 0; i < x.n_rows; ++i)
      if (in_g[i] || in_r[i]) v.emplace_back(x(i, j), in_g[i] ? 1 : 0);
    std::sort(v.begin(), v.end());
    const double N = static_cast<double>(v.size());
    double R = 0, ties = 0, n1 = 0;
    for (size_t s = 0; s < v.size();) {
      size_t e = s;
      while (e < v.size() && v[e].first == v[s].first) ++e;
      const double avg = (s + 1 + e) / 2.0;  // mean of ranks s+1 .. e
      for (size_t k = s; k < e; ++k)
        if (v[k].second) R += avg, n1 += 1;
      const double t = static_cast<double>(e - s);
      ties += t * t * t - t;
      s = e;
    }
    const double T = tie ? 1 - ties / (N * N * N - N) : 1;
    double z = (R - n1 * (N + 1) / 2) / std::sqrt(T * n1 * (N - n1) * (N + 1) / 12);
    if (std::isnan(z)) z = 0;
    o.score.push_back(z);
    o.p.push_back(std::erfc(std::fabs(z) / std::sqrt(2.0)));
  }
  return o;
}

std::vector<uint8_t> members(const Dataset& d, int32_t code) {
  const auto& c = std::get<CategoricalColumn>(d.obs.at("grp").c).codes;
  std::vector<uint8_t> m(c.size());
  for (size_t i = 0; i < c.size(); ++i) m[i] = c[i] == code;
  return m;
}
std::vector<uint8_t> complement(std::vector<uint8_t> m) {
  for (auto& x : m) x = !x;
  return m;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rel, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {  // e.g. the log fold change of a gene with negative values, as in scanpy
      EXPECT_TRUE(std::isnan(a[i])) << what << " [" << i << "]";
      continue;
    }
    EXPECT_NEAR(a[i], b[i], rel * std::fabs(b[i]) + 1e-300) << what << " [" << i << "]";
  }
}

}  // namespace

TEST(Stats, StudentTClosedForms) {
  // df = 1: p = 2 atan(1/|t|) / pi; df = 2: p = 1 - |t| / sqrt(2 + t^2) = 2 / (s (s + |t|)), s = sqrt(2 + t^2)
  for (double t : {0.0, 1e-3, 0.3, 1.0, 2.5, 10.0, 1e3, 1e6}) {
    const double p1 = 2 * std::atan(1 / t) / kPi;
    EXPECT_NEAR(stats::t_two_sided_p(t, 1), t == 0 ? 1.0 : p1, 1e-12 * (t == 0 ? 1.0 : p1)) << t;
    const double s = std::sqrt(2 + t * t);
    const double p2 = 2 / (s * (s + t));
    EXPECT_NEAR(stats::t_two_sided_p(-t, 2), p2, 1e-12 * p2) << t;
  }
  // large df: the normal
  for (double t : {0.5, 2.0, 5.0, 8.0}) {
    const double pn = std::erfc(t / std::sqrt(2.0));
    EXPECT_NEAR(stats::t_two_sided_p(t, 1e9), pn, 1e-6 * pn) << t;
  }
  EXPECT_EQ(stats::t_two_sided_p(INFINITY, 5), 0.0);
  EXPECT_TRUE(std::isnan(stats::t_two_sided_p(NAN, 5)));
}

TEST(Stats, BenjaminiHochbergDefinition) {
  std::mt19937_64 rng(test::fresh_seed());
  std::vector<double> p(200);
  for (auto& x : p) x = std::pow(std::uniform_real_distribution<double>(0, 1)(rng), 3);
  p[5] = p[6] = p[7];  // ties
  expect_close(stats::benjamini_hochberg(p), bh_oracle(p), 1e-14, "bh");
  const auto bf = stats::bonferroni(p);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_DOUBLE_EQ(bf[i], std::min(1.0, p[i] * 200));
}

TEST(RankGenesGroups, TTestsAgainstDenseOracle) {
  for (bool dense_x : {false, true}) {
    const Dataset d = rgg_data(test::fresh_seed(), 260, 30, dense_x);
    const DenseD x = dense(d);
    for (const char* m : {"t-test", "t-test_overestim_var"}) {
      RankGenesGroupsOptions o;
      o.groupby = "grp";
      o.method = m;
      const auto r = rank_genes_groups(d, o, Context::cpu(2));
      ASSERT_EQ(r.group_names, (std::vector<std::string>{"a", "b", "c", "d"}));
      for (int g = 0; g < 4; ++g) {
        const auto in = members(d, g);
        const Oracle w = welch_oracle(x, in, complement(in), std::string(m) == "t-test_overestim_var");
        expect_close(r.scores[g], w.score, 1e-9, std::string(m) + " scores");
        expect_close(r.pvals[g], w.p, 1e-8, std::string(m) + " pvals");
        expect_close(r.pvals_adj[g], bh_oracle(w.p), 1e-8, std::string(m) + " pvals_adj");
        expect_close(r.logfoldchanges[g], w.lfc, 1e-9, "lfc");
        // order: by score, best first
        for (size_t k = 1; k < r.order[g].size(); ++k)
          EXPECT_GE(r.scores[g][r.order[g][k - 1]], r.scores[g][r.order[g][k]]);
      }
    }
  }
}

TEST(RankGenesGroups, WilcoxonAgainstMannWhitneyOracle) {
  const Dataset d = rgg_data(test::fresh_seed());
  const DenseD x = dense(d);
  for (bool tie : {false, true}) {
    RankGenesGroupsOptions o;
    o.groupby = "grp";
    o.method = "wilcoxon";
    o.tie_correct = tie;
    const auto r = rank_genes_groups(d, o, Context::cpu(2));
    for (int g = 0; g < 4; ++g) {
      const auto in = members(d, g);
      const Oracle w = mwu_oracle(x, in, complement(in), tie);
      expect_close(r.scores[g], w.score, 1e-10, "wilcoxon scores");
      expect_close(r.pvals[g], w.p, 1e-9, "wilcoxon pvals");
      expect_close(r.pvals_adj[g], bh_oracle(w.p), 1e-9, "wilcoxon pvals_adj");
    }
  }
}

TEST(RankGenesGroups, ReferenceGroupSubsetAndBonferroni) {
  const Dataset d = rgg_data(test::fresh_seed());
  const DenseD x = dense(d);
  for (const char* m : {"t-test", "wilcoxon"}) {
    RankGenesGroupsOptions o;
    o.groupby = "grp";
    o.method = m;
    o.groups = {"c", "a"};
    o.reference = "b";
    o.tie_correct = true;
    o.corr_method = "bonferroni";
    const auto r = rank_genes_groups(d, o, Context::cpu(2));
    ASSERT_EQ(r.groups_order, (std::vector<std::string>{"c", "a", "b"}));
    ASSERT_EQ(r.group_names, (std::vector<std::string>{"c", "a"}));
    const int codes[] = {2, 0};
    for (int f = 0; f < 2; ++f) {
      const Oracle w = std::string(m) == "t-test" ? welch_oracle(x, members(d, codes[f]), members(d, 1), false)
                                                  : mwu_oracle(x, members(d, codes[f]), members(d, 1), true);
      expect_close(r.scores[f], w.score, 1e-9, std::string(m) + " vs b");
      expect_close(r.pvals_adj[f], stats::bonferroni(w.p), 1e-8, "bonferroni");
    }
  }
}

TEST(RankGenesGroups, PtsNGenesRankbyAbsAndThreads) {
  const Dataset d = rgg_data(test::fresh_seed(), 400, 50);
  const DenseD x = dense(d);
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "wilcoxon";
  o.pts = true;
  o.n_genes = 7;
  o.rankby_abs = true;
  const auto r1 = rank_genes_groups(d, o, Context::cpu(1));
  const auto r3 = rank_genes_groups(d, o, Context::cpu(3));
  for (int g = 0; g < 4; ++g) {
    EXPECT_TRUE(same_bits(r1.scores[g], r3.scores[g]));  // bit for bit
    EXPECT_EQ(r1.order[g], r3.order[g]);
    ASSERT_EQ(r1.order[g].size(), 7u);
    // the 7 largest |scores|
    std::vector<double> a;
    for (double s : r1.scores[g]) a.push_back(std::fabs(s));
    std::vector<double> sorted = a;
    std::sort(sorted.rbegin(), sorted.rend());
    for (int k = 0; k < 7; ++k) EXPECT_EQ(a[r1.order[g][k]], sorted[k]);
    const auto in = members(d, g);
    for (int64_t j = 0; j < x.n_cols; ++j) {
      double nz_in = 0, n_in = 0, nz_out = 0, n_out = 0;
      for (int64_t i = 0; i < x.n_rows; ++i) {
        (in[i] ? n_in : n_out) += 1;
        if (x(i, j) != 0) (in[i] ? nz_in : nz_out) += 1;
      }
      EXPECT_DOUBLE_EQ(r1.pts[g][j], nz_in / n_in);
      EXPECT_DOUBLE_EQ(r1.pts_rest[g][j], nz_out / n_out);
    }
  }
}

// The t-tests on raw/X read back in row pieces (scurry run's CPU path): the same statistics and
// results, bit for bit, as on the matrix held whole, for any piece size and thread count; the count
// check's finding; other methods refused.
TEST(RankGenesGroups, RowsReadInPiecesEqualTheMatrixHeld) {
  const uint64_t seed = test::fresh_seed();
  Dataset d = rgg_data(seed, 700, 40);
  const CsrF& x = std::get<CsrF>(d.X.m);
  std::vector<int32_t> codes = std::get<CategoricalColumn>(d.obs.at("grp").c).codes;
  int64_t reads = 0;
  struct CountedRows : MemoryRowSource {
    CountedRows(const CsrF& m, int64_t& n) : MemoryRowSource(m), reads(n) {}
    CsrF read_rows(int64_t begin, int64_t end) override {
      ++reads;
      return MemoryRowSource::read_rows(begin, end);
    }
    int64_t& reads;
  } rows(x, reads);
  const GeneGroupStats whole = gene_group_stats(x, codes, 4, Context::cpu(2));
  for (int64_t piece : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}}) {
    for (int threads : {1, 3}) {
      bool counts = true;
      reads = 0;
      const GeneGroupStats st = gene_group_stats(rows, codes, 4, Context::cpu(threads), piece, &counts);
      EXPECT_EQ(st.sum, whole.sum) << "piece " << piece;  // bit for bit
      EXPECT_EQ(st.sum_sq, whole.sum_sq);
      EXPECT_EQ(st.nnz, whole.nnz);
      EXPECT_EQ(st.n_cells, whole.n_cells);
      EXPECT_FALSE(counts);  // log1p values
      EXPECT_GE(reads, std::min<int64_t>(16, x.n_rows));
    }
  }
  // The whole test through the Dataset: raw holds X's genes, the rows are raw/X's.
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.pts = true;
  auto with_raw = [&](bool x) {
    Dataset e = d;
    e.raw = std::make_shared<Dataset>();
    e.raw->var = d.var;
    if (x) e.raw->X = d.X;
    return e;
  };
  for (const char* method : {"t-test", "t-test_overestim_var"}) {
    o.method = method;
    Dataset held = with_raw(true), streamed = with_raw(false);
    const auto a = rank_genes_groups_inplace(held, o, Context::cpu(2));
    const auto b = rank_genes_groups_inplace(streamed, o, Context::cpu(1), rows);
    EXPECT_TRUE(a.use_raw && b.use_raw);
    EXPECT_EQ(a.gene_names, b.gene_names);
    EXPECT_TRUE(same_bits(a.scores, b.scores)) << method;
    EXPECT_TRUE(same_bits(a.pvals, b.pvals)) << method;
    EXPECT_TRUE(same_bits(a.pvals_adj, b.pvals_adj)) << method;
    EXPECT_TRUE(same_bits(a.logfoldchanges, b.logfoldchanges)) << method;
    EXPECT_EQ(a.order, b.order);
    EXPECT_TRUE(same_bits(a.pts, b.pts)) << method;
    EXPECT_TRUE(same_bits(a.pts_rest, b.pts_rest)) << method;
  }
  // Counts are found.
  CsrF ints = x;
  for (float& v : ints.data) v = std::fabs(std::round(v * 3));
  bool counts = false;
  MemoryRowSource int_rows(ints);
  gene_group_stats(int_rows, codes, 4, Context::cpu(2), 50, &counts);
  EXPECT_TRUE(counts);
  o.method = "wilcoxon";
  Dataset e = with_raw(false);
  EXPECT_THROW(rank_genes_groups_inplace(e, o, Context::cpu(1), rows), InputError);
  o.method = "t-test";
  EXPECT_THROW(rank_genes_groups_inplace(d, o, Context::cpu(1), rows), InputError);  // no raw
}

TEST(RankGenesGroups, Errors) {
  Dataset d = rgg_data(test::fresh_seed(), 60, 5);
  RankGenesGroupsOptions o;
  o.groupby = "nope";
  try {
    rank_genes_groups(d, o, Context::cpu(1));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
  o.groupby = "grp";
  o.groups = {"zz"};
  EXPECT_THROW(rank_genes_groups(d, o, Context::cpu(1)), InputError);
  o.groups.clear();
  o.method = "magic";
  EXPECT_THROW(rank_genes_groups(d, o, Context::cpu(1)), InputError);
  o.method = "t-test";
  o.use_raw = true;
  EXPECT_THROW(rank_genes_groups(d, o, Context::cpu(1)), InputError);  // no raw
  o.use_raw.reset();
  d.obs.set("num", Column::numeric(std::vector<double>(60, 1.0)));
  o.groupby = "num";
  EXPECT_THROW(rank_genes_groups(d, o, Context::cpu(1)), InputError);
  // a group of one cell
  auto& cat = std::get<CategoricalColumn>(d.obs.at("grp").c);
  cat.categories.push_back("solo");
  cat.codes[0] = 4;
  o.groupby = "grp";
  try {
    rank_genes_groups(d, o, Context::cpu(1));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'solo'"), std::string::npos) << e.what();
  }
}

TEST(RankGenesGroups, UnsLayoutAndH5adRoundTrip) {
  Dataset d = rgg_data(test::fresh_seed(), 120, 12);
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "t-test";
  o.pts = true;
  o.n_genes = 5;
  o.key_added = "markers";
  rank_genes_groups_inplace(d, o, Context::cpu(2));
  test::TempDir tmp;
  write_h5ad(d, tmp.path("o.h5ad"));
  write_zarr(d, tmp.path("o.zarr"));
  for (const Dataset& back : {read_h5ad(tmp.path("o.h5ad")), read_zarr(tmp.path("o.zarr"))}) {
  const Dict& u = back.uns.at("markers").dict();
  const Dict& u0 = d.uns.at("markers").dict();
  for (const char* k : {"names", "scores", "pvals", "pvals_adj", "logfoldchanges"}) {
    const auto& a = std::get<RecArray>(u.at(k).v);
    const auto& b = std::get<RecArray>(u0.at(k).v);
    ASSERT_EQ(a.n, 5);
    ASSERT_EQ(a.fields.size(), 4u);
    for (size_t f = 0; f < 4; ++f) {
      EXPECT_EQ(a.fields[f].name, b.fields[f].name);
      EXPECT_EQ(a.fields[f].str, b.fields[f].str);
      EXPECT_EQ(a.fields[f].dtype, b.fields[f].dtype) << k;
      for (int64_t i = 0; i < 5 && !b.fields[f].is_string; ++i) {
        const double want = b.fields[f].dtype == DType::f32 ? static_cast<double>(static_cast<float>(b.fields[f].num[i]))
                                                            : b.fields[f].num[i];
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(a.fields[f].num[i]));
        else EXPECT_EQ(a.fields[f].num[i], want) << k;
      }
    }
  }
  EXPECT_EQ(std::get<RecArray>(u.at("scores").v).fields[0].dtype, DType::f32);
  EXPECT_EQ(std::get<RecArray>(u.at("pvals").v).fields[0].dtype, DType::f64);
  const auto& pts = std::get<Table>(u.at("pts").v);
  EXPECT_EQ(pts.n_rows(), 12);
  EXPECT_EQ(pts.names(), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(std::get<std::string>(u.at("params").dict().at("method").v), "t-test");
  // the df table
  const Table df = rank_genes_groups_df(back, "markers");
  EXPECT_EQ(df.n_rows(), 20);
  EXPECT_EQ(df.names(), (std::vector<std::string>{"group", "names", "scores", "logfoldchanges", "pvals", "pvals_adj",
                                                  "pct_nz_group", "pct_nz_reference"}));
  }
  ZarrWriteOptions v3;
  v3.format = 3;
  EXPECT_THROW(write_zarr(d, tmp.path("o3.zarr"), v3), InputError);  // no structured dtypes in zarr v3
}

// Not a test of its own: with SCURRY_WRITE_RGG=PREFIX set, writes PREFIX.h5ad and PREFIX.zarr (a
// wilcoxon result with pts) for tests/cli/test_rank_genes_groups_cli.sh to read with anndata.
TEST(RankGenesGroups, WriteForPython) {
  const char* prefix = std::getenv("SCURRY_WRITE_RGG");
  if (!prefix) GTEST_SKIP() << "SCURRY_WRITE_RGG not set";
  Dataset d = rgg_data(test::fresh_seed(), 150, 20);
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "wilcoxon";
  o.pts = true;
  o.n_genes = 6;
  rank_genes_groups_inplace(d, o, Context::cpu(2));
  write_h5ad(d, std::string(prefix) + ".h5ad");
  write_zarr(d, std::string(prefix) + ".zarr");
}

TEST(RankGenesGroups, FilterAgainstDirectFractions) {
  Dataset d = rgg_data(test::fresh_seed(), 300, 24);
  const DenseD x = dense(d);
  RankGenesGroupsOptions o;
  o.groupby = "grp";
  o.method = "wilcoxon";
  o.n_genes = 10;
  rank_genes_groups_inplace(d, o, Context::cpu(2));
  FilterRankGenesGroupsOptions f;
  f.min_in_group_fraction = 0.3;
  f.max_out_group_fraction = 0.6;
  f.min_fold_change = 0.5;
  f.use_raw = false;
  filter_rank_genes_groups(d, f, Context::cpu(2));
  const auto& orig = std::get<RecArray>(d.uns.at("rank_genes_groups").dict().at("names").v);
  const auto& filt = std::get<RecArray>(d.uns.at("rank_genes_groups_filtered").dict().at("names").v);
  int kept = 0, dropped = 0;
  for (int g = 0; g < 4; ++g) {
    const auto in = members(d, g);
    for (int64_t k = 0; k < 10; ++k) {
      const int64_t j = std::stoi(orig.fields[g].str[k].substr(1));
      double nz_in = 0, n_in = 0, nz_out = 0, n_out = 0, s_in = 0, s_out = 0;
      for (int64_t i = 0; i < x.n_rows; ++i) {
        (in[i] ? n_in : n_out) += 1;
        (in[i] ? s_in : s_out) += x(i, j);
        if (x(i, j) != 0) (in[i] ? nz_in : nz_out) += 1;
      }
      const double lfc = std::log2((std::expm1(s_in / n_in) + 1e-9) / (std::expm1(s_out / n_out) + 1e-9));
      const bool keep = nz_in / n_in > 0.3 && nz_out / n_out < 0.6 && lfc > 0.5;
      EXPECT_EQ(filt.fields[g].str[k], keep ? orig.fields[g].str[k] : "nan") << g << " " << k;
      (keep ? kept : dropped) += 1;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(dropped, 0);
}

TEST(RankGenesGroups, UnsortedRowsExplicitZerosAndMaskVar) {
  const Dataset d = rgg_data(test::fresh_seed(), 200, 25);
  // the same matrix with every row's entries reversed and an explicit zero where a gene is absent
  Dataset e = d;
  {
    const CsrF& x = d.X.csr_f();
    CsrF y = CsrF::zeros(x.n_rows, x.n_cols);
    for (int64_t r = 0; r < x.n_rows; ++r) {
      std::vector<uint8_t> present(static_cast<size_t>(x.n_cols), 0);
      for (int64_t q = x.indptr[r + 1]; q-- > x.indptr[r];) {
        y.indices.push_back(x.indices[q]);
        y.data.push_back(x.data[q]);
        present[x.indices[q]] = 1;
      }
      for (int32_t j = 0; j < x.n_cols; ++j)
        if (!present[j] && (r + j) % 7 == 0) {
          y.indices.push_back(j);
          y.data.push_back(0.0f);
          break;
        }
      y.indptr[r + 1] = static_cast<int64_t>(y.data.size());
    }
    e.X = Matrix(std::move(y));
  }
  for (const char* m : {"t-test", "wilcoxon"}) {
    RankGenesGroupsOptions o;
    o.groupby = "grp";
    o.method = m;
    o.pts = true;
    const auto a = rank_genes_groups(d, o, Context::cpu(2));
    const auto b = rank_genes_groups(e, o, Context::cpu(2));
    for (int g = 0; g < 4; ++g) {
      EXPECT_TRUE(same_bits(a.scores[g], b.scores[g])) << m;
      EXPECT_TRUE(same_bits(a.pts[g], b.pts[g])) << m;  // explicit zeros are not expressed
    }
    // mask_var: only the even genes, each with its score from the full run
    Dataset dm = d;
    std::vector<uint8_t> even(25);
    for (int j = 0; j < 25; ++j) even[j] = j % 2 == 0;
    dm.var.set("even", Column::boolean(even));
    o.mask_var = "even";
    const auto c = rank_genes_groups(dm, o, Context::cpu(2));
    ASSERT_EQ(c.gene_names.size(), 13u);
    for (int g = 0; g < 4; ++g)
      for (size_t k = 0; k < 13; ++k) {
        EXPECT_EQ(c.gene_names[k], "g" + std::to_string(2 * k));
        EXPECT_TRUE(same_bits(c.scores[g][k], a.scores[g][2 * k])) << m;
      }
  }
}
