// aggregate (sc.get.aggregate) on the GPU against the CPU path (the oracle; itself tested against
// direct per-group loops in test_aggregate.cpp): every function, two by columns, a mask, dof, a dense
// layer, negative values and many groups; a matrix with NaN (summed on the CPU); two runs and three
// contexts sharing the genes, and the matrix streamed in chunks of rows, give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "get/aggregate.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// n cells x g genes, by columns "p" (n_p categories) and "q" (3), a mask "keep"; values of both
// signs with a wide range of magnitudes (the fixed-point grids' exponents differ by gene).
Dataset pseudobulk_data(uint64_t seed, int64_t n, int64_t g, int n_p) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DenseF x(n, g);
  CategoricalColumn p, q;
  for (int c = 0; c < n_p; ++c) p.categories.push_back("p" + std::to_string(c));
  q.categories = {"A", "B", "C"};
  std::vector<uint8_t> keep;
  for (int64_t i = 0; i < n; ++i) {
    p.codes.push_back(u(rng) < 0.02 ? -1 : static_cast<int32_t>(rng() % n_p));
    q.codes.push_back(static_cast<int32_t>(rng() % 3));
    keep.push_back(u(rng) < 0.9);
    for (int64_t j = 0; j < g; ++j)
      if (u(rng) < 0.3) x(i, j) = static_cast<float>((u(rng) - 0.2) * std::pow(10.0, static_cast<double>(j % 7) - 3));
  }
  Dataset d;
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("g" + std::to_string(j));
  d.obs.set("p", Column(p));
  d.obs.set("q", Column(q));
  d.obs.set("keep", Column::boolean(keep));
  d.layers["dense"] = Matrix(x);
  d.X = Matrix(to_csr_f(Matrix(std::move(x))));
  return d;
}

AggregateOptions all_funcs(std::vector<std::string> by) {
  AggregateOptions o;
  o.by = std::move(by);
  o.func = {"sum", "mean", "count_nonzero", "var"};
  return o;
}

// The largest |value| of each gene of d's X.
std::vector<double> gene_max_abs(const Dataset& d) {
  const CsrF& x = d.X.csr_f();
  std::vector<double> m(static_cast<size_t>(x.n_cols), 0.0);
  for (size_t q = 0; q < x.data.size(); ++q)
    m[x.indices[q]] = std::max(m[x.indices[q]], std::fabs(static_cast<double>(x.data[q])));
  return m;
}

// a's layers against b's: the same groups, counts equal, the rest within rel of the value plus the
// device's rounding. The device sums every term on a per-gene fixed-point grid of 2^(e-33), where
// 2^e <= 2 max|term| (gene_sums.cu), so a group's sum is off by at most nnz 2^-31 max|x| (nnz: the
// group's count_nonzero), its mean by 2^-31 max|x|, and var = (sum_sq - n mean^2) / (n - dof) by
// about 2^-30 (max x^2 + 2 |mean| max|x|) <= 2^-28 max x^2: an absolute error by gene, which a
// relative tolerance alone misses where the group's var or sum is small beside the gene's largest
// value (a group with one nonzero, 1.4, in a gene whose values reach 80: var 0.098 off by 1.3e-7 on
// an H100, seed 104069440090 + 1).
void expect_same(const Dataset& a, const Dataset& b, double rel, const std::vector<double>& max_abs,
                 const std::string& what) {
  ASSERT_EQ(a.obs.index, b.obs.index) << what;
  const DenseD nnz = to_dense_d(b.layers.at("count_nonzero"));
  for (const char* f : {"sum", "mean", "count_nonzero", "var"}) {
    const DenseD x = to_dense_d(a.layers.at(f)), y = to_dense_d(b.layers.at(f));
    ASSERT_EQ(x.n_rows, y.n_rows);
    ASSERT_EQ(x.n_cols, y.n_cols);
    ASSERT_EQ(static_cast<int64_t>(max_abs.size()), x.n_cols);
    EXPECT_EQ(a.layers.at(f).dtype, b.layers.at(f).dtype) << what << " " << f;
    for (int64_t i = 0; i < x.n_rows; ++i)
      for (int64_t j = 0; j < x.n_cols; ++j) {
        const double m = max_abs[static_cast<size_t>(j)];
        double grid = 0.0;
        if (std::strcmp(f, "sum") == 0) grid = nnz(i, j) * std::ldexp(m, -31);
        else if (std::strcmp(f, "mean") == 0) grid = std::ldexp(m, -31);
        else if (std::strcmp(f, "var") == 0) grid = std::ldexp(m * m, -28);
        const double tol = std::strcmp(f, "count_nonzero") == 0 ? 0.0 : rel * std::max(1e-3, std::fabs(y(i, j))) + grid;
        EXPECT_NEAR(x(i, j), y(i, j), tol) << what << " " << f << " group " << i << " gene " << j;
      }
  }
}

bool same_bits(const Dataset& a, const Dataset& b) {
  for (const char* f : {"sum", "mean", "count_nonzero", "var"}) {
    const DenseD x = to_dense_d(a.layers.at(f)), y = to_dense_d(b.layers.at(f));
    if (x.data.size() != y.data.size() || std::memcmp(x.data.data(), y.data.data(), x.data.size() * 8) != 0) return false;
  }
  return true;
}

}  // namespace

TEST(AggregateGpu, EveryFunctionAgainstTheCpu) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = pseudobulk_data(test::fresh_seed(), 4000, 45, 9);
  const Context cpu = Context::cpu(2);
  const Context gpu = test::gpu_context();
  for (bool mask : {false, true})
    for (int dof : {0, 1})
      for (const char* layer : {"", "dense"}) {
        AggregateOptions o = all_funcs({"p", "q"});
        o.dof = dof;
        o.layer = layer;
        if (mask) o.mask = "keep";
        // the device's fixed-point sums against the CPU's float64 partials (expect_same's bound)
        expect_same(aggregate(d, o, gpu), aggregate(d, o, cpu), 1e-6, gene_max_abs(d),
                    std::string("mask ") + (mask ? "on" : "off") + " dof " + std::to_string(dof) + " layer '" + layer + "'");
      }
  // many groups (one by column of 300 categories)
  const Dataset e = pseudobulk_data(test::fresh_seed() + 1, 6000, 20, 300);
  expect_same(aggregate(e, all_funcs({"p"}), gpu), aggregate(e, all_funcs({"p"}), cpu), 1e-6, gene_max_abs(e), "300 groups");
}

TEST(AggregateGpu, TwoRunsThreeContextsAndStreamedGiveTheSameBitsAndNanIsSummedOnTheCpu) {
  SCURRY_REQUIRE_GPU();
  const Dataset d = pseudobulk_data(test::fresh_seed(), 5000, 31, 6);
  const Context gpu = test::gpu_context();
  const Dataset a = aggregate(d, all_funcs({"p", "q"}), gpu);
  EXPECT_TRUE(same_bits(a, aggregate(d, all_funcs({"p", "q"}), gpu)));
  std::vector<Context> three = test::three_gpu_contexts();
  std::vector<Context*> gpus;
  for (Context& c : three) gpus.push_back(&c);
  EXPECT_TRUE(same_bits(aggregate(d, all_funcs({"p", "q"}), *gpus[0]), aggregate(d, all_funcs({"p", "q"}), *gpus[0], gpus)));
  // streamed: the matrix in chunks of ~9,000 entries of rows (each pass uploads them again)
  setenv("SCURRY_RGG_GPU_CHUNK", "9000", 1);
  const Dataset streamed = aggregate(d, all_funcs({"p", "q"}), gpu);
  unsetenv("SCURRY_RGG_GPU_CHUNK");
  EXPECT_TRUE(same_bits(a, streamed));
  // NaN: the device flags it and the CPU path sums (its NaN propagates into the group's sum)
  Dataset n = pseudobulk_data(test::fresh_seed() + 2, 500, 8, 3);
  std::get<CsrF>(n.X.m).data[3] = NAN;
  const Dataset g = aggregate(n, all_funcs({"p"}), gpu), c = aggregate(n, all_funcs({"p"}), Context::cpu(1));
  const DenseD gs = to_dense_d(g.layers.at("sum")), cs = to_dense_d(c.layers.at("sum"));
  ASSERT_EQ(gs.data.size(), cs.data.size());
  for (size_t i = 0; i < gs.data.size(); ++i) {
    EXPECT_EQ(std::isnan(gs.data[i]), std::isnan(cs.data[i])) << i;
    if (!std::isnan(cs.data[i])) {
      EXPECT_EQ(gs.data[i], cs.data[i]) << i;
    }
  }
}
