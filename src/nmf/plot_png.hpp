// scurry: a tiny RGB raster canvas with lines, markers and a 5x7 pixel font (letters, digits and the
// punctuation plots need), written as PNG (zlib-compressed, no plotting library), and cNMF's two
// figures drawn with it: the k-selection plot and the consensus clustergram.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.hpp"

namespace scurry {

struct Canvas {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes a pixel

  Canvas(int w, int h, uint32_t background = 0xFFFFFF);
  void pixel(int x, int y, uint32_t color);
  void rect(int x0, int y0, int x1, int y1, uint32_t color);  // filled, inclusive
  void line(int x0, int y0, int x1, int y1, uint32_t color, int thickness = 1);
  // ASCII letters, digits and . , - + ( ) % / : = _ ^ < > | (others are skipped), `scale` pixels
  // per font pixel; (x, y) is the top left.
  void text(int x, int y, const std::string& s, uint32_t color, int scale = 2);
  // The same, rotated 90 degrees counter-clockwise (reads bottom to top from (x, y)).
  void text_up(int x, int y, const std::string& s, uint32_t color, int scale = 2);
  void dashed(int x0, int y0, int x1, int y1, uint32_t color, int dash = 8, int thickness = 1);
  static int text_width(const std::string& s, int scale = 2);
};

// The PNG file's bytes (8-bit RGB, filter 0, zlib level 9).
std::string encode_png(const Canvas& c);

// Axis ticks at 1-2-2.5-5 x 10^e steps covering [lo, hi] with about `target` intervals; labels with
// just enough decimals to differ, large or tiny ranges scaled by 10^exponent (shown in the title).
struct NiceTicks {
  double lo = 0, hi = 1, step = 1;
  int exponent = 0, decimals = 0;
  std::vector<double> values;
  std::vector<std::string> labels;
};
NiceTicks nice_ticks(double lo, double hi, int target);

// cNMF's k-selection plot: stability (blue, left axis) and error (red, right axis) against K, each a
// line with square markers, grid lines at the ticks; a title, both axes titled (the error axis with
// its 10^e factor), a legend, distinct tick labels (K labels thinned when they would touch).
Canvas k_selection_canvas(const std::vector<int>& ks, const std::vector<double>& stability,
                          const std::vector<double>& error);

// The leaves of the average-linkage (UPGMA) tree of a distance matrix, in scipy's leaves_list order.
std::vector<int64_t> average_linkage_leaves(const DenseD& distances);

// cNMF's consensus clustergram (--show-clustering): the Euclidean distances between the kept
// L2-normalised spectra, ordered by k-means cluster and within a cluster by average-linkage leaves
// (viridis), the cluster strips on the left and top (Spectral), the histogram of every spectrum's
// local density (bins of 1/49 on [0, 1]) with the filtering threshold dashed and the count removed,
// and the colour bar of the distances.
Canvas cnmf_clustergram_canvas(const DenseD& kept_l2, const std::vector<int>& labels,
                               const std::vector<double>& local_density, double density_threshold);

}  // namespace scurry
