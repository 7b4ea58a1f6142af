#include "pp/combat.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"
#include "pp/linalg.hpp"
#include "pp/obs_groups.hpp"

namespace scurry {
namespace {

constexpr int64_t kBlockValues = int64_t{1} << 20;  // values per row block (fixed partition)
constexpr double kConv = 1e-4;                      // scanpy's _it_sol convergence
constexpr int kMaxIter = 100000;                    // a guard scanpy does not have
// A gene whose residual standard deviation is at most this fraction of its fitted values' scale is
// constant up to rounding (a constant gene, or one the covariates explain exactly) and is treated
// as zero variance, as scanpy treats var_pooled == 0. Its residuals are rounding noise of the fit
// (about 1e-16 of the scale times the design's condition number); standardised, noise / noise gave
// O(1) values that changed with the order of the sums (CPU vs GPU, row order) and, through the
// priors over all genes, moved every gene's gamma* and delta* by up to 0.65 and the corrected
// matrix by ~1%. float32 data varying at all has a residual sd of >= 6e-8 of its values times
// sqrt(share of cells that differ), so only genes where < 3 cells in a million differ by one float
// step are caught.
constexpr double kZeroVarRel = 1e-10;

// Inverse of a small symmetric positive definite p x p matrix, as numpy.linalg.inv in scanpy.
std::vector<double> invert(std::vector<double> a, int64_t p) {
  std::vector<double> inv;
  if (!linalg::invert_gauss_jordan(a, p, inv, 1e-12))
    fail_input("combat", "the design (batches and covariates) is singular: a covariate is constant, repeats another, or is confounded with the batches");
  return inv;
}

}  // namespace

namespace detail {

// From pass 1's D^T Y (p x g) and D^T D (p x p), acc = [D^T Y, D^T D]: B_hat = (D^T D)^-1 D^T Y and
// the grand mean per gene (the batch rows of B weighted by the batch shares); scale per gene: the
// size of the fitted values' terms, max_b |B[b]| + sum_c |B[nb + c]| rms(cov_c) (the rounding
// noise of the residuals is proportional to it).
void combat_fit(const std::vector<double>& acc, const std::vector<double>& nbatch, int64_t n, int64_t g, int64_t p,
                std::vector<double>& B, std::vector<double>& grand, std::vector<double>& scale) {
  const int64_t nb = static_cast<int64_t>(nbatch.size());
  const size_t G = static_cast<size_t>(g);
  const std::vector<double> DtDinv = invert(std::vector<double>(acc.begin() + p * g, acc.begin() + p * g + p * p), p);
  B.assign(static_cast<size_t>(p * g), 0.0);
  linalg::dgemm(false, false, p, g, p, 1.0, DtDinv.data(), p, acc.data(), g, 0.0, B.data(), g);
  grand.assign(G, 0.0);
  for (int64_t b = 0; b < nb; ++b)
    for (size_t j = 0; j < G; ++j) grand[j] += nbatch[b] / static_cast<double>(n) * B[b * G + j];
  scale.assign(G, 0.0);
  for (int64_t b = 0; b < nb; ++b)
    for (size_t j = 0; j < G; ++j) scale[j] = std::max(scale[j], std::fabs(B[b * G + j]));
  const double* DtD = acc.data() + p * g;
  for (int64_t c = nb; c < p; ++c) {
    const double rms = std::sqrt(DtD[c * p + c] / static_cast<double>(n));
    for (size_t j = 0; j < G; ++j) scale[j] += std::fabs(B[c * G + j]) * rms;
  }
}

// From pass 2's per-batch residual sums rs ([2 b G + j]: sum, [(2 b + 1) G + j]: sum of squares):
// the pooled variance, the standardised data's per-batch moments, the priors and the
// empirical-Bayes iteration: gamma*, delta*, var_pooled, iterations.
CombatResult combat_eb(const std::vector<double>& rs, const std::vector<double>& B, const std::vector<double>& grand,
                       const std::vector<double>& scale, const std::vector<double>& nbatch, int64_t n, int64_t g) {
  const int64_t nb = static_cast<int64_t>(nbatch.size());
  const size_t G = static_cast<size_t>(g);
  CombatResult res;
  res.var_pooled.assign(G, 0.0);
  for (int32_t b = 0; b < nb; ++b)
    for (size_t j = 0; j < G; ++j) res.var_pooled[j] += rs[(2 * b + 1) * G + j];
  int64_t zero_var = 0;
  for (size_t j = 0; j < G; ++j) {
    double& v = res.var_pooled[j];
    v /= static_cast<double>(n);
    if (v <= kZeroVarRel * kZeroVarRel * scale[j] * scale[j]) v = 0;  // constant up to rounding
    zero_var += v == 0;
  }
  if (zero_var) log::info(detail::concat("combat: found ", zero_var, " genes with zero variance"));
  // Standardised data s = (Y - stand_mean) / sqrt(var_pooled) = (r + B[b] - grand) / sigma, so per
  // batch: sum s and sum s^2 from the residual sums.
  std::vector<double> S1(static_cast<size_t>(nb) * G), S2(static_cast<size_t>(nb) * G);
  for (int32_t b = 0; b < nb; ++b)
    for (size_t j = 0; j < G; ++j) {
      const double vp = res.var_pooled[j];
      if (vp == 0) {
        S1[b * G + j] = S2[b * G + j] = 0;
        continue;
      }
      const double sh = B[b * G + j] - grand[j], r1 = rs[2 * b * G + j], r2 = rs[(2 * b + 1) * G + j];
      S1[b * G + j] = (r1 + nbatch[b] * sh) / std::sqrt(vp);
      S2[b * G + j] = (r2 + 2 * sh * r1 + nbatch[b] * sh * sh) / vp;
    }
  // gamma_hat: per-batch means of s; delta_hat: per-batch variances (ddof 1).
  std::vector<double> gamma_hat(S1.size()), delta_hat(S1.size());
  for (int32_t b = 0; b < nb; ++b)
    for (size_t j = 0; j < G; ++j) {
      const double nbb = nbatch[b], m = S1[b * G + j] / nbb;
      gamma_hat[b * G + j] = m;
      delta_hat[b * G + j] = std::max(0.0, S2[b * G + j] - nbb * m * m) / (nbb - 1);
    }
  res.gamma_star.resize(S1.size());
  res.delta_star.resize(S1.size());
  res.iterations.assign(static_cast<size_t>(nb), 0);
  for (int32_t b = 0; b < nb; ++b) {
    const double* gh = gamma_hat.data() + b * G;
    const double* dh = delta_hat.data() + b * G;
    // Priors: gamma ~ N(gamma_bar, t2) (numpy var, ddof 0), delta ~ InvGamma(a, b) by the method of
    // moments on delta_hat (pandas var, ddof 1).
    double gbar = 0, dm = 0;
    for (size_t j = 0; j < G; ++j) {
      gbar += gh[j];
      dm += dh[j];
    }
    gbar /= static_cast<double>(G);
    dm /= static_cast<double>(G);
    double t2 = 0, ds2 = 0;
    for (size_t j = 0; j < G; ++j) {
      t2 += (gh[j] - gbar) * (gh[j] - gbar);
      ds2 += (dh[j] - dm) * (dh[j] - dm);
    }
    t2 /= static_cast<double>(G);
    ds2 /= static_cast<double>(G) - 1;
    const double a_prior = (2 * ds2 + dm * dm) / ds2, b_prior = (dm * ds2 + dm * dm * dm) / ds2;
    const double nn = nbatch[b];
    std::vector<double> g_old(gh, gh + G), d_old(dh, dh + G), g_new(G), d_new(G);
    double change = 1;
    int it = 0;
    while (change > kConv && it < kMaxIter) {
      double cg = -INFINITY, cd = -INFINITY;
      for (size_t j = 0; j < G; ++j) {
        g_new[j] = (t2 * nn * gh[j] + d_old[j] * gbar) / (t2 * nn + d_old[j]);
        const double sum2 = S2[b * G + j] - 2 * g_new[j] * S1[b * G + j] + nn * g_new[j] * g_new[j];
        d_new[j] = (0.5 * sum2 + b_prior) / (nn / 2.0 + a_prior - 1.0);
        // scanpy: max over genes of |new - old| / old (old not made absolute).
        cg = std::max(cg, std::fabs(g_new[j] - g_old[j]) / g_old[j]);
        cd = std::max(cd, std::fabs(d_new[j] - d_old[j]) / d_old[j]);
      }
      change = std::max(cg, cd);
      g_old.swap(g_new);
      d_old.swap(d_new);
      ++it;
    }
    std::copy(g_old.begin(), g_old.end(), res.gamma_star.begin() + b * G);
    std::copy(d_old.begin(), d_old.end(), res.delta_star.begin() + b * G);
    res.iterations[b] = it;
  }
  return res;
}

}  // namespace detail

CombatResult combat_dense(const Context& ctx, DenseF& Y, const std::vector<int32_t>& codes, int32_t nb,
                          const DenseD& cov) {
  const int64_t n = Y.n_rows, g = Y.n_cols, nc = cov.n_cols, p = nb + nc;
  if (static_cast<int64_t>(codes.size()) != n || (nc > 0 && cov.n_rows != n))
    fail("combat: codes/covariates do not match the matrix rows");
  std::vector<double> nbatch(static_cast<size_t>(nb), 0.0);
  for (int32_t c : codes) nbatch[c] += 1.0;
  for (int32_t b = 0; b < nb; ++b)
    if (nbatch[b] < 2) fail_input("combat", "batch ", b, " has fewer than 2 cells; ComBat needs at least 2 cells per batch");
  const RowBlocks rb = RowBlocks::uniform(n, std::max<int64_t>(1, kBlockValues / std::max<int64_t>(1, g)));
  const size_t G = static_cast<size_t>(g);
  // Design row i: [one-hot(codes[i]), cov(i, :)].
  auto design_row = [&](int64_t i, double* out) {
    std::fill(out, out + nb, 0.0);
    out[codes[i]] = 1.0;
    for (int64_t c = 0; c < nc; ++c) out[nb + c] = cov(i, c);
  };
  linalg::SingleThreadedBlas single;
  // Pass 1: D^T Y (p x g) and D^T D (p x p).
  std::vector<double> acc;
  reduce_blocks(ctx.threads(), rb.n_blocks(), static_cast<size_t>(p * g + p * p), acc, [&](int64_t b, double* part) {
    const int64_t r0 = rb.begin(b), m = rb.end(b) - r0;
    std::vector<double> Db(static_cast<size_t>(m * p)), yb(Y.data.begin() + r0 * g, Y.data.begin() + (r0 + m) * g);
    for (int64_t i = 0; i < m; ++i) design_row(r0 + i, Db.data() + i * p);
    linalg::dgemm(true, false, p, g, m, 1.0, Db.data(), p, yb.data(), g, 0.0, part, g);
    linalg::dgemm(true, false, p, p, m, 1.0, Db.data(), p, Db.data(), p, 0.0, part + p * g, p);
  });
  std::vector<double> B, grand, scale;
  detail::combat_fit(acc, nbatch, n, g, p, B, grand, scale);
  // Fitted values: the batch part B[code] plus the covariate part cov(i,:) B[nb:], per block.
  auto fit_block = [&](int64_t r0, int64_t m, std::vector<double>& covfit) {
    covfit.assign(static_cast<size_t>(m * g), 0.0);
    if (nc > 0) linalg::dgemm(false, false, m, g, nc, 1.0, cov.row(r0), nc, B.data() + nb * G, g, 0.0, covfit.data(), g);
  };
  // Pass 2: per batch and gene, sum and sum of squares of the residuals r = Y - D B.
  std::vector<double> rs;
  reduce_blocks(ctx.threads(), rb.n_blocks(), 2 * static_cast<size_t>(nb) * G, rs, [&](int64_t b, double* part) {
    const int64_t r0 = rb.begin(b), m = rb.end(b) - r0;
    std::vector<double> cf;
    fit_block(r0, m, cf);
    for (int64_t i = 0; i < m; ++i) {
      const int32_t c = codes[r0 + i];
      const float* y = Y.row(r0 + i);
      const double* bb = B.data() + c * G;
      double* s1 = part + 2 * c * G;
      double* s2 = s1 + G;
      for (size_t j = 0; j < G; ++j) {
        const double r = static_cast<double>(y[j]) - bb[j] - cf[i * G + j];
        s1[j] += r;
        s2[j] += r * r;
      }
    }
  });
  CombatResult res = detail::combat_eb(rs, B, grand, scale, nbatch, n, g);
  // Pass 3: adjusted = (s - gamma*[b]) / sqrt(delta*[b]) * sqrt(var_pooled) + stand_mean.
  std::vector<double> sig(G), mult(static_cast<size_t>(nb) * G);
  for (size_t j = 0; j < G; ++j) sig[j] = std::sqrt(res.var_pooled[j]);
  for (int32_t b = 0; b < nb; ++b)
    for (size_t j = 0; j < G; ++j) mult[b * G + j] = sig[j] / std::sqrt(res.delta_star[b * G + j]);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t blk) {
    const int64_t r0 = rb.begin(blk), m = rb.end(blk) - r0;
    std::vector<double> cf;
    fit_block(r0, m, cf);
    for (int64_t i = 0; i < m; ++i) {
      const int32_t c = codes[r0 + i];
      float* y = Y.row(r0 + i);
      for (size_t j = 0; j < G; ++j) {
        const double stand = grand[j] + cf[i * G + j];
        const double s = res.var_pooled[j] == 0 ? 0.0 : (static_cast<double>(y[j]) - stand) / sig[j];
        y[j] = static_cast<float>((s - res.gamma_star[c * G + j]) * mult[c * G + j] + stand);
      }
    }
  });
  return res;
}

CombatResult combat(const Context& ctx, Dataset& d, const CombatOptions& opt) {
  const char* where = "combat";
  if (d.X.empty()) fail_input(where, "X is empty");
  const ObsGroups gr = obs_groups(d.obs, opt.key, where);
  std::set<std::string> seen;
  for (const auto& c : opt.covariates) {
    if (!d.obs.has(c)) fail_input(where, "could not find the covariate '", c, "' in obs (obs columns: ", list_columns(d.obs), ")");
    if (c == opt.key) fail_input(where, "the batch key '", c, "' is also a covariate; batch key and covariates cannot overlap");
    if (!seen.insert(c).second) fail_input(where, "covariate '", c, "' is given twice; covariates must be unique");
  }
  for (int32_t b = 0; b < gr.n(); ++b)
    if (gr.sizes[b] < 2)
      fail_input(where, "batch '", gr.names[b], "' of obs['", opt.key, "'] has fewer than 2 cells; ComBat needs at least 2 cells per batch (filter it out first)");
  const int64_t n = d.n_obs();
  std::vector<std::vector<double>> cols;
  for (const auto& c : opt.covariates) {
    const Column& col = d.obs.at(c);
    if (auto* p = std::get_if<NumericColumn>(&col.c)) {
      cols.push_back(p->values);
    } else if (auto* bc = std::get_if<BoolColumn>(&col.c)) {
      cols.emplace_back(bc->values.begin(), bc->values.end());
    } else {
      const ObsGroups cg = obs_groups(d.obs, c, where);
      for (int32_t l = 1; l < cg.n(); ++l) {
        std::vector<double> ind(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) ind[i] = cg.codes[i] == l;
        cols.push_back(std::move(ind));
      }
    }
    for (double v : cols.back())
      if (!std::isfinite(v)) fail_input(where, "covariate '", c, "' has missing or infinite values");
  }
  DenseD cov(n, static_cast<int64_t>(cols.size()));
  for (size_t c = 0; c < cols.size(); ++c)
    for (int64_t i = 0; i < n; ++i) cov(i, static_cast<int64_t>(c)) = cols[c][i];
  DenseF Y = to_dense_f(d.X);
  CombatResult res = ctx.backend() == Backend::cuda ? combat_dense_gpu(ctx, Y, gr.codes, gr.n(), cov)
                                                     : combat_dense(ctx, Y, gr.codes, gr.n(), cov);
  res.batches = gr.names;
  d.X = Matrix(std::move(Y), DType::f32);
  return res;
}

}  // namespace scurry
