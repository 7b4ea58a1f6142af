#include "sim/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "exec/parallel.hpp"

namespace scurry {

void simulate_alias_table(const std::vector<double>& p, std::vector<double>& prob, std::vector<int32_t>& alias) {
  const size_t n = p.size();
  prob.assign(n, 0.0);
  alias.assign(n, 0);
  std::vector<double> q(n);
  for (size_t i = 0; i < n; ++i) q[i] = p[i] * static_cast<double>(n);
  std::vector<int32_t> small, large;
  for (size_t i = 0; i < n; ++i) (q[i] < 1.0 ? small : large).push_back(static_cast<int32_t>(i));
  while (!small.empty() && !large.empty()) {
    int32_t s = small.back(), l = large.back();
    small.pop_back();
    prob[s] = q[s];
    alias[s] = l;
    q[l] = (q[l] + q[s]) - 1.0;
    if (q[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  for (int32_t i : large) prob[i] = 1.0, alias[i] = i;
  for (int32_t i : small) prob[i] = 1.0, alias[i] = i;
}


namespace {

// xoshiro256** (Blackman & Vigna 2018), seeded through splitmix64: fast, small, reproducible.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& x : s) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      x = z ^ (z >> 31);
    }
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// Walker/Vose alias table: O(1) draws from a discrete distribution.
struct Alias {
  std::vector<double> prob;
  std::vector<int32_t> alias;
  explicit Alias(const std::vector<double>& p) { simulate_alias_table(p, prob, alias); }
  int32_t draw(Rng& r) const {
    const double u = r.uniform() * static_cast<double>(prob.size());
    const auto i = static_cast<int32_t>(u);
    return (u - i) < prob[i] ? i : alias[i];
  }
};

constexpr int64_t kCellsPerBlock = 2048;  // fixed: results do not depend on the thread count
constexpr uint64_t kStreamGenes = 1, kStreamClusters = 2;

}  // namespace

std::vector<std::vector<double>> simulate_cluster_proportions(const SimulateOptions& o) {
  Rng r(o.seed * 1000003 + kStreamGenes);
  std::vector<double> base(static_cast<size_t>(o.n_genes));
  for (auto& b : base) b = std::exp(o.gene_log_sd * r.normal());
  std::vector<std::vector<double>> out;
  Rng rc(o.seed * 1000003 + kStreamClusters);
  for (int c = 0; c < o.n_clusters; ++c) {
    std::vector<double> p = base;
    for (auto& x : p)
      if (rc.uniform() < o.de_fraction) x *= std::exp(o.de_log_fc_sd * rc.normal());
    const double s = std::accumulate(p.begin(), p.end(), 0.0);
    for (auto& x : p) x /= s;
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

// Expected distinct genes for L draws: sum_g 1 - (1 - p_g)^L, averaged over clusters and over
// library-size quantiles.
double expected_nnz(const std::vector<std::vector<double>>& props, double L0, double lib_sd) {
  static const double z[] = {-1.53, -0.89, -0.49, -0.16, 0.16, 0.49, 0.89, 1.53};  // octile midpoints of N(0,1)
  const int n_c = static_cast<int>(std::min<size_t>(props.size(), 4));
  std::vector<double> term(static_cast<size_t>(n_c) * 8, 0.0);
  // one term per (cluster, octile), each summed in gene order: the same bits for any thread count
#pragma omp parallel for schedule(static)
  for (int t = 0; t < n_c * 8; ++t) {
    const double L = L0 * std::exp(lib_sd * z[t % 8]);
    double e = 0;
    for (double p : props[t / 8]) e += -std::expm1(L * std::log1p(-p));
    term[t] = e;
  }
  double total = 0;
  for (double e : term) total += e;
  return total / static_cast<double>(term.size());
}

}  // namespace

double calibrate_library_size(const SimulateOptions& o) {
  if (o.n_genes <= 0 || o.n_cells < 0) throw InputError("simulate: n_cells and n_genes must be positive");
  if (o.n_clusters <= 0) throw InputError("simulate: n_clusters must be at least 1");
  if (!(o.nnz_per_cell > 0) || o.nnz_per_cell > 0.8 * static_cast<double>(o.n_genes))
    throw InputError(detail::concat("simulate: nnz_per_cell must be in (0, 0.8 * n_genes = ",
                                    0.8 * static_cast<double>(o.n_genes), "], got ", o.nnz_per_cell));
  const auto props = simulate_cluster_proportions(o);
  double lo = o.nnz_per_cell, hi = o.nnz_per_cell;
  while (expected_nnz(props, hi, o.library_log_sd) < o.nnz_per_cell) hi *= 2;
  for (int it = 0; it < 40 && hi - lo > 0.5; ++it) {
    const double mid = 0.5 * (lo + hi);
    (expected_nnz(props, mid, o.library_log_sd) < o.nnz_per_cell ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

void simulate_frame(Dataset& d, const SimulateOptions& o, std::vector<int32_t> cluster_codes, double L0) {
  CategoricalColumn cluster;
  for (int c = 0; c < o.n_clusters; ++c) cluster.categories.push_back(std::to_string(c));
  cluster.codes = std::move(cluster_codes);
  d.obs.index.resize(static_cast<size_t>(o.n_cells));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < o.n_cells; ++i) d.obs.index[i] = "cell" + std::to_string(i);
  d.obs.set("cluster", Column(std::move(cluster)));
  std::vector<std::string> ids(static_cast<size_t>(o.n_genes));
  d.var.index.resize(static_cast<size_t>(o.n_genes));
  for (int64_t g = 0; g < o.n_genes; ++g) {
    d.var.index[g] = g < o.n_mito_genes ? "MT-" + std::to_string(g + 1) : "GENE" + std::to_string(g);
    ids[g] = "SIMG" + std::to_string(g);
  }
  d.var.set("gene_ids", Column::strings(std::move(ids)));
  d.uns["simulate"] = Value(Dict{{"seed", Value(static_cast<int64_t>(o.seed))},
                                 {"n_clusters", Value(o.n_clusters)},
                                 {"nnz_per_cell", Value(o.nnz_per_cell)},
                                 {"library_scale", Value(L0)}});
}

Dataset simulate(const Context& ctx, const SimulateOptions& o) {
  const double L0 = calibrate_library_size(o);
  const auto props = simulate_cluster_proportions(o);
  std::vector<Alias> tables;
  for (const auto& p : props) tables.emplace_back(p);

  const int64_t n_blocks = (o.n_cells + kCellsPerBlock - 1) / kCellsPerBlock;
  struct Block {
    std::vector<int64_t> row_nnz;
    std::vector<int32_t> idx;
    std::vector<float> val;
    std::vector<int32_t> cluster;
  };
  std::vector<Block> blocks(static_cast<size_t>(n_blocks));
  parallel_for(ctx.threads(), n_blocks, [&](int64_t b) {
    Rng r(o.seed * 0x2545f4914f6cdd1dull + 0x1000 + static_cast<uint64_t>(b));
    Block& B = blocks[b];
    std::vector<uint32_t> count(static_cast<size_t>(o.n_genes), 0);
    std::vector<int32_t> touched;
    const int64_t c0 = b * kCellsPerBlock, c1 = std::min(o.n_cells, c0 + kCellsPerBlock);
    B.idx.reserve(static_cast<size_t>((c1 - c0) * o.nnz_per_cell * 1.2));
    B.val.reserve(B.idx.capacity());
    for (int64_t c = c0; c < c1; ++c) {
      const int k = static_cast<int>(r.next() % static_cast<uint64_t>(o.n_clusters));
      const auto L = static_cast<int64_t>(std::llround(L0 * std::exp(o.library_log_sd * r.normal())));
      touched.clear();
      for (int64_t i = 0; i < L; ++i) {
        const int32_t g = tables[k].draw(r);
        if (count[g]++ == 0) touched.push_back(g);
      }
      std::sort(touched.begin(), touched.end());
      for (int32_t g : touched) {
        B.idx.push_back(g);
        B.val.push_back(static_cast<float>(count[g]));
        count[g] = 0;
      }
      B.row_nnz.push_back(static_cast<int64_t>(touched.size()));
      B.cluster.push_back(k);
    }
  });

  Dataset d;
  CsrF X = CsrF::zeros(o.n_cells, o.n_genes);
  std::vector<int64_t> offset(static_cast<size_t>(n_blocks) + 1, 0);
  int64_t row = 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t n : blocks[b].row_nnz) {
      X.indptr[row + 1] = X.indptr[row] + n;
      ++row;
    }
    offset[b + 1] = offset[b] + static_cast<int64_t>(blocks[b].idx.size());
  }
  resize_large(X.indices, static_cast<size_t>(offset.back()));
  resize_large(X.data, static_cast<size_t>(offset.back()));
  CategoricalColumn cluster;
  for (int c = 0; c < o.n_clusters; ++c) cluster.categories.push_back(std::to_string(c));
  cluster.codes.resize(static_cast<size_t>(o.n_cells));
  parallel_for(ctx.threads(), n_blocks, [&](int64_t b) {
    Block& B = blocks[b];
    std::copy(B.idx.begin(), B.idx.end(), X.indices.begin() + offset[b]);
    std::copy(B.val.begin(), B.val.end(), X.data.begin() + offset[b]);
    std::copy(B.cluster.begin(), B.cluster.end(), cluster.codes.begin() + b * kCellsPerBlock);
    B = Block{};
  });

  simulate_frame(d, o, std::move(cluster.codes), L0);
  d.X = Matrix(std::move(X), DType::f32);
  return d;
}

}  // namespace scurry
