// scurry: score_genes and score_genes_cell_cycle (see score_genes.hpp).
#include "tl/score_genes.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "tl/rank_genes_groups_gpu.hpp"

namespace scurry {

namespace {

// numpy's random_interval(max) on a 32-bit MT19937 stream: a masked draw, rejected above max.
uint64_t random_interval(std::mt19937& rng, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s : {1, 2, 4, 8, 16, 32}) mask |= mask >> s;
  uint64_t v;
  do {
    v = static_cast<uint64_t>(rng()) & mask;
  } while (v > max);
  return v;
}

// numpy's legacy RandomState.shuffle of a 1-D array.
template <class T>
void numpy_shuffle(std::vector<T>& a, std::mt19937& rng) {
  for (size_t i = a.size(); i-- > 1;) {
    const size_t j = static_cast<size_t>(random_interval(rng, i));
    std::swap(a[i], a[j]);
  }
}

}  // namespace

ScoreGenesResult score_genes(const Dataset& d, const ScoreGenesOptions& o, const Context& ctx,
                             const std::vector<Context*>& gpus) {
  const bool use_raw = o.use_raw.value_or(d.raw != nullptr && !d.raw->X.empty());
  if (use_raw && (!d.raw || d.raw->X.empty())) throw InputError("score_genes: use_raw is set but there is no raw");
  const Matrix& M = use_raw ? d.raw->X : d.X;
  const Table& var = use_raw ? d.raw->var : d.var;
  if (M.empty()) throw InputError("score_genes: the dataset has no X");
  if (o.n_bins < 2) throw InputError("score_genes: n_bins must be at least 2");
  const CsrF copy = std::holds_alternative<CsrF>(M.m) ? CsrF() : to_csr_f(M);
  const CsrF& x = std::holds_alternative<CsrF>(M.m) ? std::get<CsrF>(M.m) : copy;
  const int64_t N = x.n_rows, G = x.n_cols;
  std::map<std::string, int64_t> index;
  for (int64_t j = 0; j < G; ++j) index.emplace(var.index[j], j);

  ScoreGenesResult res;
  std::vector<uint8_t> in_list(static_cast<size_t>(G), 0);
  std::vector<std::string> missing;
  for (const auto& g : o.gene_list) {
    auto it = index.find(g);
    if (it == index.end()) {
      missing.push_back(g);
      continue;
    }
    if (!in_list[it->second]) res.genes_used.push_back(g);
    in_list[it->second] = 1;
  }
  if (!missing.empty()) {
    std::string m;
    for (size_t k = 0; k < missing.size() && k < 10; ++k) m += (k ? ", " : "") + missing[k];
    log::warn("score_genes: " + std::to_string(missing.size()) + " gene(s) of the list are not in the data and are ignored: " + m +
              (missing.size() > 10 ? ", ..." : ""));
  }
  if (res.genes_used.empty()) throw InputError("score_genes: no gene of the list is in the data");
  std::vector<int64_t> pool;
  if (o.gene_pool.empty()) {
    pool.resize(static_cast<size_t>(G));
    std::iota(pool.begin(), pool.end(), int64_t{0});
  } else {
    std::vector<uint8_t> inp(static_cast<size_t>(G), 0);
    for (const auto& g : o.gene_pool)
      if (auto it = index.find(g); it != index.end()) inp[it->second] = 1;
    for (int64_t j = 0; j < G; ++j)
      if (inp[j]) pool.push_back(j);
    if (pool.empty()) throw InputError("score_genes: no gene of gene_pool is in the data");
  }

  // The control genes from the per-gene sums over all cells and the NaN counts (flags: 1 the
  // set's genes, 2 the controls); n_list, n_ctrl and res.control_genes filled.
  std::vector<uint8_t> in_flags;
  int64_t n_list = 0, n_ctrl = 0;
  auto choose = [&](const std::vector<double>& sums, const std::vector<double>& nans) {
    // pandas: obs_avg over the pool, finite ones kept; rank(method='min') // n_items
    std::vector<int64_t> genes;  // pool genes with a finite mean, in pool order
    std::vector<double> avg;
    for (int64_t j : pool) {
      const double m = sums[j] / (static_cast<double>(N) - nans[j]);
      if (std::isfinite(m)) genes.push_back(j), avg.push_back(m);
    }
    const int64_t P = static_cast<int64_t>(genes.size());
    const int64_t n_items = static_cast<int64_t>(std::nearbyint(static_cast<double>(P) / (o.n_bins - 1)));
    if (n_items < 1) throw InputError(detail::concat("score_genes: too few genes (", P, ") for ", o.n_bins, " bins"));
    std::vector<int64_t> order(static_cast<size_t>(P));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return avg[a] < avg[b]; });
    std::vector<int64_t> cut(static_cast<size_t>(P));
    for (int64_t k = 0; k < P;) {
      int64_t e = k;
      while (e < P && avg[order[e]] == avg[order[k]]) ++e;
      for (int64_t t = k; t < e; ++t) cut[order[t]] = (k + 1) / n_items;  // min rank, 1-based
      k = e;
    }
    std::set<int64_t> cuts;
    for (int64_t p = 0; p < P; ++p)
      if (in_list[genes[p]]) cuts.insert(cut[p]);
    std::mt19937 rng(o.random_state.value_or(0));
    std::vector<uint8_t> control(static_cast<size_t>(G), 0);
    for (int64_t c : cuts) {
      std::vector<int64_t> r;
      for (int64_t p = 0; p < P; ++p)
        if (cut[p] == c) r.push_back(genes[p]);
      numpy_shuffle(r, rng);
      for (int64_t k = 0; k < std::min<int64_t>(o.ctrl_size, static_cast<int64_t>(r.size())); ++k) control[r[k]] = 1;
    }
    for (int64_t j = 0; j < G; ++j) {
      if (in_list[j]) control[j] = 0, ++n_list;
      if (control[j]) ++n_ctrl, res.control_genes.push_back(var.index[j]);
    }
    in_flags.assign(static_cast<size_t>(G), 0);
    for (int64_t j = 0; j < G; ++j) in_flags[j] = in_list[j] ? 1 : control[j] ? 2 : 0;
    return in_flags;
  };
  // On a GPU context: the sums and the per-cell scores on the device (score_genes_gpu, the matrix
  // uploaded once); a matrix with NaN or inf is scored here.
  res.score.resize(static_cast<size_t>(N));
  if (ctx.backend() == Backend::cuda && ctx.cuda()) {
    if (score_genes_gpu(gpu_devices(ctx, gpus), x, [&](const std::vector<double>& sums) {
          return choose(sums, std::vector<double>(static_cast<size_t>(G), 0.0));
        }, res.score))
      return res;
    log::warn("score_genes: the matrix holds NaN or infinite values; scoring on the CPU");
    res.control_genes.clear(), n_list = n_ctrl = 0;  // (the device stopped before the callback)
  }
  // per-gene means over all cells (float64; NaN excluded from sum and count, _sparse_nanmean)
  std::vector<double> acc;
  const int64_t nb = std::min<int64_t>(16, std::max<int64_t>(1, N));
  reduce_blocks(ctx.threads(), nb, static_cast<size_t>(2 * G), acc, [&](int64_t b, double* part) {
    for (int64_t r = N * b / nb; r < N * (b + 1) / nb; ++r)
      for (int64_t q = x.indptr[r]; q < x.indptr[r + 1]; ++q) {
        const float v = x.data[q];
        if (std::isnan(v)) part[G + x.indices[q]] += 1;
        else part[x.indices[q]] += v;
      }
  });
  {
    const std::vector<double> sums(acc.begin(), acc.begin() + G), nans(acc.begin() + G, acc.end());
    choose(sums, nans);
  }
  // per cell: nanmean over the set's genes minus nanmean over the control genes
  parallel_for(ctx.threads(), (N + 1023) / 1024, [&](int64_t b) {
    for (int64_t r = b * 1024; r < std::min(N, (b + 1) * 1024); ++r) {
      double s1 = 0, s2 = 0, nan1 = 0, nan2 = 0;
      for (int64_t q = x.indptr[r]; q < x.indptr[r + 1]; ++q) {
        const int32_t j = x.indices[q];
        const float v = x.data[q];
        if (in_flags[j] == 1) (std::isnan(v) ? nan1 : s1) += std::isnan(v) ? 1 : v;
        else if (in_flags[j] == 2) (std::isnan(v) ? nan2 : s2) += std::isnan(v) ? 1 : v;
      }
      res.score[r] = s1 / (static_cast<double>(n_list) - nan1) - s2 / (static_cast<double>(n_ctrl) - nan2);
    }
  });
  return res;
}

ScoreGenesResult score_genes_inplace(Dataset& d, const ScoreGenesOptions& o, const Context& ctx,
                                     const std::vector<Context*>& gpus) {
  ScoreGenesResult r = score_genes(d, o, ctx, gpus);
  d.obs.set(o.score_name, Column::numeric(r.score, DType::f64));
  return r;
}

void score_genes_cell_cycle(Dataset& d, const std::vector<std::string>& s_genes,
                            const std::vector<std::string>& g2m_genes, const ScoreGenesOptions& base,
                            const Context& ctx, const std::vector<Context*>& gpus) {
  ScoreGenesOptions o = base;
  o.ctrl_size = static_cast<int64_t>(std::min(s_genes.size(), g2m_genes.size()));
  o.gene_list = s_genes;
  o.score_name = "S_score";
  const auto s = score_genes_inplace(d, o, ctx, gpus).score;
  o.gene_list = g2m_genes;
  o.score_name = "G2M_score";
  const auto g = score_genes_inplace(d, o, ctx, gpus).score;
  std::vector<std::string> phase(s.size());
  for (size_t i = 0; i < s.size(); ++i) phase[i] = s[i] < 0 && g[i] < 0 ? "G1" : g[i] > s[i] ? "G2M" : "S";
  std::set<std::string> u(phase.begin(), phase.end());
  CategoricalColumn c;
  c.categories.assign(u.begin(), u.end());
  for (const auto& p : phase)
    c.codes.push_back(static_cast<int32_t>(std::lower_bound(c.categories.begin(), c.categories.end(), p) -
                                           c.categories.begin()));
  d.obs.set("phase", Column(c));
}

const std::vector<std::string>& tirosh_s_genes() {
  static const std::vector<std::string> g = {
      "MCM5", "PCNA", "TYMS", "FEN1", "MCM2", "MCM4", "RRM1", "UNG", "GINS2", "MCM6", "CDCA7",
      "DTL", "PRIM1", "UHRF1", "MLF1IP", "HELLS", "RFC2", "RPA2", "NASP", "RAD51AP1", "GMNN", "WDR76",
      "SLBP", "CCNE2", "UBR7", "POLD3", "MSH2", "ATAD2", "RAD51", "RRM2", "CDC45", "CDC6", "EXO1",
      "TIPIN", "DSCC1", "BLM", "CASP8AP2", "USP1", "CLSPN", "POLA1", "CHAF1B", "BRIP1", "E2F8"};
  return g;
}

const std::vector<std::string>& tirosh_g2m_genes() {
  static const std::vector<std::string> g = {
      "HMGB2", "CDK1", "NUSAP1", "UBE2C", "BIRC5", "TPX2", "TOP2A", "NDC80", "CKS2", "NUF2", "CKS1B",
      "MKI67", "TMPO", "CENPF", "TACC3", "FAM64A", "SMC4", "CCNB2", "CKAP2L", "CKAP2", "AURKB", "BUB1",
      "KIF11", "ANP32E", "TUBB4B", "GTSE1", "KIF20B", "HJURP", "CDCA3", "HN1", "CDC20", "TTK", "CDC25C",
      "KIF2C", "RANGAP1", "NCAPD2", "DLGAP5", "CDCA2", "CDCA8", "ECT2", "KIF23", "HMMR", "AURKA", "PSRC1",
      "ANLN", "LBR", "CKAP5", "CENPE", "CTCF", "NEK2", "G2E3", "GAS2L3", "CBX5", "CENPA"};
  return g;
}

}  // namespace scurry
