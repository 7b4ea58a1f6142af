// The sharded CPU chain (what `mpirun -np R scurry run` does up to PCA) on R in-process ranks gives
// the one-rank result. The ranks are threads joined by ThreadComm, a Comm written here (the same
// collective semantics as MpiComm, partials summed in rank order), so this runs without MPI; the
// real MPI run is tests/exec/test_mpi_run.sh.
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "io/h5ad.hpp"
#include "pp/preprocess.hpp"
#include "pp/shard.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// Ranks as threads: every collective posts each rank's buffer, meets at a barrier, reads what it
// needs from the others' buffers, and meets again (so no buffer dies while another rank reads it).
struct Shared {
  explicit Shared(int n) : size(n), bar(n), posted(static_cast<size_t>(n)) {}
  int size;
  std::barrier<> bar;
  std::vector<const void*> posted;
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }
  void allreduce_sum(double* d, size_t n) override { reduce(d, n); }
  void allreduce_sum(int64_t* d, size_t n) override { reduce(d, n); }
  void broadcast(void* data, size_t bytes, int root) override {
    post(data);
    if (rank_ != root && bytes) std::memcpy(data, s_->posted[root], bytes);
    s_->bar.arrive_and_wait();
  }
  void allgather(const void* send, size_t bytes, void* recv) override {
    allgatherv(send, std::vector<size_t>(static_cast<size_t>(s_->size), bytes), recv);
  }
  void allgatherv(const void* send, const std::vector<size_t>& counts, void* recv) override {
    gather_into(send, counts, recv, true);
  }
  void gatherv(const void* send, const std::vector<size_t>& counts, void* recv, int root) override {
    gather_into(send, counts, recv, rank_ == root);
  }
  void barrier() override { s_->bar.arrive_and_wait(); }
  void abort(int) override { std::abort(); }
  std::string describe() const override { return "threads"; }

 private:
  std::shared_ptr<Shared> s_;
  int rank_;
  void post(const void* p) {
    s_->posted[rank_] = p;
    s_->bar.arrive_and_wait();
  }
  template <class T>
  void reduce(T* d, size_t n) {
    post(d);
    std::vector<T> sum(n, T(0));
    for (int r = 0; r < s_->size; ++r) {
      const T* p = static_cast<const T*>(s_->posted[r]);
      for (size_t i = 0; i < n; ++i) sum[i] += p[i];
    }
    s_->bar.arrive_and_wait();
    std::copy(sum.begin(), sum.end(), d);
  }
  void gather_into(const void* send, const std::vector<size_t>& counts, void* recv, bool want) {
    post(send);
    if (want) {
      size_t off = 0;
      for (int r = 0; r < s_->size; ++r) {
        if (counts[r]) std::memcpy(static_cast<char*>(recv) + off, s_->posted[r], counts[r]);
        off += counts[r];
      }
    }
    s_->bar.arrive_and_wait();
  }
};

// The chain on `ranks` thread-ranks (each: its shard of `input`, then gathered on rank 0).
Dataset run_sharded(const Dataset& input, const PreprocessOptions& o, int ranks) {
  auto shared = std::make_shared<Shared>(ranks);
  std::vector<Dataset> out(static_cast<size_t>(ranks));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> th;
  for (int r = 0; r < ranks; ++r)
    th.emplace_back([&, r] {
      try {
        Context ctx = Context::cpu(1);
        ctx.set_comm(std::make_shared<ThreadComm>(shared, r));
        Dataset d = input;
        shard_rows(ctx, d);
        preprocess(ctx, d, o);
        gather_rows(ctx, d, 0);
        out[r] = std::move(d);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        std::abort();  // the other ranks would wait forever in a collective
      }
    });
  for (auto& t : th) t.join();
  return std::move(out[0]);
}

Dataset run_one(const Dataset& input, const PreprocessOptions& o) {
  Context ctx = Context::cpu(1);
  Dataset d = input;
  preprocess(ctx, d, o);
  return d;
}

// |a - b| <= rtol * max(|b|, 1e-3 * max|b|) elementwise.
void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rtol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0;
  for (double y : b) scale = std::max(scale, std::abs(y));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    if (!both_nan && !(std::abs(a[i] - b[i]) <= rtol * std::max(std::abs(b[i]), 1e-3 * scale))) {
      if (!bad) first = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << a[first] << " vs " << b[first];
}

void expect_tables_equal(const Table& a, const Table& b, const std::string& what) {
  EXPECT_EQ(a.index, b.index) << what;
  ASSERT_EQ(a.names(), b.names()) << what;
  for (const auto& name : b.names()) {
    const Column &x = a.at(name), &y = b.at(name);
    ASSERT_EQ(x.c.index(), y.c.index()) << what << "['" << name << "']";
    if (const auto* ny = std::get_if<NumericColumn>(&y.c)) {
      expect_close(std::get<NumericColumn>(x.c).values, ny->values, 1e-6, what + "['" + name + "']");
      EXPECT_EQ(std::get<NumericColumn>(x.c).dtype, ny->dtype) << name;
    } else if (const auto* by = std::get_if<BoolColumn>(&y.c)) {
      EXPECT_EQ(std::get<BoolColumn>(x.c).values, by->values) << what << "['" << name << "']";
    } else if (const auto* sy = std::get_if<StringColumn>(&y.c)) {
      EXPECT_EQ(std::get<StringColumn>(x.c).values, sy->values) << what << "['" << name << "']";
    } else {
      const auto& cx = std::get<CategoricalColumn>(x.c);
      const auto& cy = std::get<CategoricalColumn>(y.c);
      EXPECT_EQ(cx.categories, cy.categories) << name;
      EXPECT_EQ(cx.codes, cy.codes) << name;
    }
  }
}

std::vector<double> values(const Matrix& m) {
  const DenseD d = to_dense_d(m);
  return d.data;
}

void expect_same_result(const Dataset& a, const Dataset& b) {
  expect_tables_equal(a.obs, b.obs, "obs");
  expect_tables_equal(a.var, b.var, "var");
  ASSERT_EQ(a.X.n_rows(), b.X.n_rows());
  ASSERT_EQ(a.X.n_cols(), b.X.n_cols());
  expect_close(values(a.X), values(b.X), 1e-6, "X");
  EXPECT_EQ(to_csr_f(a.layers.at("counts")).data, to_csr_f(b.layers.at("counts")).data) << "layers['counts']";
  ASSERT_TRUE(a.raw && b.raw);
  expect_close(values(a.raw->X), values(b.raw->X), 1e-6, "raw.X");
  // X_pca up to the sign of each component
  const DenseD p = to_dense_d(a.obsm.at("X_pca")), q = to_dense_d(b.obsm.at("X_pca"));
  ASSERT_EQ(p.n_rows, q.n_rows);
  ASSERT_EQ(p.n_cols, q.n_cols);
  for (int64_t c = 0; c < q.n_cols; ++c) {
    double dot = 0, mx = 0, worst = 0;
    for (int64_t i = 0; i < q.n_rows; ++i) dot += p(i, c) * q(i, c), mx = std::max(mx, std::abs(q(i, c)));
    const double s = dot < 0 ? -1 : 1;
    for (int64_t i = 0; i < q.n_rows; ++i) worst = std::max(worst, std::abs(s * p(i, c) - q(i, c)));
    EXPECT_LE(worst, 1e-5 * mx) << "X_pca component " << c;
  }
}

}  // namespace

TEST(Shard, RangesBalanceNonzerosAndCoverTheRows) {
  const uint64_t seed = test::fresh_seed();
  const CsrF x = test::random_counts(101, 40, 0.2, seed);
  for (int size : {1, 2, 3, 7}) {
    int64_t next = 0;
    for (int r = 0; r < size; ++r) {
      const RowRange rr = shard_range(Matrix(x), r, size);
      EXPECT_EQ(rr.begin, next) << "rank " << r << " of " << size;
      EXPECT_LE(rr.begin, rr.end);
      // each share holds about nnz/size nonzeros (within one row's worth)
      const int64_t nz = x.indptr[rr.end] - x.indptr[rr.begin];
      EXPECT_LE(std::abs(nz - x.nnz() / size), 2 * 40 + 1) << "rank " << r << " of " << size;
      next = rr.end;
    }
    EXPECT_EQ(next, x.n_rows);
  }
}

TEST(Shard, TutorialChainOnTwoAndThreeRanksEqualsOneRank) {
  const Dataset input = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  const Dataset one = run_one(input, o);
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    expect_same_result(run_sharded(input, o, ranks), one);
  }
}

// Cells removed by the filters (unevenly over the ranks), seurat_v3 with a string batch key whose
// batches are not on every rank, the median as normalize target and the genes' Gram matrix (more
// cells than genes).
TEST(Shard, FiltersBatchesAndMedianOnRandomCounts) {
  const uint64_t seed = test::fresh_seed();
  const int64_t n = 600, g = 300;
  Dataset d;
  d.X = Matrix(test::random_counts(n, g, 0.15, seed));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back(j < 5 ? "MT-" + std::to_string(j) : "g" + std::to_string(j));
  std::vector<std::string> batch(n);
  for (int64_t i = 0; i < n; ++i) batch[i] = i < n / 2 ? (rng() % 2 ? "b" : "a") : (rng() % 2 ? "c" : "a");
  d.obs.set("batch", Column::strings(batch));
  PreprocessOptions o;
  o.qc_vars = {"mt"};
  o.qc.percent_top = {10, 50};
  o.filter_cells.min_genes = 40;  // removes some cells
  o.filter_genes.min_cells = 80;  // and some genes
  o.normalize.target_sum.reset();  // the median of the totals
  o.hvg.flavor = "seurat_v3";
  o.hvg.n_top_genes = 100;
  o.hvg.batch_key = "batch";
  o.pca.n_comps = 10;
  const Dataset one = run_one(d, o);
  ASSERT_LT(one.n_obs(), n) << "the filter should remove cells (seed " << seed << ")";
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    expect_same_result(run_sharded(d, o, ranks), one);
  }
}

TEST(Shard, OneRankIsANoOp) {
  const CsrF x = test::random_counts(10, 5, 0.5, 1);
  Dataset d;
  d.X = Matrix(x);
  for (int i = 0; i < 10; ++i) d.obs.index.push_back(std::to_string(i));
  for (int j = 0; j < 5; ++j) d.var.index.push_back(std::to_string(j));
  Context ctx = Context::cpu(1);
  const RowRange rr = shard_rows(ctx, d);
  EXPECT_EQ(rr.begin, 0);
  EXPECT_EQ(rr.end, 10);
  gather_rows(ctx, d);
  EXPECT_EQ(d.X.csr_f().data, x.data);
  EXPECT_EQ(d.obs.index.size(), 10u);
}
