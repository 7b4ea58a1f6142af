// filter_cells / filter_genes: masks and numbers against naive loops (CSR and dense input, 1 and 2
// threads), the Dataset slots they write and subset, errors, and scanpy 1.9.6's filters on pbmc3k.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "io/h5ad.hpp"
#include "pp/filter.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

struct Naive {
  std::vector<int64_t> row_pos, col_pos;
  std::vector<double> row_sum, col_sum;
};
Naive naive(const DenseD& x) {
  Naive o;
  o.row_pos.assign(x.n_rows, 0);
  o.row_sum.assign(x.n_rows, 0);
  o.col_pos.assign(x.n_cols, 0);
  o.col_sum.assign(x.n_cols, 0);
  for (int64_t i = 0; i < x.n_rows; ++i)
    for (int64_t j = 0; j < x.n_cols; ++j) {
      const double v = x(i, j);
      o.row_pos[i] += v > 0;
      o.col_pos[j] += v > 0;
      o.row_sum[i] += v;
      o.col_sum[j] += v;
    }
  return o;
}

Dataset make_dataset(const CsrF& x) {
  Dataset d;
  d.X = Matrix(x);
  for (int64_t i = 0; i < x.n_rows; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < x.n_cols; ++j) d.var.index.push_back("g" + std::to_string(j));
  return d;
}

}  // namespace

TEST(Filter, CellsAndGenesMatchNaive) {
  const uint64_t seed = test::fresh_seed();
  CsrF x = test::random_counts(400, 80, 0.25, seed);
  const Naive o = naive(to_dense_d(Matrix(x)));
  const int64_t min_genes = o.row_pos[7];  // a threshold some cells fail
  const double max_counts = o.row_sum[7];  // cell 7 passes both criteria, so their intersection is never empty
  for (int threads : {1, 2}) {
    const Context ctx = Context::cpu(threads);
    FilterCellsOptions co;
    co.min_genes = min_genes;
    const FilterCellsResult r = filter_cells(ctx, x, co);
    EXPECT_EQ(r.n_genes, o.row_pos);
    EXPECT_TRUE(r.n_counts.empty());
    for (size_t i = 0; i < r.keep.size(); ++i) EXPECT_EQ(r.keep[i] != 0, o.row_pos[i] >= min_genes);
    co = {};
    co.max_counts = max_counts;
    const FilterCellsResult rc = filter_cells(ctx, to_dense_f(Matrix(x)), co);
    EXPECT_EQ(rc.n_counts, o.row_sum);
    for (size_t i = 0; i < rc.keep.size(); ++i) EXPECT_EQ(rc.keep[i] != 0, o.row_sum[i] <= max_counts);
    // Several criteria: all must hold.
    co.min_genes = min_genes;
    const FilterCellsResult rb = filter_cells(ctx, x, co);
    std::vector<int64_t> want;
    for (int64_t i = 0; i < x.n_rows; ++i)
      if (o.row_pos[i] >= min_genes && o.row_sum[i] <= max_counts) want.push_back(i);
    EXPECT_EQ(rb.kept, want);

    FilterGenesOptions go;
    go.min_cells = o.col_pos[3];
    const FilterGenesResult g = filter_genes(ctx, x, go);
    EXPECT_EQ(g.n_cells, o.col_pos);
    for (size_t j = 0; j < g.keep.size(); ++j) EXPECT_EQ(g.keep[j] != 0, o.col_pos[j] >= *go.min_cells);
    go = {};
    go.max_counts = o.col_sum[5];
    go.min_counts = 1;
    const FilterGenesResult gc = filter_genes(ctx, to_dense_f(Matrix(x)), go);
    EXPECT_EQ(gc.n_counts, o.col_sum);
    for (size_t j = 0; j < gc.keep.size(); ++j)
      EXPECT_EQ(gc.keep[j] != 0, o.col_sum[j] <= o.col_sum[5] && o.col_sum[j] >= 1);
  }
}

TEST(Filter, DatasetSlotsAndErrors) {
  const uint64_t seed = test::fresh_seed();
  CsrF x = test::random_counts(200, 50, 0.3, seed);
  const Naive o = naive(to_dense_d(Matrix(x)));
  Dataset d = make_dataset(x);
  d.obsm["emb"] = Matrix(DenseF(200, 2, 1.0f));
  for (int64_t i = 0; i < 200; ++i) d.obsm["emb"].dense_f()(i, 0) = static_cast<float>(i);
  d.raw = std::make_shared<Dataset>();
  d.raw->X = Matrix(x);
  d.raw->var = d.var;
  FilterCellsOptions co;
  co.min_genes = o.row_pos[0];
  const FilterCellsResult r = filter_cells(Context::cpu(2), d, co);
  ASSERT_EQ(d.n_obs(), static_cast<int64_t>(r.kept.size()));
  ASSERT_EQ(d.X.n_rows(), d.n_obs());
  ASSERT_EQ(d.raw->X.n_rows(), d.n_obs());
  const auto& ng = d.obs.numeric("n_genes");
  EXPECT_EQ(std::get<NumericColumn>(d.obs.at("n_genes").c).dtype, DType::i64);
  for (size_t k = 0; k < r.kept.size(); ++k) {
    EXPECT_EQ(d.obs.index[k], "c" + std::to_string(r.kept[k]));
    EXPECT_EQ(ng[k], static_cast<double>(o.row_pos[r.kept[k]]));
    EXPECT_GE(ng[k], static_cast<double>(*co.min_genes));
    EXPECT_EQ(d.obsm["emb"].dense_f()(static_cast<int64_t>(k), 0), static_cast<float>(r.kept[k]));
  }
  d.check_shapes("test");

  const int64_t n_before = d.n_vars();
  const Naive o2 = naive(to_dense_d(d.X));
  std::vector<double> sorted = o2.col_sum;
  std::sort(sorted.begin(), sorted.end());
  FilterGenesOptions go;
  go.min_counts = sorted[25];  // about half the genes go
  filter_genes(Context::cpu(1), d, go);
  int64_t want = 0;
  for (double s : o2.col_sum) want += s >= *go.min_counts;
  EXPECT_EQ(d.n_vars(), want);
  EXPECT_LT(d.n_vars(), n_before);
  for (double s : d.var.numeric("n_counts")) EXPECT_GE(s, *go.min_counts);
  EXPECT_EQ(d.raw->X.n_cols(), 50);  // raw keeps every gene
  d.check_shapes("test");

  // Removing everything names the threshold.
  Dataset e = make_dataset(x);
  FilterCellsOptions all;
  all.min_genes = 51;
  try {
    filter_cells(Context::cpu(1), e, all);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("min_genes=51"), std::string::npos) << err.what();
  }
  EXPECT_EQ(e.n_obs(), 200);  // untouched
  FilterGenesOptions gall;
  gall.max_cells = -1;
  EXPECT_THROW(filter_genes(Context::cpu(1), e, gall), InputError);
  EXPECT_THROW(filter_cells(Context::cpu(1), e, FilterCellsOptions{}), InputError);
  EXPECT_THROW(filter_genes(Context::cpu(1), e, FilterGenesOptions{}), InputError);
}

TEST(Filter, MatchesScanpyOnPbmc3k) {
  Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  Dataset gold = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
  ASSERT_TRUE(gold.raw);
  FilterCellsOptions co;
  co.min_genes = 200;
  filter_cells(Context::cpu(2), d, co);
  EXPECT_EQ(d.n_obs(), 1000);
  EXPECT_EQ(d.obs.index, gold.obs.index);
  EXPECT_EQ(d.obs.numeric("n_genes"), gold.obs.numeric("n_genes"));
  FilterGenesOptions go;
  go.min_cells = 3;
  filter_genes(Context::cpu(2), d, go);
  EXPECT_EQ(d.n_vars(), 11780);
  EXPECT_EQ(d.var.index, gold.raw->var.index);
  EXPECT_EQ(d.var.numeric("n_cells"), gold.raw->var.numeric("n_cells"));
  EXPECT_EQ(d.X.nnz(), gold.raw->X.nnz());
}
