// scurry: rank_genes_groups and filter_rank_genes_groups (see rank_genes_groups.hpp).
#include "tl/rank_genes_groups.hpp"
#include "tl/logreg_gpu.hpp"
#include "tl/rank_genes_groups_gpu.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "tl/groups.hpp"
#include "tl/stats.hpp"
#include "tl/stats_core.hpp"

namespace scurry {

namespace {
// rank_genes_groups of a dataset whose X is still being copied back (Dataset::pending_x) where only
// the host's copy will do.
struct NeedsHostX : Error {
  using Error::Error;
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kGeneBlock = 64;  // genes per parallel work item

// ---- inputs ---------------------------------------------------------------------------------------

// The cells' categories of obs[groupby]: categorical as stored; strings as pandas' categories
// (sorted unique values), which is what scanpy's sanitize_anndata makes of them.
using Grouping = CellGroups;  // tl/groups.hpp

Grouping grouping_of(const Table& obs, const std::string& key) {
  if (key.empty()) throw InputError("rank_genes_groups: groupby is required (an obs column of groups, e.g. leiden)");
  if (!obs.has(key)) {
    std::string names;
    for (const auto& n : obs.names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError("rank_genes_groups: groupby column '" + key + "' is not in obs (columns: " + names + ")");
  }
  const Column& c = obs.at(key);
  if (!std::holds_alternative<CategoricalColumn>(c.c) && !std::holds_alternative<StringColumn>(c.c))
    throw InputError("rank_genes_groups: groupby column '" + key + "' is " + c.kind() +
                     ", expected a categorical (or string) column of groups");
  return cell_groups(obs, key, "rank_genes_groups");
}

// Gene-major copy of a CSR float matrix, in parallel: the cells in kTransposeBlocks fixed blocks;
// per block and gene the count of kept entries, prefix sums over (gene, block), then every block
// scatters its entries into its own ranges: the cells stay in order within a gene, and the result
// does not depend on the thread count.
constexpr int64_t kTransposeBlocks = 64;
// Row blocks of the group statistics: each holds 3 x (groups + 1) x genes float64 partials, so few.
constexpr int64_t kStatsBlocks = 16;
CsrF gene_major_csr(const CsrF& x, const std::vector<int64_t>& slot, int64_t n_genes, const Context& ctx) {
  const int64_t nb = std::min<int64_t>(kTransposeBlocks, std::max<int64_t>(1, x.n_rows));
  auto rows_of = [&](int64_t b, int64_t& r0, int64_t& r1) {
    r0 = x.n_rows * b / nb;
    r1 = x.n_rows * (b + 1) / nb;
  };
  std::vector<int64_t> cnt(static_cast<size_t>(nb * n_genes), 0);  // [block * n_genes + gene]
  parallel_for(ctx.threads(), nb, [&](int64_t b) {
    int64_t r0, r1;
    rows_of(b, r0, r1);
    for (int64_t p = x.indptr[r0]; p < x.indptr[r1]; ++p) {
      const int64_t s = slot[x.indices[p]];
      const float v = x.data[p];
      if (s >= 0 && v != 0 && !std::isnan(v)) ++cnt[b * n_genes + s];
    }
  });
  CsrF t;
  t.n_rows = n_genes;
  t.n_cols = x.n_rows;
  t.indptr.assign(static_cast<size_t>(n_genes) + 1, 0);
  int64_t run = 0;
  for (int64_t g = 0; g < n_genes; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c = cnt[b * n_genes + g];
      cnt[b * n_genes + g] = run;  // start of (gene, block)
      run += c;
    }
    t.indptr[g + 1] = run;
  }
  t.indices.resize(static_cast<size_t>(run));
  t.data.resize(static_cast<size_t>(run));
  parallel_for(ctx.threads(), nb, [&](int64_t b) {
    int64_t r0, r1;
    rows_of(b, r0, r1);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t p = x.indptr[r]; p < x.indptr[r + 1]; ++p) {
        const int64_t s = slot[x.indices[p]];
        const float v = x.data[p];
        if (s >= 0 && v != 0 && !std::isnan(v)) {
          const int64_t q = cnt[b * n_genes + s]++;
          t.indices[q] = static_cast<int32_t>(r);
          t.data[q] = v;
        }
      }
  });
  return t;
}

// Gene-major copy (genes x cells CSR) of columns `genes` of a cells x genes matrix; zeros and NaN
// dropped (scanpy calls eliminate_zeros).
CsrF gene_major(const Matrix& m, const std::vector<int64_t>& genes, const Context& ctx) {
  std::vector<int64_t> slot(static_cast<size_t>(m.n_cols()), -1);
  for (size_t k = 0; k < genes.size(); ++k) slot[static_cast<size_t>(genes[k])] = static_cast<int64_t>(k);
  if (const auto* x = std::get_if<CsrF>(&m.m)) return gene_major_csr(*x, slot, static_cast<int64_t>(genes.size()), ctx);
  CsrF t;
  t.n_rows = static_cast<int64_t>(genes.size());
  t.n_cols = m.n_rows();
  t.indptr.assign(static_cast<size_t>(t.n_rows) + 1, 0);
  auto fill = [&](auto&& for_each_entry) {
    for_each_entry([&](int64_t, int64_t c, double v) {
      if (v != 0 && slot[c] >= 0) ++t.indptr[static_cast<size_t>(slot[c]) + 1];
    });
    for (int64_t i = 0; i < t.n_rows; ++i) t.indptr[i + 1] += t.indptr[i];
    t.indices.resize(static_cast<size_t>(t.indptr.back()));
    t.data.resize(static_cast<size_t>(t.indptr.back()));
    std::vector<int64_t> next(t.indptr.begin(), t.indptr.end() - 1);
    for_each_entry([&](int64_t r, int64_t c, double v) {
      if (v != 0 && slot[c] >= 0) {
        const int64_t q = next[static_cast<size_t>(slot[c])]++;
        t.indices[q] = static_cast<int32_t>(r);
        t.data[q] = static_cast<float>(v);
      }
    });
  };
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          throw InputError("rank_genes_groups: the matrix to test is empty");
        } else if constexpr (std::is_same_v<X, CsrF> || std::is_same_v<X, CsrD>) {
          fill([&](auto&& f) {
            for (int64_t r = 0; r < x.n_rows; ++r)
              for (int64_t p = x.indptr[r]; p < x.indptr[r + 1]; ++p)
                if (!std::isnan(x.data[p])) f(r, x.indices[p], static_cast<double>(x.data[p]));
          });
        } else {
          fill([&](auto&& f) {
            for (int64_t r = 0; r < x.n_rows; ++r)
              for (int64_t c = 0; c < x.n_cols; ++c)
                if (!std::isnan(x(r, c))) f(r, c, static_cast<double>(x(r, c)));
          });
        }
      },
      m.m);
  return t;
}

// Descending by key, equal keys in gene order: the n_top best genes.
std::vector<int64_t> top_n(const std::vector<double>& key, int64_t n_top) {
  std::vector<int64_t> idx(key.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  auto cmp = [&](int64_t a, int64_t b) { return key[a] > key[b] || (key[a] == key[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + n_top, idx.end(), cmp);
  idx.resize(static_cast<size_t>(n_top));
  return idx;
}

// ---- wilcoxon -------------------------------------------------------------------------------------

// Rank sums over the cells whose bucket is selected (sel[bucket] true), for one gene whose nonzeros
// (value, bucket) are sorted by value. n: the number of selected cells; n_in[b]: selected cells per
// bucket; nnz_in[b]: their nonzeros. Adds R[b] for every selected bucket and returns the tie term
// sum(t^3 - t) over all tie groups (the zeros included).
// A nonzero as one sortable 64-bit key: the float's bits mapped to an unsigned order-preserving
// code (negatives flipped, positives with the sign bit set) in the high half, the bucket in the low
// half. Sorting the keys sorts by value; equal values have equal high halves.
inline uint64_t rank_key(float v, int32_t bucket) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(u) << 32) | static_cast<uint32_t>(bucket);
}
inline uint32_t key_value(uint64_t k) { return static_cast<uint32_t>(k >> 32); }
inline int32_t key_bucket(uint64_t k) { return static_cast<int32_t>(k & 0xffffffffu); }
inline bool key_positive(uint64_t k) { return (key_value(k) & 0x80000000u) != 0; }

constexpr int64_t kRankChunk = 256;  // genes per wilcoxon work item

bool rows_sorted(const CsrF& x, const Context& ctx) {
  const int64_t nb = std::min<int64_t>(kTransposeBlocks, std::max<int64_t>(1, x.n_rows));
  std::vector<uint8_t> ok(static_cast<size_t>(nb), 1);
  parallel_for(ctx.threads(), nb, [&](int64_t b) {
    const int64_t r0 = x.n_rows * b / nb, r1 = x.n_rows * (b + 1) / nb;
    for (int64_t r = r0; r < r1 && ok[b]; ++r)
      for (int64_t q = x.indptr[r] + 1; q < x.indptr[r + 1]; ++q)
        if (x.indices[q] <= x.indices[q - 1]) {
          ok[b] = 0;
          break;
        }
  });
  return std::all_of(ok.begin(), ok.end(), [](uint8_t v) { return v != 0; });
}

// Sorts every row's entries by column (a duplicate column's entries stay, in their order).
void sort_rows(CsrF& x, const Context& ctx) {
  parallel_for(ctx.threads(), x.n_rows, [&](int64_t r) {
    const int64_t p0 = x.indptr[r], n = x.indptr[r + 1] - p0;
    std::vector<std::pair<int32_t, float>> e(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) e[k] = {x.indices[p0 + k], x.data[p0 + k]};
    std::stable_sort(e.begin(), e.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (int64_t k = 0; k < n; ++k) x.indices[p0 + k] = e[k].first, x.data[p0 + k] = e[k].second;
  });
}

// Sorts keys by their high 32 bits (the value; rank_key) with an LSD radix sort of 8-bit digits,
// skipping digits every key shares. The order within equal values is irrelevant to the ranks.
void radix_sort_by_value(std::vector<uint64_t>& a, std::vector<uint64_t>& tmp) {
  const size_t n = a.size();
  if (n < 64) {
    std::sort(a.begin(), a.end());
    return;
  }
  tmp.resize(n);
  for (int shift = 32; shift < 64; shift += 8) {
    size_t cnt[257] = {0};
    for (uint64_t k : a) ++cnt[((k >> shift) & 0xff) + 1];
    bool trivial = false;
    for (int d = 1; d <= 256; ++d)
      if (cnt[d] == n) trivial = true;
    if (trivial) continue;
    for (int d = 1; d <= 256; ++d) cnt[d] += cnt[d - 1];
    for (uint64_t k : a) tmp[cnt[(k >> shift) & 0xff]++] = k;
    a.swap(tmp);
  }
}

double rank_sums(const std::vector<uint64_t>& sorted, const std::vector<uint8_t>& sel, int64_t n,
                 const std::vector<int64_t>& n_in, const std::vector<int64_t>& nnz_in, std::vector<double>& R) {
  int64_t nnz = 0, n_neg = 0;
  for (uint64_t k : sorted)
    if (sel[key_bucket(k)]) {
      ++nnz;
      n_neg += !key_positive(k);
    }
  const int64_t z = n - nnz;
  double ties = 0;
  int64_t pos = 0;  // selected nonzeros seen
  const size_t m = sorted.size();
  for (size_t s = 0; s < m;) {
    size_t e = s;
    int64_t t = 0;
    const uint32_t v = key_value(sorted[s]);
    while (e < m && key_value(sorted[e]) == v) {
      t += sel[key_bucket(sorted[e])];
      ++e;
    }
    if (t > 0) {
      // ranks (1-based) of this tie group: pos+1 .. pos+t, shifted past the zeros for positives
      const double base = static_cast<double>(pos) + (key_positive(sorted[s]) ? static_cast<double>(z) : 0.0);
      const double avg = base + (static_cast<double>(t) + 1.0) / 2.0;
      for (size_t k = s; k < e; ++k)
        if (sel[key_bucket(sorted[k])]) R[key_bucket(sorted[k])] += avg;
      const double td = static_cast<double>(t);
      ties += td * td * td - td;
      pos += t;
    }
    s = e;
  }
  const double zero_rank = static_cast<double>(n_neg) + (static_cast<double>(z) + 1.0) / 2.0;
  for (size_t b = 0; b < sel.size(); ++b)
    if (sel[b]) R[b] += zero_rank * static_cast<double>(n_in[b] - nnz_in[b]);
  const double zd = static_cast<double>(z);
  ties += zd * zd * zd - zd;
  return ties;
}

// ---- logreg ---------------------------------------------------------------------------------------

// Multinomial (K > 2) or binary (K == 2, one coefficient vector for class 1) logistic regression
// with L2 penalty ||W||^2 / (2C) on the coefficients (not the intercepts), as sklearn's
// LogisticRegression(lbfgs); our own L-BFGS (Nocedal & Wright 2006, algorithm 7.4, m = 10) with a
// backtracking Armijo line search. X: cells x genes (CSR); y in [0, K). Returns coef, rows x genes.
// The data term (sum of the cells' cross-entropies) and its gradient, on the CPU threads: per block
// of 256 cells float64 partials, combined in block order.
double logreg_data_term(const CsrF& X, const std::vector<int32_t>& y, int K, const std::vector<double>& w,
                        std::vector<double>& g, const Context& ctx) {
  const int64_t n = X.n_rows, p = X.n_cols;
  const int R = K == 2 ? 1 : K;                       // coefficient rows
  const int64_t nw = static_cast<int64_t>(R) * (p + 1);  // weights then intercepts
  const int64_t n_blocks = std::max<int64_t>(1, (n + 255) / 256);
  std::vector<double> acc;
  // partial[0]: loss; partial[1 .. nw]: gradient of the data term
  reduce_blocks(ctx.threads(), n_blocks, static_cast<size_t>(nw + 1), acc, [&](int64_t b, double* part) {
    std::vector<double> z(static_cast<size_t>(R));
    std::vector<double> pr(static_cast<size_t>(K));
    const int64_t r0 = b * 256, r1 = std::min(n, r0 + 256);
    for (int64_t r = r0; r < r1; ++r) {
      for (int k = 0; k < R; ++k) z[k] = w[static_cast<size_t>(R) * p + k];
      for (int64_t q = X.indptr[r]; q < X.indptr[r + 1]; ++q) {
        const double v = X.data[q];
        const int64_t j = X.indices[q];
        for (int k = 0; k < R; ++k) z[k] += w[k * p + j] * v;
      }
      part[0] += logreg_row(z.data(), K, y[r], pr.data());
      for (int k = 0; k < R; ++k) {
        double* gk = part + 1 + k * p;
        const double d = pr[k];
        for (int64_t q = X.indptr[r]; q < X.indptr[r + 1]; ++q) gk[X.indices[q]] += d * X.data[q];
        part[1 + static_cast<int64_t>(R) * p + k] += d;
      }
    }
  });
  g.assign(acc.begin() + 1, acc.end());
  return acc[0];
}

DenseD logistic_regression(const CsrF& X, const std::vector<int32_t>& y, int K, double C, int max_iter, double tol,
                           const Context& ctx, const std::vector<const Context*>& devices) {
  const int64_t p = X.n_cols;
  const int R = K == 2 ? 1 : K;                       // coefficient rows
  const int64_t nw = static_cast<int64_t>(R) * (p + 1);  // weights then intercepts
  for (float v : X.data)  // (sklearn's LogisticRegression refuses them too)
    if (!std::isfinite(v))
      throw InputError("rank_genes_groups: logreg: the matrix holds NaN or infinite values");
  // the data term on the devices (LogregGpu: the same sums in other orders) or on the threads
  std::unique_ptr<LogregGpu> dev;
  if (!devices.empty()) dev = std::make_unique<LogregGpu>(devices, X, y, K);
  auto fg = [&](const std::vector<double>& w, std::vector<double>& g) -> double {
    double f = dev ? (*dev)(w, g) : logreg_data_term(X, y, K, w, g, ctx);
    for (int64_t i = 0; i < static_cast<int64_t>(R) * p; ++i) {
      f += w[i] * w[i] / (2.0 * C);
      g[i] += w[i] / C;
    }
    return f;
  };
  std::vector<double> w(static_cast<size_t>(nw), 0.0), g, gn, wn, d(static_cast<size_t>(nw));
  double f = fg(w, g);
  constexpr int kMem = 10;
  std::vector<std::vector<double>> S, Y;
  std::vector<double> rho;
  auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  for (int it = 0; it < max_iter; ++it) {
    double gmax = 0;
    for (double v : g) gmax = std::max(gmax, std::fabs(v));
    if (gmax <= tol) break;
    // two-loop recursion: d = -H g
    std::vector<double> q = g, alpha(S.size());
    for (size_t k = S.size(); k-- > 0;) {
      alpha[k] = rho[k] * dot(S[k], q);
      for (size_t i = 0; i < q.size(); ++i) q[i] -= alpha[k] * Y[k][i];
    }
    double gamma = 1.0;
    if (!S.empty()) gamma = dot(S.back(), Y.back()) / dot(Y.back(), Y.back());
    for (double& v : q) v *= gamma;
    for (size_t k = 0; k < S.size(); ++k) {
      const double beta = rho[k] * dot(Y[k], q);
      for (size_t i = 0; i < q.size(); ++i) q[i] += S[k][i] * (alpha[k] - beta);
    }
    for (size_t i = 0; i < d.size(); ++i) d[i] = -q[i];
    double gd = dot(g, d);
    if (gd >= 0) {  // not a descent direction: restart from the gradient
      S.clear(), Y.clear(), rho.clear();
      for (size_t i = 0; i < d.size(); ++i) d[i] = -g[i];
      gd = dot(g, d);
    }
    double step = S.empty() ? std::min(1.0, 1.0 / std::sqrt(dot(d, d))) : 1.0;
    double fn = f;
    bool ok = false;
    for (int ls = 0; ls < 50; ++ls) {
      wn = w;
      for (size_t i = 0; i < w.size(); ++i) wn[i] += step * d[i];
      fn = fg(wn, gn);
      if (fn <= f + 1e-4 * step * gd) {
        ok = true;
        break;
      }
      step *= 0.5;
    }
    if (!ok) break;
    std::vector<double> s(w.size()), yv(w.size());
    for (size_t i = 0; i < w.size(); ++i) s[i] = wn[i] - w[i], yv[i] = gn[i] - g[i];
    const double sy = dot(s, yv);
    const double df = f - fn;
    w.swap(wn);
    g.swap(gn);
    f = fn;
    if (sy > 1e-12) {
      if (static_cast<int>(S.size()) == kMem) S.erase(S.begin()), Y.erase(Y.begin()), rho.erase(rho.begin());
      S.push_back(std::move(s));
      Y.push_back(std::move(yv));
      rho.push_back(1.0 / sy);
    }
    if (df <= 64 * std::numeric_limits<double>::epsilon() * std::max({std::fabs(f), std::fabs(fn), 1.0})) break;
  }
  DenseD coef(R, p);
  for (int k = 0; k < R; ++k)
    for (int64_t j = 0; j < p; ++j) coef(k, j) = w[k * p + j];
  return coef;
}

}  // namespace

// ---- statistics -----------------------------------------------------------------------------------

namespace {
// Whether every value is a non-negative integer: scanpy warns that such data look like counts.
bool all_counts(const std::vector<float>& v) {
  for (float x : v)
    if (!(x >= 0 && x == std::floor(x))) return false;
  return true;
}
void warn_counts() {
  log::warn("rank_genes_groups: the data look like raw counts (non-negative integers); logarithmize them first");
}

// Adds rows [r0, r1) of x (cells first + r of the codes) into one block's partials
// [bucket][gene][sum, sum_sq, nnz] (a value's three sums in one cache line), in row order.
void add_rows(const CsrF& x, int64_t r0, int64_t r1, const std::vector<int32_t>& codes, int64_t first,
              int64_t n_categories, int64_t G, double* part) {
  for (int64_t r = r0; r < r1; ++r) {
    const int32_t c = codes[static_cast<size_t>(first + r)];
    double* pc = part + 3 * static_cast<size_t>((c < 0 ? n_categories : c) * G);
    for (int64_t q = x.indptr[r]; q < x.indptr[r + 1]; ++q) {
      const double v = x.data[q];
      if (v == 0 || std::isnan(v)) continue;
      double* p = pc + 3 * static_cast<size_t>(x.indices[q]);
      p[0] += v;
      p[1] += v * v;
      p[2] += 1;
    }
  }
}

GeneGroupStats stats_begin(int64_t n_rows, int64_t n_cols, const std::vector<int32_t>& codes, int64_t n_categories) {
  GeneGroupStats s;
  s.n_genes = n_cols;
  s.n_categories = n_categories;
  if (static_cast<int64_t>(codes.size()) != n_rows)
    fail("gene_group_stats: ", codes.size(), " cell codes for ", n_rows, " rows");
  s.n_cells.assign(static_cast<size_t>(n_categories + 1), 0);
  for (int32_t c : codes) ++s.n_cells[c < 0 ? n_categories : c];
  return s;
}

void stats_end(const std::vector<double>& acc, GeneGroupStats& s) {
  const size_t plane = static_cast<size_t>((s.n_categories + 1) * s.n_genes);
  s.sum.resize(plane);
  s.sum_sq.resize(plane);
  s.nnz.resize(plane);
  for (size_t i = 0; i < plane; ++i) {
    s.sum[i] = acc[3 * i];
    s.sum_sq[i] = acc[3 * i + 1];
    s.nnz[i] = static_cast<int64_t>(acc[3 * i + 2]);
  }
}
}  // namespace

// Per fixed block of cells (kStatsBlocks, by rows), float64 partials added in block order
// (reduce_blocks): the same bits for any thread count, and for the matrix held or read in pieces.
GeneGroupStats gene_group_stats(const CsrF& x, const std::vector<int32_t>& codes, int64_t n_categories,
                                const Context& ctx) {
  GeneGroupStats s = stats_begin(x.n_rows, x.n_cols, codes, n_categories);
  const int64_t nb = std::min<int64_t>(kStatsBlocks, std::max<int64_t>(1, x.n_rows));
  std::vector<double> acc;
  reduce_blocks(ctx.threads(), nb, static_cast<size_t>(3 * (n_categories + 1) * x.n_cols), acc,
                [&](int64_t b, double* part) {
                  add_rows(x, x.n_rows * b / nb, x.n_rows * (b + 1) / nb, codes, 0, n_categories, x.n_cols, part);
                });
  stats_end(acc, s);
  return s;
}

GeneGroupStats gene_group_stats(RowSource& rows, const std::vector<int32_t>& codes, int64_t n_categories,
                                const Context& ctx, int64_t piece_rows, bool* counts_like) {
  const int64_t n = rows.n_rows(), G = rows.n_cols();
  GeneGroupStats s = stats_begin(n, G, codes, n_categories);
  const int64_t nb = std::min<int64_t>(kStatsBlocks, std::max<int64_t>(1, n));
  const int64_t piece = std::max<int64_t>(1, piece_rows);
  std::mutex reading;  // the reader serves one call at a time
  std::atomic<bool> ints{true}, any{false};
  std::vector<double> acc;
  reduce_blocks(ctx.threads(), nb, static_cast<size_t>(3 * (n_categories + 1) * G), acc,
                [&](int64_t b, double* part) {
                  const int64_t r0 = n * b / nb, r1 = n * (b + 1) / nb;
                  for (int64_t a = r0; a < r1; a += piece) {
                    CsrF x;
                    {
                      std::lock_guard<std::mutex> lock(reading);
                      x = rows.read_rows(a, std::min(r1, a + piece));
                    }
                    if (!x.data.empty()) any = true;
                    if (counts_like && ints.load(std::memory_order_relaxed) && !all_counts(x.data)) ints = false;
                    add_rows(x, 0, x.n_rows, codes, a, n_categories, G, part);
                  }
                });
  if (counts_like) *counts_like = ints && any;
  stats_end(acc, s);
  return s;
}

RankGenesGroupsResult rank_genes_groups(const Dataset& d, const RankGenesGroupsOptions& o, const Context& ctx) {
  return rank_genes_groups(d, o, ctx, {});
}

void validate_rank_genes_groups_options(const RankGenesGroupsOptions& o) {
  const std::string& method = o.method;
  if (method != "t-test" && method != "t-test_overestim_var" && method != "wilcoxon" && method != "logreg")
    throw InputError("rank_genes_groups: method '" + method +
                     "' is not one of t-test, t-test_overestim_var, wilcoxon, logreg");
  if (o.corr_method != "benjamini-hochberg" && o.corr_method != "bonferroni")
    throw InputError("rank_genes_groups: corr_method '" + o.corr_method +
                     "' is not one of benjamini-hochberg, bonferroni");
  if (o.n_genes && *o.n_genes <= 0) throw InputError("rank_genes_groups: n_genes must be positive");
}

namespace {
// The streamed statistics read this many values' rows at a time (as if every gene were stored: at
// most 8 MiB of data and indices), so that a piece's buffers are the heap's reused memory, not
// fresh pages (glibc maps larger ones apart and returns them when freed).
constexpr int64_t kStreamPieceValues = int64_t(1) << 20;

RankGenesGroupsResult rank_impl(const Dataset& d, const RankGenesGroupsOptions& o, const Context& ctx,
                                const std::vector<Context*>& gpus, RowSource* streamed) {
  validate_rank_genes_groups_options(o);
  const std::string& method = o.method;
  RankGenesGroupsResult res;
  res.method = method;
  res.corr_method = o.corr_method;
  res.groupby = o.groupby;
  res.reference = o.reference;
  res.layer = o.layer;

  // The matrix: a layer, raw or X (scanpy 1.9.6's _RankGenes).
  bool use_raw = streamed || o.use_raw.value_or(d.raw != nullptr && !d.raw->X.empty());
  if (use_raw && !streamed && (!d.raw || d.raw->X.empty()))
    throw InputError("rank_genes_groups: use_raw is set but the dataset has no raw (pass --no-use-raw)");
  const Matrix* X = &d.X;
  const Table* var = &d.var;
  if (!o.layer.empty()) {
    if (o.use_raw.value_or(false)) throw InputError("rank_genes_groups: cannot use a layer and use_raw together");
    use_raw = false;
    auto it = d.layers.find(o.layer);
    if (it == d.layers.end()) throw InputError("rank_genes_groups: layer '" + o.layer + "' is not in layers");
    X = &it->second;
  } else if (use_raw) {
    X = &d.raw->X;
    var = &d.raw->var;
  }
  res.use_raw = use_raw;
  // A GPU run's X may still be on its way back to the host (Dataset::pending_x) while its values are
  // on the device (device_x): then it is tested there without waiting for the copy, and only a test
  // the device cannot run needs the host's copy (NeedsHostX: rank_genes_groups_inplace settles the
  // dataset and runs again).
  const bool x_pending = X == &d.X && d.X.empty() && d.pending_x && d.device_x;
  if (X->empty() && !x_pending && !streamed) throw InputError("rank_genes_groups: the dataset has no X");
  const int64_t x_rows = streamed ? streamed->n_rows() : x_pending ? d.device_x->n_rows : X->n_rows();
  const int64_t x_cols = streamed ? streamed->n_cols() : x_pending ? d.device_x->n_cols : X->n_cols();

  std::vector<int64_t> genes;
  if (!o.mask_var.empty()) {
    if (!var->has(o.mask_var)) throw InputError("rank_genes_groups: mask_var '" + o.mask_var + "' is not a var column");
    const Column& mc = var->at(o.mask_var);
    const auto* bc = std::get_if<BoolColumn>(&mc.c);
    if (!bc) throw InputError("rank_genes_groups: mask_var '" + o.mask_var + "' is not a boolean var column");
    for (size_t j = 0; j < bc->values.size(); ++j)
      if (bc->values[j]) genes.push_back(static_cast<int64_t>(j));
    if (genes.empty()) throw InputError("rank_genes_groups: mask_var '" + o.mask_var + "' selects no gene");
  } else {
    genes.resize(static_cast<size_t>(x_cols));
    std::iota(genes.begin(), genes.end(), int64_t{0});
  }
  for (int64_t j : genes) res.gene_names.push_back(var->index[static_cast<size_t>(j)]);
  const int64_t G = static_cast<int64_t>(genes.size());
  const int64_t N = x_rows;

  // Groups (scanpy's select_groups), the reference appended to a subset.
  const Grouping gr = grouping_of(d.obs, o.groupby);
  const int64_t n_cat = static_cast<int64_t>(gr.categories.size());
  auto cat_index = [&](const std::string& name, const char* what) -> int32_t {
    auto it = std::find(gr.categories.begin(), gr.categories.end(), name);
    if (it == gr.categories.end()) {
      std::string cats;
      for (const auto& c : gr.categories) cats += (cats.empty() ? "" : ", ") + c;
      throw InputError(std::string("rank_genes_groups: ") + what + " '" + name + "' is not a group of '" + o.groupby +
                       "' (groups: " + cats + ")");
    }
    return static_cast<int32_t>(it - gr.categories.begin());
  };
  std::vector<int32_t> sel;  // category of each tested group, groups_order
  if (o.groups.empty()) {
    for (int32_t c = 0; c < n_cat; ++c) sel.push_back(c);
  } else {
    for (const auto& g : o.groups) sel.push_back(cat_index(g, "group"));
  }
  int32_t ref = -1;
  if (o.reference != "rest") {
    ref = cat_index(o.reference, "reference");
    if (std::find(sel.begin(), sel.end(), ref) == sel.end()) sel.push_back(ref);
  }
  std::vector<int64_t> count(static_cast<size_t>(n_cat), 0);
  for (int32_t c : gr.codes)
    if (c >= 0) ++count[c];
  for (int32_t c : sel) {
    res.groups_order.push_back(gr.categories[c]);
    if (count[c] < 2)
      throw InputError("rank_genes_groups: could not calculate statistics for group '" + gr.categories[c] +
                       "' of '" + o.groupby + "' since it holds " + std::to_string(count[c]) +
                       " cell(s); every group needs at least 2");
  }
  const int64_t n_top = o.n_genes && *o.n_genes > 0 ? std::min(*o.n_genes, G) : G;
  res.n_top = n_top;

  auto T0 = std::chrono::steady_clock::now();
  std::clock_t C0 = std::clock();
  auto lap = [&](const char* what) {
    if (!std::getenv("SCURRY_RGG_TIMES")) return;
    auto t = std::chrono::steady_clock::now();
    std::clock_t c = std::clock();
    std::fprintf(stderr, "[rgg] %s %.3f s wall %.3f s cpu\n", what, std::chrono::duration<double>(t - T0).count(),
                 static_cast<double>(c - C0) / CLOCKS_PER_SEC);
    T0 = t;
    C0 = c;
  };
  // The tested cells x genes matrix as CSR float: X itself when it already is one and every gene
  // is tested, else a copy of the tested genes.
  // A GPU run's scaled X still on the device (Dataset::device_x) is tested there: no host copy.
  RankGenesGroupsGpu dev;
  bool dev_done = false, dev_counts = false;
  const bool dev_x = method != "logreg" && ctx.backend() == Backend::cuda && gpus.size() <= 1 && X == &d.X &&
                     o.mask_var.empty() && d.device_x && d.device_x->n_rows == N && d.device_x->n_cols == G &&
                     ctx.cuda();  // (another device's copy: rank_genes_groups_gpu declines it)
  std::vector<int32_t> rank_fields;  // the fields (groups less the reference)
  for (int32_t c : sel)
    if (c != ref) rank_fields.push_back(c);
  if (dev_x) {
    dev_done = rank_genes_groups_gpu(ctx, *d.device_x, gr.codes, n_cat, method == "wilcoxon", ref, rank_fields, dev,
                                     dev_counts);
    if (dev_done && dev.has_nan) dev_done = false;  // the CPU's NaN handling, on the host's copy
    lap(dev_done ? "stats and ranks (gpu, the device's X)" : "the device's X: not used");
  }
  if (!dev_done && x_pending) throw NeedsHostX("internal: rank_genes_groups needs X on the host; settle() the dataset first");
  CsrF copy;
  const CsrF* xp = dev_done || streamed ? nullptr : std::get_if<CsrF>(&X->m);
  if (streamed) {
    // (the statistics below read the rows in pieces)
  } else if (dev_done) {
    if (dev_counts) warn_counts();
  } else if (!xp) {  // (a dense or float64 matrix: converted once, no second copy)
    copy = to_csr_f(*X);
    if (!o.mask_var.empty()) copy = take_cols(copy, genes);
    xp = &copy;
  } else if (!o.mask_var.empty()) {
    copy = take_cols(*xp, genes);
    xp = &copy;
  }
  static const CsrF kNone;
  const CsrF& xc = xp ? *xp : kNone;  // (not read when the device's X was tested)
  lap("matrix");
  if (method != "logreg" && !dev_done && !streamed) {
    if (!xc.data.empty() && all_counts(xc.data)) warn_counts();
  }
  lap("count check");
  // On the GPU: the statistics and the wilcoxon rank sums (rank_genes_groups_gpu.hpp), logreg's
  // statistics (its pts) included; a matrix holding NaN (which these skip) is computed here.
  bool on_gpu = !streamed && (dev_done || ctx.backend() == Backend::cuda);
  if (on_gpu && !dev_done) {
    dev = rank_genes_groups_gpu(gpu_devices(ctx, gpus), xc, gr.codes, n_cat, method == "wilcoxon", ref, rank_fields);
    if (dev.has_nan) {
      log::warn("rank_genes_groups: the matrix holds NaN or infinite values; computing on the CPU");
      on_gpu = false;
    }
  }
  bool counts_like = false;
  const GeneGroupStats st =
      on_gpu     ? std::move(dev.st)
      : streamed ? gene_group_stats(*streamed, gr.codes, n_cat, ctx,
                                    std::max<int64_t>(1, kStreamPieceValues / std::max<int64_t>(1, x_cols)),
                                    &counts_like)
                 : gene_group_stats(xc, gr.codes, n_cat, ctx);
  if (counts_like) warn_counts();
  lap(on_gpu ? "stats and ranks (gpu)" : "stats");
  const int64_t B = n_cat + 1;
  std::vector<double> tot_sum(static_cast<size_t>(G), 0), tot_sq(static_cast<size_t>(G), 0);
  std::vector<int64_t> tot_nnz(static_cast<size_t>(G), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < G; ++j) {
      tot_sum[j] += st.sum[b * G + j];
      tot_sq[j] += st.sum_sq[b * G + j];
      tot_nnz[j] += st.nnz[b * G + j];
    }
  // mean and variance (ddof = 1, scanpy's _get_mean_var) of category c, or of everything but c.
  auto moments = [&](int32_t c, bool rest, int64_t j, double& mean, double& var, double& n) {
    double s = st.sum[c * G + j], q = st.sum_sq[c * G + j];
    n = static_cast<double>(st.n_cells[c]);
    if (rest) {
      s = tot_sum[j] - s;
      q = tot_sq[j] - q;
      n = static_cast<double>(N) - n;
    }
    mean = s / n;
    var = std::max(0.0, q / n - mean * mean) * n / (n - 1.0);
  };

  // expm1 of the data's log (uns['log1p']['base'])
  double log_base_factor = 1.0;
  if (auto it = d.uns.find("log1p"); it != d.uns.end() && it->second.is_dict()) {
    const auto& ld = it->second.dict();
    if (auto b = ld.find("base"); b != ld.end()) {
      if (const double* x = std::get_if<double>(&b->second.v)) log_base_factor = std::log(*x);
      else if (const int64_t* x = std::get_if<int64_t>(&b->second.v)) log_base_factor = std::log(static_cast<double>(*x));
    }
  }
  auto expm1f = [&](double x) { return std::expm1(x * log_base_factor); };

  // pts
  if (o.pts) {
    for (int32_t c : sel) {
      std::vector<double> pt(static_cast<size_t>(G)), pr(static_cast<size_t>(G));
      for (int64_t j = 0; j < G; ++j) {
        pt[j] = static_cast<double>(st.nnz[c * G + j]) / static_cast<double>(st.n_cells[c]);
        pr[j] = static_cast<double>(tot_nnz[j] - st.nnz[c * G + j]) / static_cast<double>(N - st.n_cells[c]);
      }
      res.pts.push_back(std::move(pt));
      if (ref < 0) res.pts_rest.push_back(std::move(pr));
    }
  }

  // The fields: groups less the reference.
  std::vector<int32_t> fields;
  for (int32_t c : sel)
    if (c != ref) fields.push_back(c);

  if (method == "logreg") {
    if (sel.size() == 1) throw InputError("rank_genes_groups: cannot perform logistic regression on a single group");
    // cells of the selected groups; classes = their category codes, sorted (sklearn's classes_)
    std::vector<uint8_t> in(static_cast<size_t>(n_cat), 0);
    for (int32_t c : sel) in[c] = 1;
    std::vector<int32_t> classes(sel.begin(), sel.end());
    std::sort(classes.begin(), classes.end());
    std::vector<int64_t> rows;
    std::vector<int32_t> y;
    for (int64_t i = 0; i < N; ++i) {
      const int32_t c = gr.codes[i];
      if (c >= 0 && in[c]) {
        rows.push_back(i);
        y.push_back(static_cast<int32_t>(std::lower_bound(classes.begin(), classes.end(), c) - classes.begin()));
      }
    }
    const CsrF Xs = take_rows(xc, rows);
    const bool dev_logreg = ctx.backend() == Backend::cuda && ctx.cuda();
    const DenseD coef = logistic_regression(Xs, y, static_cast<int>(classes.size()), o.logreg_C, o.logreg_max_iter,
                                            o.logreg_tol, ctx,
                                            dev_logreg ? gpu_devices(ctx, gpus) : std::vector<const Context*>{});
    // scanpy: binary -> one field (the first group) holding coef_[0]; else the row of each group's code
    const size_t n_fields = sel.size() <= 2 ? 1 : sel.size();
    res.group_names.clear();
    for (size_t k = 0; k < n_fields; ++k) {
      const int64_t row = sel.size() <= 2 ? 0
                                          : std::lower_bound(classes.begin(), classes.end(), sel[k]) - classes.begin();
      std::vector<double> sc(coef.row(row), coef.row(row) + G);
      res.group_names.push_back(gr.categories[sel[k]]);
      std::vector<double> key = sc;
      if (o.rankby_abs)
        for (double& v : key) v = std::fabs(v);
      res.order.push_back(top_n(key, n_top));
      res.scores.push_back(std::move(sc));
    }
    return res;
  }

  for (int32_t c : fields) res.group_names.push_back(gr.categories[c]);
  const size_t F = fields.size();
  res.scores.assign(F, std::vector<double>(static_cast<size_t>(G)));
  res.pvals.assign(F, std::vector<double>(static_cast<size_t>(G)));
  res.logfoldchanges.assign(F, std::vector<double>(static_cast<size_t>(G)));

  // Work items over (field, block of genes): each entry is computed alone, so the thread count does
  // not change any bit.
  constexpr int64_t kGeneBlock = 2048;
  const int64_t gene_blocks = (G + kGeneBlock - 1) / kGeneBlock;
  auto for_fields_genes = [&](const std::function<void(size_t, int64_t)>& fn) {
    parallel_for(ctx.threads(), static_cast<int64_t>(F) * gene_blocks, [&](int64_t w) {
      const size_t f = static_cast<size_t>(w / gene_blocks);
      const int64_t j0 = (w % gene_blocks) * kGeneBlock, j1 = std::min(G, j0 + kGeneBlock);
      for (int64_t j = j0; j < j1; ++j) fn(f, j);
    });
  };
  // log fold changes, from the means (for every test, as scanpy)
  for_fields_genes([&](size_t f, int64_t j) {
    {
      double m1, v1, n1, m2, v2, n2;
      moments(fields[f], false, j, m1, v1, n1);
      if (ref < 0) moments(fields[f], true, j, m2, v2, n2);
      else moments(ref, false, j, m2, v2, n2);
      res.logfoldchanges[f][j] = std::log2((expm1f(m1) + 1e-9) / (expm1f(m2) + 1e-9));
    }
  });

  if (method == "t-test" || method == "t-test_overestim_var") {
    // t and its degrees of freedom here; the p-values (a continued fraction of a few hundred steps
    // per test where df is large) on the device on a GPU context, else here
    const bool p_on_gpu = on_gpu && ctx.cuda();
    std::vector<double> tv, dfv;
    if (p_on_gpu) tv.resize(F * static_cast<size_t>(G)), dfv.resize(F * static_cast<size_t>(G));
    for_fields_genes([&](size_t f, int64_t j) {
      {
        double m1, v1, n1, m2, v2, n2;
        moments(fields[f], false, j, m1, v1, n1);
        if (ref < 0) moments(fields[f], true, j, m2, v2, n2);
        else moments(ref, false, j, m2, v2, n2);
        if (method == "t-test_overestim_var") n2 = n1;  // scanpy's hack for small groups
        const stats::core::TDf w = stats::core::welch_t_df(m1, v1, n1, m2, v2, n2);
        res.scores[f][j] = std::isnan(w.t) ? 0.0 : w.t;
        if (p_on_gpu) {
          tv[f * G + j] = w.t, dfv[f * G + j] = w.df;
        } else {
          const double p = stats::t_two_sided_p(w.t, w.df);
          res.pvals[f][j] = std::isnan(p) ? 1.0 : p;
        }
      }
    });
    if (p_on_gpu) {
      lap("t and df");
      const std::vector<double> pv = t_pvalues_gpu(ctx, tv, dfv);
      for (size_t f = 0; f < F; ++f)
        for (int64_t j = 0; j < G; ++j) res.pvals[f][j] = std::isnan(pv[f * G + j]) ? 1.0 : pv[f * G + j];
      lap("p-values (gpu)");
    }
  } else if (on_gpu) {
    // wilcoxon from the device's exact rank sums: the zeros' tie group added here, as rank_sums does
    for_fields_genes([&](size_t f, int64_t j) {
      const int32_t c = fields[f];
      const double n1 = static_cast<double>(st.n_cells[c]);
      const double Mt = ref < 0 ? static_cast<double>(N) : n1 + static_cast<double>(st.n_cells[ref]);
      const double m = Mt - n1;
      {
        int64_t nnz_sel, neg, r2;
        double ties;
        if (ref < 0) {
          nnz_sel = tot_nnz[j];
          neg = dev.n_neg[j];
          ties = dev.ties[j];
          r2 = dev.rank2[static_cast<size_t>(c) * G + j];
        } else {
          nnz_sel = st.nnz[c * G + j] + st.nnz[ref * G + j];
          neg = dev.n_neg[f * G + j];
          ties = dev.ties[f * G + j];
          r2 = dev.rank2[f * G + j];
        }
        const double z = Mt - static_cast<double>(nnz_sel);
        const double zero_rank = static_cast<double>(neg) + (z + 1.0) / 2.0;
        const double R = static_cast<double>(r2) / 2.0 + zero_rank * static_cast<double>(st.n_cells[c] - st.nnz[c * G + j]);
        ties += z * z * z - z;
        const double tc = o.tie_correct ? 1.0 - ties / (Mt * Mt * Mt - Mt) : 1.0;
        const double sd = std::sqrt(tc * n1 * m * (Mt + 1.0) / 12.0);
        double zs = (R - n1 * ((Mt + 1.0) / 2.0)) / sd;
        if (std::isnan(zs)) zs = 0.0;
        res.scores[f][j] = zs;
        res.pvals[f][j] = stats::normal_two_sided_p(zs);
      }
    });
  } else {
    // wilcoxon: per chunk of kRankChunk genes, every cell's entries of those genes (found by binary
    // search in its sorted row) become sortable keys, one list per gene; each list is sorted by
    // value (radix) and ranked. Rows with unsorted columns are sorted first (a copy).
    const CsrF* xs = &xc;
    CsrF sorted_copy;
    if (!rows_sorted(xc, ctx)) {
      sorted_copy = xc;
      sort_rows(sorted_copy, ctx);
      xs = &sorted_copy;
    }
    lap("row order");
    std::vector<double> Rsum(F * static_cast<size_t>(G), 0.0), T(F * static_cast<size_t>(G), 1.0);
    const int64_t nb = (G + kRankChunk - 1) / kRankChunk;
    parallel_for(ctx.threads(), nb, [&](int64_t blk) {
      const int64_t g0 = blk * kRankChunk, g1 = std::min(G, g0 + kRankChunk);
      std::vector<std::vector<uint64_t>> keys(static_cast<size_t>(g1 - g0));
      for (int64_t j = g0; j < g1; ++j) {
        int64_t n = 0;
        for (int64_t b = 0; b < B; ++b) n += st.nnz[b * G + j];
        keys[j - g0].reserve(static_cast<size_t>(n));
      }
      for (int64_t r = 0; r < N; ++r) {
        const int32_t* i0 = xs->indices.data() + xs->indptr[r];
        const int32_t* i1 = xs->indices.data() + xs->indptr[r + 1];
        const int32_t* it = std::lower_bound(i0, i1, static_cast<int32_t>(g0));
        if (it == i1 || *it >= g1) continue;
        const int32_t c = gr.codes[r];
        const int32_t bucket = c < 0 ? static_cast<int32_t>(n_cat) : c;
        for (; it != i1 && *it < g1; ++it) {
          const float v = xs->data[it - xs->indices.data()];
          if (v != 0 && !std::isnan(v)) keys[*it - g0].push_back(rank_key(v, bucket));
        }
      }
      std::vector<uint64_t> tmp;
      std::vector<double> R(static_cast<size_t>(B));
      std::vector<int64_t> nnz_b(static_cast<size_t>(B));
      std::vector<uint8_t> all(static_cast<size_t>(B), 1), pair(static_cast<size_t>(B), 0);
      for (int64_t j = g0; j < g1; ++j) {
        std::vector<uint64_t>& sorted = keys[j - g0];
        radix_sort_by_value(sorted, tmp);
        for (int64_t b = 0; b < B; ++b) nnz_b[b] = st.nnz[b * G + j];
        if (ref < 0) {
          std::fill(R.begin(), R.end(), 0.0);
          const double ties = rank_sums(sorted, all, N, st.n_cells, nnz_b, R);
          const double Nd = static_cast<double>(N);
          const double tc = o.tie_correct ? 1.0 - ties / (Nd * Nd * Nd - Nd) : 1.0;
          for (size_t f = 0; f < F; ++f) {
            Rsum[f * G + j] = R[fields[f]];
            T[f * G + j] = tc;
          }
        } else {
          for (size_t f = 0; f < F; ++f) {
            std::fill(R.begin(), R.end(), 0.0);
            std::fill(pair.begin(), pair.end(), 0);
            pair[fields[f]] = pair[ref] = 1;
            const int64_t M = st.n_cells[fields[f]] + st.n_cells[ref];
            const double ties = rank_sums(sorted, pair, M, st.n_cells, nnz_b, R);
            const double Md = static_cast<double>(M);
            Rsum[f * G + j] = R[fields[f]];
            T[f * G + j] = o.tie_correct ? 1.0 - ties / (Md * Md * Md - Md) : 1.0;
          }
        }
        std::vector<uint64_t>().swap(sorted);
      }
    });
    for (size_t f = 0; f < F; ++f) {
      const double n1 = static_cast<double>(st.n_cells[fields[f]]);
      const double Mt = ref < 0 ? static_cast<double>(N) : n1 + static_cast<double>(st.n_cells[ref]);
      const double m = Mt - n1;
      for (int64_t j = 0; j < G; ++j) {
        const double sd = std::sqrt(T[f * G + j] * n1 * m * (Mt + 1.0) / 12.0);
        double z = (Rsum[f * G + j] - n1 * ((Mt + 1.0) / 2.0)) / sd;
        if (std::isnan(z)) z = 0.0;
        res.scores[f][j] = z;
        res.pvals[f][j] = stats::normal_two_sided_p(z);
      }
    }
  }
  lap("test");
  res.pvals_adj.resize(F);
  res.order.resize(F);
  parallel_for(ctx.threads(), static_cast<int64_t>(F), [&](int64_t f) {
    res.pvals_adj[f] = o.corr_method == "benjamini-hochberg" ? stats::benjamini_hochberg(res.pvals[f])
                                                             : stats::bonferroni(res.pvals[f]);
    std::vector<double> key = res.scores[f];
    if (o.rankby_abs)
      for (double& v : key) v = std::fabs(v);
    res.order[f] = top_n(key, n_top);
  });
  lap("adjust+order");
  return res;
}
}  // namespace

RankGenesGroupsResult rank_genes_groups(const Dataset& d, const RankGenesGroupsOptions& o, const Context& ctx,
                                        const std::vector<Context*>& gpus) {
  return rank_impl(d, o, ctx, gpus, nullptr);
}

// ---- uns ------------------------------------------------------------------------------------------

void store_rank_genes_groups(Dataset& d, const RankGenesGroupsResult& r, const std::string& key) {
  Dict u;
  Dict params;
  params["groupby"] = Value(r.groupby);
  params["reference"] = Value(r.reference);
  params["method"] = Value(r.method);
  params["use_raw"] = Value(r.use_raw);
  if (!r.layer.empty()) params["layer"] = Value(r.layer);  // None: anndata writes nothing
  params["corr_method"] = Value(r.corr_method);
  u["params"] = Value(std::move(params));
  auto rec = [&](const std::vector<std::vector<double>>& v, DType dt) {
    RecArray a;
    a.n = r.n_top;
    for (size_t f = 0; f < r.group_names.size(); ++f) {
      RecField fl;
      fl.name = r.group_names[f];
      fl.dtype = dt;
      fl.num.resize(static_cast<size_t>(r.n_top));
      for (int64_t k = 0; k < r.n_top; ++k) fl.num[k] = v[f][r.order[f][k]];
      a.fields.push_back(std::move(fl));
    }
    return a;
  };
  {
    RecArray names;
    names.n = r.n_top;
    for (size_t f = 0; f < r.group_names.size(); ++f) {
      RecField fl;
      fl.name = r.group_names[f];
      fl.is_string = true;
      for (int64_t k = 0; k < r.n_top; ++k) fl.str.push_back(r.gene_names[r.order[f][k]]);
      names.fields.push_back(std::move(fl));
    }
    u["names"] = Value(std::move(names));
  }
  u["scores"] = Value(rec(r.scores, DType::f32));
  if (r.has_pvals()) {
    u["pvals"] = Value(rec(r.pvals, DType::f64));
    u["pvals_adj"] = Value(rec(r.pvals_adj, DType::f64));
    u["logfoldchanges"] = Value(rec(r.logfoldchanges, DType::f32));
  }
  auto frame = [&](const std::vector<std::vector<double>>& cols) {
    Table t;
    t.index = r.gene_names;
    t.index_name = "_index";
    for (size_t g = 0; g < cols.size(); ++g) t.set(r.groups_order[g], Column::numeric(cols[g], DType::f64));
    return t;
  };
  if (!r.pts.empty()) u["pts"] = Value(frame(r.pts));
  if (!r.pts_rest.empty()) u["pts_rest"] = Value(frame(r.pts_rest));
  d.uns[key] = Value(std::move(u));
}

RankGenesGroupsResult rank_genes_groups_inplace(Dataset& d, const RankGenesGroupsOptions& opt, const Context& ctx,
                                                const std::vector<Context*>& gpus) {
  RankGenesGroupsResult r;
  try {
    r = rank_genes_groups(d, opt, ctx, gpus);
  } catch (const NeedsHostX&) {  // (X still coming back from the GPU, and the device could not test it)
    d.settle();
    r = rank_genes_groups(d, opt, ctx, gpus);
  }
  store_rank_genes_groups(d, r, opt.key_added);
  return r;
}

RankGenesGroupsResult rank_genes_groups_inplace(Dataset& d, const RankGenesGroupsOptions& opt, const Context& ctx,
                                                RowSource& rows) {
  if (!d.raw || !opt.layer.empty() || !opt.mask_var.empty() || !opt.use_raw.value_or(true) ||
      (opt.method != "t-test" && opt.method != "t-test_overestim_var"))
    throw InputError("rank_genes_groups: the rows read back are raw's, for a t-test without layer or mask_var");
  RankGenesGroupsResult r;
  if (ctx.backend() == Backend::cpu) {
    r = rank_impl(d, opt, ctx, {}, &rows);
  } else {
    const Context cpu = Context::cpu(ctx.threads());
    r = rank_impl(d, opt, cpu, {}, &rows);
  }
  store_rank_genes_groups(d, r, opt.key_added);
  return r;
}

// ---- rank_genes_groups_df -------------------------------------------------------------------------

namespace {
const Dict& rgg_dict(const Dataset& d, const std::string& key) {
  auto it = d.uns.find(key);
  if (it == d.uns.end() || !it->second.is_dict())
    throw InputError("uns['" + key + "'] is missing: run rank_genes_groups first (or pass its key)");
  return it->second.dict();
}
const RecArray* rec_of(const Dict& u, const std::string& name) {
  auto it = u.find(name);
  return it == u.end() ? nullptr : std::get_if<RecArray>(&it->second.v);
}
}  // namespace

Table rank_genes_groups_df(const Dataset& d, const std::string& key) {
  const Dict& u = rgg_dict(d, key);
  const RecArray* names = rec_of(u, "names");
  if (!names) throw InputError("uns['" + key + "']['names'] is not a record array");
  std::vector<std::string> group, gname;
  const char* num_cols[] = {"scores", "logfoldchanges", "pvals", "pvals_adj"};
  std::vector<std::vector<double>> nums(4);
  std::vector<double> pg, pr;
  const Table* pts = nullptr;
  const Table* pts_rest = nullptr;
  if (auto it = u.find("pts"); it != u.end()) pts = std::get_if<Table>(&it->second.v);
  if (auto it = u.find("pts_rest"); it != u.end()) pts_rest = std::get_if<Table>(&it->second.v);
  std::map<std::string, int64_t> gene_row;
  if (pts)
    for (size_t i = 0; i < pts->index.size(); ++i) gene_row[pts->index[i]] = static_cast<int64_t>(i);
  for (const auto& fl : names->fields) {
    for (int64_t k = 0; k < names->n; ++k) {
      group.push_back(fl.name);
      gname.push_back(fl.str.at(k));
      for (int c = 0; c < 4; ++c) {
        const RecArray* a = rec_of(u, num_cols[c]);
        if (!a) continue;
        const RecField* af = a->field(fl.name);
        nums[c].push_back(af ? af->num.at(k) : kNaN);
      }
      if (pts) {
        auto gi = gene_row.find(fl.str[k]);
        const auto& pcol = pts->numeric(fl.name);
        pg.push_back(gi == gene_row.end() ? kNaN : pcol[gi->second]);
        if (pts_rest) pr.push_back(gi == gene_row.end() ? kNaN : pts_rest->numeric(fl.name)[gi->second]);
      }
    }
  }
  Table t;
  t.index.resize(group.size());
  for (size_t i = 0; i < group.size(); ++i) t.index[i] = std::to_string(i);
  t.set("group", Column::strings(group));
  t.set("names", Column::strings(gname));
  for (int c = 0; c < 4; ++c)
    if (rec_of(u, num_cols[c])) t.set(num_cols[c], Column::numeric(nums[c]));
  if (pts) t.set("pct_nz_group", Column::numeric(pg));
  if (pts_rest) t.set("pct_nz_reference", Column::numeric(pr));
  return t;
}

std::string rank_genes_groups_tsv(const Table& t) {
  std::ostringstream os;
  const auto& cols = t.names();
  for (size_t c = 0; c < cols.size(); ++c) os << (c ? "\t" : "") << cols[c];
  os << '\n';
  char buf[64];
  for (int64_t i = 0; i < t.n_rows(); ++i) {
    for (size_t c = 0; c < cols.size(); ++c) {
      if (c) os << '\t';
      const Column& col = t.at(cols[c]);
      if (const auto* s = std::get_if<StringColumn>(&col.c)) os << s->values[i];
      else if (const auto* n = std::get_if<NumericColumn>(&col.c)) {
        std::snprintf(buf, sizeof buf, "%.9g", n->values[i]);
        os << buf;
      }
    }
    os << '\n';
  }
  return os.str();
}

// ---- filter_rank_genes_groups ---------------------------------------------------------------------

void filter_rank_genes_groups(Dataset& d, const FilterRankGenesGroupsOptions& o, const Context& ctx) {
  (void)ctx;
  const Dict& u = rgg_dict(d, o.key);
  const RecArray* names = rec_of(u, "names");
  if (!names) throw InputError("uns['" + o.key + "']['names'] is not a record array");
  const Dict* params = nullptr;
  if (auto it = u.find("params"); it != u.end() && it->second.is_dict()) params = &it->second.dict();
  auto param_str = [&](const char* k) -> std::string {
    if (!params) return "";
    auto it = params->find(k);
    if (it == params->end()) return "";
    const std::string* s = std::get_if<std::string>(&it->second.v);
    return s ? *s : "";
  };
  bool p_use_raw = true;
  if (params)
    if (auto it = params->find("use_raw"); it != params->end())
      if (const bool* b = std::get_if<bool>(&it->second.v)) p_use_raw = *b;
  const std::string groupby = o.groupby.empty() ? param_str("groupby") : o.groupby;
  const bool use_raw = o.use_raw.value_or(p_use_raw);
  const bool same = param_str("groupby") == groupby && param_str("reference") == "rest" && p_use_raw == use_raw;
  const RecArray* lfc = same ? rec_of(u, "logfoldchanges") : nullptr;
  const Table* pts = nullptr;
  const Table* pts_rest = nullptr;
  if (same) {
    if (auto it = u.find("pts"); it != u.end()) pts = std::get_if<Table>(&it->second.v);
    if (auto it = u.find("pts_rest"); it != u.end()) pts_rest = std::get_if<Table>(&it->second.v);
    if (!pts || !pts_rest) pts = pts_rest = nullptr;
  }
  const Grouping gr = grouping_of(d.obs, groupby);
  // the matrix and its gene lookup
  const Matrix* X = &d.X;
  const Table* var = &d.var;
  if (use_raw) {
    if (!d.raw || d.raw->X.empty()) throw InputError("filter_rank_genes_groups: use_raw but the dataset has no raw");
    X = &d.raw->X;
    var = &d.raw->var;
  }
  std::map<std::string, int64_t> gene_of;
  for (size_t j = 0; j < var->index.size(); ++j) gene_of.emplace(var->index[j], static_cast<int64_t>(j));
  double log_base_factor = 1.0;
  if (auto it = d.uns.find("log1p"); it != d.uns.end() && it->second.is_dict())
    if (auto b = it->second.dict().find("base"); b != it->second.dict().end())
      if (const double* x = std::get_if<double>(&b->second.v)) log_base_factor = std::log(*x);
  RecArray out = *names;
  const int64_t N = d.n_obs();
  for (auto& fl : out.fields) {
    // the genes of this column, gene-major, for means and fractions in / out of the group
    std::vector<int64_t> cols;
    for (const auto& g : fl.str) {
      auto it = gene_of.find(g);
      if (it == gene_of.end()) throw InputError("filter_rank_genes_groups: gene '" + g + "' is not in the matrix");
      cols.push_back(it->second);
    }
    std::vector<double> frac_in(fl.str.size()), frac_out(fl.str.size()), fold(fl.str.size());
    auto in_it = std::find(gr.categories.begin(), gr.categories.end(), fl.name);
    const int32_t cat = in_it == gr.categories.end() ? -2 : static_cast<int32_t>(in_it - gr.categories.begin());
    int64_t n_in = 0;
    for (int32_t c : gr.codes) n_in += c == cat;
    if (!pts || !lfc) {
      std::vector<int64_t> uniq = cols;
      std::sort(uniq.begin(), uniq.end());
      uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
      const CsrF gm = gene_major(*X, uniq, ctx);
      for (size_t k = 0; k < cols.size(); ++k) {
        const int64_t j = std::lower_bound(uniq.begin(), uniq.end(), cols[k]) - uniq.begin();
        double s_in = 0, s_out = 0;
        int64_t z_in = 0, z_out = 0;
        for (int64_t q = gm.indptr[j]; q < gm.indptr[j + 1]; ++q) {
          if (gr.codes[gm.indices[q]] == cat) s_in += gm.data[q], ++z_in;
          else s_out += gm.data[q], ++z_out;
        }
        const double nin = static_cast<double>(n_in), nout = static_cast<double>(N - n_in);
        if (!pts) {
          frac_in[k] = z_in / nin;
          frac_out[k] = z_out / nout;
        }
        if (!lfc)
          fold[k] = std::log2((std::expm1(s_in / nin * log_base_factor) + 1e-9) /
                              (std::expm1(s_out / nout * log_base_factor) + 1e-9));
      }
    }
    if (pts) {
      std::map<std::string, int64_t> prow;
      for (size_t i = 0; i < pts->index.size(); ++i) prow.emplace(pts->index[i], static_cast<int64_t>(i));
      const auto& pin = pts->numeric(fl.name);
      const auto& pout = pts_rest->numeric(fl.name);
      for (size_t k = 0; k < fl.str.size(); ++k) {
        auto it = prow.find(fl.str[k]);
        frac_in[k] = it == prow.end() ? kNaN : pin[it->second];
        frac_out[k] = it == prow.end() ? kNaN : pout[it->second];
      }
    }
    if (lfc) {
      const RecField* lf = lfc->field(fl.name);
      for (size_t k = 0; k < fl.str.size(); ++k) fold[k] = lf ? static_cast<double>(static_cast<float>(lf->num[k])) : kNaN;
    }
    for (size_t k = 0; k < fl.str.size(); ++k) {
      const double fc = o.compare_abs ? std::fabs(fold[k]) : fold[k];
      const bool keep = frac_in[k] > o.min_in_group_fraction && frac_out[k] < o.max_out_group_fraction &&
                        fc > o.min_fold_change;
      if (!keep) fl.str[k] = "nan";
    }
  }
  Dict copy = u;
  copy["names"] = Value(std::move(out));
  d.uns[o.key_added] = Value(std::move(copy));
}

}  // namespace scurry
