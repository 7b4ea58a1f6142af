// calculate_qc_metrics: every column against a naive dense-loop oracle (seeded random counts with
// explicit zeros, an empty cell and cells with fewer genes than n), CSR vs dense input, 1 vs 2
// threads bit-identical, Dataset columns/dtypes, bad input, and scanpy 1.9.6's QC of pbmc3k.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/context.hpp"
#include "io/h5ad.hpp"
#include "pp/qc.hpp"
#include "testlib.hpp"

using namespace scurry;

namespace {

struct Oracle {
  std::vector<double> ngenes, total;
  std::vector<std::vector<double>> top, qtot, qpct;
  std::vector<double> ncells, mean, dropout, vtotal;
};

Oracle oracle(const DenseD& x, const std::vector<int64_t>& ns, const std::vector<std::vector<uint8_t>>& masks) {
  const int64_t n = x.n_rows, g = x.n_cols;
  Oracle o;
  o.ngenes.assign(n, 0);
  o.total.assign(n, 0);
  o.top.assign(ns.size(), std::vector<double>(n, 0));
  o.qtot.assign(masks.size(), std::vector<double>(n, 0));
  o.qpct.assign(masks.size(), std::vector<double>(n, 0));
  o.ncells.assign(g, 0);
  o.vtotal.assign(g, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> vals;
    for (int64_t j = 0; j < g; ++j) {
      const double v = x(i, j);
      if (v != 0) {
        o.ngenes[i] += 1;
        o.ncells[j] += 1;
        vals.push_back(v);
      }
      o.total[i] += v;
      o.vtotal[j] += v;
      for (size_t q = 0; q < masks.size(); ++q)
        if (masks[q][j]) o.qtot[q][i] += v;
    }
    std::sort(vals.rbegin(), vals.rend());
    for (size_t k = 0; k < ns.size(); ++k) {
      double s = 0;
      for (size_t t = 0; t < vals.size() && static_cast<int64_t>(t) < ns[k]; ++t) s += vals[t];
      o.top[k][i] = o.total[i] > 0 ? s / o.total[i] * 100 : 0;
    }
    for (size_t q = 0; q < masks.size(); ++q) o.qpct[q][i] = o.total[i] > 0 ? o.qtot[q][i] / o.total[i] * 100 : 0;
  }
  for (int64_t j = 0; j < g; ++j) {
    o.mean.push_back(o.vtotal[j] / n);
    o.dropout.push_back((1 - o.ncells[j] / n) * 100);
  }
  return o;
}

template <class A, class B>
void expect_close(const std::vector<A>& got, const std::vector<B>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    if (!(std::fabs(g - w) <= rel * std::fabs(w) + 1e-300) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << g << " want " << w;
  }
  EXPECT_EQ(bad, 0) << what;
}

// Random counts with a few explicit zeros and one empty cell (row 1).
CsrF make_counts(int64_t n, int64_t g, double density, uint64_t seed) {
  CsrF m = test::random_counts(n, g, density, seed);
  // row 1 emptied
  CsrF out = CsrF::zeros(n, g);
  std::mt19937_64 rng(seed + 7);
  for (int64_t r = 0; r < n; ++r) {
    if (r != 1)
      for (int64_t p = m.indptr[r]; p < m.indptr[r + 1]; ++p) {
        out.indices.push_back(m.indices[p]);
        out.data.push_back(rng() % 50 == 0 ? 0.0f : m.data[p]);  // explicit zeros
      }
    out.indptr[r + 1] = static_cast<int64_t>(out.data.size());
  }
  return out;
}

void check_against_oracle(const QcResult& r, const Oracle& o) {
  const double rel = 1e-12;
  expect_close(r.n_genes_by_counts, o.ngenes, 0, "n_genes_by_counts");
  expect_close(r.total_counts, o.total, rel, "total_counts");
  for (size_t k = 0; k < o.top.size(); ++k) expect_close(r.pct_counts_in_top[k], o.top[k], rel, "pct_top");
  for (size_t q = 0; q < o.qtot.size(); ++q) {
    expect_close(r.total_counts_qc[q], o.qtot[q], rel, "total_counts_qc");
    expect_close(r.pct_counts_qc[q], o.qpct[q], rel, "pct_counts_qc");
  }
  expect_close(r.n_cells_by_counts, o.ncells, 0, "n_cells_by_counts");
  expect_close(r.mean_counts, o.mean, rel, "mean_counts");
  expect_close(r.pct_dropout_by_counts, o.dropout, rel, "pct_dropout");
  expect_close(r.var_total_counts, o.vtotal, rel, "var total_counts");
}

}  // namespace

TEST(Qc, MatchesDenseOracle) {
  const uint64_t seed = test::fresh_seed();
  const int64_t n = 300, g = 60;
  CsrF x = make_counts(n, g, 0.3, seed);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> masks(2, std::vector<uint8_t>(g, 0));
  for (int64_t j = 0; j < g; ++j) {
    masks[0][j] = rng() % 5 == 0;
    masks[1][j] = j < 3;
  }
  QcOptions opt;
  opt.qc_vars = {"a", "b"};
  opt.percent_top = {20, 1, 50, 5};  // unsorted on purpose; many cells have < 20 genes
  const std::vector<int64_t> ns{1, 5, 20, 50};
  const Oracle o = oracle(to_dense_d(Matrix(x)), ns, masks);

  const QcResult r = calculate_qc_metrics(Context::cpu(1), x, opt, masks);
  EXPECT_EQ(r.percent_top, ns);
  check_against_oracle(r, o);
  EXPECT_EQ(r.total_counts[1], 0.0);
  EXPECT_EQ(r.pct_counts_in_top[0][1], 0.0);  // empty cell: 0, not NaN

  // Dense input gives the same results.
  const QcResult rd = calculate_qc_metrics(Context::cpu(2), to_dense_f(Matrix(x)), opt, masks);
  check_against_oracle(rd, o);
}

TEST(Qc, TopSumsFromTheCountHistogramAndFromPartitionsAgree) {
  // Rows of small integer counts take the histogram path; a row with a count of 4096 or more, a
  // fractional or a negative value takes the partitions. Both against the oracle's full sort, with
  // many ties (counts 1-3) and n values falling inside a run of equal counts.
  const uint64_t seed = test::fresh_seed();
  const int64_t n = 400, g = 700;
  CsrF x = make_counts(n, g, 0.6, seed);
  std::mt19937_64 rng(seed ^ 0x5eed);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t p0 = x.indptr[r], p1 = x.indptr[r + 1];
    if (p1 == p0) continue;
    const int64_t at = p0 + static_cast<int64_t>(rng() % static_cast<uint64_t>(p1 - p0));
    switch (r % 8) {
      case 1: x.data[at] = 4095.0f; break;   // the histogram's largest
      case 2: x.data[at] = 4096.0f; break;   // past it
      case 3: x.data[at] = 2.5f; break;      // not an integer
      case 4: x.data[at] = 1e-3f; break;     // tiny
      case 5: x.data[at] = 70000.0f; break;  // far past it
      default: break;
    }
  }
  std::vector<std::vector<uint8_t>> masks{std::vector<uint8_t>(g, 0)};
  QcOptions opt;
  opt.qc_vars = {"m"};
  opt.percent_top = {1, 2, 3, 50, 100, 200, 500, 700};
  const QcResult r = calculate_qc_metrics(Context::cpu(2), x, opt, masks);
  const Oracle o = oracle(to_dense_d(Matrix(x)), r.percent_top, masks);
  check_against_oracle(r, o);
}

TEST(Qc, ThreadCountDoesNotChangeBits) {
  const uint64_t seed = test::fresh_seed();
  // > 2^18 nonzeros: several blocks. Non-integer values make the summation order visible.
  CsrF x = test::random_counts(2000, 600, 0.35, seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (float& v : x.data) v *= u(rng);
  std::vector<std::vector<uint8_t>> masks{std::vector<uint8_t>(600, 0)};
  for (int j = 0; j < 600; j += 7) masks[0][j] = 1;
  QcOptions opt;
  opt.qc_vars = {"m"};
  const QcResult a = calculate_qc_metrics(Context::cpu(1), x, opt, masks);
  const QcResult b = calculate_qc_metrics(Context::cpu(2), x, opt, masks);
  EXPECT_EQ(a.total_counts, b.total_counts);
  EXPECT_EQ(a.pct_counts_in_top, b.pct_counts_in_top);
  EXPECT_EQ(a.pct_counts_qc, b.pct_counts_qc);
  EXPECT_EQ(a.mean_counts, b.mean_counts);
  EXPECT_EQ(a.var_total_counts, b.var_total_counts);
  EXPECT_EQ(a.n_cells_by_counts, b.n_cells_by_counts);
  // and the values are right
  const Oracle o = oracle(to_dense_d(Matrix(x)), a.percent_top, masks);
  check_against_oracle(b, o);
}

TEST(Qc, DatasetColumnsAndBadInput) {
  const uint64_t seed = test::fresh_seed();
  Dataset d;
  const int64_t n = 50, g = 30;
  d.X = Matrix(test::random_counts(n, g, 0.5, seed));
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back(j < 4 ? "MT-" + std::to_string(j) : "G" + std::to_string(j));
  EXPECT_EQ(mark_gene_prefix(d, "mt", {"MT-", "mt-"}), 4);
  QcOptions opt;
  opt.qc_vars = {"mt"};
  opt.percent_top = {5, 10};
  // (the low-level result: the unrounded float64 totals)
  const QcResult r = calculate_qc_metrics(Context::cpu(1), to_csr_f(d.X), opt, qc_var_masks(d, opt));
  calculate_qc_metrics(Context::cpu(1), d, opt);
  const std::vector<std::string> want_obs{"n_genes_by_counts", "log1p_n_genes_by_counts", "total_counts",
                                          "log1p_total_counts", "pct_counts_in_top_5_genes",
                                          "pct_counts_in_top_10_genes", "total_counts_mt",
                                          "log1p_total_counts_mt", "pct_counts_mt"};
  EXPECT_EQ(d.obs.names(), want_obs);
  const std::vector<std::string> want_var{"mt", "n_cells_by_counts", "mean_counts", "log1p_mean_counts",
                                          "pct_dropout_by_counts", "total_counts", "log1p_total_counts"};
  EXPECT_EQ(d.var.names(), want_var);
  auto dtype = [](const Table& t, const std::string& c) { return std::get<NumericColumn>(t.at(c).c).dtype; };
  EXPECT_EQ(dtype(d.obs, "n_genes_by_counts"), DType::i32);
  EXPECT_EQ(dtype(d.obs, "log1p_n_genes_by_counts"), DType::f64);
  EXPECT_EQ(dtype(d.obs, "total_counts"), DType::f32);
  EXPECT_EQ(dtype(d.obs, "pct_counts_in_top_5_genes"), DType::f64);
  EXPECT_EQ(dtype(d.obs, "pct_counts_mt"), DType::f32);
  EXPECT_EQ(dtype(d.var, "n_cells_by_counts"), DType::i64);
  EXPECT_EQ(dtype(d.var, "mean_counts"), DType::f32);
  EXPECT_EQ(dtype(d.var, "pct_dropout_by_counts"), DType::f64);
  const auto& l1p = d.obs.numeric("log1p_total_counts");
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(l1p[i], std::log1p(r.total_counts[i]), 1e-6 * std::log1p(r.total_counts[i]));
    EXPECT_EQ(l1p[i], static_cast<double>(static_cast<float>(l1p[i])));  // held as float32
  }

  opt.qc_vars = {"ribo"};
  EXPECT_THROW(calculate_qc_metrics(Context::cpu(1), d, opt), InputError);
  opt.qc_vars = {"total_counts"};  // numeric, not bool
  EXPECT_THROW(calculate_qc_metrics(Context::cpu(1), d, opt), InputError);
  opt.qc_vars = {};
  opt.percent_top = {31};
  EXPECT_THROW(calculate_qc_metrics(Context::cpu(1), d, opt), InputError);
  opt.percent_top = {0};
  EXPECT_THROW(calculate_qc_metrics(Context::cpu(1), d, opt), InputError);
  opt.layer = "nope";
  opt.percent_top = {};
  EXPECT_THROW(calculate_qc_metrics(Context::cpu(1), d, opt), InputError);

  // A prefix matching nothing: all-false column, zero QC columns, no NaN.
  EXPECT_EQ(mark_gene_prefix(d, "ercc", {"ERCC-"}), 0);
  QcOptions o2;
  o2.qc_vars = {"ercc"};
  o2.percent_top = {5};
  calculate_qc_metrics(Context::cpu(1), d, o2);
  for (double v : d.obs.numeric("pct_counts_ercc")) EXPECT_EQ(v, 0.0);
}

// ---- scanpy 1.9.6 on pbmc3k --------------------------------------------------------------------

namespace {

struct Csv {
  std::vector<std::string> header;  // without the index column
  std::vector<std::string> index;
  std::map<std::string, std::vector<std::string>> cols;
};

Csv read_csv_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buf[1 << 16];
  int k;
  while ((k = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(k));
  gzclose(f);
  Csv csv;
  std::istringstream is(text);
  std::string line;
  bool first = true;
  while (std::getline(is, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f2;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, ',')) f2.push_back(cell);
    if (line.back() == ',') f2.push_back("");
    if (first) {
      csv.header.assign(f2.begin() + 1, f2.end());
      first = false;
      continue;
    }
    csv.index.push_back(f2[0]);
    for (size_t c = 0; c < csv.header.size(); ++c) csv.cols[csv.header[c]].push_back(f2.at(c + 1));
  }
  return csv;
}

std::vector<double> numbers(const std::vector<std::string>& s) {
  std::vector<double> v;
  for (const auto& x : s) v.push_back(std::stod(x));
  return v;
}

}  // namespace

TEST(Qc, MatchesScanpyOnPbmc3k) {
  Dataset d = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  ASSERT_EQ(d.n_obs(), 1000);
  ASSERT_EQ(d.n_vars(), 13714);
  EXPECT_EQ(mark_gene_prefix(d, "mt", {"MT-"}), 13);
  QcOptions opt;
  opt.qc_vars = {"mt"};
  calculate_qc_metrics(Context::cpu(1), d, opt);

  const Csv obs = read_csv_gz(test::test_data("golden/pbmc3k_first1000.scanpy.qc_obs.csv.gz"));
  ASSERT_EQ(obs.index, d.obs.index);
  ASSERT_EQ(obs.header.size(), 11u);
  for (const auto& c : obs.header) {
    SCOPED_TRACE("obs/" + c);
    ASSERT_TRUE(d.obs.has(c));
    expect_close(d.obs.numeric(c), numbers(obs.cols.at(c)), 1e-6, "obs/" + c);
  }
  const Csv var = read_csv_gz(test::test_data("golden/pbmc3k_first1000.scanpy.qc_var.csv.gz"));
  ASSERT_EQ(var.index, d.var.index);
  for (const auto& c : var.header) {
    SCOPED_TRACE("var/" + c);
    if (c == "gene_ids") continue;
    ASSERT_TRUE(d.var.has(c));
    if (c == "mt") {
      const auto& m = d.var.boolean("mt");
      for (size_t j = 0; j < m.size(); ++j) ASSERT_EQ(m[j] != 0, var.cols.at(c)[j] == "True") << j;
      continue;
    }
    expect_close(d.var.numeric(c), numbers(var.cols.at(c)), 1e-6, "var/" + c);
  }

  // 2 threads: bit-identical.
  Dataset d2 = read_h5ad(test::test_data("pbmc3k_first1000.h5ad"));
  mark_gene_prefix(d2, "mt", {"MT-"});
  calculate_qc_metrics(Context::cpu(2), d2, opt);
  ASSERT_EQ(d2.obs.names(), d.obs.names());
  for (const auto& c : d.obs.names()) EXPECT_EQ(d2.obs.numeric(c), d.obs.numeric(c)) << "obs/" << c;
  ASSERT_EQ(d2.var.names(), d.var.names());
  for (const auto& c : d.var.names())
    if (c != "gene_ids" && c != "mt") EXPECT_EQ(d2.var.numeric(c), d.var.numeric(c)) << "var/" << c;
}
