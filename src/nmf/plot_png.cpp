// scurry: PNG canvas and the k-selection plot (see plot_png.hpp).
#include "nmf/plot_png.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"

namespace scurry {

namespace {

// 3x5 glyphs, one row a byte (bit 2 = left column).
struct Glyph {
  char c;
  uint8_t rows[5];
};
constexpr Glyph kFont[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 7, 1, 7}},
    {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}},
    {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
    {'+', {0, 2, 7, 2, 0}}, {'e', {0, 2, 5, 6, 3}}, {'K', {5, 5, 6, 5, 5}},
};

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

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
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

int Canvas::text_width(const std::string& s, int scale) { return static_cast<int>(s.size()) * 4 * scale; }

void Canvas::text(int x, int y, const std::string& s, uint32_t c, int scale) {
  for (const char ch : s) {
    for (const Glyph& gl : kFont) {
      if (gl.c != ch) continue;
      for (int r = 0; r < 5; ++r)
        for (int col = 0; col < 3; ++col)
          if (gl.rows[r] & (4 >> col)) rect(x + col * scale, y + r * scale, x + col * scale + scale - 1, y + r * scale + scale - 1, c);
    }
    x += 4 * scale;
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

Canvas k_selection_canvas(const std::vector<int>& ks, const std::vector<double>& stab, const std::vector<double>& err) {
  constexpr int kW = 720, kH = 480, kLeft = 90, kRight = 630, kTop = 30, kBottom = 410;
  constexpr uint32_t kBlue = 0x1F4FD0, kRed = 0xD02020, kGrid = 0xDDDDDD, kAxis = 0x000000;
  constexpr int kTicks = 5;
  Canvas c(kW, kH);
  if (ks.empty()) return c;
  const double xmin = *std::min_element(ks.begin(), ks.end()), xmax = *std::max_element(ks.begin(), ks.end());
  auto range = [](const std::vector<double>& v, double& lo, double& hi) {
    lo = hi = std::nan("");
    for (const double x : v)
      if (std::isfinite(x)) lo = std::isnan(lo) ? x : std::min(lo, x), hi = std::isnan(hi) ? x : std::max(hi, x);
    if (std::isnan(lo)) lo = 0, hi = 1;
    const double pad = hi > lo ? 0.05 * (hi - lo) : (lo != 0 ? 0.05 * std::fabs(lo) : 1.0);
    lo -= pad, hi += pad;
  };
  double s0, s1, e0, e1;
  range(stab, s0, s1);
  range(err, e0, e1);
  auto px = [&](double k) {
    return xmax > xmin ? kLeft + 20 + static_cast<int>((k - xmin) / (xmax - xmin) * (kRight - kLeft - 40)) : (kLeft + kRight) / 2;
  };
  auto py = [&](double v, double lo, double hi) { return kBottom - static_cast<int>((v - lo) / (hi - lo) * (kBottom - kTop)); };
  // Grid and ticks.
  for (int t = 0; t <= kTicks; ++t) {
    const int y = kBottom - t * (kBottom - kTop) / kTicks;
    c.line(kLeft, y, kRight, y, kGrid);
    const std::string ls = fmt(s0 + (s1 - s0) * t / kTicks), le = fmt(e0 + (e1 - e0) * t / kTicks);
    c.text(kLeft - 8 - Canvas::text_width(ls), y - 5, ls, kBlue);
    c.text(kRight + 8, y - 5, le, kRed);
  }
  for (const int k : ks) {
    const int x = px(k);
    c.line(x, kTop, x, kBottom, kGrid);
    const std::string l = std::to_string(k);
    c.text(x - Canvas::text_width(l) / 2, kBottom + 10, l, kAxis);
  }
  c.text((kLeft + kRight) / 2 - 4, kBottom + 32, "K", kAxis, 3);
  c.line(kLeft, kTop, kLeft, kBottom, kBlue, 2);
  c.line(kRight, kTop, kRight, kBottom, kRed, 2);
  c.line(kLeft, kBottom, kRight, kBottom, kAxis, 2);
  // Series.
  auto series = [&](const std::vector<double>& v, double lo, double hi, uint32_t col) {
    for (size_t q = 0; q < ks.size(); ++q) {
      if (!std::isfinite(v[q])) continue;
      const int x = px(ks[q]), y = py(v[q], lo, hi);
      if (q + 1 < ks.size() && std::isfinite(v[q + 1])) c.line(x, y, px(ks[q + 1]), py(v[q + 1], lo, hi), col, 2);
      c.rect(x - 3, y - 3, x + 3, y + 3, col);
    }
  };
  series(stab, s0, s1, kBlue);
  series(err, e0, e1, kRed);
  return c;
}

}  // namespace scurry
