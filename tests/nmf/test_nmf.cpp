// Batched NMF: HALS (cd), MU Frobenius and MU Kullback-Leibler against a float64 reference written
// here step by step after sklearn's _nmf.py (dense, naive objective), batched = separate runs,
// 1 vs 2 threads identical, bad input.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "nmf/nmf.hpp"
#include "nmf/numpy_random.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

constexpr double kEps32 = 1.1920928955078125e-07;
constexpr double kEps64 = 2.220446049250313e-16;

using Mat = std::vector<std::vector<double>>;

Mat dense_of(const CsrF& X) {
  Mat m(X.n_rows, std::vector<double>(X.n_cols, 0.0));
  for (int64_t i = 0; i < X.n_rows; ++i)
    for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) m[i][X.indices[p]] = X.data[p];
  return m;
}
Mat zeros(size_t r, size_t c) { return Mat(r, std::vector<double>(c, 0.0)); }
Mat mul(const Mat& A, const Mat& B) {
  Mat C = zeros(A.size(), B[0].size());
  for (size_t i = 0; i < A.size(); ++i)
    for (size_t q = 0; q < B.size(); ++q)
      for (size_t j = 0; j < B[0].size(); ++j) C[i][j] += A[i][q] * B[q][j];
  return C;
}
Mat tr(const Mat& A) {
  Mat T = zeros(A[0].size(), A.size());
  for (size_t i = 0; i < A.size(); ++i)
    for (size_t j = 0; j < A[0].size(); ++j) T[j][i] = A[i][j];
  return T;
}

// sklearn _update_cdnmf_fast on W with HHt, XHt; returns the violation.
double cd_update(Mat& W, const Mat& HHt, const Mat& XHt) {
  double viol = 0;
  const size_t k = HHt.size();
  for (size_t t = 0; t < k; ++t)
    for (size_t i = 0; i < W.size(); ++i) {
      double grad = -XHt[i][t];
      for (size_t r = 0; r < k; ++r) grad += HHt[t][r] * W[i][r];
      const double pg = W[i][t] == 0 ? std::min(0.0, grad) : grad;
      viol += std::fabs(pg);
      if (HHt[t][t] != 0) W[i][t] = std::max(W[i][t] - grad / HHt[t][t], 0.0);
    }
  return viol;
}

double objective(const Mat& X, const Mat& W, const Mat& H, NmfLoss loss) {
  const Mat WH = mul(W, H);
  double res = 0;
  for (size_t i = 0; i < X.size(); ++i)
    for (size_t j = 0; j < X[0].size(); ++j) {
      if (loss == NmfLoss::frobenius) {
        res += 0.5 * (X[i][j] - WH[i][j]) * (X[i][j] - WH[i][j]);
      } else {
        res += WH[i][j];
        if (X[i][j] > kEps32) res += X[i][j] * std::log(X[i][j] / std::max(WH[i][j], kEps32)) - X[i][j];
      }
    }
  return std::sqrt(2 * std::max(res, 0.0));
}

// `iters` iterations of sklearn's solver from (W, H), float64.
double reference(const Mat& X, Mat W, Mat H, NmfSolver solver, NmfLoss loss, int iters) {
  const size_t k = H.size();
  for (int it = 0; it < iters; ++it) {
    if (solver == NmfSolver::cd) {
      cd_update(W, mul(H, tr(H)), mul(X, tr(H)));
      Mat Ht = tr(H);
      cd_update(Ht, mul(tr(W), W), mul(tr(X), W));
      H = tr(Ht);
    } else if (loss == NmfLoss::frobenius) {
      const Mat num = mul(X, tr(H)), den = mul(W, mul(H, tr(H)));
      for (size_t i = 0; i < W.size(); ++i)
        for (size_t c = 0; c < k; ++c) W[i][c] *= num[i][c] / (den[i][c] == 0 ? kEps32 : den[i][c]);
      const Mat nh = mul(tr(W), X), dh = mul(mul(tr(W), W), H);
      for (size_t c = 0; c < k; ++c)
        for (size_t j = 0; j < H[0].size(); ++j) H[c][j] *= nh[c][j] / (dh[c][j] == 0 ? kEps32 : dh[c][j]);
    } else {
      Mat WH = mul(W, H);
      Mat Q = zeros(X.size(), X[0].size());
      for (size_t i = 0; i < X.size(); ++i)
        for (size_t j = 0; j < X[0].size(); ++j) Q[i][j] = X[i][j] / std::max(WH[i][j], kEps32);
      const Mat num = mul(Q, tr(H));
      for (size_t i = 0; i < W.size(); ++i)
        for (size_t c = 0; c < k; ++c) {
          double hs = 0;
          for (size_t j = 0; j < H[0].size(); ++j) hs += H[c][j];
          W[i][c] *= num[i][c] / (hs == 0 ? kEps32 : hs);
        }
      WH = mul(W, H);
      for (size_t i = 0; i < X.size(); ++i)
        for (size_t j = 0; j < X[0].size(); ++j) Q[i][j] = X[i][j] / std::max(WH[i][j], kEps32);
      const Mat nh = mul(tr(W), Q);
      for (size_t c = 0; c < k; ++c) {
        double ws = 0;
        for (size_t i = 0; i < W.size(); ++i) ws += W[i][c];
        if (ws == 0) ws = 1;
        for (size_t j = 0; j < H[0].size(); ++j) {
          H[c][j] *= nh[c][j] / ws;
          if (H[c][j] < kEps64) H[c][j] = 0;
        }
      }
    }
  }
  return objective(X, W, H, loss);
}

Mat to_mat(const DenseF& d) {
  Mat m = zeros(d.n_rows, d.n_cols);
  for (int64_t i = 0; i < d.n_rows; ++i)
    for (int64_t j = 0; j < d.n_cols; ++j) m[i][j] = d(i, j);
  return m;
}

struct Case {
  NmfSolver solver;
  NmfLoss loss;
};

TEST(Nmf, ObjectivesMatchFloat64Reference) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(70, 45, 0.4, seed, 9);
  const Mat Xd = dense_of(X);
  const Context ctx = Context::cpu(2);
  for (const Case cs : {Case{NmfSolver::cd, NmfLoss::frobenius}, Case{NmfSolver::mu, NmfLoss::frobenius},
                        Case{NmfSolver::mu, NmfLoss::kullback_leibler}}) {
    const NmfBatch init = nmf_random_init(X, 4, {seed + 1, seed + 2});
    for (const int iters : {1, 3, 6}) {
      NmfOptions opt;
      opt.solver = cs.solver;
      opt.loss = cs.loss;
      opt.tol = 0;
      opt.max_iter = iters;
      opt.rows_per_block = 16;
      const NmfResult r = nmf_fit(ctx, X, init, opt);
      for (int rep = 0; rep < 2; ++rep) {
        const double ref = reference(Xd, to_mat(init.w_of(rep)), to_mat(init.h_of(rep)), cs.solver, cs.loss, iters);
        EXPECT_EQ(r.n_iter[rep], iters);
        EXPECT_NEAR(r.error[rep], ref, 1e-6 * ref)
            << nmf_solver_name(cs.solver) << "/" << nmf_loss_name(cs.loss) << " after " << iters << " iterations";
        // The objective computed by scurry from its own factors agrees with the naive one.
        const double own = objective(Xd, to_mat(r.f.w_of(rep)), to_mat(r.f.h_of(rep)), cs.loss);
        EXPECT_NEAR(r.error[rep], own, 1e-9 * own + 1e-9);
      }
    }
  }
}

// Counts with a planted rank-5 structure (rounded 4 W0 H0, W0 and H0 uniform, a fifth of W0 zeroed):
// MU converges inside 1000 iterations on it whatever the seed (on pure noise it can need more); HALS
// (cd) needs more than 1000 for ~5% of the seeds (measured over 200), so its cap here is 5000.
CsrF planted_counts(int64_t n, int64_t g, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> W(static_cast<size_t>(n * k)), H(static_cast<size_t>(k * g));
  for (auto& w : W) w = u(rng) < 0.2 ? 0.0 : u(rng);
  for (auto& h : H) h = u(rng);
  std::vector<float> dense(static_cast<size_t>(n * g));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) {
      double v = 0;
      for (int c = 0; c < k; ++c) v += W[i * k + c] * H[c * g + j];
      dense[i * g + j] = static_cast<float>(std::round(4.0 * v));
    }
  return csr_from_dense_rows(dense.data(), n, g);
}

TEST(Nmf, ConvergesAndDecreases) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = planted_counts(120, 60, 5, seed);
  const Context ctx = Context::cpu(2);
  const NmfBatch init = nmf_random_init(X, 5, {seed});
  for (const Case cs : {Case{NmfSolver::cd, NmfLoss::frobenius}, Case{NmfSolver::mu, NmfLoss::frobenius},
                        Case{NmfSolver::mu, NmfLoss::kullback_leibler}}) {
    NmfOptions opt;
    opt.solver = cs.solver;
    opt.loss = cs.loss;
    if (cs.solver == NmfSolver::cd) opt.max_iter = 5000;
    const NmfResult r = nmf_fit(ctx, X, init, opt);
    const double e0 = nmf_objective(ctx, X, init, cs.loss)[0];
    EXPECT_LT(r.error[0], 0.9 * e0);
    EXPECT_LT(r.n_iter[0], opt.max_iter) << "did not converge: " << nmf_solver_name(cs.solver) << " " << nmf_loss_name(cs.loss);
    for (const float v : r.f.W) EXPECT_GE(v, 0.0f);
  }
}

TEST(Nmf, BatchEqualsSeparateRuns) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(150, 50, 0.3, seed, 12);
  const Context ctx = Context::cpu(2);
  const std::vector<uint64_t> seeds = nmf_replicate_seeds(seed, 4);
  for (const Case cs : {Case{NmfSolver::cd, NmfLoss::frobenius}, Case{NmfSolver::mu, NmfLoss::kullback_leibler}}) {
    NmfOptions opt;
    opt.solver = cs.solver;
    opt.loss = cs.loss;
    opt.max_iter = 300;
    const NmfResult batch = nmf_fit(ctx, X, nmf_random_init(X, 3, seeds), opt);
    for (int r = 0; r < 4; ++r) {
      const NmfResult one = nmf_fit(ctx, X, nmf_random_init(X, 3, {seeds[r]}), opt);
      EXPECT_EQ(batch.n_iter[r], one.n_iter[0]);
      EXPECT_EQ(batch.f.w_of(r).data, one.f.W);
      EXPECT_EQ(batch.f.h_of(r).data, one.f.h_of(0).data);
      EXPECT_EQ(batch.error[r], one.error[0]);
    }
  }
}

TEST(Nmf, ThreadCountDoesNotChangeResults) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(700, 80, 0.2, seed, 12);
  for (const Case cs : {Case{NmfSolver::cd, NmfLoss::frobenius}, Case{NmfSolver::mu, NmfLoss::frobenius},
                        Case{NmfSolver::mu, NmfLoss::kullback_leibler}}) {
    NmfOptions opt;
    opt.solver = cs.solver;
    opt.loss = cs.loss;
    opt.max_iter = 60;
    opt.rows_per_block = 32;
    const NmfBatch init = nmf_random_init(X, 4, nmf_replicate_seeds(seed, 3));
    const NmfResult a = nmf_fit(Context::cpu(1), X, init, opt);
    const NmfResult b = nmf_fit(Context::cpu(2), X, init, opt);
    EXPECT_EQ(a.f.W, b.f.W);
    EXPECT_EQ(a.f.Ht, b.f.Ht);
    EXPECT_EQ(a.error, b.error);
    EXPECT_EQ(a.n_iter, b.n_iter);
  }
}

TEST(Nmf, FixedHRefitMatchesReferenceNnls) {
  // W with H fixed (sklearn update_H=False, cd from zeros): each row is a non-negative least squares
  // problem; at convergence the KKT conditions hold: grad >= 0, and grad == 0 where W > 0.
  const uint64_t seed = test::fresh_seed();
  const CsrF X = test::random_counts(80, 40, 0.5, seed, 9);
  const Context ctx = Context::cpu(2);
  const NmfBatch f = nmf_random_init(X, 3, {seed});
  const DenseF H = f.h_of(0);
  NmfOptions opt;
  opt.tol = 1e-10;
  opt.max_iter = 5000;
  const DenseF W = nmf_fit_w_fixed_h(ctx, X, H, opt);
  const Mat Hm = to_mat(H), Xd = dense_of(X);
  const Mat HHt = mul(Hm, tr(Hm)), XHt = mul(Xd, tr(Hm));
  double scale = 0;
  for (const auto& row : XHt)
    for (const double v : row) scale = std::max(scale, std::fabs(v));
  for (int64_t i = 0; i < W.n_rows; ++i)
    for (int c = 0; c < 3; ++c) {
      double grad = -XHt[i][c];
      for (int s = 0; s < 3; ++s) grad += HHt[c][s] * W(i, s);
      EXPECT_GE(grad, -1e-4 * scale);
      if (W(i, c) > 0) {
        EXPECT_NEAR(grad, 0.0, 1e-4 * scale);
      }
    }
}

TEST(Nmf, BadInput) {
  CsrF X = test::random_counts(20, 10, 0.5, 7, 5);
  const Context ctx = Context::cpu(1);
  const NmfBatch init = nmf_random_init(X, 2, {1});
  X.data[3] = -1.0f;
  EXPECT_THROW(nmf_fit(ctx, X, init, {}), InputError);
  X.data[3] = std::nanf("");
  EXPECT_THROW(nmf_fit(ctx, X, init, {}), InputError);
  X.data[3] = 1.0f;
  NmfOptions kl_cd;
  kl_cd.loss = NmfLoss::kullback_leibler;  // cd supports only frobenius
  EXPECT_THROW(nmf_fit(ctx, X, init, kl_cd), InputError);
  EXPECT_THROW(nmf_random_init(X, 0, {1}), InputError);
  EXPECT_THROW(parse_nmf_solver("als"), InputError);
  EXPECT_EQ(parse_nmf_loss("itakura-saito"), NmfLoss::itakura_saito);
  EXPECT_THROW(parse_nmf_loss("beta-0.5"), InputError);
}

// numpy's own numbers (numpy 1.24: RandomState(14).randint(1, 2**31 - 1, 3) and
// RandomState(59886188).standard_normal(8)): cNMF's seeds and sklearn's random init.
TEST(Nmf, NumpyStreamsAsNumpy) {
  EXPECT_EQ(nmf_replicate_seeds(14, 3), (std::vector<uint64_t>{59886188, 1812018521, 1173234957}));
  NumpyRandomState r(59886188);
  const double want[] = {0.29526446, 0.80487632, -0.3867717, 0.98512177, 0.29888862, -1.54889657, -0.74348389, -1.56134038};
  for (const double w : want) EXPECT_NEAR(r.standard_normal(), w, 1e-8);
  NumpyRandomState big(4294967295u);
  EXPECT_NEAR(big.standard_normal(), 0.64840867, 1e-8);
  EXPECT_NEAR(big.standard_normal(), 0.66932353, 1e-8);
  // init: H drawn first (k x g row-major), |avg * N(0,1)|.
  const CsrF X = test::random_counts(30, 20, 0.3, test::fresh_seed(), 9);
  double tot = 0;
  for (const float v : X.data) tot += v;
  const double avg = std::sqrt(tot / (30.0 * 20.0) / 3);
  const NmfBatch b = nmf_random_init(X, 3, {59886188});
  NumpyRandomState q(59886188);
  for (int c = 0; c < 3; ++c)
    for (int j = 0; j < 20; ++j) ASSERT_EQ(b.h(0, c, j), static_cast<float>(std::fabs(avg * q.standard_normal())));
  for (int i = 0; i < 30; ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(b.w(0, i, c), static_cast<float>(std::fabs(avg * q.standard_normal())));
}

// MT19937 (the block refill, four words at a time, and the tempering) against the C++ standard
// library's std::mt19937, which is seeded the same way (init_genrand) and must give 4123659995 as
// the 10,000th word of seed 5489.
TEST(Nmf, NumpyMt19937AsStdMt19937) {
  for (const uint32_t s : {0u, 1u, 5489u, 59886188u, 4294967295u, static_cast<uint32_t>(test::fresh_seed())}) {
    NumpyRandomState mine(s);
    std::mt19937 ref(s);
    for (int t = 0; t < 5 * 624 + 17; ++t) ASSERT_EQ(mine.next_u32(), ref()) << "seed " << s << " word " << t;
  }
  NumpyRandomState d(5489);
  for (int t = 0; t < 9999; ++t) d.next_u32();
  EXPECT_EQ(d.next_u32(), 4123659995u);
}

// Marsaglia's polar method split in two (polar_pairs, polar_normals) = standard_normal's values in
// order, bit for bit: over several refills, in calls of odd sizes, after next_u32 calls that leave
// the word position off a multiple of four (candidates straddling a refill), and the stream left
// where 2m calls of standard_normal leave it.
TEST(Nmf, NumpyPolarPairsAsStandardNormal) {
  const uint64_t seed = test::fresh_seed();
  for (const int skip : {0, 1, 2, 3, 5, 622}) {
    const uint32_t s = static_cast<uint32_t>(seed + skip);
    NumpyRandomState bulk(s), ref(s);
    for (int t = 0; t < skip; ++t) ASSERT_EQ(bulk.next_u32(), ref.next_u32());
    int64_t drawn = 0;
    for (const int64_t m : {1, 2, 155, 156, 157, 1000, 7, 4096}) {
      std::vector<PolarPair> p(static_cast<size_t>(m));
      bulk.polar_pairs(p.data(), m);
      for (int64_t q = 0; q < m; ++q) {
        double a, b;
        NumpyRandomState::polar_normals(p[q], a, b);
        ASSERT_EQ(a, ref.standard_normal()) << "skip " << skip << " pair " << drawn + q;
        ASSERT_EQ(b, ref.standard_normal()) << "skip " << skip << " pair " << drawn + q;
      }
      drawn += m;
    }
    for (int t = 0; t < 10; ++t) ASSERT_EQ(bulk.standard_normal(), ref.standard_normal()) << skip;
    ASSERT_EQ(bulk.next_u32(), ref.next_u32());
  }
  NumpyRandomState odd(3);
  odd.standard_normal();  // f x1 cached: the pairs would start one normal late
  PolarPair p{};
  EXPECT_THROW(odd.polar_pairs(&p, 1), Error);
}

TEST(Nmf, ReplicateSeedsAndInit) {
  const auto s = nmf_replicate_seeds(14, 1000);
  for (const auto v : s) {
    EXPECT_GE(v, 1u);
    EXPECT_LT(v, (uint64_t(1) << 31) - 1);
  }
  EXPECT_EQ(s, nmf_replicate_seeds(14, 1000));
  EXPECT_NE(s, nmf_replicate_seeds(15, 1000));
  // init: |N(0,1)| * sqrt(mean(X)/k): the mean of |N(0,1)| is sqrt(2/pi).
  const CsrF X = test::random_counts(400, 300, 0.2, 3, 9);
  double tot = 0;
  for (const float v : X.data) tot += v;
  const double avg = std::sqrt(tot / (400.0 * 300.0) / 5);
  const NmfBatch b = nmf_random_init(X, 5, {99});
  double m = 0;
  for (const float v : b.Ht) m += v;
  m /= static_cast<double>(b.Ht.size());
  EXPECT_NEAR(m / avg, std::sqrt(2.0 / M_PI), 0.03);
}

}  // namespace
}  // namespace scurry
