// scurry: a tiny RGB raster canvas with lines, markers and a 3x5 pixel digit font, written as PNG
// (zlib-compressed, no plotting library), and cNMF's k-selection plot drawn with it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace scurry {

struct Canvas {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes a pixel

  Canvas(int w, int h, uint32_t background = 0xFFFFFF);
  void pixel(int x, int y, uint32_t color);
  void rect(int x0, int y0, int x1, int y1, uint32_t color);  // filled, inclusive
  void line(int x0, int y0, int x1, int y1, uint32_t color, int thickness = 1);
  // Digits, '.', '-', '+', 'e' and 'K' (others are skipped), `scale` pixels per font pixel.
  void text(int x, int y, const std::string& s, uint32_t color, int scale = 2);
  static int text_width(const std::string& s, int scale = 2);
};

// The PNG file's bytes (8-bit RGB, filter 0, zlib level 9).
std::string encode_png(const Canvas& c);

// cNMF's k-selection plot: stability (blue, left axis) and error (red, right axis) against K, each a
// line with square markers, grid lines at the ticks, numeric tick labels. Titles are left out (the
// colours follow cNMF's plot: stability blue, error red).
Canvas k_selection_canvas(const std::vector<int>& ks, const std::vector<double>& stability,
                          const std::vector<double>& error);

}  // namespace scurry
