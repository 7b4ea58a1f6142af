// highly_variable_genes: scanpy 1.9.6's flags and statistics on pbmc3k (seurat, cell_ranger
// identical flags; seurat_v3 Jaccard >= 0.99), pearson_residuals against a dense float64 oracle,
// batch_key against per-batch runs combined here, 1 vs 2 threads bit-identical, Dataset columns,
// bad input.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "io/h5ad.hpp"
#include "pp/hvg.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

// ---- golden data -----------------------------------------------------------------------------

struct Golden {
  CsrF logX;    // raw/X: log1p(normalize_total) of 1000 x 11780
  Table var;    // raw/var
  CsrF counts;  // the shared counts restricted to the 11780 genes, in raw/var order
};

const Golden& golden() {
  static Golden g = [] {
    Golden out;
    Dataset gd = read_h5ad(test::test_data("golden/pbmc3k_first1000.scanpy.h5ad"));
    if (!gd.raw) throw Error("golden file has no raw");
    out.logX = to_csr_f(gd.raw->X);
    out.var = gd.raw->var;
    H5adReadOptions ro;
    ro.read_raw = false;
    Dataset cd = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"), ro);
    std::map<std::string, int64_t> pos;
    for (int64_t i = 0; i < cd.n_vars(); ++i) pos[cd.var.index[i]] = i;
    std::vector<int64_t> cols;
    for (const auto& name : out.var.index) {
      auto it = pos.find(name);
      if (it == pos.end()) throw Error("gene " + name + " of the golden raw/var is not in the counts");
      cols.push_back(it->second);
    }
    out.counts = to_csr_f(take_cols(cd.X, cols));
    return out;
  }();
  return g;
}

std::vector<uint8_t> golden_bool(const std::string& col) { return golden().var.boolean(col); }
const std::vector<double>& golden_num(const std::string& col) { return golden().var.numeric(col); }

void expect_close_where_finite(const std::vector<double>& got, const std::vector<double>& want, double rel,
                               const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0, nan_mismatch = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(want[i])) {
      const double e = std::fabs(got[i] - want[i]) / std::max(1e-300, std::fabs(want[i]));
      if (!(e <= rel) && !(std::fabs(got[i] - want[i]) <= 1e-12)) ++bad;
      if (std::isfinite(e)) worst = std::max(worst, e);
    } else if (std::isfinite(got[i])) {
      ++nan_mismatch;
    }
  }
  std::printf("%s: max relative error %.3g\n", what.c_str(), worst);
  EXPECT_EQ(bad, 0) << what << ": values off by more than " << rel << " relative";
  EXPECT_EQ(nan_mismatch, 0) << what << ": finite where scanpy has NaN/inf";
}

int64_t count_true(const std::vector<uint8_t>& v) { return std::count(v.begin(), v.end(), 1); }

void check_dispersion_flavor(const std::string& flavor) {
  const Golden& g = golden();
  HvgOptions o;
  o.flavor = flavor;
  o.n_top_genes = 2000;
  const HvgResult r = highly_variable_genes(Context::cpu(2), g.logX, o);
  const std::string p = "hvg_" + flavor + "_";
  const std::vector<uint8_t> want = golden_bool(p + "highly_variable");
  ASSERT_EQ(r.highly_variable.size(), want.size());
  int64_t diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff += (r.highly_variable[i] != 0) != (want[i] != 0);
  std::printf("%s: %lld selected (scanpy %lld), %lld flags differ\n", flavor.c_str(),
              static_cast<long long>(count_true(r.highly_variable)), static_cast<long long>(count_true(want)),
              static_cast<long long>(diff));
  EXPECT_EQ(diff, 0);
  expect_close_where_finite(r.means, golden_num(p + "means"), 1e-5, flavor + " means");
  expect_close_where_finite(r.dispersions, golden_num(p + "dispersions"), 1e-5, flavor + " dispersions");
  expect_close_where_finite(r.dispersions_norm, golden_num(p + "dispersions_norm"), 1e-5, flavor + " dispersions_norm");

  // Dataset level: mean_bin labels and categories exactly as in the golden file.
  Dataset d;
  d.X = Matrix(g.logX);
  d.var.index = g.var.index;
  d.obs.index.resize(static_cast<size_t>(g.logX.n_rows));
  for (size_t i = 0; i < d.obs.index.size(); ++i) d.obs.index[i] = std::to_string(i);
  HvgOptions od = o;
  od.key_prefix = "mine_";
  highly_variable_genes(Context::cpu(1), d, od);
  const auto& mine = std::get<CategoricalColumn>(d.var.at("mine_mean_bin").c);
  const auto& gold = std::get<CategoricalColumn>(g.var.at(p + "mean_bin").c);
  EXPECT_EQ(mine.categories, gold.categories);
  int64_t label_diff = 0;
  for (size_t i = 0; i < gold.codes.size(); ++i)
    label_diff += mine.categories.at(mine.codes[i]) != gold.categories.at(gold.codes[i]);
  EXPECT_EQ(label_diff, 0);
  EXPECT_EQ(d.var.boolean("mine_highly_variable"), want);
  EXPECT_EQ(std::get<NumericColumn>(d.var.at("mine_dispersions_norm").c).dtype, DType::f32);
  ASSERT_TRUE(d.uns.count("hvg"));
}

TEST(HvgGolden, SeuratFlagsIdenticalToScanpy) { check_dispersion_flavor("seurat"); }
TEST(HvgGolden, CellRangerFlagsIdenticalToScanpy) { check_dispersion_flavor("cell_ranger"); }

TEST(HvgGolden, SeuratV3JaccardAtLeast099) {
  const Golden& g = golden();
  HvgOptions o;
  o.flavor = "seurat_v3";
  o.n_top_genes = 2000;
  const HvgResult r = highly_variable_genes(Context::cpu(2), g.counts, o);
  const std::vector<uint8_t> want = golden_bool("hvg_seurat_v3_highly_variable");
  int64_t inter = 0, uni = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    inter += r.highly_variable[i] && want[i];
    uni += r.highly_variable[i] || want[i];
  }
  const double jaccard = static_cast<double>(inter) / static_cast<double>(uni);
  std::printf("seurat_v3: %lld selected, Jaccard vs scanpy = %.6f\n", static_cast<long long>(count_true(r.highly_variable)),
              jaccard);
  EXPECT_EQ(count_true(r.highly_variable), 2000);
  EXPECT_GE(jaccard, 0.99);
  expect_close_where_finite(r.means, golden_num("hvg_seurat_v3_means"), 1e-6, "seurat_v3 means");
  expect_close_where_finite(r.variances, golden_num("hvg_seurat_v3_variances"), 1e-6, "seurat_v3 variances");
  // The normalized variances depend on the LOESS surface; report and bound them.
  const std::vector<double>& vn = golden_num("hvg_seurat_v3_variances_norm");
  double worst = 0;
  for (size_t i = 0; i < vn.size(); ++i)
    worst = std::max(worst, std::fabs(r.variances_norm[i] - vn[i]) / std::max(1e-12, std::fabs(vn[i])));
  std::printf("seurat_v3 variances_norm: max relative error %.3g\n", worst);
  EXPECT_LT(worst, 1e-8);  // skmisc's interpolated LOESS surface is reproduced
  // Flags differ only inside the tie of equal scores at the cutoff (scanpy's unstable argsort).
  std::vector<double> sorted = vn;
  std::sort(sorted.rbegin(), sorted.rend());
  const double cut = sorted[1999];
  for (size_t i = 0; i < want.size(); ++i)
    if ((r.highly_variable[i] != 0) != (want[i] != 0)) {
      EXPECT_NEAR(vn[i], cut, 1e-9 * cut) << "gene " << g.var.index[i] << " differs outside the cutoff tie";
    }
}

// ---- pearson residuals against a dense float64 oracle ------------------------------------------

struct PearsonOracle {
  std::vector<double> resvar;  // mean over batches
  std::vector<double> rank;    // median rank (NaN if never in top)
  std::vector<int64_t> nb;
  std::vector<uint8_t> hv;
};

PearsonOracle pearson_oracle(const CsrF& X, const std::vector<int32_t>& batch, int nbatch, int64_t ntop, double theta) {
  const int64_t n = X.n_rows, G = X.n_cols;
  DenseD D(n, G);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) D(r, X.indices[k]) += X.data[k];
  PearsonOracle o;
  o.resvar.assign(G, 0);
  std::vector<std::vector<double>> ranks;
  double clip = -1;
  for (int b = 0; b < nbatch; ++b) {
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < n; ++r)
      if (batch.empty() || batch[r] == b) rows.push_back(r);
    const double N = static_cast<double>(rows.size());
    if (clip < 0) clip = std::sqrt(N);
    std::vector<double> sg(G, 0), sc(rows.size(), 0);
    double tot = 0;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t g = 0; g < G; ++g) {
        sg[g] += D(rows[i], g);
        sc[i] += D(rows[i], g);
        tot += D(rows[i], g);
      }
    std::vector<double> rv(G, 0);
    for (int64_t g = 0; g < G; ++g) {
      if (sg[g] == 0) continue;
      std::vector<double> z(rows.size());
      double mean = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        const double mu = sc[i] * sg[g] / tot;
        z[i] = std::clamp((D(rows[i], g) - mu) / std::sqrt(mu + mu * mu / theta), -clip, clip);
        mean += z[i];
      }
      mean /= N;
      double v = 0;
      for (double x : z) v += (x - mean) * (x - mean);
      rv[g] = v / N;
    }
    for (int64_t g = 0; g < G; ++g) o.resvar[g] += rv[g] / nbatch;
    std::vector<int64_t> ord(G);
    std::iota(ord.begin(), ord.end(), 0);
    std::stable_sort(ord.begin(), ord.end(), [&](int64_t a, int64_t c) { return rv[a] > rv[c]; });
    std::vector<double> rk(G);
    for (int64_t i = 0; i < G; ++i) rk[ord[i]] = static_cast<double>(i);
    ranks.push_back(rk);
  }
  o.rank.assign(G, std::nan(""));
  o.nb.assign(G, 0);
  for (int64_t g = 0; g < G; ++g) {
    std::vector<double> t;
    for (const auto& rk : ranks)
      if (rk[g] < ntop) t.push_back(rk[g]);
    o.nb[g] = static_cast<int64_t>(t.size());
    std::sort(t.begin(), t.end());
    if (!t.empty()) o.rank[g] = t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
  }
  std::vector<int64_t> ord(G);
  std::iota(ord.begin(), ord.end(), 0);
  std::stable_sort(ord.begin(), ord.end(), [&](int64_t a, int64_t c) {
    if (o.nb[a] != o.nb[c]) return o.nb[a] > o.nb[c];
    const bool na = std::isnan(o.rank[a]), nc = std::isnan(o.rank[c]);
    if (na || nc) return !na && nc;
    return o.rank[a] < o.rank[c];
  });
  o.hv.assign(G, 0);
  for (int64_t i = 0; i < std::min(ntop, G); ++i) o.hv[ord[i]] = 1;
  return o;
}

// Random counts with gene-specific rates (overdispersed genes among them) and no empty cell.
CsrF varied_counts(int64_t n, int64_t G, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> rate_d(0.5, 1.0);
  std::vector<double> rate(G), disp(G);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t g = 0; g < G; ++g) {
    rate[g] = rate_d(rng) * 2;
    disp[g] = u(rng) < 0.15 ? 0.3 : 20.0;
  }
  CsrF X = CsrF::zeros(n, G);
  for (int64_t r = 0; r < n; ++r) {
    const double size = std::exp(std::normal_distribution<double>(0, 0.4)(rng));
    for (int64_t g = 0; g < G; ++g) {
      std::gamma_distribution<double> gd(disp[g], rate[g] * size / disp[g]);
      const int c = std::poisson_distribution<int>(gd(rng))(rng);
      if (c > 0 || (g == r % G)) {
        X.indices.push_back(static_cast<int32_t>(g));
        X.data.push_back(static_cast<float>(std::max(c, 1)));
      }
    }
    X.indptr[r + 1] = static_cast<int64_t>(X.data.size());
  }
  return X;
}

TEST(HvgPearson, MatchesDenseOracle) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = varied_counts(300, 150, seed);
  HvgOptions o;
  o.flavor = "pearson_residuals";
  o.n_top_genes = 40;
  const HvgResult r = highly_variable_genes(Context::cpu(2), X, o);
  const PearsonOracle want = pearson_oracle(X, {}, 1, 40, 100.0);
  for (size_t g = 0; g < want.resvar.size(); ++g)
    ASSERT_NEAR(r.residual_variances[g], want.resvar[g], 1e-9 * std::max(1.0, want.resvar[g])) << g;
  EXPECT_EQ(r.highly_variable, want.hv);
  EXPECT_EQ(count_true(r.highly_variable), 40);
  for (size_t g = 0; g < want.rank.size(); ++g) {
    if (std::isnan(want.rank[g])) EXPECT_TRUE(std::isnan(r.highly_variable_rank[g]));
    else EXPECT_EQ(r.highly_variable_rank[g], want.rank[g]);
  }
  // theta = inf (Poisson) and a custom clip.
  o.theta = std::numeric_limits<double>::infinity();
  o.clip = 3.0;
  const HvgResult r2 = highly_variable_genes(Context::cpu(1), X, o);
  std::vector<int32_t> none;
  // Oracle with clip 3: scale trick not available, so recompute directly.
  {
    const int64_t n = X.n_rows, G = X.n_cols;
    DenseD D(n, G);
    for (int64_t rr = 0; rr < n; ++rr)
      for (int64_t k = X.indptr[rr]; k < X.indptr[rr + 1]; ++k) D(rr, X.indices[k]) += X.data[k];
    std::vector<double> sg(G, 0), sc(n, 0);
    double tot = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t g = 0; g < G; ++g) sg[g] += D(i, g), sc[i] += D(i, g), tot += D(i, g);
    for (int64_t g = 0; g < G; ++g) {
      double m = 0, m2 = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double mu = sc[i] * sg[g] / tot;
        const double z = std::clamp((D(i, g) - mu) / std::sqrt(mu), -3.0, 3.0);
        m += z;
        m2 += z * z;
      }
      const double v = m2 / n - (m / n) * (m / n);
      ASSERT_NEAR(r2.residual_variances[g], v, 1e-9 * std::max(1.0, v)) << g;
    }
  }
  o.n_top_genes.reset();
  EXPECT_THROW(highly_variable_genes(Context::cpu(1), X, o), InputError);
}

TEST(HvgPearson, BatchesMatchOracle) {
  const uint64_t seed = test::fresh_seed();
  const CsrF X = varied_counts(240, 120, seed);
  std::vector<int32_t> batch(X.n_rows);
  std::mt19937_64 rng(seed + 1);
  for (auto& b : batch) b = static_cast<int32_t>(rng() % 2);
  HvgOptions o;
  o.flavor = "pearson_residuals";
  o.n_top_genes = 30;
  const HvgResult r = highly_variable_genes(Context::cpu(2), X, o, batch);
  const PearsonOracle want = pearson_oracle(X, batch, 2, 30, 100.0);
  for (size_t g = 0; g < want.resvar.size(); ++g)
    ASSERT_NEAR(r.residual_variances[g], want.resvar[g], 1e-9 * std::max(1.0, want.resvar[g])) << g;
  EXPECT_EQ(r.highly_variable_nbatches, want.nb);
  EXPECT_EQ(r.highly_variable, want.hv);
}

// ---- batches: seurat / cell_ranger / seurat_v3 against per-batch runs combined here ------------

CsrF log_normalize(const CsrF& C) {
  CsrF X = C;
  for (int64_t r = 0; r < X.n_rows; ++r) {
    double s = 0;
    for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) s += X.data[k];
    for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k)
      X.data[k] = static_cast<float>(std::log1p(X.data[k] / s * 1e4));
  }
  return X;
}

CsrF rows_of(const CsrF& X, const std::vector<int32_t>& batch, int b) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < X.n_rows; ++r)
    if (batch[r] == b) rows.push_back(r);
  return take_rows(X, rows);
}

TEST(HvgBatch, DispersionFlavorsCombineAsScanpy) {
  const uint64_t seed = test::fresh_seed();
  CsrF C = varied_counts(400, 300, seed);
  // Genes 0..9 absent from batch 1: they are filtered there and count as 0 in the means.
  std::vector<int32_t> batch(C.n_rows);
  for (int64_t r = 0; r < C.n_rows; ++r) batch[r] = r % 3 == 0 ? 1 : 0;
  for (int64_t r = 0; r < C.n_rows; ++r)
    if (batch[r] == 1)
      for (int64_t k = C.indptr[r]; k < C.indptr[r + 1]; ++k)
        if (C.indices[k] < 10) C.data[k] = 0;
  CsrF X = log_normalize(to_csr_f(Matrix(to_dense_f(Matrix(C)))));  // drops the explicit zeros
  for (const std::string flavor : {"seurat", "cell_ranger"}) {
    for (bool top : {true, false}) {
      HvgOptions o;
      o.flavor = flavor;
      if (top) o.n_top_genes = 50;
      const HvgResult r = highly_variable_genes(Context::cpu(2), X, o, batch);
      const int64_t G = X.n_cols;
      std::vector<double> m(G, 0), dn(G, 0);
      std::vector<int64_t> nb(G, 0);
      for (int b = 0; b < 2; ++b) {
        CsrF Xb = rows_of(X, batch, b);
        std::vector<int64_t> npos(G, 0), keep;
        for (int64_t k = 0; k < Xb.nnz(); ++k) npos[Xb.indices[k]] += Xb.data[k] > 0;
        for (int64_t g = 0; g < G; ++g)
          if (npos[g] > 0) keep.push_back(g);
        if (b == 1) {
          ASSERT_LE(keep.size(), static_cast<size_t>(G - 10));
        }
        const HvgResult rb = highly_variable_genes(Context::cpu(1), take_cols(Xb, keep), o);
        for (size_t i = 0; i < keep.size(); ++i) {
          m[keep[i]] += rb.means[i] / 2;
          dn[keep[i]] += (std::isnan(rb.dispersions_norm[i]) ? 0 : rb.dispersions_norm[i]) / 2;
          nb[keep[i]] += rb.highly_variable[i];
        }
      }
      EXPECT_EQ(r.highly_variable_nbatches, nb) << flavor;
      for (int64_t g = 0; g < G; ++g) {
        ASSERT_NEAR(r.means[g], m[g], 1e-12 * (1 + std::fabs(m[g]))) << flavor << " gene " << g;
        ASSERT_NEAR(r.dispersions_norm[g], dn[g], 1e-9 * (1 + std::fabs(dn[g]))) << flavor << " gene " << g;
        EXPECT_EQ(r.highly_variable_intersection[g], nb[g] == 2);
      }
      std::vector<uint8_t> want(G, 0);
      if (top) {
        std::vector<int64_t> ord(G);
        std::iota(ord.begin(), ord.end(), 0);
        std::stable_sort(ord.begin(), ord.end(), [&](int64_t a, int64_t c) {
          if (nb[a] != nb[c]) return nb[a] > nb[c];
          return dn[a] > dn[c];
        });
        for (int i = 0; i < 50; ++i) want[ord[i]] = 1;
      } else {
        for (int64_t g = 0; g < G; ++g) want[g] = m[g] > 0.0125 && m[g] < 3 && dn[g] > 0.5;
      }
      EXPECT_EQ(r.highly_variable, want) << flavor << (top ? " n_top_genes" : " cutoffs");
    }
  }
}

TEST(HvgBatch, SeuratV3CombinesPerBatchRanks) {
  const uint64_t seed = test::fresh_seed();
  const CsrF C = varied_counts(500, 400, seed);
  std::vector<int32_t> batch(C.n_rows);
  for (int64_t r = 0; r < C.n_rows; ++r) batch[r] = r < 200 ? 0 : 1;
  HvgOptions o;
  o.flavor = "seurat_v3";
  o.n_top_genes = 60;
  const HvgResult r = highly_variable_genes(Context::cpu(2), C, o, batch);
  const int64_t G = C.n_cols;
  std::vector<std::vector<double>> ranks;
  std::vector<double> vn(G, 0);
  for (int b = 0; b < 2; ++b) {
    HvgOptions ob = o;
    ob.n_top_genes = G;  // full ranking of the batch
    const HvgResult rb = highly_variable_genes(Context::cpu(1), rows_of(C, batch, b), ob);
    for (int64_t g = 0; g < G; ++g) vn[g] += rb.variances_norm[g] / 2;
    ranks.push_back(rb.highly_variable_rank);
  }
  std::vector<double> med(G, std::nan(""));
  std::vector<int64_t> nb(G, 0);
  for (int64_t g = 0; g < G; ++g) {
    std::vector<double> t;
    for (const auto& rk : ranks)
      if (rk[g] < 60) t.push_back(rk[g]);
    nb[g] = static_cast<int64_t>(t.size());
    std::sort(t.begin(), t.end());
    if (t.size() == 1) med[g] = t[0];
    if (t.size() == 2) med[g] = (t[0] + t[1]) / 2;
  }
  EXPECT_EQ(r.highly_variable_nbatches, nb);
  for (int64_t g = 0; g < G; ++g) {
    ASSERT_NEAR(r.variances_norm[g], vn[g], 1e-12 * (1 + vn[g])) << g;
    if (std::isnan(med[g])) EXPECT_TRUE(std::isnan(r.highly_variable_rank[g])) << g;
    else EXPECT_EQ(r.highly_variable_rank[g], med[g]) << g;
  }
  std::vector<int64_t> ord(G);
  std::iota(ord.begin(), ord.end(), 0);
  std::stable_sort(ord.begin(), ord.end(), [&](int64_t a, int64_t c) {
    const bool na = std::isnan(med[a]), nc = std::isnan(med[c]);
    if (na != nc) return nc;
    if (!na && med[a] != med[c]) return med[a] < med[c];
    return nb[a] > nb[c];
  });
  std::vector<uint8_t> want(G, 0);
  for (int i = 0; i < 60; ++i) want[ord[i]] = 1;
  EXPECT_EQ(r.highly_variable, want);
}

TEST(HvgBatch, DatasetBatchKeyAndMissingKey) {
  const uint64_t seed = test::fresh_seed();
  const CsrF C = varied_counts(300, 200, seed);
  Dataset d;
  d.X = Matrix(log_normalize(C));
  d.layers["counts"] = Matrix(C);
  d.obs.index.resize(300);
  d.var.index.resize(200);
  for (int i = 0; i < 300; ++i) d.obs.index[i] = "c" + std::to_string(i);
  for (int i = 0; i < 200; ++i) d.var.index[i] = "g" + std::to_string(i);
  std::vector<std::string> lab(300);
  std::vector<int32_t> codes(300);
  for (int i = 0; i < 300; ++i) {
    lab[i] = i % 2 ? "b" : "a";
    codes[i] = i % 2;
  }
  d.obs.set("batch", Column::strings(lab));
  HvgOptions o;
  o.n_top_genes = 30;
  o.batch_key = "batch";
  const HvgResult r = highly_variable_genes(Context::cpu(2), d, o);
  const HvgResult want = highly_variable_genes(Context::cpu(1), log_normalize(C), o, codes, d.var.index);
  EXPECT_EQ(r.highly_variable, want.highly_variable);
  EXPECT_EQ(d.var.boolean("highly_variable"), want.highly_variable);
  EXPECT_EQ(std::get<NumericColumn>(d.var.at("highly_variable_nbatches").c).dtype, DType::i64);
  EXPECT_FALSE(d.var.has("mean_bin"));

  HvgOptions v3;
  v3.flavor = "seurat_v3";
  v3.layer = "counts";
  v3.n_top_genes = 25;
  v3.subset = true;
  Dataset d2 = d;
  highly_variable_genes(Context::cpu(1), d2, v3);
  EXPECT_EQ(d2.n_vars(), 25);
  EXPECT_EQ(std::get<NumericColumn>(d2.var.at("highly_variable_rank").c).dtype, DType::f32);

  HvgOptions bad = o;
  bad.batch_key = "no_such_column";
  try {
    highly_variable_genes(Context::cpu(1), d, bad);
    ADD_FAILURE() << "missing batch_key accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_column"), std::string::npos) << e.what();
  }
  HvgOptions badl = v3;
  badl.layer = "nope";
  EXPECT_THROW(highly_variable_genes(Context::cpu(1), d, badl), InputError);
  HvgOptions badf = o;
  badf.flavor = "seurat_v4";
  EXPECT_THROW(highly_variable_genes(Context::cpu(1), d, badf), InputError);
}

// ---- threads, edge cases ----------------------------------------------------------------------

TEST(Hvg, OneAndTwoThreadsBitIdentical) {
  const uint64_t seed = test::fresh_seed();
  // Enough nonzeros for several row blocks.
  const CsrF C = varied_counts(3000, 300, seed);
  const CsrF X = log_normalize(C);
  std::vector<int32_t> batch(C.n_rows);
  for (int64_t r = 0; r < C.n_rows; ++r) batch[r] = static_cast<int32_t>(r % 2);
  for (const std::string flavor : {"seurat", "cell_ranger", "seurat_v3", "pearson_residuals"}) {
    for (bool batched : {false, true}) {
      HvgOptions o;
      o.flavor = flavor;
      o.n_top_genes = 50;
      const CsrF& M = (flavor == "seurat" || flavor == "cell_ranger") ? X : C;
      const std::vector<int32_t> b = batched ? batch : std::vector<int32_t>{};
      const HvgResult a = highly_variable_genes(Context::cpu(1), M, o, b);
      const HvgResult c = highly_variable_genes(Context::cpu(2), M, o, b);
      auto same = [](const std::vector<double>& x, const std::vector<double>& y) {
        if (x.size() != y.size()) return false;
        for (size_t i = 0; i < x.size(); ++i)
          if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
        return true;
      };
      EXPECT_EQ(a.highly_variable, c.highly_variable) << flavor;
      EXPECT_TRUE(same(a.means, c.means)) << flavor;
      EXPECT_TRUE(same(a.dispersions_norm, c.dispersions_norm)) << flavor;
      EXPECT_TRUE(same(a.variances_norm, c.variances_norm)) << flavor;
      EXPECT_TRUE(same(a.residual_variances, c.residual_variances)) << flavor;
      EXPECT_GT(count_true(a.highly_variable), 0) << flavor;
    }
  }
}

TEST(Hvg, EdgeCasesNeverNaNFlags) {
  const uint64_t seed = test::fresh_seed();
  CsrF C = varied_counts(200, 100, seed);
  // An all-zero gene.
  for (int64_t k = 0; k < C.nnz(); ++k)
    if (C.indices[k] == 7) C.data[k] = 0;
  const CsrF Cz = to_csr_f(Matrix(to_dense_f(Matrix(C))));
  const CsrF X = log_normalize(Cz);
  HvgOptions o;
  o.n_top_genes = 5000;  // more than genes: all genes with a normalized dispersion
  const HvgResult r = highly_variable_genes(Context::cpu(1), X, o);
  // scanpy: cutoff = the smallest normalized dispersion; NaN counts as 0 (np.nan_to_num), so the
  // all-zero gene is selected exactly when that cutoff is <= 0.
  EXPECT_TRUE(std::isnan(r.dispersions_norm[7]));
  double lowest = 1e300;
  for (double v : r.dispersions_norm)
    if (!std::isnan(v)) lowest = std::min(lowest, v);
  EXPECT_EQ(r.highly_variable[7], lowest <= 0 ? 1 : 0);
  EXPECT_EQ(count_true(r.highly_variable), lowest <= 0 ? 100 : 99);
  HvgOptions cut;  // cutoffs: NaN normalized dispersions become 0, as scanpy
  const HvgResult rc = highly_variable_genes(Context::cpu(1), X, cut);
  for (double v : rc.dispersions_norm) EXPECT_FALSE(std::isnan(v));
  HvgOptions v3;
  v3.flavor = "seurat_v3";
  v3.n_top_genes = 5000;
  const HvgResult r3 = highly_variable_genes(Context::cpu(1), Cz, v3);
  EXPECT_EQ(count_true(r3.highly_variable), 100);
  for (double v : r3.variances_norm) EXPECT_TRUE(std::isfinite(v));
  HvgOptions zero = o;
  zero.n_top_genes = 0;
  EXPECT_THROW(highly_variable_genes(Context::cpu(1), X, zero), InputError);
}

}  // namespace
