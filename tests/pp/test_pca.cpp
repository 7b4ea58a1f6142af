// PCA: the gram and randomized solvers against a dense float64 Jacobi-eigensolver oracle, sparse
// against dense input (implicit centring), thread-count independence, bad input, the Dataset slots,
// and scanpy 1.9.6's PCA of the pbmc3k golden data.
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "pp/pca.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// ---- oracle: dense float64 PCA with a cyclic Jacobi eigen-solver -----------------------------------

// Eigen-decomposition of a symmetric matrix a (g x g, row-major): values descending, vectors as
// columns of vecs.
void jacobi_eigen(std::vector<double> a, int64_t g, std::vector<double>& vals, std::vector<double>& vecs) {
  std::vector<double> v(g * g, 0.0);
  for (int64_t i = 0; i < g; ++i) v[i * g + i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (int64_t i = 0; i < g; ++i)
      for (int64_t j = 0; j < g; ++j) (i == j ? diag : off) += a[i * g + j] * a[i * g + j];
    if (off <= 1e-30 * diag) break;
    for (int64_t p = 0; p < g; ++p)
      for (int64_t q = p + 1; q < g; ++q) {
        const double apq = a[p * g + q];
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (a[q * g + q] - a[p * g + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < g; ++k) {  // columns p, q
          const double akp = a[k * g + p], akq = a[k * g + q];
          a[k * g + p] = c * akp - s * akq;
          a[k * g + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < g; ++k) {  // rows p, q
          const double apk = a[p * g + k], aqk = a[q * g + k];
          a[p * g + k] = c * apk - s * aqk;
          a[q * g + k] = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < g; ++k) {
          const double vkp = v[k * g + p], vkq = v[k * g + q];
          v[k * g + p] = c * vkp - s * vkq;
          v[k * g + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<int64_t> order(g);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return a[x * g + x] > a[y * g + y]; });
  vals.resize(g);
  vecs.assign(g * g, 0.0);
  for (int64_t c = 0; c < g; ++c) {
    vals[c] = a[order[c] * g + order[c]];
    for (int64_t i = 0; i < g; ++i) vecs[i * g + c] = v[i * g + order[c]];
  }
}

struct Oracle {
  std::vector<double> variance, ratio;
  DenseD comps;  // g x k
  DenseD xpca;   // n x k
};

// scikit-learn PCA (center) or TruncatedSVD (!center) of x, exactly, in float64.
Oracle oracle_pca(const DenseD& x, int64_t k, bool center) {
  const int64_t n = x.n_rows, g = x.n_cols;
  std::vector<double> mu(g, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) mu[j] += x(i, j) / n;
  DenseD xc = x;
  double total = 0;
  for (int64_t j = 0; j < g; ++j) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += (x(i, j) - mu[j]) * (x(i, j) - mu[j]);
    total += ss / (center ? n - 1 : n);
  }
  if (center)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < g; ++j) xc(i, j) -= mu[j];
  std::vector<double> cov(g * g, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t a = 0; a < g; ++a)
      for (int64_t b = 0; b < g; ++b) cov[a * g + b] += xc(i, a) * xc(i, b);
  for (double& c : cov) c /= center ? n - 1 : n;
  std::vector<double> vals, vecs;
  jacobi_eigen(cov, g, vals, vecs);
  Oracle o;
  o.comps = DenseD(g, k);
  for (int64_t j = 0; j < g; ++j)
    for (int64_t c = 0; c < k; ++c) o.comps(j, c) = vecs[j * g + c];
  o.xpca = DenseD(n, k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < k; ++c) {
      double s = 0;
      for (int64_t j = 0; j < g; ++j) s += xc(i, j) * o.comps(j, c);
      o.xpca(i, c) = s;
    }
  for (int64_t c = 0; c < k; ++c) {
    if (center) {
      o.variance.push_back(vals[c]);
    } else {  // TruncatedSVD: variance (ddof 0) of the transformed columns
      double m = 0, ss = 0;
      for (int64_t i = 0; i < n; ++i) m += o.xpca(i, c) / n;
      for (int64_t i = 0; i < n; ++i) ss += (o.xpca(i, c) - m) * (o.xpca(i, c) - m);
      o.variance.push_back(ss / n);
    }
    o.ratio.push_back(o.variance.back() / total);
  }
  return o;
}

// ---- inputs -------------------------------------------------------------------------------------

// Sparse cells-by-genes data with cluster structure: `clusters` groups of different sizes and
// strengths, each lifting its own ~8 marker genes; sparse noise elsewhere. The top clusters-1
// eigenvalues are well separated from the noise bulk and from each other.
CsrF clustered(int64_t n, int64_t g, int clusters, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<int64_t>> markers(clusters);
  for (int c = 0; c < clusters; ++c)
    for (int m = 0; m < 8; ++m) markers[c].push_back((c * 8 + m) % g);
  CsrF x = CsrF::zeros(n, g);
  for (int64_t i = 0; i < n; ++i) {
    // cluster sizes ~ proportional to c + 1
    const double r = u(rng) * clusters * (clusters + 1) / 2.0;
    int c = 0;
    for (double acc = 1; acc < r && c < clusters - 1; acc += c + 2) ++c;
    std::vector<double> row(g, 0.0);
    for (int64_t j = 0; j < g; ++j)
      if (u(rng) < 0.15) row[j] = std::floor(u(rng) * 4);
    for (int64_t j : markers[c]) row[j] += 3.0 * (c + 1) + std::floor(u(rng) * 3);
    for (int64_t j = 0; j < g; ++j)
      if (row[j] != 0) {
        x.indices.push_back(static_cast<int32_t>(j));
        x.data.push_back(static_cast<float>(row[j]));
      }
    x.indptr[i + 1] = x.nnz();
  }
  return x;
}

DenseD as_double(const Matrix& m) { return to_dense_d(m); }

double cosine(const DenseD& a, int64_t ca, const DenseD& b, int64_t cb) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < a.n_rows; ++i) {
    ab += a(i, ca) * b(i, cb);
    aa += a(i, ca) * a(i, ca);
    bb += b(i, cb) * b(i, cb);
  }
  return ab / std::sqrt(aa * bb);
}

double pearson(const DenseD& a, int64_t ca, const DenseD& b, int64_t cb) {
  const int64_t n = a.n_rows;
  double ma = 0, mb = 0;
  for (int64_t i = 0; i < n; ++i) ma += a(i, ca) / n, mb += b(i, cb) / n;
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += (a(i, ca) - ma) * (b(i, cb) - mb);
    aa += (a(i, ca) - ma) * (a(i, ca) - ma);
    bb += (b(i, cb) - mb) * (b(i, cb) - mb);
  }
  return ab / std::sqrt(aa * bb);
}

double max_abs(const DenseD& a) {
  double m = 0;
  for (double v : a.data) m = std::max(m, std::fabs(v));
  return m;
}

// Checks r against the oracle: eigenvalues/ratios to rel_tol, components |cos| >= min_cos, X_pca
// (up to each component's sign) to xpca_tol relative to the largest |X_pca| entry.
void expect_matches(const PcaResult& r, const Oracle& o, double rel_tol, double min_cos, double xpca_tol) {
  const int64_t k = static_cast<int64_t>(o.variance.size());
  ASSERT_EQ(static_cast<int64_t>(r.variance.size()), k);
  ASSERT_EQ(r.components.n_cols, k);
  const DenseD x = as_double(r.x_pca);
  ASSERT_EQ(x.n_rows, o.xpca.n_rows);
  ASSERT_EQ(x.n_cols, k);
  const double scale = max_abs(o.xpca);
  for (int64_t c = 0; c < k; ++c) {
    EXPECT_NEAR(r.variance[c], o.variance[c], rel_tol * o.variance[c]) << "component " << c;
    EXPECT_NEAR(r.variance_ratio[c], o.ratio[c], rel_tol * o.ratio[c]) << "component " << c;
    const double cs = cosine(r.components, c, o.comps, c);
    EXPECT_GE(std::fabs(cs), min_cos) << "component " << c;
    const double sign = cs < 0 ? -1 : 1;
    double worst = 0;
    for (int64_t i = 0; i < x.n_rows; ++i) worst = std::max(worst, std::fabs(x(i, c) - sign * o.xpca(i, c)));
    EXPECT_LE(worst, xpca_tol * scale) << "component " << c;
  }
}

// In each X_pca column the entry of largest magnitude is positive (scikit-learn's svd_flip).
void expect_sign_convention(const PcaResult& r) {
  const DenseD x = as_double(r.x_pca);
  for (int64_t c = 0; c < x.n_cols; ++c) {
    double best = -1, val = 0;
    for (int64_t i = 0; i < x.n_rows; ++i)
      if (std::fabs(x(i, c)) > best) best = std::fabs(x(i, c)), val = x(i, c);
    EXPECT_GT(val, 0) << "component " << c;
  }
}

PcaOptions opts(const std::string& solver, int64_t k, bool center = true) {
  PcaOptions o;
  o.svd_solver = solver;
  o.n_comps = k;
  o.zero_center = center;
  return o;
}

}  // namespace

// ---- exact solver -----------------------------------------------------------------------------------

TEST(Pca, GramMatchesOracleSparseAndDense) {
  const uint64_t seed = test::fresh_seed();
  const CsrF xs = test::random_counts(300, 40, 0.3, seed, 9);
  const DenseF xd = to_dense_f(Matrix(xs));
  const Oracle o = oracle_pca(to_dense_d(Matrix(xs)), 12, true);
  const Context ctx = Context::cpu(2);
  for (const std::string solver : {"gram", "arpack"}) {
    const PcaResult rs = pca(ctx, xs, opts(solver, 12));
    const PcaResult rd = pca(ctx, xd, opts(solver, 12));
    EXPECT_EQ(rs.solver, "gram");
    expect_matches(rs, o, 1e-6, 0.9999, 1e-5);
    expect_matches(rd, o, 1e-6, 0.9999, 1e-5);
    expect_sign_convention(rs);
    // Sparse (implicit centring) equals dense (same matrix) to float32 output precision.
    const DenseD a = as_double(rs.x_pca), b = as_double(rd.x_pca);
    double worst = 0;
    for (size_t i = 0; i < a.data.size(); ++i) worst = std::max(worst, std::fabs(a.data[i] - b.data[i]));
    EXPECT_LE(worst, 1e-5 * max_abs(a));
  }
}

// The float32 Gram (blocks of 1,024 centred rows, float64 sums across blocks) over more blocks than
// its reduction groups, on counts shifted far from zero (a float32 Gram of uncentred data would lose
// the small variances to cancellation): with the float64 Rayleigh-Ritz pass as exact as the float64
// Gram; without it still within 1e-4 (the bar). Against the Jacobi oracle.
TEST(Pca, Float32GramMatchesOracleOverManyBlocks) {
  const uint64_t seed = test::fresh_seed();
  const CsrF xs = test::random_counts(4500, 60, 0.3, seed, 8);
  DenseF xd = to_dense_f(Matrix(xs));
  for (int64_t i = 0; i < xd.n_rows; ++i)
    for (int64_t j = 0; j < xd.n_cols; ++j) xd(i, j) += 100.0f + static_cast<float>(j);
  DenseD xo(xd.n_rows, xd.n_cols);
  for (size_t e = 0; e < xd.data.size(); ++e) xo.data[e] = xd.data[e];
  const Oracle o = oracle_pca(xo, 20, true);
  for (int threads : {1, 2}) {
    PcaOptions opt = opts("gram", 20);
    const PcaResult r = pca(Context::cpu(threads), xd, opt);
    expect_matches(r, o, 1e-8, 0.99999, 1e-5);
    opt.gram_refine = 0;
    expect_matches(pca(Context::cpu(threads), xd, opt), o, 1e-4, 0.999, 1e-3);
    opt.gram_float32 = false;
    expect_matches(pca(Context::cpu(threads), xd, opt), o, 1e-6, 0.9999, 1e-5);
  }
  // Sparse input through the same path.
  expect_matches(pca(Context::cpu(2), xs, opts("gram", 20)), oracle_pca(to_dense_d(Matrix(xs)), 20, true), 1e-8,
                 0.99999, 1e-5);
}

TEST(Pca, GramNoCenteringMatchesTruncatedSvdOracle) {
  const uint64_t seed = test::fresh_seed();
  const CsrF xs = test::random_counts(250, 30, 0.4, seed, 6);
  const Oracle o = oracle_pca(to_dense_d(Matrix(xs)), 8, false);
  const Context ctx = Context::cpu(1);
  expect_matches(pca(ctx, xs, opts("gram", 8, false)), o, 1e-6, 0.9999, 1e-5);
  expect_matches(pca(ctx, to_dense_f(Matrix(xs)), opts("gram", 8, false)), o, 1e-6, 0.9999, 1e-5);
}

// ---- randomized solver ------------------------------------------------------------------------------

TEST(Pca, RandomizedMatchesOracleOnSeparatedSpectrum) {
  const uint64_t seed = test::fresh_seed();
  const CsrF xs = clustered(600, 60, 6, seed);
  const DenseF xd = to_dense_f(Matrix(xs));
  const int64_t k = 5;
  const Oracle o = oracle_pca(to_dense_d(Matrix(xs)), k, true);
  // The spectrum is separated: the oracle's top eigenvalues are distinct by >= 5 %.
  for (int64_t c = 0; c < k; ++c) ASSERT_GT(o.variance[c], 1.05 * (c + 1 < k ? o.variance[c + 1] : 0)) << c;
  const Context ctx = Context::cpu(2);
  PcaOptions opt = opts("randomized", k);
  opt.random_state = seed;
  const PcaResult rs = pca(ctx, xs, opt);
  const PcaResult rd = pca(ctx, xd, opt);
  EXPECT_EQ(rs.solver, "randomized");
  expect_matches(rs, o, 1e-3, 0.999, 1e-3);
  expect_matches(rd, o, 1e-3, 0.999, 1e-3);
  expect_sign_convention(rd);
  // Total variance is exact (per-gene variances), whatever the solver.
  const PcaResult rg = pca(ctx, xs, opts("gram", k));
  EXPECT_NEAR(rs.total_variance, rg.total_variance, 1e-9 * rg.total_variance);
}

TEST(Pca, RandomizedNoCentering) {
  const uint64_t seed = test::fresh_seed();
  const CsrF xs = clustered(500, 50, 5, seed);
  const Oracle o = oracle_pca(to_dense_d(Matrix(xs)), 4, false);
  PcaOptions opt = opts("randomized", 4, false);
  opt.random_state = seed + 1;
  expect_matches(pca(Context::cpu(2), xs, opt), o, 1e-3, 0.999, 1e-3);
}

TEST(Pca, AutoPicksSolverByGeneCount) {
  const CsrF xs = test::random_counts(80, 30, 0.3, test::fresh_seed());
  PcaOptions opt = opts("auto", 5);
  EXPECT_EQ(pca(Context::cpu(1), xs, opt).solver, "gram");
  opt.auto_gram_max_genes = 20;
  EXPECT_EQ(pca(Context::cpu(1), xs, opt).solver, "randomized");
}

// ---- determinism --------------------------------------------------------------------------------------

TEST(Pca, OneAndTwoThreadsBitIdentical) {
  const uint64_t seed = test::fresh_seed();
  // Large enough for several row blocks, Gram column tiles and reduction groups.
  const CsrF xs = test::random_counts(3000, 300, 0.1, seed, 12);
  const DenseF xd = to_dense_f(Matrix(xs));
  for (const std::string solver : {"gram", "randomized"})
    for (bool center : {true, false}) {
      PcaOptions opt = opts(solver, 10, center);
      const PcaResult s1 = pca(Context::cpu(1), xs, opt), s2 = pca(Context::cpu(2), xs, opt);
      const PcaResult d1 = pca(Context::cpu(1), xd, opt), d2 = pca(Context::cpu(2), xd, opt);
      const std::string what = solver + (center ? " centred" : " uncentred");
      EXPECT_EQ(s1.x_pca.dense_f().data, s2.x_pca.dense_f().data) << what;
      EXPECT_EQ(s1.components.data, s2.components.data) << what;
      EXPECT_EQ(s1.variance, s2.variance) << what;
      EXPECT_EQ(s1.variance_ratio, s2.variance_ratio) << what;
      EXPECT_EQ(d1.x_pca.dense_f().data, d2.x_pca.dense_f().data) << what;
      EXPECT_EQ(d1.components.data, d2.components.data) << what;
      EXPECT_EQ(d1.variance, d2.variance) << what;
    }
}

// ---- bad input -----------------------------------------------------------------------------------------

TEST(Pca, NCompsOutOfRangeThrows) {
  const CsrF xs = test::random_counts(40, 25, 0.3, test::fresh_seed());
  const Context ctx = Context::cpu(1);
  EXPECT_THROW(pca(ctx, xs, opts("gram", 25)), InputError);  // = min(n, g)
  EXPECT_THROW(pca(ctx, xs, opts("gram", 30)), InputError);
  EXPECT_THROW(pca(ctx, xs, opts("randomized", 25)), InputError);
  EXPECT_THROW(pca(ctx, xs, opts("gram", 0)), InputError);
  EXPECT_EQ(pca(ctx, xs, opts("gram", 24)).variance.size(), 24u);  // min(n, g) - 1 is fine
  // Unset: scanpy's default, min(50, min(n, g) - 1).
  PcaOptions def;
  EXPECT_EQ(pca(ctx, xs, def).variance.size(), 24u);
  const CsrF big = test::random_counts(120, 80, 0.3, test::fresh_seed());
  EXPECT_EQ(pca(ctx, big, def).variance.size(), 50u);
}

TEST(Pca, BadInputThrows) {
  const Context ctx = Context::cpu(1);
  EXPECT_THROW(pca(ctx, CsrF::zeros(30, 10), opts("gram", 3)), InputError);  // all constant
  EXPECT_THROW(pca(ctx, CsrF::zeros(1, 10), PcaOptions{}), InputError);     // one cell
  DenseF d(20, 6, 1.0f);
  d(3, 2) = NAN;
  EXPECT_THROW(pca(ctx, d, opts("gram", 3)), InputError);
  EXPECT_THROW(pca(ctx, d, opts("randomized", 3)), InputError);
  EXPECT_THROW(pca(ctx, test::random_counts(30, 10, 0.5, 1), opts("lobpcg", 3)), InputError);
}

// ---- Dataset level ---------------------------------------------------------------------------------

TEST(Pca, DatasetHvgMaskAndSlots) {
  const uint64_t seed = test::fresh_seed();
  const int64_t n = 200, g = 50;
  Dataset d;
  d.X = Matrix(test::random_counts(n, g, 0.3, seed, 8));
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("g" + std::to_string(j));
  std::vector<uint8_t> hv(g, 0);
  std::vector<int64_t> keep;
  for (int64_t j = 0; j < g; ++j)
    if (j % 3 != 1) hv[j] = 1, keep.push_back(j);
  d.var.set("highly_variable", Column::boolean(hv));

  PcaOptions opt;
  opt.n_comps = 7;
  const PcaResult r = pca(Context::cpu(2), d, opt);
  EXPECT_TRUE(r.use_highly_variable);
  EXPECT_EQ(r.genes, keep);
  // Equals the PCA of the HVG columns alone.
  const CsrF sub = take_cols(d.X.csr_f(), keep);
  const Oracle o = oracle_pca(to_dense_d(Matrix(sub)), 7, true);
  expect_matches(r, o, 1e-6, 0.9999, 1e-5);
  // Slots, shapes and dtypes as scanpy writes them.
  ASSERT_TRUE(d.obsm.count("X_pca"));
  EXPECT_EQ(d.obsm["X_pca"].dtype, DType::f32);
  EXPECT_EQ(d.obsm["X_pca"].dense_f().n_rows, n);
  EXPECT_EQ(d.obsm["X_pca"].dense_f().n_cols, 7);
  ASSERT_TRUE(d.varm.count("PCs"));
  const DenseD& pcs = d.varm["PCs"].dense_d();
  EXPECT_EQ(d.varm["PCs"].dtype, DType::f64);
  ASSERT_EQ(pcs.n_rows, g);
  ASSERT_EQ(pcs.n_cols, 7);
  for (int64_t j = 0; j < g; ++j)
    for (int64_t c = 0; c < 7; ++c) {
      if (!hv[j]) {
        EXPECT_EQ(pcs(j, c), 0.0) << j;
      }
    }
  for (size_t u = 0; u < keep.size(); ++u) EXPECT_NEAR(pcs(keep[u], 0), r.components(u, 0), 1e-7);
  const Dict& up = d.uns.at("pca").dict();
  const auto& var = std::get<NumArray>(up.at("variance").v);
  const auto& ratio = std::get<NumArray>(up.at("variance_ratio").v);
  EXPECT_EQ(var.shape, std::vector<int64_t>{7});
  EXPECT_EQ(ratio.dtype, DType::f32);
  EXPECT_NEAR(ratio.data[0], o.ratio[0], 1e-6 * o.ratio[0]);
  const Dict& params = up.at("params").dict();
  EXPECT_EQ(std::get<bool>(params.at("zero_center").v), true);
  EXPECT_EQ(std::get<bool>(params.at("use_highly_variable").v), true);

  // use_highly_variable=false: all genes, float32 PCs.
  opt.use_highly_variable = false;
  const PcaResult all = pca(Context::cpu(1), d, opt);
  EXPECT_FALSE(all.use_highly_variable);
  EXPECT_EQ(d.varm["PCs"].dense_f().n_rows, g);
  EXPECT_EQ(d.varm["PCs"].dtype, DType::f32);
  EXPECT_EQ(std::get<bool>(d.uns.at("pca").dict().at("params").dict().at("use_highly_variable").v), false);

  // Asking for HVGs without the column is an InputError.
  d.var.remove("highly_variable");
  opt.use_highly_variable = true;
  EXPECT_THROW(pca(Context::cpu(1), d, opt), InputError);
}

// ---- golden: scanpy 1.9.6 on pbmc3k_first1000 -----------------------------------------------------------

namespace {

// A float dataset of an HDF5 file, as float64, with its shape.
std::vector<double> read_h5(const std::string& path, const std::string& name, std::vector<hsize_t>& dims) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + path);
  hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (ds < 0) {
    H5Fclose(f);
    throw std::runtime_error("no dataset " + name + " in " + path);
  }
  hid_t sp = H5Dget_space(ds);
  const int rank = H5Sget_simple_extent_ndims(sp);
  dims.assign(rank, 0);
  H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
  hsize_t total = 1;
  for (hsize_t d : dims) total *= d;
  std::vector<double> out(total);
  H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Sclose(sp);
  H5Dclose(ds);
  H5Fclose(f);
  return out;
}

DenseD read_dense(const std::string& path, const std::string& name) {
  std::vector<hsize_t> dims;
  std::vector<double> v = read_h5(path, name, dims);
  if (dims.size() != 2) throw std::runtime_error(name + " is not 2-D");
  DenseD m(static_cast<int64_t>(dims[0]), static_cast<int64_t>(dims[1]));
  m.data = std::move(v);
  return m;
}

}  // namespace

TEST(Pca, GoldenScanpyPbmc3k) {
  const std::string path = test::test_data("golden/pbmc3k_first1000.scanpy.h5ad");
  const DenseD gx = read_dense(path, "X");
  const DenseD gpca = read_dense(path, "obsm/X_pca");
  const DenseD gpcs = read_dense(path, "varm/PCs");
  std::vector<hsize_t> dims;
  const std::vector<double> gratio = read_h5(path, "uns/pca/variance_ratio", dims);
  const std::vector<double> gvar = read_h5(path, "uns/pca/variance", dims);
  ASSERT_EQ(gx.n_rows, 1000);
  ASSERT_EQ(gx.n_cols, 2000);
  ASSERT_EQ(gratio.size(), 50u);

  Dataset d;
  DenseF x(gx.n_rows, gx.n_cols);
  for (size_t i = 0; i < gx.data.size(); ++i) x.data[i] = static_cast<float>(gx.data[i]);
  d.X = Matrix(std::move(x));
  for (int64_t i = 0; i < gx.n_rows; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < gx.n_cols; ++j) d.var.index.push_back("g" + std::to_string(j));

  for (const std::string solver : {"auto", "randomized"}) {
    PcaOptions opt;
    opt.svd_solver = solver;
    opt.n_comps = 50;
    const PcaResult r = pca(Context::cpu(2), d, opt);
    const bool exact = r.solver == "gram";
    const DenseD ours = to_dense_d(d.obsm.at("X_pca"));
    const DenseD pcs = to_dense_d(d.varm.at("PCs"));
    ASSERT_EQ(ours.n_rows, 1000);
    ASSERT_EQ(ours.n_cols, 50);
    ASSERT_EQ(pcs.n_rows, 2000);
    double worst_ratio = 0, worst_var = 0, min_r_pca = 1, min_r_pcs = 1;
    for (int c = 0; c < 50; ++c) {
      worst_ratio = std::max(worst_ratio, std::fabs(r.variance_ratio[c] - gratio[c]) / gratio[c]);
      worst_var = std::max(worst_var, std::fabs(r.variance[c] - gvar[c]) / gvar[c]);
    }
    for (int c = 0; c < 20; ++c) {
      min_r_pca = std::min(min_r_pca, std::fabs(pearson(ours, c, gpca, c)));
      min_r_pcs = std::min(min_r_pcs, std::fabs(pearson(pcs, c, gpcs, c)));
    }
    std::printf("[golden pca %s] max rel err variance_ratio (50 comps) = %.3g, variance = %.3g; "
                "min |r| first 20: X_pca %.7f, PCs %.7f\n",
                r.solver.c_str(), worst_ratio, worst_var, min_r_pca, min_r_pcs);
    if (exact) {
      EXPECT_LE(worst_ratio, 1e-4);
      EXPECT_LE(worst_var, 1e-4);
      EXPECT_GE(min_r_pca, 0.999);
      EXPECT_GE(min_r_pcs, 0.999);
      // scanpy's sign convention holds too: compare signs on the first 20 components.
      for (int c = 0; c < 20; ++c) EXPECT_GT(pearson(ours, c, gpca, c), 0) << "component " << c;
    } else {
      // The randomized solver (default 7 iterations) on scaled data's flat spectrum tail: the
      // leading components must agree; later ones converge more slowly (printed above).
      for (int c = 0; c < 5; ++c) {
        EXPECT_NEAR(r.variance_ratio[c], gratio[c], 1e-3 * gratio[c]) << c;
        EXPECT_GE(std::fabs(pearson(ours, c, gpca, c)), 0.999) << c;
      }
    }
    const Dict& up = d.uns.at("pca").dict();
    EXPECT_EQ(std::get<bool>(up.at("params").dict().at("use_highly_variable").v), false);
  }
}
