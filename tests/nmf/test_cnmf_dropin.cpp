// The cNMF drop-in's pieces against oracles: exact NNLS (every support enumerated, KKT checked),
// starCAT's gene overlap and scaling (a dense re-implementation), NNDSVD (from an exact dense SVD),
// average-linkage leaves (a naive UPGMA on a planted tree), axis ticks (distinct labels), the flat
// yaml reader, the clustergram and k-selection PNGs (ink where the panels are).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "nmf/cnmf_files.hpp"
#include "nmf/cnmf_steps.hpp"
#include "nmf/nmf.hpp"
#include "nmf/plot_png.hpp"
#include "nmf/starcat.hpp"
#include "pp/linalg.hpp"
#include "testlib.hpp"

namespace scurry {
namespace {

// Oracle: min_w ||x - w H||^2, w >= 0 by enumerating every support S (2^k), solving the normal
// equations on S, keeping feasible solutions, and taking the smallest objective.
std::vector<double> nnls_bruteforce(const DenseD& H, const std::vector<double>& x) {
  const int k = static_cast<int>(H.n_rows);
  const int64_t g = H.n_cols;
  std::vector<double> best(k, 0.0);
  double best_obj = 0;
  for (const double v : x) best_obj += v * v;
  for (int mask = 1; mask < (1 << k); ++mask) {
    std::vector<int> S;
    for (int a = 0; a < k; ++a)
      if (mask & (1 << a)) S.push_back(a);
    const int m = static_cast<int>(S.size());
    DenseD A(m, m + 1);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t q = 0; q < g; ++q) s += H(S[i], q) * H(S[j], q);
        A(i, j) = s;
      }
      double s = 0;
      for (int64_t q = 0; q < g; ++q) s += H(S[i], q) * x[q];
      A(i, m) = s;
    }
    bool ok = true;  // Gaussian elimination with partial pivoting
    for (int c = 0; c < m && ok; ++c) {
      int p = c;
      for (int r = c + 1; r < m; ++r)
        if (std::fabs(A(r, c)) > std::fabs(A(p, c))) p = r;
      if (std::fabs(A(p, c)) < 1e-12) ok = false;
      for (int j = 0; j <= m && ok; ++j) std::swap(A(c, j), A(p, j));
      for (int r = 0; r < m && ok; ++r)
        if (r != c) {
          const double f = A(r, c) / A(c, c);
          for (int j = c; j <= m; ++j) A(r, j) -= f * A(c, j);
        }
    }
    if (!ok) continue;
    std::vector<double> w(k, 0.0);
    for (int i = 0; i < m; ++i) w[S[i]] = A(i, m) / A(i, i);
    if (std::any_of(w.begin(), w.end(), [](double v) { return v < 0; })) continue;
    double obj = 0;
    for (int64_t q = 0; q < g; ++q) {
      double r = x[q];
      for (int a = 0; a < k; ++a) r -= w[a] * H(a, q);
      obj += r * r;
    }
    if (obj < best_obj) best_obj = obj, best = w;
  }
  return best;
}

TEST(CnmfDropin, NnlsIsExact) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const int k = 6;
  const int64_t g = 40, n = 60;
  DenseD H(k, g);
  for (auto& v : H.data) v = u(rng) < 0.5 ? 0.0 : u(rng);
  CsrF X;
  X.n_rows = n, X.n_cols = g;
  X.indptr.assign(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < g; ++j)
      if (u(rng) < 0.4) X.indices.push_back(static_cast<int32_t>(j)), X.data.push_back(static_cast<float>(u(rng) * 10));
    X.indptr[i + 1] = static_cast<int64_t>(X.indices.size());
  }
  const Context c1 = Context::cpu(1), c3 = Context::cpu(3);
  const DenseF W = nnls_fixed_spectra(c3, X, H, 7);
  const DenseF W1 = nnls_fixed_spectra(c1, X, H, 7);
  EXPECT_EQ(W.data, W1.data);  // any thread count, the same bits
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> x(g, 0.0);
    for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) x[X.indices[p]] = X.data[p];
    const std::vector<double> want = nnls_bruteforce(H, x);
    double scale = 1e-9;
    for (const double v : want) scale = std::max(scale, std::fabs(v));
    for (int a = 0; a < k; ++a) ASSERT_NEAR(W(i, a), want[a], 2e-5 * scale + 1e-6) << "cell " << i << " program " << a;
  }
}

TEST(CnmfDropin, StarcatSharedGenesSortedAndScaled) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const int k = 3;
  const std::vector<std::string> ref_genes = {"g5", "g1", "gX", "g3", "g9", "gN"};
  DenseD ref(k, 6);
  for (auto& v : ref.data) v = u(rng);
  ref(1, 5) = std::nan("");  // gN: NaN in one program -> dropped
  const std::vector<std::string> q_genes = {"g1", "g2", "g3", "g5", "g9", "gN"};
  const CsrF Q = test::random_counts(50, 6, 0.6, seed + 1, 7);
  const Context ctx = Context::cpu(2);
  StarcatOptions opt;
  const StarcatResult r = starcat_fit(ctx, Q, q_genes, ref, ref_genes, opt, "query");
  ASSERT_EQ(r.genes, (std::vector<std::string>{"g1", "g3", "g5", "g9"}));
  // Oracle: dense, the same genes, population std scaling (0 -> 1), float32 reference, brute-force NNLS.
  const int qcol[] = {0, 2, 3, 4}, rcol[] = {1, 3, 0, 4};
  std::vector<double> sd(4);
  for (int q = 0; q < 4; ++q) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < 50; ++i) {
      double v = 0;
      for (int64_t p = Q.indptr[i]; p < Q.indptr[i + 1]; ++p)
        if (Q.indices[p] == qcol[q]) v = Q.data[p];
      s += v, s2 += v * v;
    }
    const double m = s / 50;
    sd[q] = std::sqrt(std::max(0.0, s2 / 50 - m * m));
    if (sd[q] == 0) sd[q] = 1;
  }
  DenseD H(k, 4);
  for (int a = 0; a < k; ++a)
    for (int q = 0; q < 4; ++q) H(a, q) = static_cast<float>(ref(a, rcol[q]));
  for (int64_t i = 0; i < 50; ++i) {
    std::vector<double> x(4, 0.0);
    for (int64_t p = Q.indptr[i]; p < Q.indptr[i + 1]; ++p)
      for (int q = 0; q < 4; ++q)
        if (Q.indices[p] == qcol[q]) x[q] = static_cast<float>(Q.data[p] / sd[q]);
    const auto want = nnls_bruteforce(H, x);
    for (int a = 0; a < k; ++a) ASSERT_NEAR(r.usages(i, a), want[a], 1e-4 * (1 + std::fabs(want[a]))) << i;
  }
  // starCAT's own solver (mu, tol 1e-4) stops near the exact minimum: its objective is no lower than
  // the exact one (up to rounding) and within 2% of it.
  opt.exact = false;
  const StarcatResult m = starcat_fit(ctx, Q, q_genes, ref, ref_genes, opt, "query");
  double obj_exact = 0, obj_mu = 0;
  for (int64_t i = 0; i < 50; ++i) {
    std::vector<double> x(4, 0.0);
    for (int64_t p = Q.indptr[i]; p < Q.indptr[i + 1]; ++p)
      for (int q = 0; q < 4; ++q)
        if (Q.indices[p] == qcol[q]) x[q] = static_cast<float>(Q.data[p] / sd[q]);
    for (int q = 0; q < 4; ++q) {
      double re = x[q], rm = x[q];
      for (int a = 0; a < k; ++a) re -= r.usages(i, a) * H(a, q), rm -= m.usages(i, a) * H(a, q);
      obj_exact += re * re, obj_mu += rm * rm;
    }
  }
  EXPECT_GE(obj_mu, obj_exact * (1 - 1e-5));
  EXPECT_LE(obj_mu, obj_exact * 1.02 + 1e-9);
  EXPECT_THROW(starcat_fit(ctx, Q, {"a", "b", "c", "d", "e", "f"}, ref, ref_genes, opt, "query"), InputError);
}

TEST(CnmfDropin, NndsvdMatchesExactSvdConstruction) {
  const uint64_t seed = test::fresh_seed();
  // A planted rank-4 non-negative matrix plus noise: a clear gap after the 4th singular value.
  const int k = 4;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DenseD Wt(80, k), Ht(k, 30);
  for (auto& v : Wt.data) v = u(rng) < 0.3 ? 0 : u(rng);
  for (auto& v : Ht.data) v = u(rng) < 0.3 ? 0 : 3 * u(rng);
  CsrF X;
  X.n_rows = 80, X.n_cols = 30;
  X.indptr.assign(81, 0);
  for (int64_t i = 0; i < 80; ++i) {
    for (int64_t j = 0; j < 30; ++j) {
      double v = 0.01 * u(rng);
      for (int a = 0; a < k; ++a) v += Wt(i, a) * Ht(a, j);
      X.indices.push_back(static_cast<int32_t>(j)), X.data.push_back(static_cast<float>(v));
    }
    X.indptr[i + 1] = static_cast<int64_t>(X.indices.size());
  }
  const Context ctx = Context::cpu(2);
  const NmfBatch b = nmf_nndsvd_init(ctx, X, k, {seed, seed + 1});
  ASSERT_EQ(b.R, 2);
  // Oracle: the same construction from LAPACK's exact SVD of the dense X.
  DenseD D(80, 30);
  for (int64_t i = 0; i < 80; ++i)
    for (int64_t p = X.indptr[i]; p < X.indptr[i + 1]; ++p) D(i, X.indices[p]) = X.data[p];
  const linalg::Svd sv = linalg::svd_thin(D);
  for (int c = 0; c < k; ++c) {
    std::vector<double> x(80), y(30);
    for (int i = 0; i < 80; ++i) x[i] = sv.u(i, c);
    for (int j = 0; j < 30; ++j) y[j] = sv.vt(c, j);
    std::vector<double> w(80), h(30);
    if (c == 0) {
      for (int i = 0; i < 80; ++i) w[i] = std::sqrt(sv.s[0]) * std::fabs(x[i]);
      for (int j = 0; j < 30; ++j) h[j] = std::sqrt(sv.s[0]) * std::fabs(y[j]);
    } else {
      double xp = 0, xn = 0, yp = 0, yn = 0;
      for (const double v : x) (v > 0 ? xp : xn) += v * v;
      for (const double v : y) (v > 0 ? yp : yn) += v * v;
      xp = std::sqrt(xp), xn = std::sqrt(xn), yp = std::sqrt(yp), yn = std::sqrt(yn);
      const bool pos = xp * yp > xn * yn;
      const double sig = pos ? xp * yp : xn * yn, l = std::sqrt(sv.s[c] * sig);
      for (int i = 0; i < 80; ++i) w[i] = l * (pos ? std::max(x[i], 0.0) : std::max(-x[i], 0.0)) / (pos ? xp : xn);
      for (int j = 0; j < 30; ++j) h[j] = l * (pos ? std::max(y[j], 0.0) : std::max(-y[j], 0.0)) / (pos ? yp : yn);
    }
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 80; ++i) ASSERT_NEAR(b.w(r, i, c), w[i] < 1e-6 ? 0 : w[i], 2e-3 * (1 + w[i])) << c << " " << i;
      for (int j = 0; j < 30; ++j) ASSERT_NEAR(b.h(r, c, j), h[j] < 1e-6 ? 0 : h[j], 2e-3 * (1 + h[j])) << c << " " << j;
    }
  }
}

TEST(CnmfDropin, AverageLinkageLeavesKeepPlantedGroups) {
  // Two tight groups {0, 3, 5} and {1, 2, 4}, far apart: the leaves list each group contiguously.
  const int groups[] = {0, 1, 1, 0, 1, 0};
  DenseD D(6, 6);
  std::mt19937_64 rng(test::fresh_seed());
  std::uniform_real_distribution<double> u(0, 0.1);
  for (int i = 0; i < 6; ++i)
    for (int j = i + 1; j < 6; ++j) D(i, j) = D(j, i) = (groups[i] == groups[j] ? 0.1 : 5.0) + u(rng);
  const auto leaves = average_linkage_leaves(D);
  ASSERT_EQ(leaves.size(), 6u);
  std::vector<int64_t> sorted(leaves);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(sorted[i], i);
  for (int q = 0; q < 3; ++q) EXPECT_EQ(groups[leaves[q]], groups[leaves[0]]);
  for (int q = 3; q < 6; ++q) EXPECT_NE(groups[leaves[q]], groups[leaves[0]]);
}

TEST(CnmfDropin, TickLabelsAreDistinct) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-8, 8);
  for (int t = 0; t < 200; ++t) {
    const double c = std::pow(10.0, u(rng)) * (rng() % 2 ? 1 : -1);
    const double w = std::fabs(c) * std::pow(10.0, u(rng) / 3 - 3);  // ranges down to ~1e-6 relative
    const NiceTicks nt = nice_ticks(c, c + w, 5);
    ASSERT_GE(nt.values.size(), 2u);
    EXPECT_LE(nt.lo, c);
    EXPECT_GE(nt.hi, c + w);
    for (size_t q = 1; q < nt.labels.size(); ++q) ASSERT_NE(nt.labels[q], nt.labels[q - 1]) << c << " " << w;
    for (const auto& l : nt.labels) ASSERT_LE(l.size(), 16u) << l;
  }
  // The k-selection error axis of the bundled data (4.6e5, spread 3e3): labels differ.
  const NiceTicks e = nice_ticks(460331.46, 463525.94, 5);
  for (size_t q = 1; q < e.labels.size(); ++q) EXPECT_NE(e.labels[q], e.labels[q - 1]);
  EXPECT_EQ(e.exponent, 5);
}

TEST(CnmfDropin, KSelectionStatsOfCnmfAndOfOlderScurry) {
  const CnmfKSelectionStats a = read_k_selection_stats(test::test_data("golden/cnmf_pbmc3k/pbmc3k/pbmc3k.k_selection_stats.df.npz"));
  EXPECT_EQ(a.k, (std::vector<int>{4, 5}));
  EXPECT_NEAR(a.stability[1], 0.8157760936669869, 1e-15);
  EXPECT_NEAR(a.prediction_error[0], 463525.93624538503, 1e-8);
  test::TempDir t;
  write_tsv_table(t.path("s.df.txt"), {"0"}, {"k", "local_density_threshold", "stability", "prediction_error"},
                  DenseD(1, 4, 3.0));
  const CnmfKSelectionStats b = read_k_selection_stats(t.path("s.df.txt"));
  EXPECT_EQ(b.k, (std::vector<int>{3}));
  write_tsv_table(t.path("bad.txt"), {"0"}, {"k", "error"}, DenseD(1, 2, 3.0));
  EXPECT_THROW(read_k_selection_stats(t.path("bad.txt")), InputError);
}

TEST(CnmfDropin, FlatYamlAsCnmfWritesIt) {
  test::TempDir t;
  write_flat_yaml(t.path("p.yaml"), {{"tol", "0.0001"}, {"beta_loss", "frobenius"}, {"alpha_H", "0.0"}});
  std::ifstream in(t.path("p.yaml"));
  std::string all((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(all, "alpha_H: 0.0\nbeta_loss: frobenius\ntol: 0.0001\n");  // yaml.dump: sorted keys
  {
    std::ofstream(t.path("q.yaml")) << "# made by hand\n---\nbeta_loss: 'kullback-leibler'\nmax_iter: 200  # fewer\n\ninit: random\n";
  }
  const auto kv = read_flat_yaml(t.path("q.yaml"));
  ASSERT_EQ(kv.size(), 3u);
  EXPECT_EQ(kv[0], (std::pair<std::string, std::string>{"beta_loss", "kullback-leibler"}));
  EXPECT_EQ(kv[1], (std::pair<std::string, std::string>{"max_iter", "200"}));
  {
    std::ofstream(t.path("n.yaml")) << "solver: cd\nnested:\n  a: 1\n";
  }
  try {
    read_flat_yaml(t.path("n.yaml"));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("n.yaml"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

// sklearn's mu with beta_loss = 0 (Itakura-Saito), written out densely in float64 (the oracle).
TEST(CnmfDropin, ItakuraSaitoMatchesDenseSklearnRule) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 5);
  const int64_t n = 20, g = 15;
  const int k = 3;
  CsrF X;
  X.n_rows = n, X.n_cols = g;
  X.indptr.assign(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < g; ++j) X.indices.push_back(static_cast<int32_t>(j)), X.data.push_back(static_cast<float>(u(rng)));
    X.indptr[i + 1] = static_cast<int64_t>(X.indices.size());
  }
  const NmfBatch init = nmf_random_init(X, k, {seed});
  NmfOptions o;
  o.solver = NmfSolver::mu;
  o.loss = NmfLoss::itakura_saito;
  o.tol = 0;
  o.max_iter = 6;
  const Context ctx = Context::cpu(2);
  const NmfResult r = nmf_fit(ctx, X, init, o);
  std::vector<double> W(n * k), H(k * g);
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < k; ++c) W[i * k + c] = init.w(0, i, c);
  for (int c = 0; c < k; ++c)
    for (int64_t j = 0; j < g; ++j) H[c * g + j] = init.h(0, c, j);
  const double eps = 1.1920928955078125e-07;
  auto x = [&](int64_t i, int64_t j) { return static_cast<double>(X.data[i * g + j]); };
  for (int it = 0; it < 6; ++it) {
    std::vector<double> WH(n * g);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < g; ++j) {
        double s = 0;
        for (int c = 0; c < k; ++c) s += W[i * k + c] * H[c * g + j];
        WH[i * g + j] = std::max(s, eps);
      }
    for (int64_t i = 0; i < n; ++i)
      for (int c = 0; c < k; ++c) {
        double num = 0, den = 0;
        for (int64_t j = 0; j < g; ++j) num += x(i, j) / (WH[i * g + j] * WH[i * g + j]) * H[c * g + j], den += H[c * g + j] / WH[i * g + j];
        W[i * k + c] *= std::sqrt(num / den);
      }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < g; ++j) {
        double s = 0;
        for (int c = 0; c < k; ++c) s += W[i * k + c] * H[c * g + j];
        WH[i * g + j] = std::max(s, eps);
      }
    for (int c = 0; c < k; ++c)
      for (int64_t j = 0; j < g; ++j) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; ++i) num += x(i, j) / (WH[i * g + j] * WH[i * g + j]) * W[i * k + c], den += W[i * k + c] / WH[i * g + j];
        H[c * g + j] *= std::sqrt(num / den);
      }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < k; ++c) ASSERT_NEAR(r.f.w(0, i, c), W[i * k + c], 1e-4 * (1 + W[i * k + c]));
  for (int c = 0; c < k; ++c)
    for (int64_t j = 0; j < g; ++j) ASSERT_NEAR(r.f.h(0, c, j), H[c * g + j], 1e-4 * (1 + H[c * g + j]));
  // The divergence: sum(x / wh - log(x / wh) - 1), reported as sqrt(2 d).
  double d = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < g; ++j) {
      double s = 0;
      for (int c = 0; c < k; ++c) s += W[i * k + c] * H[c * g + j];
      const double q = x(i, j) / s;
      d += q - std::log(q) - 1;
    }
  EXPECT_NEAR(r.error[0], std::sqrt(2 * d), 1e-3 * std::sqrt(2 * d));
  // Zeros: sklearn's refusal.
  const CsrF Z = test::random_counts(20, 15, 0.5, seed, 5);
  EXPECT_THROW(nmf_fit(ctx, Z, nmf_random_init(Z, k, {seed}), o), InputError);
}

int ink(const Canvas& c, int x0, int y0, int x1, int y1) {
  int n = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      const uint8_t* p = c.rgb.data() + (static_cast<size_t>(y) * c.width + x) * 3;
      n += !(p[0] == 255 && p[1] == 255 && p[2] == 255);
    }
  return n;
}

TEST(CnmfDropin, FiguresHaveTheirPanels) {
  const Canvas k = k_selection_canvas({2, 4, 6, 8}, {0.9, 0.8, 0.85, 0.6}, {5e5, 4.6e5, 4.5e5, 4.4e5});
  EXPECT_GT(ink(k, 0, 0, k.width, 40), 200);                     // title
  EXPECT_GT(ink(k, 0, 60, 60, 530), 100);                         // left axis title
  EXPECT_GT(ink(k, k.width - 60, 60, k.width, 530), 100);         // right axis title
  EXPECT_GT(ink(k, 130, 560, 830, 640), 200);                     // x axis title
  // Clustergram: 3 clusters of 4 spectra each.
  std::mt19937_64 rng(test::fresh_seed());
  std::uniform_real_distribution<double> u(0, 1);
  DenseD l2(12, 5);
  std::vector<int> labels(12);
  for (int i = 0; i < 12; ++i) {
    labels[i] = i % 3;
    double s = 0;
    for (int j = 0; j < 5; ++j) s += std::pow(l2(i, j) = (j == labels[i] ? 3 : 0) + u(rng), 2);
    for (int j = 0; j < 5; ++j) l2(i, j) /= std::sqrt(s);
  }
  const Canvas c = cnmf_clustergram_canvas(l2, labels, std::vector<double>(12, 0.1), 0.5);
  EXPECT_EQ(ink(c, 75, 75, 800, 800), 725 * 725);  // the heatmap fills its square
  EXPECT_GT(ink(c, 900, 60, 1300, 400), 1000);      // histogram and its labels
}

}  // namespace
}  // namespace scurry
