// aggregate (sc.get.aggregate) against direct per-group loops on fresh seeded data: one and two by
// columns (the observed combinations only, "a_b" names), mask, dof, a layer, dense input, thread
// count independence, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "get/aggregate.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

Dataset agg_data(uint64_t seed, int64_t n = 300, int64_t g = 17) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DenseF x(n, g);
  CategoricalColumn a, b;
  a.categories = {"t", "u", "unused", "v"};
  b.categories = {"x", "y"};
  std::vector<uint8_t> mask;
  for (int64_t i = 0; i < n; ++i) {
    a.codes.push_back(static_cast<int32_t>(std::vector<int>{0, 1, 3}[rng() % 3]));
    b.codes.push_back(a.codes.back() == 3 ? 0 : static_cast<int32_t>(rng() % 2));  // (v, y) never seen
    mask.push_back(u(rng) < 0.8);
    for (int64_t j = 0; j < g; ++j)
      if (u(rng) < 0.4) x(i, j) = static_cast<float>(std::exp(u(rng) * 3) - 0.5);
  }
  Dataset d;
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("g" + std::to_string(j));
  d.obs.set("a", Column(a));
  d.obs.set("b", Column(b));
  d.obs.set("m", Column::boolean(mask));
  d.layers["dense"] = Matrix(x);
  d.X = Matrix(to_csr_f(Matrix(std::move(x))));
  return d;
}

}  // namespace

TEST(Aggregate, AgainstDirectLoops) {
  const Dataset d = agg_data(test::fresh_seed());
  const DenseD x = to_dense_d(d.X);
  const auto& a = std::get<CategoricalColumn>(d.obs.at("a").c).codes;
  const auto& b = std::get<CategoricalColumn>(d.obs.at("b").c).codes;
  const auto& m = d.obs.boolean("m");
  for (bool use_mask : {false, true})
    for (int dof : {0, 1})
      for (const char* layer : {"", "dense"}) {
        AggregateOptions o;
        o.by = {"a", "b"};
        o.func = {"sum", "mean", "count_nonzero", "var"};
        o.dof = dof;
        o.layer = layer;
        if (use_mask) o.mask = "m";
        const Dataset r = aggregate(d, o, Context::cpu(2));
        // observed combinations, in category order, the unused category dropped
        ASSERT_EQ(r.obs.index, (std::vector<std::string>{"t_x", "t_y", "u_x", "u_y", "v_x"}));
        EXPECT_EQ(std::get<CategoricalColumn>(r.obs.at("a").c).categories, (std::vector<std::string>{"t", "u", "v"}));
        EXPECT_EQ(r.var.index, d.var.index);
        const int ac[] = {0, 0, 1, 1, 3}, bc[] = {0, 1, 0, 1, 0};
        for (int k = 0; k < 5; ++k)
          for (int64_t j = 0; j < x.n_cols; ++j) {
            double s = 0, q = 0, n = 0, nz = 0;
            for (int64_t i = 0; i < x.n_rows; ++i)
              if (a[i] == ac[k] && b[i] == bc[k] && (!use_mask || m[i])) {
                s += x(i, j), q += x(i, j) * x(i, j), n += 1, nz += x(i, j) != 0;
              }
            const double mean = s / n;
            double var = 0;
            for (int64_t i = 0; i < x.n_rows; ++i)
              if (a[i] == ac[k] && b[i] == bc[k] && (!use_mask || m[i])) var += (x(i, j) - mean) * (x(i, j) - mean);
            var /= n - dof;
            EXPECT_NEAR(r.layers.at("sum").dense_d()(k, j), s, 1e-6 * std::fabs(s) + 1e-9);
            EXPECT_NEAR(r.layers.at("mean").dense_d()(k, j), mean, 1e-12 * std::fabs(mean) + 1e-12);
            EXPECT_EQ(r.layers.at("count_nonzero").dense_d()(k, j), nz);
            EXPECT_NEAR(r.layers.at("var").dense_d()(k, j), var, 1e-9 * var + 1e-12);
          }
        EXPECT_EQ(r.layers.at("count_nonzero").dtype, DType::i64);
        EXPECT_EQ(r.layers.at("sum").dtype, DType::f32);
      }
}

TEST(Aggregate, OneColumnThreadsAndErrors) {
  const Dataset d = agg_data(test::fresh_seed(), 500, 9);
  AggregateOptions o;
  o.by = {"a"};
  o.func = {"var", "mean"};
  const Dataset r1 = aggregate(d, o, Context::cpu(1));
  const Dataset r3 = aggregate(d, o, Context::cpu(3));
  EXPECT_EQ(r1.obs.index, (std::vector<std::string>{"t", "u", "v"}));
  EXPECT_EQ(r1.layers.at("var").dense_d().data, r3.layers.at("var").dense_d().data);  // bit for bit
  EXPECT_EQ(r1.layers.size(), 2u);
  o.by = {"nope"};
  EXPECT_THROW(aggregate(d, o, Context::cpu(1)), InputError);
  o.by = {"a"};
  o.func = {"median"};
  EXPECT_THROW(aggregate(d, o, Context::cpu(1)), InputError);
  o.func = {"sum"};
  o.mask = "a";  // not boolean
  EXPECT_THROW(aggregate(d, o, Context::cpu(1)), InputError);
}
