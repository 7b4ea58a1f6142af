#include "report/image.hpp"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace scurry::report {

Rgb rgb_hex(uint32_t hex) {
  return {static_cast<uint8_t>(hex >> 16), static_cast<uint8_t>(hex >> 8), static_cast<uint8_t>(hex)};
}

std::string css(Rgb c) {
  char b[8];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", c.r, c.g, c.b);
  return b;
}

Rgb mix(Rgb a, Rgb b, double t) {
  auto m = [t](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x + (y - x) * t + 0.5); };
  return {m(a.r, b.r), m(a.g, b.g), m(a.b, b.b)};
}

Image::Image(int w, int h, Rgb bg) : width(w), height(h), rgb(static_cast<size_t>(w) * h * 3) {
  for (size_t i = 0; i < rgb.size(); i += 3) rgb[i] = bg.r, rgb[i + 1] = bg.g, rgb[i + 2] = bg.b;
}

void Image::disc(int x, int y, int r, Rgb c) {
  for (int dy = -r; dy <= r; ++dy)
    for (int dx = -r; dx <= r; ++dx)
      if (dx * dx + dy * dy <= r * r + r) set(x + dx, y + dy, c);
}

namespace {

void put_u32(std::string& s, uint32_t v) {
  s += static_cast<char>(v >> 24), s += static_cast<char>(v >> 16), s += static_cast<char>(v >> 8), s += static_cast<char>(v);
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  std::string td = std::string(type, 4) + data;
  out += td;
  put_u32(out, static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()))));
}

int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

}  // namespace

std::string encode_png(const Image& im) {
  const size_t stride = static_cast<size_t>(im.width) * 3;
  std::string raw;
  raw.reserve((stride + 1) * im.height);
  std::vector<uint8_t> zero(stride, 0), cand[5];
  for (auto& c : cand) c.resize(stride);
  for (int y = 0; y < im.height; ++y) {
    const uint8_t* cur = &im.rgb[y * stride];
    const uint8_t* up = y ? &im.rgb[(y - 1) * stride] : zero.data();
    long best_sum = -1;
    int best = 0;
    for (int f = 0; f < 5; ++f) {
      long sum = 0;
      for (size_t i = 0; i < stride; ++i) {
        const int a = i >= 3 ? cur[i - 3] : 0, b = up[i], c = i >= 3 ? up[i - 3] : 0;
        const int pred = f == 0 ? 0 : f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : paeth(a, b, c);
        const uint8_t v = static_cast<uint8_t>(cur[i] - pred);
        cand[f][i] = v;
        sum += v < 128 ? v : 256 - v;
      }
      if (best_sum < 0 || sum < best_sum) best_sum = sum, best = f;
    }
    raw += static_cast<char>(best);
    raw.append(reinterpret_cast<const char*>(cand[best].data()), stride);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::string z(zlen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 6) != Z_OK)
    throw std::runtime_error("PNG encoding: zlib compress2 failed");
  z.resize(zlen);
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(im.width));
  put_u32(ihdr, static_cast<uint32_t>(im.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, adaptive filters, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", "");
  return out;
}

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const std::string& s) {
  std::string o;
  o.reserve((s.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const uint32_t v = static_cast<uint8_t>(s[i]) << 16 | static_cast<uint8_t>(s[i + 1]) << 8 | static_cast<uint8_t>(s[i + 2]);
    o += kB64[v >> 18], o += kB64[(v >> 12) & 63], o += kB64[(v >> 6) & 63], o += kB64[v & 63];
  }
  if (i < s.size()) {
    uint32_t v = static_cast<uint8_t>(s[i]) << 16;
    if (i + 1 < s.size()) v |= static_cast<uint8_t>(s[i + 1]) << 8;
    o += kB64[v >> 18], o += kB64[(v >> 12) & 63];
    o += i + 1 < s.size() ? kB64[(v >> 6) & 63] : '=';
    o += '=';
  }
  return o;
}

std::string base64_decode(const std::string& t) {
  if (t.size() % 4) throw std::invalid_argument("base64: length not a multiple of 4");
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    throw std::invalid_argument(std::string("base64: bad digit '") + c + "'");
  };
  std::string o;
  for (size_t i = 0; i < t.size(); i += 4) {
    const int pad = (t[i + 3] == '=') + (t[i + 2] == '=');
    if (pad && i + 4 != t.size()) throw std::invalid_argument("base64: padding before the end");
    const uint32_t v = val(t[i]) << 18 | val(t[i + 1]) << 12 | (pad > 1 ? 0 : val(t[i + 2]) << 6) | (pad ? 0 : val(t[i + 3]));
    o += static_cast<char>(v >> 16);
    if (pad < 2) o += static_cast<char>(v >> 8);
    if (pad < 1) o += static_cast<char>(v);
  }
  return o;
}

std::string data_uri(const std::string& mime, const std::string& bytes) {
  return "data:" + mime + ";base64," + base64_encode(bytes);
}

}  // namespace scurry::report
