// GPU tests (label gpu): the resident steps (pp/resident.hpp) called one at a time, as the Python
// package's device='gpu' calls them, against the CPU steps on the same Dataset: QC columns, filters,
// normalize_total and log1p apart, HVG (subset), scale with and without zero_center, PCA on a dense
// and on a sparse X (centred per block of rows, with and without an HVG mask), views (subset_copy),
// and the round trip of upload/download.
#include <cmath>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "io/h5ad.hpp"
#include "exec/context.hpp"
#include "pp/filter.hpp"
#include "pp/hvg.hpp"
#include "pp/log1p.hpp"
#include "pp/normalize.hpp"
#include "pp/pca.hpp"
#include "pp/preprocess.hpp"
#include "pp/qc.hpp"
#include "pp/resident.hpp"
#include "pp/scale.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

Context gpu_ctx() {
  ContextOptions o;
  o.device = "gpu";
  return Context::create(o);
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rel, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << what << " [" << i << "]";
      continue;
    }
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  }
  EXPECT_LE(worst, rel) << what;
}

void expect_same_columns(const Dataset& g, const Dataset& c) {
  ASSERT_EQ(g.obs.index, c.obs.index);
  ASSERT_EQ(g.var.index, c.var.index);
  for (const Table* tabs : {&c.obs, &c.var}) {
    const Table& gt = tabs == &c.obs ? g.obs : g.var;
    for (const auto& name : tabs->names()) {
      ASSERT_TRUE(gt.has(name)) << name;
      const Column& col = tabs->at(name);
      if (std::holds_alternative<NumericColumn>(col.c)) {
        const double tol = name.find("dispersions_norm") != std::string::npos ? 1e-4 : 1e-5;
        expect_close(gt.numeric(name), tabs->numeric(name), tol, name);
      } else if (std::holds_alternative<BoolColumn>(col.c)) {
        EXPECT_EQ(gt.boolean(name), tabs->boolean(name)) << name;
      }
    }
  }
}

double worst_abs(const Matrix& a, const Matrix& b) {
  const DenseF x = to_dense_f(a), y = to_dense_f(b);
  EXPECT_EQ(x.n_rows, y.n_rows);
  EXPECT_EQ(x.n_cols, y.n_cols);
  double w = 0;
  for (size_t i = 0; i < std::min(x.data.size(), y.data.size()); ++i) w = std::max<double>(w, std::abs(x.data[i] - y.data[i]));
  return w;
}

void expect_same_pca(const Dataset& g, const Dataset& c, int n_check) {
  const auto& gu = g.uns.at("pca").dict(), &cu = c.uns.at("pca").dict();
  const auto& gv = std::get<NumArray>(gu.at("variance_ratio").v).data;
  const auto& cv = std::get<NumArray>(cu.at("variance_ratio").v).data;
  ASSERT_EQ(gv.size(), cv.size());
  for (size_t j = 0; j < static_cast<size_t>(n_check) && j < cv.size(); ++j)
    EXPECT_NEAR(gv[j], cv[j], 1e-4 * cv[j]) << "variance_ratio " << j;
  const DenseF gp = to_dense_f(g.obsm.at("X_pca")), cp = to_dense_f(c.obsm.at("X_pca"));
  ASSERT_EQ(gp.n_rows, cp.n_rows);
  ASSERT_EQ(gp.n_cols, cp.n_cols);
  for (int64_t j = 0; j < std::min<int64_t>(n_check, cp.n_cols); ++j) {
    double sab = 0, saa = 0, sbb = 0;
    for (int64_t i = 0; i < cp.n_rows; ++i) sab += gp(i, j) * cp(i, j), saa += gp(i, j) * gp(i, j), sbb += cp(i, j) * cp(i, j);
    EXPECT_GT(std::abs(sab) / std::sqrt(saa * sbb), 0.999) << "X_pca component " << j;
  }
  const Matrix &gl = g.varm.at("PCs"), &cl = c.varm.at("PCs");
  EXPECT_EQ(gl.dtype, cl.dtype);
  EXPECT_EQ(gl.n_rows(), cl.n_rows());
}

// The tutorial's steps one at a time on both backends; `zero_center` picks the scale.
void step_by_step(Dataset cpu_d, bool zero_center, bool subset) {
  Context cpu = Context::cpu(2), gpu = gpu_ctx();
  Dataset gd = cpu_d;
  mark_gene_prefix(cpu_d, "mt", {"MT-", "mt-"});
  mark_gene_prefix(gd, "mt", {"MT-", "mt-"});
  auto x = resident::upload(gpu, gd.X);
  gd.X = Matrix();  // X lives on the device from here on
  QcOptions q;
  q.qc_vars = {"mt"};
  calculate_qc_metrics(cpu, cpu_d, q);
  resident::qc(gpu, *x, gd, q);
  FilterCellsOptions fc;
  fc.min_genes = 300;
  filter_cells(cpu, cpu_d, fc);
  resident::filter_cells(gpu, *x, gd, fc);
  FilterGenesOptions fg;
  fg.min_cells = 5;
  filter_genes(cpu, cpu_d, fg);
  resident::filter_genes(gpu, *x, gd, fg);
  expect_same_columns(gd, cpu_d);
  EXPECT_EQ(worst_abs(resident::download(gpu, *x), cpu_d.X), 0.0) << "the filtered counts";
  NormalizeTotalOptions no;
  no.target_sum = 1e4;
  no.key_added = "norm_total";
  normalize_total(cpu, cpu_d, no);
  resident::normalize_total(gpu, *x, gd, no);
  EXPECT_LT(worst_abs(resident::download(gpu, *x), cpu_d.X), 1e-3) << "normalised (values up to 1e4)";
  log1p(cpu, cpu_d, Log1pOptions{});
  resident::log1p(gpu, *x, gd);
  EXPECT_TRUE(gd.uns.count("log1p"));
  EXPECT_LT(worst_abs(resident::download(gpu, *x), cpu_d.X), 2e-6) << "log1p";
  HvgOptions h;
  h.n_top_genes = 1000;
  h.subset = subset;
  highly_variable_genes(cpu, cpu_d, h);
  resident::highly_variable_genes(gpu, *x, gd, h);
  expect_same_columns(gd, cpu_d);
  EXPECT_EQ(x->n_cols(), gd.n_vars());
  ScaleOptions so;
  so.max_value = 10;
  so.zero_center = zero_center;
  so.clip_below = zero_center;  // scanpy 1.10's clip to [-max_value, max_value] (the package's default)
  scale(cpu, cpu_d, so);
  resident::scale(gpu, *x, gd, so);
  expect_same_columns(gd, cpu_d);
  EXPECT_EQ(x->dense(), zero_center);
  EXPECT_LT(worst_abs(resident::download(gpu, *x), cpu_d.X), 1e-4) << "scaled X";
  PcaOptions po;
  po.n_comps = 30;
  pca(cpu, cpu_d, po);
  resident::pca(gpu, *x, gd, po);
  expect_same_pca(gd, cpu_d, 20);
}

}  // namespace

TEST(ResidentGpu, TutorialStepsOneAtATimeEqualTheCpu) {
  SCURRY_REQUIRE_GPU();
  step_by_step(test::simulated_counts(4000, 6000, 800), true, true);
}

TEST(ResidentGpu, SparseScaleAndMaskedSparsePcaEqualTheCpu) {
  SCURRY_REQUIRE_GPU();
  // Without the HVG subset: the PCA takes var['highly_variable'] as a mask (a column subset copied
  // on the device) of a sparse X, centred one block of rows at a time.
  step_by_step(test::simulated_counts(3000, 5000, 700), false, false);
}

TEST(ResidentGpu, PcaOfTheLogDataWithoutScaleEqualsTheCpu) {
  SCURRY_REQUIRE_GPU();
  Context cpu = Context::cpu(2), gpu = gpu_ctx();
  Dataset c = test::simulated_counts(2500, 3000, 600), g = c;
  auto x = resident::upload(gpu, g.X);
  g.X = Matrix();
  NormalizeTotalOptions no;  // the median target
  normalize_total(cpu, c, no);
  log1p(cpu, c, Log1pOptions{});
  resident::normalize_total(gpu, *x, g, no, true);  // fused, as the chain
  EXPECT_LT(worst_abs(resident::download(gpu, *x), c.X), 2e-6);
  for (bool centred : {true, false}) {
    PcaOptions po;
    po.n_comps = 20;
    po.zero_center = centred;
    Dataset cc = c, gg = g;
    pca(cpu, cc, po);
    resident::pca(gpu, *x, gg, po);
    expect_same_pca(gg, cc, 15);
  }
}

TEST(ResidentGpu, ViewsAndRoundTrip) {
  SCURRY_REQUIRE_GPU();
  Context gpu = gpu_ctx();
  Dataset c = test::simulated_counts(700, 900, 200);
  auto x = resident::upload(gpu, c.X);
  EXPECT_EQ(x->n_rows(), 700);
  EXPECT_EQ(x->nnz(), c.X.csr_f().nnz());
  EXPECT_EQ(worst_abs(resident::download(gpu, *x), c.X), 0.0);
  std::vector<int64_t> rows, cols;
  for (int64_t i = 3; i < 700; i += 7) rows.push_back(i);
  for (int64_t j = 0; j < 900; j += 3) cols.push_back(j);
  Dataset v = c;
  v.subset_obs(rows);
  v.subset_vars(cols);
  auto xv = resident::subset_copy(gpu, *x, rows, false, cols, false);
  EXPECT_EQ(worst_abs(resident::download(gpu, *xv), v.X), 0.0);
  EXPECT_EQ(worst_abs(resident::download(gpu, *x), c.X), 0.0) << "the source is untouched";
  // A dense input is stored as CSR (its zeros dropped).
  auto xd = resident::upload(gpu, Matrix(to_dense_f(c.X), DType::f32));
  EXPECT_FALSE(xd->dense());
  EXPECT_EQ(worst_abs(resident::download(gpu, *xd), c.X), 0.0);
  // A step that needs the sparse matrix on a dense X says so.
  ScaleOptions so;
  Dataset d2 = c;
  resident::scale(gpu, *xd, d2, so);
  EXPECT_TRUE(xd->dense());
  EXPECT_THROW(resident::log1p(gpu, *xd, d2), InputError);
}

// From the caller's own buffers (the package's scipy matrix): every combination of index, row pointer
// and value widths gives the matrix itself; a bad structure is refused naming the problem.
TEST(ResidentGpu, UploadFromBuffersOfEveryWidth) {
  SCURRY_REQUIRE_GPU();
  Context gpu = gpu_ctx();
  const Dataset c = test::simulated_counts(500, 700, 150);
  const CsrF& x = c.X.csr_f();
  std::vector<int32_t> p32(x.indptr.begin(), x.indptr.end()), i32(x.indices.begin(), x.indices.end());
  std::vector<int64_t> p64(x.indptr.begin(), x.indptr.end()), i64(x.indices.begin(), x.indices.end());
  std::vector<float> v32(x.data.begin(), x.data.end());
  std::vector<double> v64(x.data.begin(), x.data.end());
  for (int pb : {4, 8})
    for (int ib : {4, 8})
      for (int vb : {4, 8}) {
        resident::CsrParts p;
        p.n_rows = x.n_rows, p.n_cols = x.n_cols, p.nnz = x.nnz();
        p.indptr = pb == 4 ? static_cast<const void*>(p32.data()) : p64.data(), p.indptr_bytes = pb;
        p.indices = ib == 4 ? static_cast<const void*>(i32.data()) : i64.data(), p.index_bytes = ib;
        p.data = vb == 4 ? static_cast<const void*>(v32.data()) : v64.data(), p.value_bytes = vb;
        auto r = resident::upload(gpu, p, "X");
        EXPECT_EQ(worst_abs(resident::download(gpu, *r), c.X), 0.0) << pb << " " << ib << " " << vb;
        EXPECT_EQ(r->nnz(), x.nnz());
      }
  resident::CsrParts p;
  p.n_rows = x.n_rows, p.n_cols = x.n_cols, p.nnz = x.nnz();
  p.indptr = p64.data(), p.indices = i64.data(), p.index_bytes = 8, p.data = v32.data();
  i64[7] = (int64_t{1} << 32) + 3;  // would wrap into range as int32
  EXPECT_THROW(resident::upload(gpu, p, "X"), InputError);
  i64[7] = x.indices[7];
  std::vector<int32_t> bad32 = i32;
  bad32[11] = static_cast<int32_t>(x.n_cols);
  p.indices = bad32.data(), p.index_bytes = 4;
  EXPECT_THROW(resident::upload(gpu, p, "X"), InputError);
  p.indices = i32.data();
  p64[static_cast<size_t>(x.n_rows / 2)] = x.nnz() + 1;  // decreasing after it
  EXPECT_THROW(resident::upload(gpu, p, "X"), InputError);
}

// The package's counts check on the device: the host check's message (value, row, column).
TEST(ResidentGpu, CheckCountsNamesTheFirstBadValue) {
  SCURRY_REQUIRE_GPU();
  Context gpu = gpu_ctx();
  Dataset c = test::simulated_counts(300, 400, 100);
  auto ok = resident::upload(gpu, c.X);
  EXPECT_NO_THROW(resident::check_counts(gpu, *ok, "normalize_total"));
  for (float bad : {std::nanf(""), -1.0f, INFINITY}) {
    Matrix m = c.X;
    CsrF& x = m.csr_f();
    const int64_t p = x.nnz() / 2;
    x.data[static_cast<size_t>(p)] = bad;
    std::string want;
    try {
      check_counts(m, "normalize_total");
    } catch (const InputError& e) {
      want = e.what();
    }
    ASSERT_FALSE(want.empty());
    auto r = resident::upload(gpu, m);
    EXPECT_NO_THROW(resident::note_counts(gpu, *r));  // the upload's scan remembers a pass only
    for (int twice = 0; twice < 2; ++twice) {
      try {
        resident::check_counts(gpu, *r, "normalize_total");
        ADD_FAILURE() << "no error for " << bad;
      } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()), want);
      }
    }
  }
  auto clean = resident::upload(gpu, c.X);  // a pass noted, then the check finds it done
  resident::note_counts(gpu, *clean);
  EXPECT_NO_THROW(resident::check_counts(gpu, *clean, "normalize_total"));
}
