// The host halves of the preprocessing steps shared by the resident and the streamed GPU chains
// (pp/chain_steps.hpp).
#include "pp/chain_steps.hpp"

#include <algorithm>
#include <cmath>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "exec/comm.hpp"
#include "pp/hvg.hpp"

namespace scurry::chain {

CellStats cell_stats(const std::vector<double>& n_genes, const std::vector<double>& total) {
  const int64_t n = static_cast<int64_t>(total.size());
  CellStats s;
  s.n_genes.resize(static_cast<size_t>(n));
  s.total_f32.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    s.n_genes[i] = static_cast<int64_t>(n_genes[i]);
    s.total_f32[i] = static_cast<double>(static_cast<float>(total[i]));
  }
  return s;
}

void check_every_rank_keeps(Comm& comm, int64_t kept_here) {
  if (comm.size() <= 1) return;
  const std::vector<int64_t> left = allgather_count(comm, kept_here);
  for (size_t q = 0; q < left.size(); ++q)
    if (left[q] == 0)
      throw InputError(detail::concat("--gpus: filter_cells left no cell on rank ", q, " of ", left.size(),
                                      " (its share of the cells); use fewer GPUs"));
}

double median_of_positive(const std::vector<double>& v) {
  std::vector<double> p;
  for (double x : v)
    if (x > 0) p.push_back(x);
  if (p.empty()) throw InputError("normalize_total: every cell has a total of 0; nothing to normalise");
  const size_t m = p.size() / 2;
  std::nth_element(p.begin(), p.begin() + m, p.end());
  const double hi = p[m];
  if (p.size() % 2) return hi;
  const double lo = *std::max_element(p.begin(), p.begin() + m);
  return 0.5 * (lo + hi);
}

double normalize_target(Comm& comm, const std::optional<double>& target_sum,
                        const std::function<std::vector<double>()>& totals) {
  if (target_sum) {
    if (!(*target_sum > 0)) throw InputError("normalize_total: target_sum must be > 0");
    return *target_sum;
  }
  // The median over every rank's cells (the order of the totals does not matter to it).
  return comm.size() > 1 ? median_of_positive(allgatherv(comm, totals())) : median_of_positive(totals());
}

void write_totals(Dataset& d, const std::string& key, const std::vector<double>& totals) {
  std::vector<double> v(totals.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(totals[i]);
  d.obs.set(key, Column::numeric(std::move(v), DType::f32));
}

std::vector<int64_t> choose_hvg(Dataset& d, const HvgOptions& o, const std::vector<double>& sum,
                                const std::vector<double>& sumsq, int64_t n) {
  std::vector<double> mean, var;
  mean_var_from_sums(sum, sumsq, static_cast<double>(n), mean, var);
  HvgOptions h = o;
  h.subset = false;
  HvgResult hr = hvg_dispersion_from_moments(mean, var, h);
  write_hvg(d, hr, h);
  std::vector<int64_t> keep;
  for (size_t g = 0; g < hr.highly_variable.size(); ++g)
    if (hr.highly_variable[g]) keep.push_back(static_cast<int64_t>(g));
  if (keep.empty()) throw InputError("highly_variable_genes selected no gene; relax its cut-offs");
  return keep;
}

ScaleStats scale_stats(Dataset& d, const std::vector<double>& sum, const std::vector<double>& sumsq, int64_t n,
                       const std::vector<int64_t>& genes) {
  std::vector<double> mean, var;
  mean_var_from_sums(sum, sumsq, static_cast<double>(n), mean, var);
  ScaleStats s;
  auto add = [&](size_t j) {
    s.mean.push_back(mean[j]);
    s.sd.push_back(var[j] > 0 ? std::sqrt(var[j]) : 1.0);
  };
  if (genes.empty())
    for (size_t j = 0; j < mean.size(); ++j) add(j);
  else
    for (int64_t j : genes) add(static_cast<size_t>(j));
  d.var.set("mean", Column::numeric(s.mean));
  d.var.set("std", Column::numeric(s.sd));
  return s;
}

}  // namespace scurry::chain
