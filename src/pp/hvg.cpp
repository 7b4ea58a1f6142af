// scurry: highly variable genes; see hvg.hpp. Follows scanpy 1.9.6
// (scanpy/preprocessing/_highly_variable_genes.py, scanpy/experimental/pp/_highly_variable_genes.py)
// step by step; pandas' cut/groupby and numpy's percentile are reproduced where they decide flags.
#include "pp/hvg.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "exec/parallel.hpp"
#include "pp/loess.hpp"

namespace scurry {
namespace {

constexpr const char* kWhere = "highly_variable_genes";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Work per row block (nonzeros plus dense work per row): fixed, independent of the thread count.
constexpr int64_t kBlockCost = int64_t{1} << 18;
// Row blocks whose per-gene partials are held at once (bounds memory: kInFlight x width doubles).
constexpr int64_t kInFlight = 16;

// ---------------------------------------------------------------------------------------------
// Row lists and the per-gene block reduction.

// Cells over all ranks (each rank holds rows of them).
int64_t global_count(const Context& ctx, int64_t n) {
  ctx.comm().allreduce_sum(&n, 1);
  return n;
}

// Positions [0, n) name rows: rows->at(p), or p itself when rows is null.
struct RowList {
  const std::vector<int64_t>* rows = nullptr;
  int64_t n = 0;
  int64_t row(int64_t p) const { return rows ? (*rows)[p] : p; }
};

std::vector<int64_t> make_blocks(const CsrF& X, const RowList& rl, int64_t dense_cost) {
  std::vector<int64_t> bounds{0};
  int64_t cost = 0;
  for (int64_t p = 0; p < rl.n; ++p) {
    cost += X.row_nnz(rl.row(p)) + dense_cost + 1;
    if (cost >= kBlockCost) {
      bounds.push_back(p + 1);
      cost = 0;
    }
  }
  if (bounds.back() != rl.n) bounds.push_back(rl.n);
  return bounds;
}

// Sum over row blocks of fn(pos_begin, pos_end, partial) where partial is a zeroed array of `width`
// doubles; partials are added in block order, then allreduced over ranks.
template <class F>
std::vector<double> column_reduce(const Context& ctx, const CsrF& X, const RowList& rl, int64_t width,
                                  int64_t dense_cost, F&& fn) {
  const std::vector<int64_t> bounds = make_blocks(X, rl, dense_cost);
  const int64_t nb = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  std::vector<std::vector<double>> part(static_cast<size_t>(std::min(nb, kInFlight)));
  for (int64_t c0 = 0; c0 < nb; c0 += kInFlight) {
    const int64_t c1 = std::min(nb, c0 + kInFlight);
    parallel_for(ctx.threads(), c1 - c0, [&](int64_t i) {
      std::vector<double>& a = part[static_cast<size_t>(i)];
      a.assign(static_cast<size_t>(width), 0.0);
      fn(bounds[c0 + i], bounds[c0 + i + 1], a.data());
    });
    for (int64_t i = 0; i < c1 - c0; ++i) {
      const std::vector<double>& a = part[static_cast<size_t>(i)];
      for (int64_t j = 0; j < width; ++j) total[j] += a[j];
    }
  }
  ctx.comm().allreduce_sum(total.data(), total.size());
  return total;
}

// Per-gene sum, sum of squares and count of positive entries of f(x) over the listed rows.
struct Moments {
  int64_t n = 0;
  std::vector<double> sum, sumsq, npos;
};

// A float -> float function memoised in a small direct-mapped table (one per row block): the values
// of a log-normalised row are log1p(count * size factor), few distinct ones per cell (one per count
// level), so seurat's expm1 (glibc's expm1f, ~18 ns a call here) runs once per distinct value
// instead of once per nonzero. The same function is called, so the results are its bits. Entries
// start as (0, f(0)): a valid pair, no sentinel.
template <class F>
struct Memo {
  static constexpr int kBits = 10;
  F f;
  std::vector<uint32_t> key;
  std::vector<float> val;
  explicit Memo(F fn) : f(fn), key(size_t{1} << kBits, 0u), val(size_t{1} << kBits, fn(0.0f)) {}
  float operator()(float x) {
    uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    const uint32_t h = (b * 2654435761u) >> (32 - kBits);  // Knuth's multiplicative hash
    if (key[h] != b) {
      key[h] = b;
      val[h] = f(x);
    }
    return val[h];
  }
};

// Per-gene sums into one interleaved array (sum, sum of squares, positives per gene: one cache line
// a gene instead of three), then scattered into acc's three arrays; the same additions in the same
// order as three arrays, so the same bits.
template <class T>
Moments moments(const Context& ctx, const CsrF& X, const RowList& rl, T transform) {
  const int64_t G = X.n_cols;
  std::vector<double> t = column_reduce(ctx, X, rl, 3 * G, 0, [&](int64_t p0, int64_t p1, double* acc) {
    T tr = transform;  // this block's own copy (a Memo's table)
    std::vector<double> inter(static_cast<size_t>(3 * G), 0.0);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r = rl.row(p);
      for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) {
        const int32_t g = X.indices[k];
        const float x = X.data[k];
        const double v = static_cast<double>(tr(x));
        double* a = inter.data() + 3 * static_cast<int64_t>(g);
        a[0] += v;
        a[1] += v * v;
        a[2] += x > 0 ? 1.0 : 0.0;
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      acc[g] = inter[3 * g];
      acc[G + g] = inter[3 * g + 1];
      acc[2 * G + g] = inter[3 * g + 2];
    }
  });
  Moments m;
  m.n = global_count(ctx, rl.n);
  m.sum.assign(t.begin(), t.begin() + G);
  m.sumsq.assign(t.begin() + G, t.begin() + 2 * G);
  m.npos.assign(t.begin() + 2 * G, t.end());
  return m;
}

void mean_var(const Moments& m, std::vector<double>& mean, std::vector<double>& var) {
  mean_var_from_sums(m.sum, m.sumsq, static_cast<double>(m.n), mean, var);
}

// ---------------------------------------------------------------------------------------------
// pandas / numpy pieces.

// Python's repr of a float (shortest round-trip digits; exponent form below 1e-4 or from 1e16).
std::string py_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  const int exp10 = std::stoi(s.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  const int nd = static_cast<int>(digits.size());
  const int decpt = exp10 + 1;  // value = 0.digits * 10^decpt
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0)
      out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    else if (decpt < nd)
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
    else
      out = digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
  } else {
    out = digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    const int ex = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", ex < 0 ? '-' : '+', std::abs(ex));
    out += eb;
  }
  return sign + out;
}

// pandas.core.reshape.tile._round_frac.
double round_frac(double x, int precision) {
  if (!std::isfinite(x) || x == 0) return x;
  double whole;
  const double frac = std::modf(x, &whole);
  int digits = precision;
  if (whole == 0) digits = -static_cast<int>(std::floor(std::log10(std::fabs(frac)))) - 1 + precision;
  const double f = std::pow(10.0, digits);  // exact for digits <= 22
  return std::nearbyint(x * f) / f;
}

// pandas' interval labels "(a, b]" for the bins (precision inferred as pandas does from 3).
std::vector<std::string> interval_labels(const std::vector<double>& bins) {
  int precision = 3;
  for (int p = 3; p < 20; ++p) {
    std::set<double> levels;
    for (double b : bins) levels.insert(round_frac(b, p));
    if (levels.size() == bins.size()) {
      precision = p;
      break;
    }
  }
  std::vector<std::string> labels;
  for (size_t i = 0; i + 1 < bins.size(); ++i)
    labels.push_back("(" + py_repr(round_frac(bins[i], precision)) + ", " + py_repr(round_frac(bins[i + 1], precision)) +
                     "]");
  return labels;
}

// pd.cut code of x for right-closed bins: searchsorted(bins, x, 'left') - 1; -1 outside or NaN.
int32_t cut_code(const std::vector<double>& bins, double x) {
  if (std::isnan(x)) return -1;
  const int64_t id = std::lower_bound(bins.begin(), bins.end(), x) - bins.begin();
  if (id == 0 || id == static_cast<int64_t>(bins.size())) return -1;
  return static_cast<int32_t>(id - 1);
}

// np.percentile(v, q) with the default 'linear' method.
double np_percentile(std::vector<double> sorted_v, double q) {
  const int64_t n = static_cast<int64_t>(sorted_v.size());
  const double virt = static_cast<double>(n - 1) * (q / 100.0);
  if (virt >= static_cast<double>(n - 1)) return sorted_v[n - 1];
  if (virt < 0) return sorted_v[0];
  const double prev = std::floor(virt);
  const double gamma = virt - prev;
  const double a = sorted_v[static_cast<size_t>(prev)], b = sorted_v[static_cast<size_t>(prev) + 1];
  const double diff = b - a;
  return gamma >= 0.5 ? b - diff * (1 - gamma) : a + diff * gamma;
}

// Natural-sort comparison (natsort's default key: digit runs compare as integers).
bool natural_less(const std::string& a, const std::string& b) {
  auto tokens = [](const std::string& s) {
    std::vector<std::pair<bool, std::string>> t;  // (is_number, text)
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) t.push_back({false, ""});
    size_t i = 0;
    while (i < s.size()) {
      const bool dig = std::isdigit(static_cast<unsigned char>(s[i])) != 0;
      size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) != 0) == dig) ++j;
      std::string tok = s.substr(i, j - i);
      if (dig) {
        size_t z = tok.find_first_not_of('0');
        tok = z == std::string::npos ? "0" : tok.substr(z);
      }
      t.push_back({dig, tok});
      i = j;
    }
    return t;
  };
  const auto ta = tokens(a), tb = tokens(b);
  for (size_t i = 0; i < std::min(ta.size(), tb.size()); ++i) {
    const auto& x = ta[i];
    const auto& y = tb[i];
    if (x.first && y.first) {
      if (x.second.size() != y.second.size()) return x.second.size() < y.second.size();
      if (x.second != y.second) return x.second < y.second;
    } else if (x.first != y.first) {
      return x.first;  // numbers before text (natsort puts them in separate tuple slots anyway)
    } else if (x.second != y.second) {
      return x.second < y.second;
    }
  }
  return ta.size() < tb.size();
}

// pandas groupby mean (Kahan-compensated sum, NaN skipped) and std (Welford, ddof = 1, NaN skipped).
struct BinStats {
  std::vector<double> mean, std, median, mad;
};

// ---------------------------------------------------------------------------------------------
// seurat / cell_ranger on one batch (scanpy's _highly_variable_genes_single_batch), on the given
// per-gene mean and variance of the (expm1'd for seurat) data.
struct SingleBatch {
  std::vector<double> means, dispersions, dispersions_norm;
  std::vector<int32_t> mean_bin;
  std::vector<std::string> categories;
  std::vector<uint8_t> highly_variable;
};

SingleBatch dispersion_single_batch(std::vector<double> mean, const std::vector<double>& var, bool seurat,
                                    const HvgOptions& opt) {
  const size_t G = mean.size();
  SingleBatch r;
  if (G == 0) return r;
  for (double& m : mean)
    if (m == 0) m = 1e-12;
  std::vector<double> disp(G);
  for (size_t g = 0; g < G; ++g) disp[g] = var[g] / mean[g];
  if (seurat) {
    for (size_t g = 0; g < G; ++g) {
      if (disp[g] == 0) disp[g] = kNaN;
      disp[g] = std::log(disp[g]);
      mean[g] = std::log1p(mean[g]);
    }
  }
  r.means = mean;
  r.dispersions = disp;

  // Bins.
  std::vector<double> bins;
  if (seurat) {
    double mn = *std::min_element(mean.begin(), mean.end()), mx = *std::max_element(mean.begin(), mean.end());
    const int nb = opt.n_bins;
    if (mn == mx) {  // pandas: widen a zero range by 0.1 %
      mn -= mn != 0 ? 0.001 * std::fabs(mn) : 0.001;
      mx += mx != 0 ? 0.001 * std::fabs(mx) : 0.001;
      bins.resize(static_cast<size_t>(nb) + 1);
      const double step = (mx - mn) / nb;
      for (int i = 0; i <= nb; ++i) bins[i] = static_cast<double>(i) * step + mn;
      bins[nb] = mx;
    } else {
      bins.resize(static_cast<size_t>(nb) + 1);
      const double step = (mx - mn) / nb;  // np.linspace
      for (int i = 0; i <= nb; ++i) bins[i] = static_cast<double>(i) * step + mn;
      bins[nb] = mx;
      bins[0] -= (mx - mn) * 0.001;
    }
  } else {
    std::vector<double> sorted = mean;
    std::sort(sorted.begin(), sorted.end());
    bins.push_back(-std::numeric_limits<double>::infinity());
    for (int q = 10; q < 105; q += 5) bins.push_back(np_percentile(sorted, static_cast<double>(q)));
    bins.push_back(std::numeric_limits<double>::infinity());
    for (size_t i = 1; i < bins.size(); ++i)
      if (bins[i] == bins[i - 1])
        fail_input(kWhere, "flavor cell_ranger: the percentile bin edges of the gene means are not unique (",
                   bins[i], " repeats; too many genes share a mean, e.g. in a small batch); scanpy fails here too "
                   "(pandas: 'Bin edges must be unique'); use flavor seurat or filter genes");
  }
  r.categories = interval_labels(bins);
  const int64_t nbins = static_cast<int64_t>(bins.size()) - 1;
  r.mean_bin.resize(G);
  for (size_t g = 0; g < G; ++g) r.mean_bin[g] = cut_code(bins, mean[g]);

  // Per-bin statistics of the dispersions.
  std::vector<std::vector<double>> members(static_cast<size_t>(nbins));
  for (size_t g = 0; g < G; ++g)
    if (r.mean_bin[g] >= 0) members[r.mean_bin[g]].push_back(disp[g]);
  std::vector<double> center(static_cast<size_t>(nbins), kNaN), scale(static_cast<size_t>(nbins), kNaN);
  for (int64_t b = 0; b < nbins; ++b) {
    const std::vector<double>& v = members[b];
    if (v.empty()) continue;
    if (seurat) {
      double sum = 0, comp = 0, wmean = 0, ssqdm = 0;
      int64_t cnt = 0;
      for (double x : v) {
        if (std::isnan(x)) continue;
        const double y = x - comp, t = sum + y;
        comp = t - sum - y;
        sum = t;
        ++cnt;
        const double old = wmean;
        wmean += (x - old) / static_cast<double>(cnt);
        ssqdm += (x - wmean) * (x - old);
      }
      double m = cnt > 0 ? sum / static_cast<double>(cnt) : kNaN;
      double s = cnt > 1 ? std::sqrt(ssqdm / static_cast<double>(cnt - 1)) : kNaN;
      if (std::isnan(s)) {  // one gene in the bin: scanpy sets its normalized dispersion to 1
        s = m;
        m = 0;
      }
      center[b] = m;
      scale[b] = s;
    } else {
      std::vector<double> nn;
      for (double x : v)
        if (!std::isnan(x)) nn.push_back(x);
      auto median = [](std::vector<double> a) {
        std::sort(a.begin(), a.end());
        const size_t n = a.size();
        if (n == 0) return kNaN;
        return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
      };
      const double med = median(nn);
      center[b] = med;
      // statsmodels.robust.mad: median(|a - median(a)|) / 0.6745..., NaN if any value is NaN. The
      // division by 0.6745 is applied to the normalised dispersion below (x / mad * c rather than
      // x / (mad / c)): in a bin of odd size the gene whose deviation is the MAD then gets exactly c
      // (x / x = 1), the same in every bin and on every backend, so those ties at a cut-off of
      // n_top_genes are exact (scanpy's x / (mad / c) rounds them apart by an ulp or two, bin by bin).
      if (nn.size() != v.size()) {
        scale[b] = kNaN;
      } else {
        std::vector<double> dev(v.size());
        for (size_t i = 0; i < v.size(); ++i) dev[i] = std::fabs(v[i] - med);
        scale[b] = median(dev);
      }
    }
  }
  const double factor = seurat ? 1.0 : 0.6744897501960817;
  r.dispersions_norm.resize(G);
  for (size_t g = 0; g < G; ++g) {
    const int32_t b = r.mean_bin[g];
    r.dispersions_norm[g] = b < 0 ? kNaN : (disp[g] - center[b]) / scale[b] * factor;
  }

  // Selection.
  r.highly_variable.assign(G, 0);
  if (opt.n_top_genes) {
    std::vector<double> finite;
    for (double x : r.dispersions_norm)
      if (!std::isnan(x)) finite.push_back(x);
    std::sort(finite.begin(), finite.end(), std::greater<double>());
    int64_t ntop = *opt.n_top_genes;
    if (ntop > static_cast<int64_t>(G)) {
      log::info(detail::concat(kWhere, ": n_top_genes (", ntop, ") > number of genes (", G, "), returning all genes"));
      ntop = static_cast<int64_t>(G);
    }
    if (ntop > static_cast<int64_t>(finite.size())) {
      log::warn(detail::concat(kWhere, ": n_top_genes (", ntop, ") > number of normalized dispersions (", finite.size(),
                               "), returning all genes with normalized dispersions"));
      ntop = static_cast<int64_t>(finite.size());
    }
    if (ntop > 0) {
      const double cut = finite[static_cast<size_t>(ntop - 1)];
      for (size_t g = 0; g < G; ++g) {
        double x = r.dispersions_norm[g];  // np.nan_to_num
        if (std::isnan(x)) x = 0;
        else if (std::isinf(x)) x = x > 0 ? std::numeric_limits<double>::max() : -std::numeric_limits<double>::max();
        r.highly_variable[g] = x >= cut;
      }
    }
  } else {
    for (size_t g = 0; g < G; ++g) {
      double& dn = r.dispersions_norm[g];
      if (std::isnan(dn)) dn = 0;  // scanpy sets them to 0 in place ("similar to Seurat")
      r.highly_variable[g] = mean[g] > opt.min_mean && mean[g] < opt.max_mean && dn > opt.min_disp && dn < opt.max_disp;
    }
  }
  return r;
}

// Ranks (0 = largest) as scanpy's np.argsort(np.argsort(-v)), NaN last. numpy's default sort is
// not stable (and on AVX-512 machines is a vectorized sort whose order of equal values is not
// reproducible in scalar code): equal scores rank here in gene order.
std::vector<double> descending_ranks(const std::vector<double>& v) {
  const size_t G = v.size();
  std::vector<int64_t> order(G);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
    if (na || nb) return !na && nb;
    return v[a] > v[b];
  });
  std::vector<double> rank(G);
  for (size_t i = 0; i < G; ++i) rank[order[i]] = static_cast<double>(i);
  return rank;
}

// Ranks per batch -> nbatches (rank < ntop) and median of the ranks < ntop (NaN if none), as float32.
void combine_ranks(const std::vector<std::vector<double>>& ranks, int64_t ntop, std::vector<double>& median_rank,
                   std::vector<int64_t>& nbatches) {
  const size_t G = ranks.empty() ? 0 : ranks[0].size();
  median_rank.assign(G, kNaN);
  nbatches.assign(G, 0);
  std::vector<float> top;
  for (size_t g = 0; g < G; ++g) {
    top.clear();
    for (const auto& r : ranks)
      if (r[g] < static_cast<double>(ntop)) top.push_back(static_cast<float>(r[g]));
    nbatches[g] = static_cast<int64_t>(top.size());
    if (top.empty()) continue;
    std::sort(top.begin(), top.end());
    const size_t n = top.size();
    const float med = n % 2 ? top[n / 2] : (top[n / 2 - 1] + top[n / 2]) / 2.0f;
    median_rank[g] = static_cast<double>(med);
  }
}

// Selects the first ntop genes of `order`.
std::vector<uint8_t> take_top(const std::vector<int64_t>& order, int64_t ntop) {
  std::vector<uint8_t> hv(order.size(), 0);
  for (int64_t i = 0; i < std::min<int64_t>(ntop, static_cast<int64_t>(order.size())); ++i) hv[order[i]] = 1;
  return hv;
}

bool nan_last_less(double a, double b) {  // ascending, NaN last
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return !na && nb;
  return a < b;
}

void check_counts(const CsrF& X, const std::string& flavor) {
  for (float x : X.data) {
    if (!(x >= 0) || x != std::floor(x)) {
      log::warn(detail::concat(kWhere, ": flavor '", flavor, "' expects raw count data, but non-integers were found"));
      return;
    }
  }
}

// This rank's rows of each batch (batches are decided over all ranks: a batch with no cell on any
// rank is dropped; one with cells elsewhere only stays, with an empty local list).
std::vector<std::vector<int64_t>> batch_rows(const Context& ctx, const std::vector<int32_t>& batch, int64_t n_cells,
                                             int64_t& n_batches) {
  std::vector<std::vector<int64_t>> rows;
  if (global_count(ctx, batch.empty() ? 0 : 1) == 0) {
    n_batches = 1;
    return rows;  // empty: all rows
  }
  if (static_cast<int64_t>(batch.size()) != n_cells)
    fail_input(kWhere, "batch labels have ", batch.size(), " entries but the matrix has ", n_cells, " cells");
  int64_t mx = -1;
  for (int32_t b : batch) {
    if (b < 0) fail_input(kWhere, "batch code ", b, " is negative (missing batch label?)");
    mx = std::max<int64_t>(mx, b);
  }
  if (ctx.comm().size() > 1)
    for (int64_t m : allgather_count(ctx.comm(), mx)) mx = std::max(mx, m);
  rows.resize(static_cast<size_t>(mx) + 1);
  for (int64_t i = 0; i < n_cells; ++i) rows[batch[i]].push_back(i);
  std::vector<int64_t> sizes(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) sizes[b] = static_cast<int64_t>(rows[b].size());
  ctx.comm().allreduce_sum(sizes.data(), sizes.size());
  std::vector<std::vector<int64_t>> kept;
  for (size_t b = 0; b < rows.size(); ++b)
    if (sizes[b] > 0) kept.push_back(std::move(rows[b]));
  n_batches = static_cast<int64_t>(kept.size());
  return kept;
}

// ---------------------------------------------------------------------------------------------
// Flavours.

HvgResult hvg_dispersion_single(const std::vector<double>& mean, const std::vector<double>& var, const HvgOptions& opt) {
  SingleBatch sb = dispersion_single_batch(mean, var, opt.flavor == "seurat", opt);
  HvgResult res;
  res.flavor = opt.flavor;
  res.means = std::move(sb.means);
  res.dispersions = std::move(sb.dispersions);
  res.dispersions_norm = std::move(sb.dispersions_norm);
  res.mean_bin = std::move(sb.mean_bin);
  res.mean_bin_categories = std::move(sb.categories);
  res.highly_variable = std::move(sb.highly_variable);
  return res;
}

HvgResult hvg_dispersion(const Context& ctx, const CsrF& X, const HvgOptions& opt,
                         const std::vector<std::vector<int64_t>>& brows, const std::vector<std::string>& names) {
  const bool seurat = opt.flavor == "seurat";
  const int64_t G = X.n_cols;
  float factor = 1.0f;
  if (seurat && opt.log1p_base > 0) factor = static_cast<float>(std::log(opt.log1p_base));
  const Memo transform([seurat, factor](float x) -> float {
    if (!seurat) return x;
    return std::expm1(factor == 1.0f ? x : x * factor);
  });
  HvgResult res;
  res.flavor = opt.flavor;
  if (brows.empty()) {
    Moments m = moments(ctx, X, RowList{nullptr, X.n_rows}, transform);
    std::vector<double> mean, var;
    mean_var(m, mean, var);
    return hvg_dispersion_single(mean, var, opt);
  }
  // Per batch on the genes expressed in it; absent genes count as 0 (not NaN) in the means.
  const int64_t B = static_cast<int64_t>(brows.size());
  std::vector<double> sm(G, 0), sd(G, 0), sn(G, 0);
  std::vector<int64_t> cm(G, 0), cd(G, 0), cn(G, 0), nb(G, 0);
  for (const auto& rows : brows) {
    Moments m = moments(ctx, X, RowList{&rows, static_cast<int64_t>(rows.size())}, transform);
    std::vector<double> mean, var;
    mean_var(m, mean, var);
    std::vector<int64_t> keep;
    for (int64_t g = 0; g < G; ++g)
      if (m.npos[g] >= 1) keep.push_back(g);
    std::vector<double> km(keep.size()), kv(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) {
      km[i] = mean[keep[i]];
      kv[i] = var[keep[i]];
    }
    SingleBatch sb = dispersion_single_batch(km, kv, seurat, opt);
    std::vector<double> bm(G, 0), bd(G, 0), bn(G, 0);
    std::vector<uint8_t> bh(G, 0);
    for (size_t i = 0; i < keep.size(); ++i) {
      bm[keep[i]] = sb.means[i];
      bd[keep[i]] = sb.dispersions[i];
      bn[keep[i]] = sb.dispersions_norm[i];
      bh[keep[i]] = sb.highly_variable[i];
    }
    for (int64_t g = 0; g < G; ++g) {  // np.nanmean
      if (!std::isnan(bm[g])) sm[g] += bm[g], ++cm[g];
      if (!std::isnan(bd[g])) sd[g] += bd[g], ++cd[g];
      if (!std::isnan(bn[g])) sn[g] += bn[g], ++cn[g];
      nb[g] += bh[g];
    }
  }
  res.n_batches = B;
  res.means.resize(G);
  res.dispersions.resize(G);
  res.dispersions_norm.resize(G);
  res.highly_variable_nbatches = nb;
  res.highly_variable_intersection.resize(G);
  for (int64_t g = 0; g < G; ++g) {
    res.means[g] = cm[g] ? sm[g] / static_cast<double>(cm[g]) : kNaN;
    res.dispersions[g] = cd[g] ? sd[g] / static_cast<double>(cd[g]) : kNaN;
    res.dispersions_norm[g] = cn[g] ? sn[g] / static_cast<double>(cn[g]) : kNaN;
    res.highly_variable_intersection[g] = nb[g] == B;
  }
  if (opt.n_top_genes) {
    // Genes in name order (pandas groupby sorts by name), then stable sort by
    // (nbatches desc, dispersions_norm desc, NaN last).
    std::vector<int64_t> order(G);
    std::iota(order.begin(), order.end(), 0);
    if (static_cast<int64_t>(names.size()) == G)
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return names[a] < names[b]; });
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      if (nb[a] != nb[b]) return nb[a] > nb[b];
      const double x = res.dispersions_norm[a], y = res.dispersions_norm[b];
      const bool nx = std::isnan(x), ny = std::isnan(y);
      if (nx || ny) return !nx && ny;
      return x > y;
    });
    res.highly_variable = take_top(order, *opt.n_top_genes);
  } else {
    res.highly_variable.assign(G, 0);
    for (int64_t g = 0; g < G; ++g) {
      double& dn = res.dispersions_norm[g];
      if (std::isnan(dn)) dn = 0;
      const double mu = res.means[g];
      res.highly_variable[g] = mu > opt.min_mean && mu < opt.max_mean && dn > opt.min_disp && dn < opt.max_disp;
    }
  }
  return res;
}

HvgResult hvg_seurat_v3(const Context& ctx, const CsrF& X, const HvgOptions& opt,
                        const std::vector<std::vector<int64_t>>& brows) {
  const int64_t G = X.n_cols;
  const int64_t ntop = opt.n_top_genes ? *opt.n_top_genes : 2000;
  if (opt.check_values) check_counts(X, opt.flavor);
  if (ntop > G)
    log::warn(detail::concat(kWhere, ": n_top_genes (", ntop, ") > number of genes (", G, "); all genes are selected"));
  auto ident = [](float x) { return x; };
  HvgResult res;
  res.flavor = opt.flavor;
  {
    Moments all = moments(ctx, X, RowList{nullptr, X.n_rows}, ident);
    mean_var(all, res.means, res.variances);
  }
  std::vector<std::vector<int64_t>> one;
  const std::vector<std::vector<int64_t>>* batches = &brows;
  if (brows.empty()) {
    one.emplace_back();  // marker: all rows
    batches = &one;
  }
  std::vector<std::vector<double>> ranks;
  res.variances_norm.assign(G, 0.0);
  for (const auto& rows : *batches) {
    const RowList rl = brows.empty() ? RowList{nullptr, X.n_rows} : RowList{&rows, static_cast<int64_t>(rows.size())};
    const int64_t N = global_count(ctx, rl.n);
    if (N < 2) fail_input(kWhere, "flavor seurat_v3: a batch has ", N, " cell(s); each batch needs at least 2");
    std::vector<double> mean, var;
    if (brows.empty()) {
      mean = res.means;
      var = res.variances;
    } else {
      mean_var(moments(ctx, X, rl, ident), mean, var);
    }
    std::vector<double> lx, ly;
    std::vector<int64_t> nc;
    for (int64_t g = 0; g < G; ++g)
      if (var[g] > 0) {
        nc.push_back(g);
        lx.push_back(std::log10(mean[g]));
        ly.push_back(std::log10(var[g]));
      }
    LoessOptions lo;
    lo.span = opt.span;
    lo.degree = 2;
    std::vector<double> est(G, 0.0);
    try {
      LoessResult fit = loess(lx, ly, lo);
      for (size_t i = 0; i < nc.size(); ++i) est[nc[i]] = fit.fitted[i];
    } catch (const InputError& e) {
      fail_input(kWhere, "flavor seurat_v3: the LOESS fit of log10(variance) on log10(mean) over ", nc.size(),
                 " non-constant genes failed (", e.what(), ")");
    }
    std::vector<double> reg_std(G), clip_val(G);
    const double vmax = std::sqrt(static_cast<double>(N));
    for (int64_t g = 0; g < G; ++g) {
      reg_std[g] = std::sqrt(std::pow(10.0, est[g]));
      clip_val[g] = reg_std[g] * vmax + mean[g];
    }
    std::vector<double> t = column_reduce(ctx, X, rl, 2 * G, 0, [&](int64_t p0, int64_t p1, double* acc) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t r = rl.row(p);
        for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) {
          const int32_t g = X.indices[k];
          double x = static_cast<double>(X.data[k]);
          if (x > clip_val[g]) x = clip_val[g];
          acc[g] += x;
          acc[G + g] += x * x;
        }
      }
    });
    std::vector<double> norm(G);
    const double n = static_cast<double>(N);
    for (int64_t g = 0; g < G; ++g) {
      const double s = t[g], sq = t[G + g];
      norm[g] = (1 / ((n - 1) * (reg_std[g] * reg_std[g]))) * ((n * (mean[g] * mean[g])) + sq - 2 * s * mean[g]);
      res.variances_norm[g] += norm[g];
    }
    ranks.push_back(descending_ranks(norm));
  }
  const int64_t B = static_cast<int64_t>(batches->size());
  res.n_batches = B;
  for (double& v : res.variances_norm) v /= static_cast<double>(B);
  combine_ranks(ranks, ntop, res.highly_variable_rank, res.highly_variable_nbatches);
  std::vector<int64_t> order(G);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double x = res.highly_variable_rank[a], y = res.highly_variable_rank[b];
    if (nan_last_less(x, y)) return true;
    if (nan_last_less(y, x)) return false;
    return res.highly_variable_nbatches[a] > res.highly_variable_nbatches[b];
  });
  res.highly_variable = take_top(order, ntop);
  res.highly_variable_intersection.resize(G);
  for (int64_t g = 0; g < G; ++g) res.highly_variable_intersection[g] = res.highly_variable_nbatches[g] == B;
  return res;
}

HvgResult hvg_pearson(const Context& ctx, const CsrF& X, const HvgOptions& opt,
                      const std::vector<std::vector<int64_t>>& brows) {
  const int64_t G = X.n_cols;
  if (!opt.n_top_genes)
    fail_input(kWhere, "flavor pearson_residuals requires n_top_genes (the number of genes to select)");
  const int64_t ntop = *opt.n_top_genes;
  if (opt.check_values) check_counts(X, opt.flavor);
  if (!(opt.theta > 0)) fail_input(kWhere, "pearson residuals require theta > 0, got ", opt.theta);
  if (ntop > G)
    log::warn(detail::concat(kWhere, ": n_top_genes (", ntop, ") > number of genes (", G, "); all genes are selected"));
  auto ident = [](float x) { return x; };
  HvgResult res;
  res.flavor = opt.flavor;
  mean_var(moments(ctx, X, RowList{nullptr, X.n_rows}, ident), res.means, res.variances);
  // Cell totals (float64).
  std::vector<double> cell_sum(static_cast<size_t>(X.n_rows), 0.0);
  for (int64_t r = 0; r < X.n_rows; ++r) {
    double s = 0;
    for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) s += X.data[k];
    cell_sum[r] = s;
    if (!(s > 0))
      fail_input(kWhere, "flavor pearson_residuals: cell ", r, " has a total count of ", s,
                 " (its residuals would be NaN); filter empty cells first (e.g. filter_cells min_counts=1)");
  }
  std::vector<std::vector<int64_t>> one;
  const std::vector<std::vector<int64_t>>* batches = &brows;
  if (brows.empty()) {
    one.emplace_back();
    batches = &one;
  }
  std::optional<double> clip = opt.clip;
  const double theta = opt.theta;
  std::vector<std::vector<double>> ranks;
  res.residual_variances.assign(G, 0.0);
  for (const auto& rows : *batches) {
    const RowList rl = brows.empty() ? RowList{nullptr, X.n_rows} : RowList{&rows, static_cast<int64_t>(rows.size())};
    const int64_t N = global_count(ctx, rl.n);
    Moments m = moments(ctx, X, rl, ident);
    double total = 0;
    for (int64_t g = 0; g < G; ++g)
      if (m.npos[g] >= 1) total += m.sum[g];
    if (!clip) clip = std::sqrt(static_cast<double>(N));  // scanpy: set once, from the first batch
    if (*clip < 0) fail_input(kWhere, "pearson residuals require clip >= 0, got ", *clip);
    const double c = *clip;
    std::vector<double> t = column_reduce(ctx, X, rl, 2 * G, G, [&](int64_t p0, int64_t p1, double* acc) {
      std::vector<double> dense(static_cast<size_t>(G), 0.0);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t r = rl.row(p);
        for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) dense[X.indices[k]] += X.data[k];
        const double nc = cell_sum[r];
        for (int64_t g = 0; g < G; ++g) {
          if (!(m.npos[g] >= 1)) continue;
          const double mu = nc * m.sum[g] / total;
          double z = (dense[g] - mu) / std::sqrt(mu + mu * mu / theta);
          z = std::min(std::max(z, -c), c);
          acc[g] += z;
          acc[G + g] += z * z;
        }
        for (int64_t k = X.indptr[r]; k < X.indptr[r + 1]; ++k) dense[X.indices[k]] = 0.0;
      }
    });
    std::vector<double> rv(G, 0.0);
    const double n = static_cast<double>(N);
    for (int64_t g = 0; g < G; ++g) {
      if (!(m.npos[g] >= 1)) continue;
      const double mean_r = t[g] / n;
      rv[g] = std::max(0.0, t[G + g] / n - mean_r * mean_r);
      res.residual_variances[g] += rv[g];
    }
    ranks.push_back(descending_ranks(rv));
  }
  const int64_t B = static_cast<int64_t>(batches->size());
  res.n_batches = B;
  for (double& v : res.residual_variances) v /= static_cast<double>(B);
  combine_ranks(ranks, ntop, res.highly_variable_rank, res.highly_variable_nbatches);
  std::vector<int64_t> order(G);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (res.highly_variable_nbatches[a] != res.highly_variable_nbatches[b])
      return res.highly_variable_nbatches[a] > res.highly_variable_nbatches[b];
    return nan_last_less(res.highly_variable_rank[a], res.highly_variable_rank[b]);
  });
  res.highly_variable = take_top(order, ntop);
  res.highly_variable_intersection.resize(G);
  for (int64_t g = 0; g < G; ++g) res.highly_variable_intersection[g] = res.highly_variable_nbatches[g] == B;
  return res;
}

// Batch codes from an obs column (categories in their order; strings / numbers sorted, over the
// values of all ranks).
std::vector<int32_t> batch_codes(const Context& ctx, const Table& obs, const std::string& key) {
  if (!obs.has(key))
    fail_input(kWhere, "batch_key '", key, "' is not a column of obs; pass an existing obs column or no batch_key");
  const Column& col = obs.at(key);
  std::vector<int32_t> codes(static_cast<size_t>(obs.n_rows()));
  if (const auto* c = std::get_if<CategoricalColumn>(&col.c)) {
    for (size_t i = 0; i < codes.size(); ++i) {
      if (c->codes[i] < 0) fail_input(kWhere, "obs['", key, "'] has a missing value at cell ", i, "; every cell needs a batch");
      codes[i] = c->codes[i];
    }
  } else if (const auto* s = std::get_if<StringColumn>(&col.c)) {
    std::map<std::string, int32_t> u;
    for (const auto& v : s->values) u.emplace(v, 0);
    if (ctx.comm().size() > 1) {
      std::vector<std::string> mine;
      for (const auto& kv : u) mine.push_back(kv.first);
      for (auto& v : allgatherv_strings(ctx.comm(), mine)) u.emplace(std::move(v), 0);
    }
    int32_t k = 0;
    for (auto& kv : u) kv.second = k++;
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = u[s->values[i]];
  } else if (const auto* nm = std::get_if<NumericColumn>(&col.c)) {
    std::map<double, int32_t> u;
    for (double v : nm->values) {
      if (std::isnan(v)) fail_input(kWhere, "obs['", key, "'] has a missing (NaN) value; every cell needs a batch");
      u.emplace(v, 0);
    }
    if (ctx.comm().size() > 1) {
      std::vector<double> mine;
      for (const auto& kv : u) mine.push_back(kv.first);
      for (double v : allgatherv(ctx.comm(), mine)) u.emplace(v, 0);
    }
    int32_t k = 0;
    for (auto& kv : u) kv.second = k++;
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = u[nm->values[i]];
  } else if (const auto* b = std::get_if<BoolColumn>(&col.c)) {
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = b->values[i] ? 1 : 0;
  }
  return codes;
}

}  // namespace

HvgResult highly_variable_genes(const Context& ctx, const CsrF& X, const HvgOptions& opt, const std::vector<int32_t>& batch,
                                const std::vector<std::string>& gene_names) {
  const std::string& f = opt.flavor;
  if (f != "seurat" && f != "cell_ranger" && f != "seurat_v3" && f != "pearson_residuals")
    fail_input(kWhere, "unknown flavor '", f, "'; use seurat, cell_ranger, seurat_v3 or pearson_residuals");
  if (opt.n_top_genes && *opt.n_top_genes <= 0)
    fail_input(kWhere, "n_top_genes must be positive, got ", *opt.n_top_genes);
  if (X.n_cols == 0) fail_input(kWhere, "the matrix has no genes");
  if (const int64_t n = global_count(ctx, X.n_rows); n < 2)
    fail_input(kWhere, "the matrix has ", n, " cell(s); variances need at least 2");
  if ((f == "seurat" || f == "cell_ranger") && opt.n_bins <= 0)
    fail_input(kWhere, "n_bins must be positive, got ", opt.n_bins);
  int64_t n_batches = 1;
  const std::vector<std::vector<int64_t>> brows = batch_rows(ctx, batch, X.n_rows, n_batches);
  if (f == "seurat" || f == "cell_ranger") return hvg_dispersion(ctx, X, opt, brows, gene_names);
  if (f == "seurat_v3") return hvg_seurat_v3(ctx, X, opt, brows);
  return hvg_pearson(ctx, X, opt, brows);
}

HvgResult highly_variable_genes(const Context& ctx, const DenseF& X, const HvgOptions& opt, const std::vector<int32_t>& batch,
                                const std::vector<std::string>& gene_names) {
  return highly_variable_genes(ctx, to_csr_f(Matrix(X)), opt, batch, gene_names);
}

HvgResult highly_variable_genes(const Context& ctx, Dataset& d, const HvgOptions& opt) {
  const Matrix* M = &d.X;
  if (!opt.layer.empty()) {
    auto it = d.layers.find(opt.layer);
    if (it == d.layers.end()) fail_input(kWhere, "layer '", opt.layer, "' not found; available layers are in d.layers");
    M = &it->second;
  }
  if (M->empty()) fail_input(kWhere, "the matrix (", opt.layer.empty() ? "X" : "layers/" + opt.layer, ") is empty");
  HvgOptions o = opt;
  if (o.log1p_base == 0) {
    auto it = d.uns.find("log1p");
    if (it != d.uns.end() && it->second.is_dict()) {
      auto b = it->second.dict().find("base");
      if (b != it->second.dict().end()) {
        if (const double* v = std::get_if<double>(&b->second.v)) o.log1p_base = *v;
        if (const int64_t* v = std::get_if<int64_t>(&b->second.v)) o.log1p_base = static_cast<double>(*v);
      }
    }
  }
  std::vector<int32_t> batch;
  if (!o.batch_key.empty()) batch = batch_codes(ctx, d.obs, o.batch_key);
  HvgResult r;
  if (std::holds_alternative<CsrF>(M->m))
    r = highly_variable_genes(ctx, std::get<CsrF>(M->m), o, batch, d.var.index);
  else
    r = highly_variable_genes(ctx, to_csr_f(*M), o, batch, d.var.index);

  write_hvg(d, r, o);
  return r;
}

HvgResult hvg_dispersion_from_moments(const std::vector<double>& mean, const std::vector<double>& var,
                                      const HvgOptions& opt) {
  if (opt.flavor != "seurat" && opt.flavor != "cell_ranger")
    fail("internal: hvg_dispersion_from_moments is for the seurat and cell_ranger flavours, not ", opt.flavor);
  return hvg_dispersion_single(mean, var, opt);
}

void write_hvg(Dataset& d, const HvgResult& r, const HvgOptions& o) {
  const std::string& p = o.key_prefix;
  auto f64 = [](const std::vector<double>& v) { return Column::numeric(v, DType::f64); };
  auto f32 = [](const std::vector<double>& v) {
    std::vector<double> w(v.size());
    for (size_t i = 0; i < v.size(); ++i) w[i] = static_cast<double>(static_cast<float>(v[i]));
    return Column::numeric(std::move(w), DType::f32);
  };
  auto i64 = [](const std::vector<int64_t>& v) {
    return Column::numeric(std::vector<double>(v.begin(), v.end()), DType::i64);
  };
  const bool batched = !o.batch_key.empty();
  if (o.flavor == "seurat" || o.flavor == "cell_ranger") {
    d.var.set(p + "highly_variable", Column::boolean(r.highly_variable));
    d.var.set(p + "means", f64(r.means));
    d.var.set(p + "dispersions", f64(r.dispersions));
    if (!batched) {
      // mean_bin as anndata writes a string column: categories of the used labels, natural-sorted.
      std::set<int32_t> used(r.mean_bin.begin(), r.mean_bin.end());
      used.erase(-1);
      std::vector<std::string> cats;
      for (int32_t c : used) cats.push_back(r.mean_bin_categories[c]);
      std::sort(cats.begin(), cats.end(), natural_less);
      std::map<std::string, int32_t> pos;
      for (size_t i = 0; i < cats.size(); ++i) pos[cats[i]] = static_cast<int32_t>(i);
      CategoricalColumn cc;
      cc.categories = cats;
      cc.codes.resize(r.mean_bin.size());
      for (size_t i = 0; i < r.mean_bin.size(); ++i)
        cc.codes[i] = r.mean_bin[i] < 0 ? -1 : pos[r.mean_bin_categories[r.mean_bin[i]]];
      d.var.set(p + "mean_bin", Column(std::move(cc)));
    }
    d.var.set(p + "dispersions_norm", f32(r.dispersions_norm));
    if (batched) {
      d.var.set(p + "highly_variable_nbatches", i64(r.highly_variable_nbatches));
      d.var.set(p + "highly_variable_intersection", Column::boolean(r.highly_variable_intersection));
    }
    d.uns["hvg"] = Value(Dict{{"flavor", Value(o.flavor)}});
  } else if (o.flavor == "seurat_v3") {
    d.var.set(p + "highly_variable", Column::boolean(r.highly_variable));
    d.var.set(p + "highly_variable_rank", f32(r.highly_variable_rank));
    d.var.set(p + "means", f64(r.means));
    d.var.set(p + "variances", f64(r.variances));
    d.var.set(p + "variances_norm", f64(r.variances_norm));
    if (batched) d.var.set(p + "highly_variable_nbatches", i64(r.highly_variable_nbatches));
    d.uns["hvg"] = Value(Dict{{"flavor", Value(o.flavor)}});
  } else {
    d.var.set(p + "means", f64(r.means));
    d.var.set(p + "variances", f64(r.variances));
    d.var.set(p + "residual_variances", f64(r.residual_variances));
    d.var.set(p + "highly_variable_rank", f32(r.highly_variable_rank));
    if (batched) {
      d.var.set(p + "highly_variable_nbatches", i64(r.highly_variable_nbatches));
      d.var.set(p + "highly_variable_intersection", Column::boolean(r.highly_variable_intersection));
    }
    d.var.set(p + "highly_variable", Column::boolean(r.highly_variable));
    d.uns["hvg"] = Value(Dict{{"flavor", Value(o.flavor)},
                              {"computed_on", Value(o.layer.empty() ? std::string("adata.X") : o.layer)}});
  }
  if (o.subset) {
    std::vector<int64_t> keep;
    for (size_t g = 0; g < r.highly_variable.size(); ++g)
      if (r.highly_variable[g]) keep.push_back(static_cast<int64_t>(g));
    d.subset_vars(keep);
  }
}

void mean_var_from_sums(const std::vector<double>& sum, const std::vector<double>& sumsq, double n,
                        std::vector<double>& mean, std::vector<double>& var) {
  const size_t G = sum.size();
  mean.resize(G);
  var.resize(G);
  for (size_t g = 0; g < G; ++g) {
    const double mu = sum[g] / n;
    double v = (sumsq[g] / n - mu * mu) * (n / (n - 1));
    if (v < 0) v = 0;
    mean[g] = mu;
    var[g] = v;
  }
}

}  // namespace scurry
