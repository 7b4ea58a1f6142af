// The report's drawing and statistics: the SVG writer's output is well-formed XML (a small checker
// here), tick labels are distinct and inside the range for seeded random ranges, base64 matches
// RFC 4648's vectors and round-trips, the PNG encoder's files decode (chunk CRCs, zlib, the five
// filters undone by an independent decoder here) to the exact pixels, the data URIs of a plot decode
// to PNGs; expression_stats against an exact oracle (float64 over every cell) and the same bits for 1
// and 2 threads; the page of a dataset with missing slots notes them and refers to nothing outside.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/row_blocks.hpp"
#include "report/image.hpp"
#include "report/report.hpp"
#include "report/svg.hpp"
#include "testlib.hpp"

using namespace scurry;
using namespace scurry::report;

namespace {

// Well-formed XML: balanced tags, quoted attributes, no raw '<' in text or attributes, '&' only in
// entities. Returns "" or the first problem.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  size_t i = 0;
  auto entity_ok = [&](size_t at) {
    const size_t semi = s.find(';', at);
    if (semi == std::string::npos || semi - at > 8) return false;
    const std::string e = s.substr(at + 1, semi - at - 1);
    return e == "amp" || e == "lt" || e == "gt" || e == "quot" || e == "apos" || (e.size() > 1 && e[0] == '#');
  };
  while (i < s.size()) {
    if (s[i] == '&') {
      if (!entity_ok(i)) return "bad entity at " + std::to_string(i);
      ++i;
      continue;
    }
    if (s[i] != '<') {
      if (s[i] == '>') return "raw '>' at " + std::to_string(i);
      ++i;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return "unclosed tag at " + std::to_string(i);
    std::string tag = s.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return "'<' inside a tag at " + std::to_string(i);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "mismatched </" + name + "> at " + std::to_string(i);
      stack.pop_back();
    } else {
      const bool self = !tag.empty() && tag.back() == '/';
      if (self) tag.pop_back();
      const size_t sp = tag.find_first_of(" \n\t");
      const std::string name = tag.substr(0, sp);
      if (name.empty()) return "empty tag name at " + std::to_string(i);
      // attributes: name="value" pairs
      size_t p = sp == std::string::npos ? tag.size() : sp;
      while (p < tag.size()) {
        while (p < tag.size() && std::isspace(static_cast<unsigned char>(tag[p]))) ++p;
        if (p >= tag.size()) break;
        const size_t eq = tag.find('=', p);
        if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') return "unquoted attribute in <" + name + ">";
        const size_t close = tag.find('"', eq + 2);
        if (close == std::string::npos) return "unterminated attribute in <" + name + ">";
        const std::string val = tag.substr(eq + 2, close - eq - 2);
        for (size_t k = 0; k < val.size(); ++k)
          if (val[k] == '&') {
            const size_t semi = val.find(';', k);
            if (semi == std::string::npos) return "bad entity in an attribute of <" + name + ">";
          }
        p = close + 1;
      }
      if (!self) stack.push_back(name);
    }
    i = end + 1;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  return "";
}

uint32_t be32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24 | static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8 | static_cast<uint8_t>(s[at + 3]);
}

// An independent PNG decoder for 8-bit RGB non-interlaced files (what encode_png writes).
Image decode_png(const std::string& f) {
  if (f.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) throw std::runtime_error("no PNG signature");
  size_t at = 8;
  int w = 0, h = 0;
  std::string idat;
  bool end = false;
  while (at + 12 <= f.size() && !end) {
    const uint32_t len = be32(f, at);
    const std::string type = f.substr(at + 4, 4), data = f.substr(at + 8, len);
    const uint32_t crc = be32(f, at + 8 + len);
    const std::string td = type + data;
    if (crc != static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()))))
      throw std::runtime_error("bad CRC in " + type);
    if (type == "IHDR") {
      w = static_cast<int>(be32(data, 0)), h = static_cast<int>(be32(data, 4));
      if (data[8] != 8 || data[9] != 2 || data[12] != 0) throw std::runtime_error("not 8-bit RGB non-interlaced");
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      end = true;
    }
    at += 12 + len;
  }
  if (!end) throw std::runtime_error("no IEND");
  const size_t stride = static_cast<size_t>(w) * 3;
  uLongf rawlen = static_cast<uLongf>((stride + 1) * h);
  std::string raw(rawlen, '\0');
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &rawlen, reinterpret_cast<const Bytef*>(idat.data()),
                 static_cast<uLong>(idat.size())) != Z_OK || rawlen != (stride + 1) * h)
    throw std::runtime_error("zlib stream does not inflate to the image size");
  Image im(w, h);
  for (int y = 0; y < h; ++y) {
    const int ft = static_cast<uint8_t>(raw[y * (stride + 1)]);
    for (size_t i = 0; i < stride; ++i) {
      const int x = static_cast<uint8_t>(raw[y * (stride + 1) + 1 + i]);
      const int a = i >= 3 ? im.rgb[y * stride + i - 3] : 0;
      const int b = y ? im.rgb[(y - 1) * stride + i] : 0;
      const int c = (i >= 3 && y) ? im.rgb[(y - 1) * stride + i - 3] : 0;
      int pred = 0;
      if (ft == 1) pred = a;
      else if (ft == 2) pred = b;
      else if (ft == 3) pred = (a + b) / 2;
      else if (ft == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
      } else if (ft != 0) throw std::runtime_error("bad filter type");
      im.rgb[y * stride + i] = static_cast<uint8_t>(x + pred);
    }
  }
  return im;
}

std::vector<std::string> data_uris(const std::string& s, const std::string& prefix) {
  std::vector<std::string> out;
  for (size_t at = s.find(prefix); at != std::string::npos; at = s.find(prefix, at + 1)) {
    const size_t b = at + prefix.size();
    out.push_back(s.substr(b, s.find('"', b) - b));
  }
  return out;
}

}  // namespace

TEST(ReportSvg, Base64MatchesRfc4648AndRoundTrips) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, enc] : vectors) {
    EXPECT_EQ(base64_encode(plain), enc);
    EXPECT_EQ(base64_decode(enc), plain);
  }
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 50; ++t) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    EXPECT_EQ(base64_decode(base64_encode(s)), s);
  }
  EXPECT_THROW(base64_decode("Zm9*"), std::invalid_argument);
}

TEST(ReportSvg, PngDecodesToTheSamePixels) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 6; ++t) {
    const int w = 1 + static_cast<int>(rng() % 90), h = 1 + static_cast<int>(rng() % 70);
    Image im(w, h);
    // smooth gradients (Sub/Up/Paeth win), noise (None wins) and discs
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        im.set(x, y, t % 2 ? Rgb{static_cast<uint8_t>(x * 3), static_cast<uint8_t>(y * 2), static_cast<uint8_t>(x + y)}
                           : Rgb{static_cast<uint8_t>(rng()), static_cast<uint8_t>(rng()), static_cast<uint8_t>(rng())});
    for (int k = 0; k < 20; ++k) im.disc(static_cast<int>(rng() % w), static_cast<int>(rng() % h), static_cast<int>(rng() % 4), viridis((rng() % 100) / 99.0));
    const Image back = decode_png(encode_png(im));
    ASSERT_EQ(back.width, w);
    ASSERT_EQ(back.height, h);
    EXPECT_TRUE(back.rgb == im.rgb) << "seed " << seed << " image " << t;
  }
}

TEST(ReportSvg, TickLabelsAreDistinctAndInRange) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (int t = 0; t < 3000; ++t) {
    const double mag = std::pow(10.0, -6 + 16 * u(rng));
    double lo = (u(rng) - 0.3) * mag, hi = lo + mag * std::pow(10.0, -4 * u(rng));
    if (!(hi > lo)) continue;
    const Ticks tk = nice_ticks(lo, hi, 2 + static_cast<int>(rng() % 6));
    ASSERT_GE(tk.values.size(), 1u) << lo << " " << hi;
    ASSERT_LE(tk.values.size(), 16u) << lo << " " << hi;
    ASSERT_EQ(tk.values.size(), tk.labels.size());
    std::set<std::string> distinct(tk.labels.begin(), tk.labels.end());
    EXPECT_EQ(distinct.size(), tk.labels.size()) << "seed " << seed << ": [" << lo << ", " << hi << "] first " << tk.labels.front();
    for (size_t i = 0; i < tk.values.size(); ++i) {
      EXPECT_GE(tk.values[i], lo - (hi - lo) * 1e-6);
      EXPECT_LE(tk.values[i], hi + (hi - lo) * 1e-6);
      if (i) {
        EXPECT_GT(tk.values[i], tk.values[i - 1]);
      }
    }
    if (lo > 0) {
      const Ticks lt = log_ticks(lo, hi);
      std::set<std::string> d2(lt.labels.begin(), lt.labels.end());
      EXPECT_EQ(d2.size(), lt.labels.size()) << "log [" << lo << ", " << hi << "]";
    }
  }
  // The examples the old cNMF plot got wrong: close values keep their digits.
  const Ticks close = nice_ticks(0.981, 0.987, 4);
  EXPECT_EQ(std::set<std::string>(close.labels.begin(), close.labels.end()).size(), close.labels.size());
  EXPECT_GE(close.labels.size(), 3u);
  const Ticks big = nice_ticks(0, 1.2e6, 5);
  EXPECT_EQ(big.labels.back().back(), 'M');
  EXPECT_EQ(big.labels.front(), "0");
}

TEST(ReportSvg, PlotIsWellFormedXmlWithDecodableImages) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  Plot p(500, 400, "a <title> & \"quotes\"");
  p.legend("cells & <groups>", {{category_color(0, 3), "a<b"}, {category_color(1, 3), "c&d"}, {category_color(2, 3), "e\"f"}});
  p.colorbar("expr.", 0, 7.5);
  p.x.title = "x (units)";
  p.y.title = "y (%)";
  p.y.log = true;
  std::vector<double> xs(200), ys(200);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(rng() % 1000), ys[i] = 1 + static_cast<double>(rng() % 10000);
  p.x.fit(xs), p.y.fit(ys);
  p.points(xs, ys, grey(10));
  p.hline(200, "min_genes 200", rgb_hex(0xD55E00));
  Image im(p.area_width(), p.area_height());
  for (int k = 0; k < 100; ++k) im.disc(static_cast<int>(rng() % im.width), static_cast<int>(rng() % im.height), 2, viridis(k / 99.0));
  p.image(im);
  p.text(500, 50, "label <1>");
  const std::string svg = p.svg();
  EXPECT_EQ(xml_problem(svg), "") << svg.substr(0, 2000);
  const auto uris = data_uris(svg, "href=\"data:image/png;base64,");
  ASSERT_EQ(uris.size(), 1u);
  const Image back = decode_png(base64_decode(uris[0]));
  EXPECT_TRUE(back.rgb == im.rgb);
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; &quot;quotes&quot;"), std::string::npos);
}

namespace {

struct Oracle {
  std::vector<double> mean_pct;
  std::vector<std::vector<double>> pct;  // per gene, per cell
};
Oracle oracle(const CsrF& m, bool log1p) {
  Oracle o;
  o.mean_pct.assign(m.n_cols, 0);
  o.pct.assign(m.n_cols, std::vector<double>(m.n_rows, 0));
  for (int64_t r = 0; r < m.n_rows; ++r) {
    double sum = 0;
    for (int64_t k = m.indptr[r]; k < m.indptr[r + 1]; ++k) sum += log1p ? std::expm1(double(m.data[k])) : m.data[k];
    for (int64_t k = m.indptr[r]; k < m.indptr[r + 1]; ++k) {
      const double c = log1p ? std::expm1(double(m.data[k])) : m.data[k];
      o.pct[m.indices[k]][r] = sum > 0 ? 100 * c / sum : 0;
    }
  }
  for (int64_t j = 0; j < m.n_cols; ++j) {
    for (double v : o.pct[j]) o.mean_pct[j] += v;
    o.mean_pct[j] /= static_cast<double>(m.n_rows);
  }
  return o;
}

}  // namespace

TEST(ReportStats, ExpressionStatsMatchTheOracle) {
  const uint64_t seed = test::fresh_seed();
  const int64_t n = 3001, g = 57;
  CsrF m = test::random_counts(n, g, 0.3, seed, 30);
  for (float& v : m.data) v = std::log1p(v * 0.37f);  // log1p of "normalised" values
  std::mt19937_64 rng(seed + 1);
  const int groups = 4;
  std::vector<int32_t> codes(n);
  for (auto& c : codes) c = static_cast<int32_t>(rng() % (groups + 1)) - 1;  // -1: no group
  const std::vector<int64_t> dot{3, 10, 56}, cell{7, 0};
  ReportOptions o;
  o.top_genes = 5;
  o.block_rows = 64;
  o.threads = 1;
  MemoryRowSource src(m);
  const ExpressionStats a = expression_stats(src, true, &codes, groups, dot, cell, o);
  o.threads = 2;
  const ExpressionStats b = expression_stats(src, true, &codes, groups, dot, cell, o);
  EXPECT_TRUE(a.mean_pct == b.mean_pct) << "thread count changed the bits";
  EXPECT_TRUE(a.dot_mean == b.dot_mean);
  const Oracle orc = oracle(m, true);
  for (int64_t j = 0; j < g; ++j) EXPECT_NEAR(a.mean_pct[j], orc.mean_pct[j], 1e-9 * std::max(1.0, orc.mean_pct[j])) << j;
  std::vector<int64_t> idx(g);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return orc.mean_pct[x] > orc.mean_pct[y]; });
  ASSERT_EQ(a.top.size(), 5u);
  for (int t = 0; t < 5; ++t) {
    EXPECT_EQ(a.top[t], idx[t]) << "rank " << t << " seed " << seed;
    std::vector<double> v = orc.pct[a.top[t]];
    std::sort(v.begin(), v.end());
    const double bin = 100.0 / o.hist_bins;
    auto q = [&](double f) { return v[static_cast<size_t>(f * (v.size() - 1))]; };
    EXPECT_NEAR(a.top_box[t].med, q(0.5), 2 * bin);
    EXPECT_NEAR(a.top_box[t].q1, q(0.25), 2 * bin);
    EXPECT_NEAR(a.top_box[t].q3, q(0.75), 2 * bin);
    EXPECT_NEAR(a.top_box[t].max, v.back(), 2 * bin);
  }
  for (int c = 0; c < groups; ++c)
    for (size_t s = 0; s < dot.size(); ++s) {
      double cnt = 0, expr = 0, sum = 0;
      for (int64_t r = 0; r < n; ++r) {
        if (codes[r] != c) continue;
        ++cnt;
        for (int64_t k = m.indptr[r]; k < m.indptr[r + 1]; ++k)
          if (m.indices[k] == dot[s]) expr += m.data[k] > 0, sum += m.data[k];
      }
      EXPECT_NEAR(a.dot_frac[c * dot.size() + s], expr / cnt, 1e-12);
      EXPECT_NEAR(a.dot_mean[c * dot.size() + s], sum / cnt, 1e-9);
    }
  for (size_t u = 0; u < cell.size(); ++u)
    for (int64_t r = 0; r < n; r += 97) {
      double want = 0;
      for (int64_t k = m.indptr[r]; k < m.indptr[r + 1]; ++k)
        if (m.indices[k] == cell[u]) want = m.data[k];
      EXPECT_EQ(a.cell_values[u][r], want);
    }
}

TEST(ReportPage, MissingSlotsAreNotedAndNothingOutsideIsReferenced) {
  const uint64_t seed = test::fresh_seed();
  Dataset d;
  const int64_t n = 500, g = 40;
  for (int64_t i = 0; i < n; ++i) d.obs.index.push_back("c" + std::to_string(i));
  for (int64_t j = 0; j < g; ++j) d.var.index.push_back("G" + std::to_string(j));
  CsrF m = test::random_counts(n, g, 0.4, seed, 9);
  std::vector<double> ng(n), tc(n);
  for (int64_t r = 0; r < n; ++r) {
    ng[r] = static_cast<double>(m.row_nnz(r));
    for (int64_t k = m.indptr[r]; k < m.indptr[r + 1]; ++k) tc[r] += m.data[k];
  }
  d.obs.set("n_genes_by_counts", Column::numeric(ng));
  d.obs.set("total_counts", Column::numeric(tc));
  d.X = Matrix(m);
  const std::string html = report_of_dataset(d, "/data/x<1>.h5ad", "test", {}, {"a warning & more"});
  EXPECT_NE(html.find(xml_escape("obs['pct_counts_mt']")), std::string::npos);
  EXPECT_NE(html.find(xml_escape("obsm['X_umap'] is absent")), std::string::npos);
  EXPECT_NE(html.find(xml_escape("uns['rank_genes_groups']")), std::string::npos);
  EXPECT_NE(html.find(xml_escape("uns['pca']['variance_ratio'] is absent")), std::string::npos);
  EXPECT_NE(html.find("a warning &amp; more"), std::string::npos);
  EXPECT_NE(html.find("/data/x&lt;1&gt;.h5ad"), std::string::npos);
  EXPECT_NE(html.find("Top 20 genes"), std::string::npos);  // from X (counts): 40 genes
  // Self-contained: no reference to another file or the network (the only URL is SVG's namespace).
  std::string rest = html;
  for (size_t at; (at = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;) rest.erase(at, 26);
  EXPECT_EQ(rest.find("http:"), std::string::npos);
  EXPECT_EQ(rest.find("https:"), std::string::npos);
  EXPECT_EQ(rest.find(" src="), std::string::npos);
  for (size_t at = rest.find("href=\""); at != std::string::npos; at = rest.find("href=\"", at + 1)) {
    const char c = rest[at + 6];
    EXPECT_TRUE(c == '#' || rest.compare(at + 6, 5, "data:") == 0) << rest.substr(at, 40);
  }
  // Every figure is well-formed XML.
  int figures = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    const size_t end = html.find("</svg>", at);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(xml_problem(html.substr(at, end + 6 - at)), "");
    ++figures;
  }
  EXPECT_EQ(figures, 4);  // 2 violins, the QC scatter, the highest expressed genes
}
