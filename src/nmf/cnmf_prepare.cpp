// scurry: cNMF prepare (see cnmf_prepare.hpp).
#include "nmf/cnmf_prepare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "core/row_blocks.hpp"
#include "exec/parallel.hpp"

namespace scurry {

namespace {

constexpr int64_t kRowsPerBlock = 1024;
constexpr int kTopMeanGenes = 20;  // cNMF: A from the 20 highest-mean genes

// pandas Series.quantile(q) (linear interpolation), NaN skipped.
double quantile(std::vector<double> v, double q) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// Row totals (float64).
std::vector<double> row_totals(const Context& ctx, const CsrF& m) {
  std::vector<double> t(static_cast<size_t>(m.n_rows), 0.0);
  const RowBlocks rb = RowBlocks::uniform(m.n_rows, kRowsPerBlock);
  parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
    for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
      double s = 0;
      for (int64_t p = m.indptr[i]; p < m.indptr[i + 1]; ++p) s += m.data[p];
      t[i] = s;
    }
  });
  return t;
}

[[noreturn]] void fail_cells(const std::string& where, const std::vector<int64_t>& bad,
                             const std::vector<std::string>& names, const std::string& what) {
  std::string list;
  for (size_t q = 0; q < bad.size() && q < 5; ++q) list += (q ? ", " : "") + names[bad[q]];
  if (bad.size() > 5) list += ", ...";
  fail_input(where, bad.size(), " cell", bad.size() == 1 ? " has" : "s have", " zero counts ", what, " (", list,
             "); remove them first (e.g. scurry filter-cells --min-counts 1) or choose other genes");
}

}  // namespace

void column_mean_std(const CsrF& m, std::vector<double>& mean, std::vector<double>& std_) {
  const size_t g = static_cast<size_t>(m.n_cols);
  std::vector<double> s(g, 0.0), s2(g, 0.0);
  for (int64_t p = 0; p < m.nnz(); ++p) {
    const double v = m.data[p];
    s[m.indices[p]] += v;
    s2[m.indices[p]] += v * v;
  }
  mean.assign(g, 0.0);
  std_.assign(g, 0.0);
  const double n = static_cast<double>(m.n_rows);
  for (size_t j = 0; j < g; ++j) {
    mean[j] = s[j] / n;
    std_[j] = std::sqrt(std::max(0.0, s2[j] / n - mean[j] * mean[j]));
  }
}

CnmfHighVar cnmf_highvar_genes(const CsrF& tpm, int64_t numgenes) {
  const size_t g = static_cast<size_t>(tpm.n_cols);
  CnmfHighVar h;
  std::vector<double> sd;
  column_mean_std(tpm, h.mean, sd);
  h.var.resize(g);
  h.fano.resize(g);
  std::vector<double> cv(g);
  for (size_t j = 0; j < g; ++j) {
    h.var[j] = sd[j] * sd[j];
    h.fano[j] = h.var[j] / h.mean[j];  // NaN for mean 0, as pandas
    cv[j] = sd[j] / h.mean[j];
  }
  // A: min over the 20 highest-mean genes of sqrt(var)/mean (NaN skipped).
  std::vector<size_t> order(g);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return h.mean[a] > h.mean[b]; });
  h.A = std::numeric_limits<double>::quiet_NaN();
  for (size_t q = 0; q < order.size() && q < static_cast<size_t>(kTopMeanGenes); ++q) {
    const double v = cv[order[q]];
    if (!std::isnan(v) && (std::isnan(h.A) || v < h.A)) h.A = v;
  }
  const double ml = quantile(h.mean, 0.10), mh = quantile(h.mean, 0.90);
  const double fl = quantile(h.fano, 0.10), fh = quantile(h.fano, 0.90);
  std::vector<double> box;
  for (size_t j = 0; j < g; ++j)
    if (h.fano[j] > fl && h.fano[j] < fh && h.mean[j] > ml && h.mean[j] < mh) box.push_back(h.fano[j]);
  const double fano_median = quantile(box, 0.5);
  h.B = std::sqrt(fano_median);
  h.expected_fano.resize(g);
  h.fano_ratio.resize(g);
  for (size_t j = 0; j < g; ++j) {
    h.expected_fano[j] = h.A * h.A * h.mean[j] + h.B * h.B;
    h.fano_ratio[j] = h.fano[j] / h.expected_fano[j];
  }
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double x = h.fano_ratio[a], y = h.fano_ratio[b];
    if (std::isnan(x)) return false;
    if (std::isnan(y)) return true;
    return x > y;
  });
  h.high_var.assign(g, 0);
  for (size_t q = 0; q < order.size() && static_cast<int64_t>(q) < numgenes; ++q) h.high_var[order[q]] = 1;
  return h;
}

CnmfPrepared cnmf_prepare(const Context& ctx, const CsrF& counts, const std::vector<std::string>& cell_names,
                          const std::vector<std::string>& gene_names, const CnmfPrepareOptions& opt,
                          const std::string& where, const CsrF* given_tpm) {
  if (static_cast<int64_t>(cell_names.size()) != counts.n_rows ||
      static_cast<int64_t>(gene_names.size()) != counts.n_cols)
    fail("cnmf_prepare: names do not match the matrix shape");
  if (counts.n_rows < 2) fail_input(where, "cNMF needs at least 2 cells (got ", counts.n_rows, ")");
  if (opt.genes.empty() && opt.num_highvar_genes < 1)
    fail_input(where, "--numgenes must be at least 1 (got ", opt.num_highvar_genes, ")");
  for (int64_t p = 0; p < counts.nnz(); ++p)
    if (!std::isfinite(counts.data[p]) || counts.data[p] < 0)
      fail_input(where, "X has the value ", counts.data[p], " (column ", counts.indices[p],
                 "); cNMF needs raw non-negative counts");
  CnmfPrepared out;
  // TPM (scanpy normalize_per_cell(counts_per_cell_after=1e6)).
  const std::vector<double> tot = row_totals(ctx, counts);
  std::vector<int64_t> bad;
  for (int64_t i = 0; i < counts.n_rows; ++i)
    if (tot[i] <= 0) bad.push_back(i);
  if (!bad.empty()) fail_cells(where, bad, cell_names, "in total");
  if (given_tpm) {
    if (given_tpm->n_rows != counts.n_rows || given_tpm->n_cols != counts.n_cols)
      fail_input("--tpm", "the TPM matrix is ", given_tpm->n_rows, " x ", given_tpm->n_cols, " but the counts are ",
                 counts.n_rows, " x ", counts.n_cols, " (cells x genes must match)");
    out.tpm = *given_tpm;
  } else {
    out.tpm = counts;
    const RowBlocks rb = RowBlocks::uniform(counts.n_rows, kRowsPerBlock);
    parallel_for(ctx.threads(), rb.n_blocks(), [&](int64_t b) {
      for (int64_t i = rb.begin(b); i < rb.end(b); ++i) {
        const double s = opt.tpm_target / tot[i];
        for (int64_t p = out.tpm.indptr[i]; p < out.tpm.indptr[i + 1]; ++p)
          out.tpm.data[p] = static_cast<float>(out.tpm.data[p] * s);
      }
    });
  }
  column_mean_std(out.tpm, out.tpm_mean, out.tpm_std);
  // Genes.
  if (!opt.genes.empty()) {
    std::unordered_map<std::string, int64_t> idx;
    for (int64_t j = static_cast<int64_t>(gene_names.size()) - 1; j >= 0; --j) idx[gene_names[j]] = j;
    for (const auto& name : opt.genes) {
      const auto it = idx.find(name);
      if (it == idx.end())
        fail_input(where, "gene '", name, "' of the genes file is not in the data's var index; list genes by var name");
      out.genes.push_back(it->second);
    }
  } else {
    const CnmfHighVar hv = cnmf_highvar_genes(out.tpm, opt.num_highvar_genes);
    for (int64_t j = 0; j < counts.n_cols; ++j)
      if (hv.high_var[j]) out.genes.push_back(j);
  }
  // Counts of those genes scaled to unit variance (scanpy scale(zero_center=False): ddof 1, 0 -> 1).
  out.norm_counts = take_cols(counts, out.genes);
  std::vector<double> mean, sd;
  column_mean_std(out.norm_counts, mean, sd);
  const double n = static_cast<double>(counts.n_rows);
  for (double& s : sd) {
    s = std::sqrt(s * s * n / (n - 1));
    if (s == 0) s = 1;
  }
  for (int64_t p = 0; p < out.norm_counts.nnz(); ++p)
    out.norm_counts.data[p] = static_cast<float>(out.norm_counts.data[p] / sd[out.norm_counts.indices[p]]);
  const std::vector<double> t2 = row_totals(ctx, out.norm_counts);
  bad.clear();
  for (int64_t i = 0; i < counts.n_rows; ++i)
    if (t2[i] <= 0) bad.push_back(i);
  if (!bad.empty()) fail_cells(where, bad, cell_names, "over the over-dispersed genes");
  return out;
}

}  // namespace scurry
