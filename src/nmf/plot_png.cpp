// scurry: PNG canvas and the k-selection plot (see plot_png.hpp).
#include "nmf/plot_png.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/error.hpp"
#include "pp/linalg.hpp"

namespace scurry {

namespace {

// 5x7 glyphs (printable ASCII that plots need), one row a byte, bit 4 = the left column; a glyph
// advances 6 font pixels. Our own drawing.
struct Glyph {
  char c;
  uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {' ', {0, 0, 0, 0, 0, 0, 0}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'a', {0, 0, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},       {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0, 0, 0x0E, 0x10, 0x10, 0x11, 0x0E}},       {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},       {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}},    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0, 0x0C, 0x04, 0x04, 0x04, 0x0E}},    {'j', {0x02, 0, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}}, {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0, 0, 0x1A, 0x15, 0x15, 0x11, 0x11}},       {'n', {0, 0, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0, 0, 0x0E, 0x11, 0x11, 0x11, 0x0E}},       {'p', {0, 0, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0, 0, 0x0D, 0x13, 0x0F, 0x01, 0x01}},       {'r', {0, 0, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0, 0, 0x0E, 0x10, 0x0E, 0x01, 0x1E}},       {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0, 0, 0x11, 0x11, 0x11, 0x13, 0x0D}},       {'v', {0, 0, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0, 0, 0x11, 0x11, 0x15, 0x15, 0x0A}},       {'x', {0, 0, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0, 0, 0x11, 0x11, 0x0F, 0x01, 0x0E}},       {'z', {0, 0, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},                {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},
    {'-', {0, 0, 0, 0x1F, 0, 0, 0}},                   {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}}, {'/', {0, 0x01, 0x02, 0x04, 0x08, 0x10, 0}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},          {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},
    {'_', {0, 0, 0, 0, 0, 0, 0x1F}},                   {'^', {0x04, 0x0A, 0x11, 0, 0, 0, 0}},
    {'<', {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}},
    {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}}, {'|', {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
};
const Glyph* glyph(char ch) {
  for (const Glyph& g : kFont)
    if (g.c == ch) return &g;
  return nullptr;
}

void put_u32(std::string& s, uint32_t v) {
  for (int sh = 24; sh >= 0; sh -= 8) s.push_back(static_cast<char>((v >> sh) & 0xFF));
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  std::string td(type, 4);
  td += data;
  out += td;
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()));
  put_u32(out, static_cast<uint32_t>(crc));
}


}  // namespace

Canvas::Canvas(int w, int h, uint32_t bg) : width(w), height(h), rgb(static_cast<size_t>(w) * h * 3) {
  for (size_t p = 0; p < rgb.size(); p += 3) {
    rgb[p] = (bg >> 16) & 0xFF;
    rgb[p + 1] = (bg >> 8) & 0xFF;
    rgb[p + 2] = bg & 0xFF;
  }
}

void Canvas::pixel(int x, int y, uint32_t c) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  uint8_t* p = rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
  p[0] = (c >> 16) & 0xFF, p[1] = (c >> 8) & 0xFF, p[2] = c & 0xFF;
}

void Canvas::rect(int x0, int y0, int x1, int y1, uint32_t c) {
  for (int y = std::min(y0, y1); y <= std::max(y0, y1); ++y)
    for (int x = std::min(x0, x1); x <= std::max(x0, x1); ++x) pixel(x, y, c);
}

void Canvas::line(int x0, int y0, int x1, int y1, uint32_t c, int th) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  const int lo = -(th - 1) / 2, hi = th / 2;
  for (;;) {
    rect(x0 + lo, y0 + lo, x0 + hi, y0 + hi, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

int Canvas::text_width(const std::string& s, int scale) { return static_cast<int>(s.size()) * 6 * scale - scale; }

void Canvas::text(int x, int y, const std::string& s, uint32_t c, int scale) {
  for (const char ch : s) {
    if (const Glyph* gl = glyph(ch))
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (gl->rows[r] & (0x10 >> col)) rect(x + col * scale, y + r * scale, x + col * scale + scale - 1, y + r * scale + scale - 1, c);
    x += 6 * scale;
  }
}

void Canvas::text_up(int x, int y, const std::string& s, uint32_t c, int scale) {
  // Rotated 90 degrees counter-clockwise: the baseline runs upwards from (x, y).
  for (const char ch : s) {
    if (const Glyph* gl = glyph(ch))
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (gl->rows[r] & (0x10 >> col)) {
            const int px = x + r * scale, py = y - col * scale;
            rect(px, py - scale + 1, px + scale - 1, py, c);
          }
    y -= 6 * scale;
  }
}

void Canvas::dashed(int x0, int y0, int x1, int y1, uint32_t c, int dash, int thickness) {
  const double len = std::hypot(x1 - x0, y1 - y0);
  const int steps = std::max(1, static_cast<int>(len / dash));
  for (int q = 0; q < steps; q += 2) {
    const double a = static_cast<double>(q) / steps, b = std::min(1.0, static_cast<double>(q + 1) / steps);
    line(static_cast<int>(x0 + a * (x1 - x0)), static_cast<int>(y0 + a * (y1 - y0)), static_cast<int>(x0 + b * (x1 - x0)),
         static_cast<int>(y0 + b * (y1 - y0)), c, thickness);
  }
}

std::string encode_png(const Canvas& c) {
  std::string raw;
  raw.reserve(static_cast<size_t>(c.height) * (c.width * 3 + 1));
  for (int y = 0; y < c.height; ++y) {
    raw.push_back(0);  // filter: none
    raw.append(reinterpret_cast<const char*>(c.rgb.data()) + static_cast<size_t>(y) * c.width * 3,
               static_cast<size_t>(c.width) * 3);
  }
  uLongf clen = compressBound(static_cast<uLong>(raw.size()));
  std::string comp(clen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(comp.data()), &clen, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 9) != Z_OK)
    fail("PNG: zlib compression failed");
  comp.resize(clen);
  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(c.width));
  put_u32(ihdr, static_cast<uint32_t>(c.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, no filter method, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", comp);
  chunk(out, "IEND", "");
  return out;
}

// ---- axes helpers ------------------------------------------------------------------------------

NiceTicks nice_ticks(double lo, double hi, int target) {
  NiceTicks t;
  if (!(hi > lo)) {
    const double pad = lo != 0 ? 0.05 * std::fabs(lo) : 1.0;
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  t.step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
  t.lo = std::floor(lo / t.step + 1e-9) * t.step;
  t.hi = std::ceil(hi / t.step - 1e-9) * t.step;
  for (double v = t.lo; v <= t.hi + 0.5 * t.step; v += t.step) t.values.push_back(std::fabs(v) < 1e-12 * t.step ? 0.0 : v);
  // Scale large or tiny values into a "x 10^e" factor so the labels stay short.
  const double amax = std::max(std::fabs(t.lo), std::fabs(t.hi));
  t.exponent = (amax >= 1e5 || (amax > 0 && amax < 1e-3)) ? static_cast<int>(std::floor(std::log10(amax))) : 0;
  const double sstep = t.step / std::pow(10.0, t.exponent);
  t.decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(sstep) - 1e-9)));
  if (sstep * std::pow(10.0, t.decimals) - std::floor(sstep * std::pow(10.0, t.decimals) + 1e-9) > 1e-6) ++t.decimals;  // 2.5
  for (const double v : t.values) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", t.decimals, v / std::pow(10.0, t.exponent));
    t.labels.push_back(buf);
  }
  return t;
}

uint32_t colormap(const std::vector<uint32_t>& anchors, double x) {
  if (!(x >= 0)) x = 0;
  if (x > 1) x = 1;
  const double pos = x * static_cast<double>(anchors.size() - 1);
  const size_t i = std::min(anchors.size() - 2, static_cast<size_t>(pos));
  const double f = pos - static_cast<double>(i);
  uint32_t out = 0;
  for (int sh = 16; sh >= 0; sh -= 8) {
    const double a = (anchors[i] >> sh) & 0xFF, b = (anchors[i + 1] >> sh) & 0xFF;
    out |= static_cast<uint32_t>(std::lround(a + f * (b - a))) << sh;
  }
  return out;
}
// matplotlib's viridis and Spectral, sampled at equal steps (the maps are interpolated between).
const std::vector<uint32_t> kViridis = {0x440154, 0x482878, 0x3E4989, 0x31688E, 0x26828E,
                                        0x1F9E89, 0x35B779, 0x6ECE58, 0xB5DE2B, 0xFDE725};
const std::vector<uint32_t> kSpectral = {0x9E0142, 0xD53E4F, 0xF46D43, 0xFDAE61, 0xFEE08B, 0xFFFFBF,
                                         0xE6F598, 0xABDDA4, 0x66C2A5, 0x3288BD, 0x5E4FA2};

namespace {
constexpr uint32_t kBlue = 0x1F4FD0, kRed = 0xD02020, kGrid = 0xE2E2E2, kInk = 0x000000;

std::string sci_title(const std::string& title, int exponent) {
  return exponent == 0 ? title : title + " (x 1e" + std::to_string(exponent) + ")";
}
}  // namespace

Canvas k_selection_canvas(const std::vector<int>& ks, const std::vector<double>& stab, const std::vector<double>& err) {
  constexpr int kW = 960, kH = 640, kLeft = 130, kRight = 830, kTop = 60, kBottom = 530;
  Canvas c(kW, kH);
  const std::string title = "cNMF k selection: stability and error against K";
  c.text((kW - Canvas::text_width(title, 2)) / 2, 18, title, kInk, 2);
  if (ks.empty()) return c;
  auto finite_range = [](const std::vector<double>& v, double& lo, double& hi) {
    lo = hi = std::nan("");
    for (const double x : v)
      if (std::isfinite(x)) lo = std::isnan(lo) ? x : std::min(lo, x), hi = std::isnan(hi) ? x : std::max(hi, x);
    if (std::isnan(lo)) lo = 0, hi = 1;
  };
  double s0, s1, e0, e1;
  finite_range(stab, s0, s1);
  finite_range(err, e0, e1);
  const NiceTicks ts = nice_ticks(s0, s1, 5), te = nice_ticks(e0, e1, 5);
  const double xmin = *std::min_element(ks.begin(), ks.end()), xmax = *std::max_element(ks.begin(), ks.end());
  auto px = [&](double k) {
    return xmax > xmin ? kLeft + 30 + static_cast<int>(std::lround((k - xmin) / (xmax - xmin) * (kRight - kLeft - 60)))
                       : (kLeft + kRight) / 2;
  };
  auto py = [&](double v, const NiceTicks& t) {
    return kBottom - static_cast<int>(std::lround((v - t.lo) / (t.hi - t.lo) * (kBottom - kTop)));
  };
  // Horizontal grid at the stability ticks; tick labels on both sides.
  for (size_t q = 0; q < ts.values.size(); ++q) {
    const int y = py(ts.values[q], ts);
    c.line(kLeft, y, kRight, y, kGrid);
    c.line(kLeft - 6, y, kLeft, y, kBlue, 2);
    c.text(kLeft - 12 - Canvas::text_width(ts.labels[q]), y - 7, ts.labels[q], kBlue);
  }
  for (size_t q = 0; q < te.values.size(); ++q) {
    const int y = py(te.values[q], te);
    c.line(kRight, y, kRight + 6, y, kRed, 2);
    c.text(kRight + 12, y - 7, te.labels[q], kRed);
  }
  // K ticks: every k, or every m-th when labels would touch.
  std::vector<int> sk(ks);
  std::sort(sk.begin(), sk.end());
  int every = 1;
  const int widest = Canvas::text_width(std::to_string(sk.back())) + 10;
  if (sk.size() > 1) {
    int min_gap = kRight - kLeft;
    for (size_t q = 1; q < sk.size(); ++q) min_gap = std::min(min_gap, px(sk[q]) - px(sk[q - 1]));
    while (min_gap * every < widest) ++every;
  }
  for (size_t q = 0; q < sk.size(); ++q) {
    const int x = px(sk[q]);
    c.line(x, kTop, x, kBottom, kGrid);
    c.line(x, kBottom, x, kBottom + 6, kInk, 2);
    if (q % every == 0) {
      const std::string l = std::to_string(sk[q]);
      c.text(x - Canvas::text_width(l) / 2, kBottom + 12, l, kInk);
    }
  }
  c.line(kLeft, kTop, kLeft, kBottom, kBlue, 2);
  c.line(kRight, kTop, kRight, kBottom, kRed, 2);
  c.line(kLeft, kBottom, kRight, kBottom, kInk, 2);
  c.line(kLeft, kTop, kRight, kTop, kInk, 1);
  // Axis titles.
  const std::string xt = "Number of Components (K)";
  c.text((kLeft + kRight - Canvas::text_width(xt, 2)) / 2, kBottom + 42, xt, kInk, 2);
  const std::string yl = sci_title("Stability (silhouette)", ts.exponent);
  const std::string yr = sci_title("Error (Frobenius, squared)", te.exponent);
  c.text_up(22, (kTop + kBottom + Canvas::text_width(yl, 2)) / 2, yl, kBlue, 2);
  c.text_up(kW - 40, (kTop + kBottom + Canvas::text_width(yr, 2)) / 2, yr, kRed, 2);
  // Series.
  auto series = [&](const std::vector<double>& v, const NiceTicks& t, uint32_t col) {
    std::vector<std::pair<int, double>> pts;
    for (size_t q = 0; q < ks.size(); ++q) pts.emplace_back(ks[q], v[q]);
    std::sort(pts.begin(), pts.end());
    for (size_t q = 0; q < pts.size(); ++q) {
      if (!std::isfinite(pts[q].second)) continue;
      const int x = px(pts[q].first), y = py(pts[q].second, t);
      if (q + 1 < pts.size() && std::isfinite(pts[q + 1].second))
        c.line(x, y, px(pts[q + 1].first), py(pts[q + 1].second, t), col, 3);
      c.rect(x - 4, y - 4, x + 4, y + 4, col);
    }
  };
  series(stab, ts, kBlue);
  series(err, te, kRed);
  // Legend (top right, inside the axes).
  const int lw = 70 + Canvas::text_width("Stability (left axis)", 2), lx = kRight - lw - 12, ly = kTop + 12;
  c.rect(lx, ly, lx + lw, ly + 62, 0xFFFFFF);
  c.line(lx, ly, lx + lw, ly, 0x999999);
  c.line(lx, ly + 62, lx + lw, ly + 62, 0x999999);
  c.line(lx, ly, lx, ly + 62, 0x999999);
  c.line(lx + lw, ly, lx + lw, ly + 62, 0x999999);
  c.line(lx + 10, ly + 18, lx + 50, ly + 18, kBlue, 3);
  c.rect(lx + 26, ly + 14, lx + 34, ly + 22, kBlue);
  c.text(lx + 60, ly + 11, "Stability (left axis)", kInk, 2);
  c.line(lx + 10, ly + 44, lx + 50, ly + 44, kRed, 3);
  c.rect(lx + 26, ly + 40, lx + 34, ly + 48, kRed);
  c.text(lx + 60, ly + 37, "Error (right axis)", kInk, 2);
  return c;
}

// ---- the clustergram ---------------------------------------------------------------------------

std::vector<int64_t> average_linkage_leaves(const DenseD& D) {
  const int64_t m = D.n_rows;
  if (m <= 1) return m == 1 ? std::vector<int64_t>{0} : std::vector<int64_t>{};
  // UPGMA (average linkage) by the naive O(m^3) merge; scipy's convention: a merge's children are
  // (smaller id, larger id), ids 0..m-1 for leaves and m + i for the i-th merge; leaves in pre-order.
  std::vector<std::vector<double>> d(m, std::vector<double>(m));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) d[i][j] = D(i, j);
  std::vector<int64_t> id(m), size(m, 1);
  std::vector<bool> alive(m, true);
  for (int64_t i = 0; i < m; ++i) id[i] = i;
  std::vector<std::pair<int64_t, int64_t>> children;
  for (int64_t step = 0; step < m - 1; ++step) {
    int64_t a = -1, b = -1;
    double best = std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < m; ++i) {
      if (!alive[i]) continue;
      for (int64_t j = i + 1; j < m; ++j)
        if (alive[j] && d[i][j] < best) best = d[i][j], a = i, b = j;
    }
    if (a < 0) break;
    for (int64_t j = 0; j < m; ++j)
      if (alive[j] && j != a && j != b) {
        const double v = (d[a][j] * size[a] + d[b][j] * size[b]) / static_cast<double>(size[a] + size[b]);
        d[a][j] = d[j][a] = v;
      }
    children.emplace_back(std::min(id[a], id[b]), std::max(id[a], id[b]));
    id[a] = m + step;
    size[a] += size[b];
    alive[b] = false;
  }
  std::vector<int64_t> out, stack{m + static_cast<int64_t>(children.size()) - 1};
  while (!stack.empty()) {
    const int64_t v = stack.back();
    stack.pop_back();
    if (v < m) {
      out.push_back(v);
      continue;
    }
    stack.push_back(children[v - m].second);
    stack.push_back(children[v - m].first);
  }
  return out;
}

Canvas cnmf_clustergram_canvas(const DenseD& l2, const std::vector<int>& labels, const std::vector<double>& local_density,
                               double density_threshold) {
  const int64_t m = l2.n_rows;
  // Distances between the kept spectra (sklearn's euclidean_distances, as cNMF: the Gram by BLAS,
  // then sqrt(|a|^2 + |b|^2 - 2 a.b), clipped at 0).
  DenseD D(m, m);
  if (m > 0) {
    linalg::dgemm(false, true, m, m, l2.n_cols, 1.0, l2.data.data(), l2.n_cols, l2.data.data(), l2.n_cols, 0.0,
                  D.data.data(), m);
    std::vector<double> sq(m);
    for (int64_t i = 0; i < m; ++i) sq[i] = D(i, i);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) D(i, j) = i == j ? 0.0 : std::sqrt(std::max(0.0, sq[i] + sq[j] - 2 * D(i, j)));
  }
  // cNMF's order: by cluster label, and within a cluster by average-linkage leaves.
  int kmax = 0;
  for (const int l : labels) kmax = std::max(kmax, l + 1);
  std::vector<int64_t> order;
  for (int cl = 0; cl < kmax; ++cl) {
    std::vector<int64_t> mem;
    for (int64_t i = 0; i < m; ++i)
      if (labels[i] == cl) mem.push_back(i);
    DenseD sub(static_cast<int64_t>(mem.size()), static_cast<int64_t>(mem.size()));
    for (size_t a = 0; a < mem.size(); ++a)
      for (size_t b = 0; b < mem.size(); ++b) sub(a, b) = D(mem[a], mem[b]);
    for (const int64_t q : average_linkage_leaves(sub)) order.push_back(mem[q]);
  }
  // Layout: cNMF's grid (widths 0.5, 9, 0.5, 4, 1; heights 0.5, 9) at 90 px a unit, plus margins.
  constexpr int kU = 90, kM = 30;
  const int strip = kU / 2, side = 9 * kU;
  const int hx = kM + strip, hy = kM + strip;  // heatmap's top left
  const int px0 = hx + side + strip, pw = 4 * kU;  // the right panel
  Canvas c(px0 + pw + kU + kM, hy + side + kM + 10);
  double vmin = 0, vmax = 0;
  if (m > 0) {
    vmin = vmax = D(order[0], order[0]);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) vmin = std::min(vmin, D(i, j)), vmax = std::max(vmax, D(i, j));
  }
  auto lab_color = [&](int l) { return colormap(kSpectral, kmax > 1 ? static_cast<double>(l) / (kmax - 1) : 0.5); };
  for (int y = 0; y < side && m > 0; ++y) {
    const int64_t i = order[std::min<int64_t>(m - 1, static_cast<int64_t>(y) * m / side)];
    for (int x = 0; x < side; ++x) {
      const int64_t j = order[std::min<int64_t>(m - 1, static_cast<int64_t>(x) * m / side)];
      c.pixel(hx + x, hy + y, colormap(kViridis, vmax > vmin ? (D(i, j) - vmin) / (vmax - vmin) : 0.0));
    }
    c.rect(kM, hy + y, kM + strip - 4, hy + y, lab_color(labels[i]));                  // left strip
    c.rect(hx + y, kM, hx + y, kM + strip - 4, lab_color(labels[order[std::min<int64_t>(m - 1, static_cast<int64_t>(y) * m / side)]]));  // top strip
  }
  // Local density histogram (bins linspace(0, 1, 50)), threshold dashed.
  const int hy0 = hy + 30, hh = side / 3 - 90, hx1 = px0 + pw;
  c.text(px0 + (pw - Canvas::text_width("Local density histogram", 2)) / 2, hy0 - 24, "Local density histogram", kInk, 2);
  std::vector<int64_t> bins(49, 0);
  int64_t removed = 0;
  for (const double v : local_density) {
    if (!(v < density_threshold)) ++removed;
    if (v >= 0 && v <= 1) ++bins[std::min<int64_t>(48, static_cast<int64_t>(v * 49))];
  }
  const int64_t bmax = std::max<int64_t>(1, *std::max_element(bins.begin(), bins.end()));
  const NiceTicks yt = nice_ticks(0, static_cast<double>(bmax), 4);
  for (int b = 0; b < 49; ++b) {
    if (!bins[b]) continue;
    const int x0 = px0 + b * pw / 49, x1 = px0 + (b + 1) * pw / 49 - 1;
    const int y1 = hy0 + hh - static_cast<int>(std::lround(static_cast<double>(bins[b]) / yt.hi * hh));
    c.rect(x0, y1, x1, hy0 + hh, 0x1F77B4);
  }
  c.line(px0, hy0, hx1, hy0, kInk);
  c.line(px0, hy0 + hh, hx1, hy0 + hh, kInk);
  c.line(px0, hy0, px0, hy0 + hh, kInk);
  c.line(hx1, hy0, hx1, hy0 + hh, kInk);
  for (size_t q = 0; q < yt.values.size(); ++q) {  // y ticks on the right, as cNMF (tick_right)
    const int y = hy0 + hh - static_cast<int>(std::lround(yt.values[q] / yt.hi * hh));
    c.line(hx1, y, hx1 + 5, y, kInk);
    c.text(hx1 + 9, y - 7, yt.labels[q], kInk, 2);
  }
  for (int t = 0; t <= 5; ++t) {
    const int x = px0 + t * pw / 5;
    c.line(x, hy0 + hh, x, hy0 + hh + 5, kInk);
    char buf[8];
    std::snprintf(buf, sizeof buf, "%.1f", t / 5.0);
    c.text(x - Canvas::text_width(buf, 2) / 2, hy0 + hh + 9, buf, kInk, 2);
  }
  if (density_threshold < 1) {
    const int x = px0 + static_cast<int>(std::lround(density_threshold * pw));
    c.dashed(x, hy0, x, hy0 + hh, kInk, 8, 2);
    c.text(x + 6, hy0 + 6, "filtering", kInk, 2);
    c.text(x + 6, hy0 + 24, "threshold", kInk, 2);
  }
  c.text(px0, hy0 + hh + 32, "Mean distance to k nearest neighbors", kInk, 2);
  char msg[160];
  std::snprintf(msg, sizeof msg, "%lld/%zu (%.0f%%) spectra above threshold", static_cast<long long>(removed),
                local_density.size(), local_density.empty() ? 0.0 : 100.0 * removed / local_density.size());
  c.text(px0, hy0 + hh + 54, msg, kInk, 2);
  c.text(px0, hy0 + hh + 74, "were removed prior to clustering", kInk, 2);
  // Colour bar of the distances.
  const int cy = hy + side / 3 + 110, ch = 24;
  c.text(px0 + (pw - Canvas::text_width("Euclidean Distance", 2)) / 2, cy - 24, "Euclidean Distance", kInk, 2);
  for (int x = 0; x < pw; ++x) c.rect(px0 + x, cy, px0 + x, cy + ch, colormap(kViridis, static_cast<double>(x) / (pw - 1)));
  for (int t = 0; t <= 2; ++t) {
    const int x = px0 + t * (pw - 1) / 2;
    c.line(x, cy + ch, x, cy + ch + 5, kInk);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", vmin + (vmax - vmin) * t / 2);
    c.text(x - Canvas::text_width(buf, 2) / 2, cy + ch + 9, buf, kInk, 2);
  }
  // Title of the clustering.
  char tt[96];
  std::snprintf(tt, sizeof tt, "%lld spectra in %d clusters", static_cast<long long>(m), kmax);
  c.text(px0, cy + ch + 50, tt, kInk, 2);
  return c;
}

}  // namespace scurry
