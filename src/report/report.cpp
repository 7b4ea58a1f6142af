#include "report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "exec/parallel.hpp"
#include "report/svg.hpp"

namespace scurry::report {

namespace {

// ---------------------------------------------------------------------------------------------
// Slots

const Dict* dict_at(const Dict& d, const std::string& k) {
  auto it = d.find(k);
  return it != d.end() && it->second.is_dict() ? &it->second.dict() : nullptr;
}
const Value* value_at(const Dict* d, const std::string& k) {
  if (!d) return nullptr;
  auto it = d->find(k);
  return it == d->end() ? nullptr : &it->second;
}
std::string str_at(const Dict* d, const std::string& k) {
  const Value* v = value_at(d, k);
  return v && std::holds_alternative<std::string>(v->v) ? std::get<std::string>(v->v) : std::string();
}
bool num_of(const Value* v, double& out) {
  if (!v) return false;
  if (auto* x = std::get_if<double>(&v->v)) return out = *x, true;
  if (auto* x = std::get_if<int64_t>(&v->v)) return out = static_cast<double>(*x), true;
  if (auto* x = std::get_if<bool>(&v->v)) return out = *x, true;
  if (auto* a = std::get_if<NumArray>(&v->v); a && a->data.size() == 1) return out = a->data[0], true;
  return false;
}

std::string plain(double v) {  // "20000", "0.5": no suffix (thresholds as the user typed them)
  char b[40];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

std::string thousands(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) o += ',';
    o += s[i];
  }
  return v < 0 ? "-" + o : o;
}

std::string value_text(const Value& v) {
  if (auto* s = std::get_if<std::string>(&v.v)) return *s;
  if (auto* x = std::get_if<double>(&v.v)) return fmt_num(*x, 6);
  if (auto* x = std::get_if<int64_t>(&v.v)) return std::to_string(*x);
  if (auto* x = std::get_if<bool>(&v.v)) return *x ? "True" : "False";
  if (auto* s = std::get_if<std::vector<std::string>>(&v.v)) {
    std::string o;
    for (size_t i = 0; i < s->size() && i < 8; ++i) o += (i ? ", " : "") + (*s)[i];
    if (s->size() > 8) o += ", ...";
    return "[" + o + "]";
  }
  if (auto* a = std::get_if<NumArray>(&v.v)) {
    if (a->data.size() <= 4) {
      std::string o;
      for (size_t i = 0; i < a->data.size(); ++i) o += (i ? ", " : "") + fmt_num(a->data[i], 6);
      return a->data.size() == 1 ? o : "[" + o + "]";
    }
    return "array of " + std::to_string(a->data.size());
  }
  if (v.is_dict()) return "{...}";
  return "";
}

// A numeric (or bool) obs/var column as doubles; false when absent or of another kind.
bool column(const Table& t, const std::string& name, std::vector<double>& out) {
  if (!t.has(name)) return false;
  const Column& c = t.at(name);
  if (auto* n = std::get_if<NumericColumn>(&c.c)) return out = n->values, true;
  if (auto* b = std::get_if<BoolColumn>(&c.c)) return out.assign(b->values.begin(), b->values.end()), true;
  return false;
}
const CategoricalColumn* categorical(const Table& t, const std::string& name) {
  if (name.empty() || !t.has(name)) return nullptr;
  return std::get_if<CategoricalColumn>(&t.at(name).c);
}

// ---------------------------------------------------------------------------------------------
// Statistics

double quantile_sorted(const std::vector<double>& s, double q) {
  if (s.empty()) return NAN;
  const double p = q * static_cast<double>(s.size() - 1);
  const size_t i = static_cast<size_t>(p);
  return i + 1 < s.size() ? s[i] + (s[i + 1] - s[i]) * (p - i) : s[i];
}
// Tukey's box: quartiles, whiskers at the furthest values within 1.5 IQR of the box.
Box box_of(std::vector<double> v) {
  Box b;
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return b;
  std::sort(v.begin(), v.end());
  b.q1 = quantile_sorted(v, 0.25), b.med = quantile_sorted(v, 0.5), b.q3 = quantile_sorted(v, 0.75);
  b.min = v.front(), b.max = v.back();
  const double iqr = b.q3 - b.q1;
  b.lo = *std::lower_bound(v.begin(), v.end(), b.q1 - 1.5 * iqr);
  b.hi = *(std::upper_bound(v.begin(), v.end(), b.q3 + 1.5 * iqr) - 1);
  return b;
}
// The same from a histogram of `bins` equal bins over [0, top] (values at bin centres, linear
// interpolation of the cumulative counts inside a bin).
Box box_of_hist(const double* h, int bins, double top) {
  Box b;
  double n = 0;
  for (int i = 0; i < bins; ++i) n += h[i];
  if (n <= 0) return b;
  const double w = top / bins;
  auto q = [&](double f) {
    const double target = f * n;
    double c = 0;
    for (int i = 0; i < bins; ++i) {
      if (c + h[i] >= target && h[i] > 0) return (i + (target - c) / h[i]) * w;
      c += h[i];
    }
    return top;
  };
  b.q1 = q(0.25), b.med = q(0.5), b.q3 = q(0.75);
  int first = 0, last = bins - 1;
  while (first < bins && h[first] == 0) ++first;
  while (last > 0 && h[last] == 0) --last;
  b.min = first * w, b.max = (last + 1) * w;
  const double iqr = b.q3 - b.q1, lim_lo = b.q1 - 1.5 * iqr, lim_hi = b.q3 + 1.5 * iqr;
  b.lo = b.min, b.hi = b.min;
  for (int i = first; i <= last; ++i)
    if (h[i] > 0) {
      const double c = (i + 0.5) * w;
      if (c >= lim_lo && b.lo == b.min && c > b.min) b.lo = std::max(b.min, std::min(c, b.q1));
      if (c <= lim_hi) b.hi = std::min(c, b.max);
    }
  b.lo = std::min(b.lo, b.q1), b.hi = std::max(b.hi, b.q3);
  if (first * w >= lim_lo) b.lo = b.min;
  return b;
}

// A kernel density estimate on `grid` points over [lo, hi]: the values binned, then smoothed with a
// Gaussian of Scott's bandwidth 1.06 sigma n^(-1/5) (seaborn's violins use Scott's rule). Binned
// KDE: Silverman, "Density estimation for statistics and data analysis" (1986), section 3.5.
std::vector<double> binned_kde(const std::vector<double>& v, double lo, double hi, int grid) {
  std::vector<double> h(grid, 0.0), out(grid, 0.0);
  if (!(hi > lo)) return out;
  double n = 0, s = 0, ss = 0;
  for (double x : v)
    if (std::isfinite(x)) {
      const int i = std::clamp(static_cast<int>((x - lo) / (hi - lo) * (grid - 1) + 0.5), 0, grid - 1);
      h[i] += 1, n += 1, s += x, ss += x * x;
    }
  if (n < 2) return h;
  const double sd = std::sqrt(std::max(0.0, ss / n - (s / n) * (s / n)));
  const double bw = std::max(1.06 * sd * std::pow(n, -0.2), (hi - lo) / (grid - 1) * 0.5);
  const double bwb = bw / ((hi - lo) / (grid - 1));
  const int reach = static_cast<int>(std::ceil(4 * bwb));
  std::vector<double> k(2 * reach + 1);
  for (int j = -reach; j <= reach; ++j) k[j + reach] = std::exp(-0.5 * (j / bwb) * (j / bwb));
  for (int i = 0; i < grid; ++i)
    if (h[i] > 0)
      for (int j = std::max(0, i - reach); j <= std::min(grid - 1, i + reach); ++j) out[j] += h[i] * k[j - i + reach];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Raster layers

// Points into an image the size of the plot area: plot.px/py place them; drawn in `order`.
Image raster_points(const Plot& p, const std::vector<double>& xs, const std::vector<double>& ys,
                    const std::vector<Rgb>& colors, const std::vector<int64_t>& order, int radius) {
  Image im(p.area_width(), p.area_height());
  for (int64_t i : order) {
    if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) continue;
    im.disc(static_cast<int>(p.px(xs[i]) - p.left), static_cast<int>(p.py(ys[i]) - p.top), radius, colors[i]);
  }
  return im;
}

int point_radius(int64_t n) { return n <= 3000 ? 2 : n <= 40000 ? 1 : 0; }

// Cells per pixel, coloured by log(count) on viridis; returns the largest count.
Image raster_density(const Plot& p, const std::vector<double>& xs, const std::vector<double>& ys, int64_t& max_count) {
  const int w = p.area_width(), h = p.area_height();
  std::vector<int64_t> c(static_cast<size_t>(w) * h, 0);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) continue;
    const int X = static_cast<int>(p.px(xs[i]) - p.left), Y = static_cast<int>(p.py(ys[i]) - p.top);
    if (X >= 0 && Y >= 0 && X < w && Y < h) ++c[static_cast<size_t>(Y) * w + X];
  }
  max_count = std::max<int64_t>(1, *std::max_element(c.begin(), c.end()));
  Image im(w, h);
  for (int Y = 0; Y < h; ++Y)
    for (int X = 0; X < w; ++X) {
      const int64_t k = c[static_cast<size_t>(Y) * w + X];
      if (k) im.set(X, Y, viridis(max_count > 1 ? std::log(static_cast<double>(k)) / std::log(static_cast<double>(max_count)) : 1));
    }
  return im;
}

std::vector<int64_t> shuffled(int64_t n, uint64_t seed) {
  std::vector<int64_t> o(n);
  std::iota(o.begin(), o.end(), 0);
  std::mt19937_64 rng(seed ^ 0x5eed5c0441ULL);
  for (int64_t i = n - 1; i > 0; --i) std::swap(o[i], o[static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1))]);
  return o;
}
std::vector<int64_t> ascending(const std::vector<double>& v) {
  std::vector<int64_t> o(v.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) {
    const double x = std::isfinite(v[a]) ? v[a] : -INFINITY, y = std::isfinite(v[b]) ? v[b] : -INFINITY;
    return x < y;
  });
  return o;
}

// ---------------------------------------------------------------------------------------------
// Page pieces

struct Page {
  std::string body, nav;
  void section(const std::string& id, const std::string& title) {
    body += "</section>\n<section id=\"" + id + "\"><h2>" + xml_escape(title) + "</h2>\n";
    nav += "<a href=\"#" + id + "\">" + xml_escape(title) + "</a>";
  }
  void note(const std::string& s) { body += "<p class=\"note\">" + xml_escape(s) + "</p>\n"; }
  void para(const std::string& s) { body += "<p>" + xml_escape(s) + "</p>\n"; }
  void figure(const std::string& svg, const std::string& caption) {
    body += "<figure>" + svg + "<figcaption>" + xml_escape(caption) + "</figcaption></figure>\n";
  }
  void open_row() { body += "<div class=\"row\">\n"; }
  void close_row() { body += "</div>\n"; }
  void table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
             const std::vector<bool>& numeric = {}) {
    body += "<table><thead><tr>";
    for (size_t j = 0; j < head.size(); ++j) body += "<th>" + xml_escape(head[j]) + "</th>";
    body += "</tr></thead><tbody>\n";
    for (const auto& r : rows) {
      body += "<tr>";
      for (size_t j = 0; j < r.size(); ++j)
        body += (j < numeric.size() && numeric[j] ? "<td class=\"num\">" : "<td>") + xml_escape(r[j]) + "</td>";
      body += "</tr>\n";
    }
    body += "</tbody></table>\n";
  }
};

const char* kCss = R"(
body{font-family:Helvetica,Arial,sans-serif;color:#1e1e1e;margin:0;background:#f6f6f4;font-size:15px;line-height:1.4}
header{background:#1e3a5f;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:22px}
header p{margin:4px 0 0 0;font-size:13px;color:#dfe6ee}
nav{background:#fff;border-bottom:1px solid #ddd;padding:8px 24px;position:sticky;top:0;z-index:2}
nav a{margin-right:14px;color:#1e3a5f;text-decoration:none;font-size:13px}
main{padding:0 24px 40px 24px;max-width:1500px}
section{background:#fff;border:1px solid #e2e2e2;border-radius:6px;margin:18px 0;padding:6px 18px 14px 18px}
h2{font-size:18px;margin:10px 0 8px 0;color:#1e3a5f}
figure{display:inline-block;margin:6px 14px 10px 0;vertical-align:top;width:min-content}
figcaption{font-size:12px;color:#555;min-width:240px}
.row{display:flex;flex-wrap:wrap;align-items:flex-start}
table{border-collapse:collapse;font-size:13px;margin:6px 0 10px 0}
th,td{border-bottom:1px solid #e6e6e6;padding:3px 10px;text-align:left;vertical-align:top}
th{background:#f0f3f7}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#7a5b00;background:#fff8e1;border-left:3px solid #e6a700;padding:4px 10px;font-size:13px}
.warn{color:#8a1c00}
p.small{font-size:12px;color:#555}
code{font-size:13px;background:#f2f2f2;padding:1px 4px;border-radius:3px;word-break:break-all}
)";

// ---------------------------------------------------------------------------------------------
// Expression statistics: highest expressed genes, dotplot, gene values for the UMAP panels


}  // namespace

ExpressionStats expression_stats(RowSource& src, bool log1p, const std::vector<int32_t>* codes, int n_groups,
                           const std::vector<int64_t>& dot_genes, const std::vector<int64_t>& umap_genes,
                           const ReportOptions& opt_in) {
  ExpressionStats st;
  ReportOptions o = opt_in;
  if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t n = src.n_rows(), g = src.n_cols();
  const int64_t S = static_cast<int64_t>(dot_genes.size());
  std::vector<int64_t> dot_slot(g, -1);
  for (int64_t s = 0; s < S; ++s) dot_slot[dot_genes[s]] = s;
  std::vector<int64_t> umap_slot(g, -1);
  for (size_t u = 0; u < umap_genes.size(); ++u) umap_slot[umap_genes[u]] = static_cast<int64_t>(u);
  st.cell_values.assign(umap_genes.size(), std::vector<double>(n, 0.0));
  const int64_t br = std::max<int64_t>(1, o.block_rows), wave = br * kReduceWave;
  auto counts_of = [log1p](float v) { return log1p ? std::expm1(static_cast<double>(v)) : static_cast<double>(v); };
  const size_t grp = static_cast<size_t>(n_groups) * S;
  // Pass 1: per gene, the sum over cells of its percentage of the cell's counts; per (group, dot
  // gene): cells expressing, sum of values.
  std::vector<double> total(g + 2 * grp, 0.0), part;
  std::vector<double> row_total(n, 0.0);  // per cell: its counts (pass 2 divides by them)
  for (int64_t w0 = 0; w0 < n; w0 += wave) {
    const int64_t w1 = std::min(n, w0 + wave);
    const CsrF m = src.read_rows(w0, w1);
    const int64_t nb = (w1 - w0 + br - 1) / br;
    reduce_blocks(o.threads, nb, total.size(), part, [&](int64_t b, double* acc) {
      thread_local std::vector<double> c;  // the row's counts (expm1 once per entry)
      for (int64_t r = b * br; r < std::min(w1 - w0, (b + 1) * br); ++r) {
        const int64_t k0 = m.indptr[r], len = m.indptr[r + 1] - k0;
        c.resize(static_cast<size_t>(len));
        double sum = 0;
        for (int64_t q = 0; q < len; ++q) c[q] = counts_of(m.data[k0 + q]), sum += c[q];
        row_total[w0 + r] = sum;
        const int32_t grp_r = codes ? (*codes)[w0 + r] : -1;
        for (int64_t k = k0; k < k0 + len; ++k) {
          const int32_t j = m.indices[k];
          if (sum > 0) acc[j] += 100.0 * c[k - k0] / sum;
          if (grp_r >= 0 && dot_slot[j] >= 0 && m.data[k] > 0) {
            const size_t at = static_cast<size_t>(grp_r) * S + dot_slot[j];
            acc[g + at] += 1, acc[g + grp + at] += m.data[k];
          }
          if (umap_slot[j] >= 0) st.cell_values[umap_slot[j]][w0 + r] = m.data[k];
        }
      }
    });
    for (size_t i = 0; i < total.size(); ++i) total[i] += part[i];
  }
  st.mean_pct.assign(total.begin(), total.begin() + g);
  for (double& v : st.mean_pct) v /= std::max<int64_t>(1, n);
  std::vector<int64_t> size(std::max(0, n_groups), 0);
  if (codes)
    for (int32_t c : *codes)
      if (c >= 0 && c < n_groups) ++size[c];
  st.dot_frac.assign(grp, 0), st.dot_mean.assign(grp, 0);
  for (int gi = 0; gi < n_groups; ++gi)
    for (int64_t s = 0; s < S; ++s) {
      const size_t at = static_cast<size_t>(gi) * S + s;
      st.dot_frac[at] = size[gi] ? total[g + at] / size[gi] : 0;
      st.dot_mean[at] = size[gi] ? total[g + grp + at] / size[gi] : 0;
    }
  // The top genes (ties: the lower index first).
  std::vector<int64_t> idx(g);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = std::min<int64_t>(o.top_genes, g);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return st.mean_pct[a] != st.mean_pct[b] ? st.mean_pct[a] > st.mean_pct[b] : a < b;
  });
  st.top.assign(idx.begin(), idx.begin() + k);
  // Pass 2: histograms of the top genes' percentages (cells without the gene: bin 0).
  const int bins = std::max(10, o.hist_bins);
  std::vector<int64_t> top_slot(g, -1);
  for (int64_t t = 0; t < k; ++t) top_slot[st.top[t]] = t;
  std::vector<double> hist(static_cast<size_t>(k) * bins, 0.0);
  std::vector<double> present(k, 0.0);
  for (int64_t w0 = 0; w0 < n && k > 0; w0 += wave) {
    const int64_t w1 = std::min(n, w0 + wave);
    const CsrF m = src.read_rows(w0, w1);
    const int64_t nb = (w1 - w0 + br - 1) / br;
    reduce_blocks(o.threads, nb, hist.size() + k, part, [&](int64_t b, double* acc) {
      for (int64_t r = b * br; r < std::min(w1 - w0, (b + 1) * br); ++r) {
        const double sum = row_total[w0 + r];
        if (sum <= 0) continue;
        for (int64_t q = m.indptr[r]; q < m.indptr[r + 1]; ++q) {
          const int64_t t = top_slot[m.indices[q]];
          if (t < 0) continue;
          const double pct = 100.0 * counts_of(m.data[q]) / sum;
          const int bin = std::clamp(static_cast<int>(pct / 100.0 * bins), 0, bins - 1);
          acc[static_cast<size_t>(t) * bins + bin] += 1, acc[hist.size() + t] += 1;
        }
      }
    });
    for (size_t i = 0; i < hist.size(); ++i) hist[i] += part[i];
    for (int64_t t = 0; t < k; ++t) present[t] += part[hist.size() + t];
  }
  for (int64_t t = 0; t < k; ++t) {
    hist[static_cast<size_t>(t) * bins] += static_cast<double>(n) - present[t];
    st.top_box.push_back(box_of_hist(&hist[static_cast<size_t>(t) * bins], bins, 100.0));
  }
  return st;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Figures

std::string violin_svg(const std::string& title, const std::string& ytitle, const std::vector<double>& v,
                       const std::vector<std::pair<std::string, double>>& thresholds) {
  Plot p(250, 320, title);
  p.left = 70;
  p.x.categories = {""};
  p.x.show_ticks = false;
  p.x.title = thousands(static_cast<int64_t>(v.size())) + " cells";
  p.y.title = ytitle;
  std::vector<double> all = v;
  for (const auto& t : thresholds) all.push_back(t.second);
  p.y.fit(all, 0.05);
  const int grid = 256;
  double lo = INFINITY, hi = -INFINITY;
  for (double x : v)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (std::isfinite(lo)) {
    std::vector<double> dens = binned_kde(v, lo, hi, grid);
    const double mx = std::max(1e-300, *std::max_element(dens.begin(), dens.end()));
    std::vector<double> xs, ys;
    for (int i = 0; i < grid; ++i) xs.push_back(0.42 * dens[i] / mx), ys.push_back(lo + (hi - lo) * i / (grid - 1));
    for (int i = grid - 1; i >= 0; --i) xs.push_back(-0.42 * dens[i] / mx), ys.push_back(lo + (hi - lo) * i / (grid - 1));
    p.polygon(xs, ys, rgb_hex(0x56B4E9), rgb_hex(0x0072B2), 0.75);
    const Box b = box_of(v);
    p.polyline({0, 0}, {b.lo, b.hi}, grey(30), 1.2);
    p.rect(-0.05, b.q1, 0.05, b.q3, grey(40));
    p.circle(0, b.med, 3.5, rgb_hex(0xffffff), grey(30), true);
  }
  for (const auto& t : thresholds) p.hline(t.second, t.first, rgb_hex(0xD55E00));
  return p.svg();
}

}  // namespace

void store_run_info(Dataset& d, const RunInfo& info, const std::vector<TimingStep>& timings,
                    const std::vector<std::string>& warnings) {
  Dict s;
  s["version"] = Value(std::string(SCURRY_VERSION));
  if (!info.device.empty()) s["device"] = Value(info.device);
  if (!info.command.empty()) s["command"] = Value(info.command);
  if (!info.input.empty()) s["input"] = Value(info.input);
  Dict f;
  if (info.input_obs >= 0) f["n_obs_input"] = Value(info.input_obs);
  if (info.input_vars >= 0) f["n_vars_input"] = Value(info.input_vars);
  f["n_obs_kept"] = Value(d.n_obs());
  if (info.genes_after_filter >= 0) f["n_vars_kept"] = Value(info.genes_after_filter);
  for (const auto& [k, v] : info.cell_thresholds) f[k] = Value(v);
  for (const auto& [k, v] : info.gene_thresholds) f[k] = Value(v);
  s["filters"] = Value(std::move(f));
  if (!timings.empty()) {
    Table t;
    std::vector<std::string> step, extra;
    std::vector<double> wall, cpu, rss;
    for (size_t i = 0; i < timings.size(); ++i) {
      t.index.push_back(std::to_string(i));
      step.push_back(timings[i].name), extra.push_back(timings[i].extra);
      wall.push_back(timings[i].wall_s), cpu.push_back(timings[i].cpu_s), rss.push_back(timings[i].peak_rss_mb);
    }
    t.set("step", Column::strings(step));
    t.set("wall_s", Column::numeric(wall));
    t.set("cpu_s", Column::numeric(cpu));
    t.set("peak_rss_mb", Column::numeric(rss));
    t.set("result", Column::strings(extra));
    s["timings"] = Value(std::move(t));
  }
  if (!warnings.empty()) s["warnings"] = Value(warnings);
  d.uns["scurry"] = Value(std::move(s));
}

std::string report_html(const ReportInput& in, const ReportOptions& o) {
  if (!in.data) fail("report_html: no dataset");
  const Dataset& d = *in.data;
  const std::string& where = in.result_path;
  const int64_t n = d.n_obs();
  const Dict* sc = dict_at(d.uns, "scurry");
  const Dict* filters = sc ? dict_at(*sc, "filters") : nullptr;
  Page pg;
  pg.body = "<section id=\"summary\"><h2>Summary</h2>\n";
  pg.nav = "<a href=\"#summary\">Summary</a>";

  // ---- summary
  {
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"result", in.result_path});
    rows.push_back({"cells x genes", thousands(n) + " x " + thousands(d.n_vars()) +
                                         (d.raw ? " (raw: " + thousands(d.raw->var.n_rows()) + " genes)" : "")});
    const std::string input = str_at(sc, "input");
    if (!input.empty()) rows.push_back({"input", input});
    double a = 0, b = 0;
    if (num_of(value_at(filters, "n_obs_input"), a) && num_of(value_at(filters, "n_vars_input"), b))
      rows.push_back({"input cells x genes", thousands(static_cast<int64_t>(a)) + " x " + thousands(static_cast<int64_t>(b))});
    rows.push_back({"written by", sc ? "scurry " + str_at(sc, "version")
                                     : "not recorded (no uns['scurry']: not written by scurry run)"});
    rows.push_back({"report by", in.made_by + " (scurry " SCURRY_VERSION ")"});
    if (!str_at(sc, "device").empty()) rows.push_back({"device", str_at(sc, "device")});
    if (!str_at(sc, "command").empty()) rows.push_back({"command", str_at(sc, "command")});
    if (in.expression) rows.push_back({"gene expression from", in.expression_slot + (in.expression_log1p ? " (log1p of normalised counts)" : "")});
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    rows.push_back({"report made", date});
    pg.table({"", ""}, rows);
  }

  // ---- parameters
  pg.section("parameters", "Parameters");
  {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [k, v] : d.uns) {
      if (!v.is_dict()) continue;
      const Dict* params = dict_at(v.dict(), "params");
      std::string s;
      if (params)
        for (const auto& [pk, pv] : *params) {
          const std::string t = value_text(pv);
          if (!t.empty()) s += (s.empty() ? "" : ", ") + pk + " = " + t;
        }
      if (k == "hvg" && !str_at(&v.dict(), "flavor").empty()) s = "flavor = " + str_at(&v.dict(), "flavor");
      if (!s.empty()) rows.push_back({k, s});
    }
    if (filters) {
      std::string s;
      for (const char* key : {"min_genes", "max_genes", "min_counts", "max_counts", "min_cells", "max_cells"}) {
        double t;
        if (num_of(value_at(filters, key), t)) s += (s.empty() ? "" : ", ") + std::string(key) + " = " + plain(t);
      }
      if (!s.empty()) rows.push_back({"filters", s});
    }
    if (rows.empty()) pg.note("No parameters recorded (no uns[*]['params']).");
    else pg.table({"step", "parameters"}, rows);
  }

  // ---- QC
  pg.section("qc", "Quality control");
  std::vector<std::pair<std::string, double>> cell_thr_genes, cell_thr_counts;
  for (const char* key : {"min_genes", "max_genes"}) {
    double t;
    if (num_of(value_at(filters, key), t)) cell_thr_genes.push_back({std::string(key) + " " + plain(t), t});
  }
  for (const char* key : {"min_counts", "max_counts"}) {
    double t;
    if (num_of(value_at(filters, key), t)) cell_thr_counts.push_back({std::string(key) + " " + plain(t), t});
  }
  std::vector<double> ngenes, tcounts, pctmt;
  const bool has_ng = column(d.obs, "n_genes_by_counts", ngenes);
  const bool has_tc = column(d.obs, "total_counts", tcounts);
  const bool has_mt = column(d.obs, "pct_counts_mt", pctmt);
  {
    pg.open_row();
    if (has_ng) pg.figure(violin_svg("n_genes_by_counts", "genes detected per cell", ngenes, cell_thr_genes), "Genes with at least one count per cell.");
    if (has_tc) pg.figure(violin_svg("total_counts", "counts per cell (UMIs)", tcounts, cell_thr_counts), "Total counts per cell.");
    if (has_mt) pg.figure(violin_svg("pct_counts_mt", "mitochondrial counts (% of cell's counts)", pctmt, {}), "Share of counts from mitochondrial genes (MT-).");
    pg.close_row();
    std::string missing;
    if (!has_ng) missing += " obs['n_genes_by_counts']";
    if (!has_tc) missing += " obs['total_counts']";
    if (!has_mt) missing += " obs['pct_counts_mt']";
    if (!missing.empty()) pg.note("Not shown (slot absent):" + missing + ".");
    pg.body += "<p class=\"small\">Violins: Gaussian kernel density (Scott's bandwidth) of all cells, scaled to equal width; box: quartiles, whiskers at 1.5 IQR, white dot the median. Dashed lines: the filter thresholds.</p>\n";
    if (has_ng && has_tc) {
      Plot p(o.raster_px + 64 + 16 + 110, o.raster_px + 34 + 52, "total_counts vs n_genes_by_counts");
      p.legend_width = 110;
      p.x.title = "counts per cell (UMIs)";
      p.y.title = "genes detected per cell";
      std::vector<double> xs = tcounts, ys = ngenes;
      for (const auto& t : cell_thr_counts) xs.push_back(t.second);
      for (const auto& t : cell_thr_genes) ys.push_back(t.second);
      p.x.fit(xs), p.y.fit(ys);
      std::string cap;
      if (n > o.density_above) {
        int64_t mx = 0;
        p.image(raster_density(p, tcounts, ngenes, mx));
        p.colorbar("cells per pixel", 1, static_cast<double>(std::max<int64_t>(mx, 2)), true);
        cap = "Density of " + thousands(n) + " cells (cells per pixel, log colour scale).";
      } else {
        std::vector<Rgb> col(n, rgb_hex(0x0072B2));
        std::vector<int64_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        if (has_mt) {
          const Box b = box_of(pctmt);
          const double top = std::max(b.max, 1e-9);
          for (int64_t i = 0; i < n; ++i) col[i] = viridis(pctmt[i] / top);
          order = ascending(pctmt);
          p.colorbar("pct_counts_mt (%)", 0, top);
        }
        p.image(raster_points(p, tcounts, ngenes, col, order, point_radius(n)));
        cap = "Each dot a cell (" + thousands(n) + ")" + (has_mt ? ", coloured by pct_counts_mt." : ".");
      }
      for (const auto& t : cell_thr_genes) p.hline(t.second, t.first, rgb_hex(0xD55E00));
      for (const auto& t : cell_thr_counts) p.vline(t.second, t.first, rgb_hex(0xD55E00));
      pg.figure(p.svg(), cap + " Dashed: the filter thresholds (cells kept are the ones passing them).");
    }
  }
  // ---- filters
  pg.section("filters", "Filters");
  {
    double ni = 0, nv = 0, kv = 0;
    const bool hi = num_of(value_at(filters, "n_obs_input"), ni);
    const bool hv = num_of(value_at(filters, "n_vars_input"), nv);
    const bool hk = num_of(value_at(filters, "n_vars_kept"), kv);
    if (!filters || (!hi && !hv)) {
      pg.note("What the filters removed is not recorded in this file (uns['scurry']['filters'] is written by scurry run).");
    } else {
      std::vector<std::vector<std::string>> rows;
      auto pct = [](double a, double b) { return b > 0 ? fmt_num(100.0 * a / b, 3) + " %" : "-"; };
      if (hi) rows.push_back({"cells", thousands(static_cast<int64_t>(ni)), thousands(n), thousands(static_cast<int64_t>(ni) - n), pct(ni - n, ni)});
      if (hv && hk) rows.push_back({"genes", thousands(static_cast<int64_t>(nv)), thousands(static_cast<int64_t>(kv)), thousands(static_cast<int64_t>(nv - kv)), pct(nv - kv, nv)});
      pg.table({"", "input", "kept", "removed", "removed %"}, rows, {false, true, true, true, true});
      if (d.raw && d.raw->var.n_rows() != d.n_vars())
        pg.para("Then " + thousands(d.n_vars()) + " highly variable genes were kept for scaling and PCA (raw keeps all " +
                thousands(d.raw->var.n_rows()) + ").");
    }
  }

  // ---- expression statistics (one pair of passes for the highest expressed genes and the dotplot)
  const Dict* rgg = dict_at(d.uns, "rank_genes_groups");
  std::string groupby = str_at(rgg ? dict_at(*rgg, "params") : nullptr, "groupby");
  std::string cluster_key = !groupby.empty() && categorical(d.obs, groupby) ? groupby
                            : categorical(d.obs, "leiden")                 ? "leiden"
                            : categorical(d.obs, "louvain")                ? "louvain"
                                                                           : "";
  const CategoricalColumn* clusters = categorical(d.obs, cluster_key);
  const RecArray* names = nullptr;
  if (rgg)
    if (const Value* v = value_at(rgg, "names")) names = std::get_if<RecArray>(&v->v);
  std::map<std::string, int64_t> gene_index;
  for (size_t j = 0; j < in.expression_genes.size(); ++j) gene_index.emplace(in.expression_genes[j], static_cast<int64_t>(j));
  std::vector<std::string> groups;  // the rank_genes_groups groups, in the clusters' order when they match
  std::vector<int64_t> dot_genes, umap_genes;
  std::vector<std::string> dot_labels;
  const CategoricalColumn* dot_groups = names ? categorical(d.obs, groupby) : nullptr;
  if (names && dot_groups) {
    std::set<int64_t> seen;
    for (const auto& cat : dot_groups->categories) {
      const RecField* f = names->field(cat);
      if (!f || !f->is_string) continue;
      groups.push_back(cat);
      for (int64_t r = 0, taken = 0; r < names->n && taken < o.dotplot_genes_per_group; ++r) {
        auto it = gene_index.find(f->str[r]);
        if (it == gene_index.end()) continue;
        ++taken;
        if (seen.insert(it->second).second) dot_genes.push_back(it->second), dot_labels.push_back(f->str[r]);
      }
    }
    std::set<int64_t> useen;
    for (const auto& cat : groups) {
      const RecField* f = names->field(cat);
      for (int64_t r = 0; r < names->n; ++r) {
        auto it = gene_index.find(f->str[r]);
        if (it == gene_index.end()) continue;
        if (useen.insert(it->second).second) umap_genes.push_back(it->second);
        break;
      }
      if (static_cast<int>(umap_genes.size()) >= o.umap_marker_genes) break;
    }
  }
  ExpressionStats ex;
  const bool have_expr = in.expression && in.expression->n_rows() == n &&
                         in.expression->n_cols() == static_cast<int64_t>(in.expression_genes.size());
  if (in.expression && !have_expr)
    fail_input(where, in.expression_slot, " is ", in.expression->n_rows(), " x ", in.expression->n_cols(), " but the report expects ",
               n, " x ", in.expression_genes.size(), " (obs x genes)");
  if (have_expr)
    ex = expression_stats(*in.expression, in.expression_log1p, dot_groups ? &dot_groups->codes : nullptr,
                          dot_groups ? static_cast<int>(dot_groups->categories.size()) : 0, dot_genes, umap_genes, o);

  // ---- highest expressed genes
  pg.section("highest", "Highest expressed genes");
  if (!have_expr) {
    pg.note("Not shown: no gene expression matrix of all genes (raw/X, or X of counts or log-normalised values).");
  } else {
    const int k = static_cast<int>(ex.top.size());
    Plot p(640, 70 + 22 * k, "Top " + std::to_string(k) + " genes by mean share of counts");
    p.left = 110;
    p.x.title = "share of the cell's counts (%)";
    for (int t = k - 1; t >= 0; --t) p.y.categories.push_back(in.expression_genes[ex.top[t]]);
    std::vector<double> xs{0};
    for (const auto& b : ex.top_box) xs.push_back(b.hi);
    p.x.fit(xs, 0.04, true);
    for (int t = 0; t < k; ++t) {
      const double yc = k - 1 - t;
      const Box& b = ex.top_box[t];
      const Rgb c = category_color(t % 8, 8);
      p.polyline({b.lo, b.q1}, {yc, yc}, grey(60), 1.2);
      p.polyline({b.q3, b.hi}, {yc, yc}, grey(60), 1.2);
      p.rect(b.q1, yc - 0.32, b.q3, yc + 0.32, mix(c, rgb_hex(0xffffff), 0.35), grey(60), true);
      p.polyline({b.med, b.med}, {yc - 0.32, yc + 0.32}, grey(20), 2);
      p.points({ex.mean_pct[ex.top[t]]}, {yc}, grey(20), 2.5);
    }
    pg.figure(p.svg(), "As scanpy's pl.highest_expr_genes: for each cell, each gene's share of the cell's counts (" +
                           std::string(in.expression_log1p ? "expm1 of " : "") + in.expression_slot +
                           "); the genes with the highest mean share. Box: quartiles; whiskers at 1.5 IQR (outliers not drawn); dot: the mean. Quartiles from histograms of 0.02 % bins.");
  }

  // ---- HVG
  pg.section("hvg", "Highly variable genes");
  {
    const Table* vt = d.raw && d.raw->var.has("highly_variable") ? &d.raw->var : &d.var;
    std::vector<double> hv, means, disp, dispn, varn;
    const bool ok = column(*vt, "highly_variable", hv) && column(*vt, "means", means);
    const bool seurat = ok && column(*vt, "dispersions_norm", dispn) && column(*vt, "dispersions", disp);
    const bool v3 = ok && !seurat && column(*vt, "variances_norm", varn);
    if (!seurat && !v3) {
      pg.note("Not shown: var['highly_variable'], var['means'] and var['dispersions_norm'] (or var['variances_norm']) are absent.");
    } else {
      int64_t nh = 0;
      for (double x : hv) nh += x != 0;
      const int64_t ng = static_cast<int64_t>(hv.size());
      std::vector<Rgb> col(ng);
      std::vector<double> key(ng);
      for (int64_t i = 0; i < ng; ++i) col[i] = hv[i] != 0 ? grey(0) : grey(190), key[i] = hv[i];
      const std::vector<int64_t> order = ascending(key);
      auto panel = [&](const std::vector<double>& yv, const std::string& title, const std::string& ytitle, bool logx) {
        const int side = o.raster_px * 4 / 5;  // two panels side by side
        Plot p(side + 64 + 16 + 170, side + 34 + 52, title);
        p.legend("genes", {{grey(0), "highly variable (" + thousands(nh) + ")"}, {grey(190), "other (" + thousands(ng - nh) + ")"}});
        p.x.title = logx ? "mean expression of genes (log scale)" : "mean expression of genes (log1p of normalised counts)";
        p.x.log = logx;
        p.y.title = ytitle;
        p.x.fit(means), p.y.fit(yv);
        p.image(raster_points(p, means, yv, col, order, point_radius(ng) > 1 ? 1 : point_radius(ng) + 1));
        return p.svg();
      };
      pg.open_row();
      if (seurat) {
        pg.figure(panel(dispn, "normalised dispersions", "dispersion of genes (normalised, z-score in bin)", false), "Highly variable genes (black) against all genes, as scanpy's pl.highly_variable_genes.");
        pg.figure(panel(disp, "dispersions", "dispersion of genes (variance / mean, log)", false), "The same before normalisation within mean bins.");
      } else {
        pg.figure(panel(varn, "normalised variances (seurat_v3)", "variance of genes (normalised)", true), "Highly variable genes (black), scanpy's seurat_v3 flavour.");
      }
      pg.close_row();
    }
  }

  // ---- PCA
  pg.section("pca", "PCA");
  {
    const Dict* pca = dict_at(d.uns, "pca");
    const Value* vr = value_at(pca, "variance_ratio");
    const NumArray* a = vr ? std::get_if<NumArray>(&vr->v) : nullptr;
    if (!a || a->data.empty()) {
      pg.note("Not shown: uns['pca']['variance_ratio'] is absent.");
    } else {
      Plot p(560, 340, "PCA variance ratio");
      p.x.title = "principal component";
      p.y.title = "variance ratio (fraction of total variance)";
      std::vector<double> xs, cum;
      double c = 0;
      for (size_t i = 0; i < a->data.size(); ++i) xs.push_back(static_cast<double>(i + 1)), c += a->data[i], cum.push_back(c);
      p.x.fit(xs), p.y.fit(a->data, 0.06, true);
      p.polyline(xs, a->data, rgb_hex(0x0072B2), 1.2);
      p.points(xs, a->data, rgb_hex(0x0072B2), 3);
      pg.figure(p.svg(), "Share of the variance of the scaled highly variable genes explained by each of " +
                             std::to_string(a->data.size()) + " components; together " + fmt_num(100 * c, 3) + " %.");
    }
  }

  // ---- UMAP
  pg.section("umap", "UMAP");
  auto emb = d.obsm.find("X_umap");
  if (emb == d.obsm.end()) {
    pg.note("Not shown: obsm['X_umap'] is absent.");
  } else {
    const DenseF xy = to_dense_f(emb->second);
    if (xy.n_rows != n || xy.n_cols < 2) fail_input(where, "obsm/X_umap has shape ", xy.n_rows, " x ", xy.n_cols, " (expected ", n, " x 2)");
    std::vector<double> ux(n), uy(n);
    for (int64_t i = 0; i < n; ++i) ux[i] = xy(i, 0), uy[i] = xy(i, 1);
    const int side = o.raster_px;
    auto base = [&](const std::string& title, int legend_w) {
      Plot p(side + 24 + 12 + legend_w, side + 34 + 28, title);
      p.left = 24, p.bottom = 28, p.right = 12;
      p.legend_width = legend_w;
      p.x.title = "UMAP1", p.y.title = "UMAP2";
      p.x.show_ticks = p.y.show_ticks = false;
      p.x.fit(ux, 0.03), p.y.fit(uy, 0.03);
      return p;
    };
    pg.open_row();
    if (clusters) {
      const int nc = static_cast<int>(clusters->categories.size());
      std::vector<int64_t> size(nc, 0);
      for (int32_t c : clusters->codes)
        if (c >= 0 && c < nc) ++size[c];
      std::vector<LegendItem> items;
      size_t longest = 0;
      for (int c = 0; c < nc; ++c) {
        items.push_back({category_color(c, nc), clusters->categories[c] + " (" + thousands(size[c]) + ")"});
        longest = std::max(longest, items.back().label.size());
      }
      const int rows_fit = std::max(1, (side + 34 - 20) / 16);
      const int cols = (nc + rows_fit - 1) / rows_fit;
      Plot p = base(cluster_key + " clusters", 12 + cols * (22 + static_cast<int>(std::min<size_t>(longest, 28)) * 7));
      p.legend(cluster_key + " (cells)", items);
      std::vector<Rgb> col(n, grey(200));
      for (int64_t i = 0; i < n; ++i)
        if (clusters->codes[i] >= 0) col[i] = category_color(clusters->codes[i], nc);
      p.image(raster_points(p, ux, uy, col, shuffled(n, o.seed), point_radius(n)));
      // Each cluster's name at its median position (scanpy's legend_loc='on data'), so that colour
      // is never the only cue.
      for (int c = 0; c < nc; ++c) {
        std::vector<double> cx, cy;
        for (int64_t i = 0; i < n; ++i)
          if (clusters->codes[i] == c) cx.push_back(ux[i]), cy.push_back(uy[i]);
        if (cx.empty()) continue;
        p.text(box_of(cx).med, box_of(cy).med, clusters->categories[c], 12, "middle", grey(20), true);
      }
      pg.figure(p.svg(), thousands(n) + " cells coloured by " + cluster_key + " cluster; the legend gives each cluster's size.");
    } else {
      pg.note("No cluster labels (obs['leiden'] or obs['louvain']) to colour by.");
    }
    auto continuous = [&](const std::string& title, const std::string& unit, const std::vector<double>& v, const std::string& cap) {
      Plot p = base(title, 90);
      double lo = INFINITY, hi = -INFINITY;
      for (double x : v)
        if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
      if (!std::isfinite(lo)) lo = 0, hi = 1;
      if (hi <= lo) hi = lo + 1;
      p.colorbar(unit, lo, hi);
      std::vector<Rgb> col(n);
      for (int64_t i = 0; i < n; ++i) col[i] = std::isfinite(v[i]) ? viridis((v[i] - lo) / (hi - lo)) : grey(200);
      p.image(raster_points(p, ux, uy, col, ascending(v), point_radius(n)));
      pg.figure(p.svg(), cap);
    };
    if (has_tc) continuous("total_counts", "UMIs", tcounts, "Counts per cell (highest drawn on top).");
    if (has_mt) continuous("pct_counts_mt", "%", pctmt, "Mitochondrial share of counts (%).");
    for (size_t u = 0; u < umap_genes.size(); ++u)
      continuous(in.expression_genes[umap_genes[u]], in.expression_log1p ? "log1p expr." : "expression", ex.cell_values[u],
                 "Expression of " + in.expression_genes[umap_genes[u]] + " (" + in.expression_slot + "), the top marker of a cluster.");
    pg.close_row();
    if (!has_tc || !has_mt) pg.note("Some panels not shown: obs['total_counts'] or obs['pct_counts_mt'] is absent.");
    if (umap_genes.empty()) pg.note("No marker-gene panels: uns['rank_genes_groups'] or the expression matrix is absent.");
  }

  // ---- markers
  pg.section("markers", "Marker genes");
  if (!names || !dot_groups || groups.empty()) {
    pg.note("Not shown: uns['rank_genes_groups'] (with its groupby column in obs) is absent.");
  } else {
    const Dict* params = dict_at(*rgg, "params");
    pg.para("rank_genes_groups by " + groupby + ", method " + str_at(params, "method") + " (each cluster against the rest). Top " +
            std::to_string(o.marker_table_genes) + " genes per cluster: name, log2 fold change, adjusted p-value.");
    auto field = [&](const char* key) -> const RecArray* {
      const Value* v = value_at(rgg, key);
      return v ? std::get_if<RecArray>(&v->v) : nullptr;
    };
    const RecArray* lfc = field("logfoldchanges");
    const RecArray* padj = field("pvals_adj");
    std::vector<std::string> head{"cluster", "cells"};
    for (int r = 0; r < o.marker_table_genes; ++r) head.push_back("#" + std::to_string(r + 1));
    std::vector<std::vector<std::string>> rows;
    std::map<std::string, int64_t> size;
    for (int32_t c : dot_groups->codes)
      if (c >= 0) ++size[dot_groups->categories[c]];
    for (const auto& gname : groups) {
      std::vector<std::string> row{gname, thousands(size[gname])};
      const RecField* f = names->field(gname);
      const RecField* lf = lfc ? lfc->field(gname) : nullptr;
      const RecField* pf = padj ? padj->field(gname) : nullptr;
      for (int r = 0; r < o.marker_table_genes && r < names->n; ++r) {
        std::string cell = f->str[r];
        if (lf && !lf->is_string) cell += "  lfc " + fmt_num(lf->num[r], 3);
        if (pf && !pf->is_string) cell += ", p " + fmt_num(pf->num[r], 2);
        row.push_back(cell);
      }
      rows.push_back(row);
    }
    pg.table(head, rows);
    if (!have_expr || dot_genes.empty()) {
      pg.note("No dotplot: the expression matrix of the marker genes is absent.");
    } else {
      const int G = static_cast<int>(groups.size()), S = static_cast<int>(dot_genes.size());
      Plot p(std::max(420, 110 + 18 * S + 150), 110 + 20 * G + 40, "Dotplot of the top markers");
      p.left = 70, p.bottom = 90;
      p.x.categories = dot_labels;
      p.x.rotate_labels = true;
      p.x.title = "";
      p.y.title = groupby;
      for (int gi = G - 1; gi >= 0; --gi) p.y.categories.push_back(groups[gi]);
      double mx = 0;
      std::map<std::string, int> cat_code;
      for (size_t c = 0; c < dot_groups->categories.size(); ++c) cat_code[dot_groups->categories[c]] = static_cast<int>(c);
      for (int gi = 0; gi < G; ++gi)
        for (int s = 0; s < S; ++s) mx = std::max(mx, ex.dot_mean[static_cast<size_t>(cat_code[groups[gi]]) * S + s]);
      if (mx <= 0) mx = 1;
      const double rmax = 8.5;
      p.legend("cells expressing", {{grey(90), "25 %", rmax * std::sqrt(0.25)}, {grey(90), "50 %", rmax * std::sqrt(0.5)}, {grey(90), "100 %", rmax}});
      p.colorbar("mean expr. in group", 0, mx);
      for (int gi = 0; gi < G; ++gi) {
        const size_t code = static_cast<size_t>(cat_code[groups[gi]]);
        for (int s = 0; s < S; ++s) {
          const double fr = ex.dot_frac[code * S + s], me = ex.dot_mean[code * S + s];
          if (fr <= 0) continue;
          p.circle(s, G - 1 - gi, rmax * std::sqrt(fr), viridis(me / mx), grey(80), true);
        }
      }
      pg.figure(p.svg(), "As scanpy's pl.rank_genes_groups_dotplot: dot area = share of the cluster's cells expressing the gene (value > 0); colour = its mean expression in the cluster (" +
                             in.expression_slot + (in.expression_log1p ? ", log1p" : "") + ").");
    }
  }

  // ---- cNMF
  std::vector<std::string> usage_keys;
  for (const auto& [k, m] : d.obsm)
    if (k.rfind("cnmf_usages_k", 0) == 0) usage_keys.push_back(k);
  if (!in.cnmf_k.empty() || !usage_keys.empty()) {
    pg.section("cnmf", "cNMF programs");
    if (in.cnmf_k.empty()) {
      pg.note("No k-selection plot: give scurry report --cnmf-stats NAME.k_selection_stats.df.npz.");
    } else {
      Plot p(620, 360, "cNMF k selection");
      p.right = 70;
      p.y2_on = true;
      p.legend("", {{rgb_hex(0x0072B2), "stability"}, {rgb_hex(0xD55E00), "error"}});
      p.x.title = "number of programs K";
      p.x.integer = true;
      p.y.title = "stability (silhouette score)";
      p.y2.title = "prediction error (Frobenius norm)";
      p.x.fit(in.cnmf_k, 0.06), p.y.fit(in.cnmf_stability, 0.08), p.y2.fit(in.cnmf_error, 0.08);
      std::vector<double> ey;
      for (double e : in.cnmf_error) ey.push_back(p.y_of_y2(e));
      p.polyline(in.cnmf_k, in.cnmf_stability, rgb_hex(0x0072B2), 2);
      p.points(in.cnmf_k, in.cnmf_stability, rgb_hex(0x0072B2), 4);
      p.polyline(in.cnmf_k, ey, rgb_hex(0xD55E00), 2, true);
      p.points(in.cnmf_k, ey, rgb_hex(0xD55E00), 4);
      pg.figure(p.svg(), "Stability (silhouette of the replicates' programs, left axis) and the consensus's prediction error (right axis) against K, as cNMF's k_selection_plot (" +
                             in.cnmf_source + "). Choose K where stability is high before the error levels off.");
    }
    auto emb2 = d.obsm.find("X_umap");
    for (const auto& key : usage_keys) {
      if (emb2 == d.obsm.end()) {
        pg.note("Usages in obsm['" + key + "'] are not drawn: obsm['X_umap'] is absent.");
        continue;
      }
      const DenseF u = to_dense_f(d.obsm.at(key));
      const DenseF xy = to_dense_f(emb2->second);
      if (u.n_rows != n) fail_input(where, "obsm/", key, " has ", u.n_rows, " rows (expected ", n, ")");
      const int64_t K = u.n_cols, shown = std::min<int64_t>(K, 12);
      std::vector<double> ux(n), uy(n);
      for (int64_t i = 0; i < n; ++i) ux[i] = xy(i, 0), uy[i] = xy(i, 1);
      pg.open_row();
      for (int64_t c = 0; c < shown; ++c) {
        std::vector<double> v(n);
        for (int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (int64_t q = 0; q < K; ++q) s += u(i, q);
          v[i] = s > 0 ? u(i, c) / s : 0;
        }
        const int side = o.raster_px * 3 / 5;
        Plot p(side + 24 + 12 + 70, side + 34 + 28, "program " + std::to_string(c + 1) + " of K = " + std::to_string(K));
        p.left = 24, p.bottom = 28, p.right = 12, p.legend_width = 70;
        p.x.title = "UMAP1", p.y.title = "UMAP2";
        p.x.show_ticks = p.y.show_ticks = false;
        p.x.fit(ux, 0.03), p.y.fit(uy, 0.03);
        p.colorbar("usage", 0, 1);
        std::vector<Rgb> col(n);
        for (int64_t i = 0; i < n; ++i) col[i] = viridis(v[i]);
        p.image(raster_points(p, ux, uy, col, ascending(v), std::max(0, point_radius(n) - 1)));
        pg.figure(p.svg(), "Share of each cell's usage on program " + std::to_string(c + 1) + " (obsm['" + key + "'], rows normalised to 1).");
      }
      pg.close_row();
      if (shown < K) pg.note("The first " + std::to_string(shown) + " of " + std::to_string(K) + " programs are drawn.");
    }
  }

  // ---- timings
  pg.section("timings", "Timings");
  std::vector<TimingStep> steps = in.timings;
  if (steps.empty() && sc)
    if (const Value* tv = value_at(sc, "timings"))
      if (const Table* t = std::get_if<Table>(&tv->v)) {
        std::vector<double> w, c, r;
        if (column(*t, "wall_s", w) && column(*t, "cpu_s", c) && column(*t, "peak_rss_mb", r) && t->has("step")) {
          const auto* sn = std::get_if<StringColumn>(&t->at("step").c);
          const auto* ex2 = t->has("result") ? std::get_if<StringColumn>(&t->at("result").c) : nullptr;
          for (int64_t i = 0; sn && i < t->n_rows(); ++i)
            steps.push_back({sn->values[i], w[i], c[i], r[i], ex2 ? ex2->values[i] : ""});
        }
      }
  if (steps.empty()) {
    pg.note("No timings recorded (scurry run stores them in uns['scurry']['timings']).");
  } else {
    std::vector<std::vector<std::string>> rows;
    double tw = 0, tc = 0, peak = 0;
    char b[64];
    for (const auto& s : steps) {
      std::vector<std::string> r{s.name};
      std::snprintf(b, sizeof b, "%.3f", s.wall_s), r.push_back(b);
      std::snprintf(b, sizeof b, "%.3f", s.cpu_s), r.push_back(b);
      std::snprintf(b, sizeof b, "%.2f", s.wall_s > 0 ? s.cpu_s / s.wall_s : 0.0), r.push_back(b);
      std::snprintf(b, sizeof b, "%.1f", s.peak_rss_mb), r.push_back(b);
      r.push_back(s.extra);
      rows.push_back(r);
      tw += s.wall_s, tc += s.cpu_s, peak = std::max(peak, s.peak_rss_mb);
    }
    std::vector<std::string> tot{"total"};
    std::snprintf(b, sizeof b, "%.3f", tw), tot.push_back(b);
    std::snprintf(b, sizeof b, "%.3f", tc), tot.push_back(b);
    std::snprintf(b, sizeof b, "%.2f", tw > 0 ? tc / tw : 0.0), tot.push_back(b);
    std::snprintf(b, sizeof b, "%.1f", peak), tot.push_back(b);
    tot.push_back("");
    rows.push_back(tot);
    pg.open_row();
    pg.table({"step", "wall (s)", "CPU (s)", "CPU / wall", "peak RSS (MB)", "result"}, rows, {false, true, true, true, true, false});
    const int k = static_cast<int>(steps.size());
    Plot p(600, 70 + 24 * k, "Time per step");
    p.left = 150;
    p.legend("", {{rgb_hex(0x0072B2), "wall"}, {rgb_hex(0xE69F00), "CPU (all threads)"}});
    p.x.title = "time (s)";
    for (int i = k - 1; i >= 0; --i) p.y.categories.push_back(steps[i].name);
    std::vector<double> xs{0};
    for (const auto& s : steps) xs.push_back(s.wall_s), xs.push_back(s.cpu_s);
    p.x.fit(xs, 0.04, true);
    for (int i = 0; i < k; ++i) {
      const double yc = k - 1 - i;
      p.rect(0, yc + 0.02, steps[i].wall_s, yc + 0.36, rgb_hex(0x0072B2));
      p.rect(0, yc - 0.36, steps[i].cpu_s, yc - 0.02, rgb_hex(0xE69F00));
    }
    pg.figure(p.svg(), "Wall-clock and process CPU time of each step (CPU above wall: several threads at work).");
    pg.close_row();
  }

  // ---- warnings
  pg.section("warnings", "Warnings");
  std::vector<std::string> warns = in.warnings;
  if (warns.empty() && sc)
    if (const Value* wv = value_at(sc, "warnings"))
      if (auto* s = std::get_if<std::vector<std::string>>(&wv->v)) warns = *s;
  if (warns.empty()) {
    pg.para(sc || in.made_by == "scurry run" ? "No warnings were raised during the run." : "No warnings recorded (not a scurry run result).");
  } else {
    pg.body += "<ul>";
    for (const auto& w : warns) pg.body += "<li class=\"warn\">" + xml_escape(w) + "</li>";
    pg.body += "</ul>\n";
  }
  pg.body += "</section>\n";

  std::string title = "scurry report: " + in.result_path;
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
                     xml_escape(title) + "</title>\n<style>" + kCss + "</style></head>\n<body>\n<header><h1>scurry run report</h1><p>" +
                     xml_escape(in.result_path) + " &#183; " + thousands(n) + " cells x " + thousands(d.n_vars()) +
                     " genes &#183; scurry " SCURRY_VERSION "</p></header>\n<nav>" + pg.nav + "</nav>\n<main>\n" + pg.body +
                     "</main>\n</body></html>\n";
  return html;
}

std::string report_of_dataset(const Dataset& d, const std::string& result_path, const std::string& made_by,
                              const std::vector<TimingStep>& timings, const std::vector<std::string>& warnings,
                              const ReportOptions& opt) {
  ReportInput in;
  in.data = &d;
  in.result_path = result_path;
  in.made_by = made_by;
  in.timings = timings;
  in.warnings = warnings;
  const Matrix* m = nullptr;
  if (d.raw && !d.raw->X.empty()) {
    m = &d.raw->X, in.expression_slot = "raw/X", in.expression_genes = d.raw->var.index;
  } else if (!d.X.empty() && !d.var.has("std")) {
    m = &d.X, in.expression_slot = "X", in.expression_genes = d.var.index;
  }
  in.expression_log1p = d.uns.count("log1p") != 0;
  CsrF copy;
  std::unique_ptr<MemoryRowSource> src;
  if (m) {
    const CsrF* csr = std::get_if<CsrF>(&m->m);
    if (!csr) copy = to_csr_f(*m), csr = &copy;
    src = std::make_unique<MemoryRowSource>(*csr);
    in.expression = src.get();
  }
  return report_html(in, opt);
}

}  // namespace scurry::report
