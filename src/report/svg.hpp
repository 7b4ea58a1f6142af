// scurry report: a small SVG writer for the report's plots. A Plot is one figure: a plot area with
// x and y axes (linear, log10 or categorical; titled, with units in the title), "nice" ticks whose
// labels are always distinct, marks drawn in data coordinates (points, lines, bars, polygons, text,
// a raster image for many points), and a legend or a colour bar at the right.
//
// Palettes (colour-blind safe):
//  - categories: Okabe & Ito, "Color Universal Design" (2002/2008), eight colours, for up to 8
//    categories; beyond 8, the 20 colours of scanpy's default_20 (Vega/d3 category20 order), where
//    the report also writes each category's name on the plot so that colour is not the only cue;
//  - sequential: viridis (van der Walt & Smith, matplotlib 2.0's default map, perceptually uniform
//    and readable in grey and by colour-blind viewers), interpolated linearly between its values at
//    0, 1/9, ..., 1 as published with matplotlib (_cm_listed.py, sampled at 10 points).
// Tick placement: the 1-2-5 "nice numbers" of Heckbert, "Nice numbers for graph labels", Graphics
// Gems (1990).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "report/image.hpp"

namespace scurry::report {

Rgb category_color(int i, int n_categories);  // i in [0, n)
Rgb viridis(double t);                          // t in [0, 1] (clamped)
Rgb grey(int level);                            // level 0..255

// Escapes & < > " ' for XML text and attributes.
std::string xml_escape(const std::string& s);
// A number as short text: up to `digits` significant digits, thousands as "12.5k", millions "1.2M".
std::string fmt_num(double v, int digits = 3);

struct Ticks {
  std::vector<double> values;
  std::vector<std::string> labels;  // distinct
};
// About `target` ticks over [lo, hi] (1-2-5 steps); labels with as many decimals as their step
// needs, more until they are distinct.
Ticks nice_ticks(double lo, double hi, int target = 5);
// Powers of ten in [lo, hi] (lo > 0), with 2 and 5 between them when the range spans under 2 decades.
Ticks log_ticks(double lo, double hi);

struct Axis {
  std::string title;              // with the unit: "total counts per cell (UMIs)"
  double lo = 0, hi = 1;          // data range shown
  bool log = false;               // log10 scale (lo > 0)
  std::vector<std::string> categories;  // non-empty: a categorical axis, category i at position i
  bool rotate_labels = false;     // categorical labels at -45 degrees (long names)
  bool show_ticks = true;         // false: no ticks or labels (UMAP coordinates)
  bool integer = false;           // only integral ticks (counts such as K)
  // Range including every value (and 0 when zero is given), padded by `pad` of its span.
  void fit(const std::vector<double>& v, double pad = 0.04, bool include_zero = false);
};

struct LegendItem {
  Rgb color;
  std::string label;
  double size = -1;  // >= 0: a dot of this radius (size legend), else a square swatch
};

class Plot {
 public:
  // width, height: the whole figure in pixels (CSS px); title: shown above the plot area.
  Plot(int width, int height, std::string title);
  Axis x, y;
  // A second y axis at the right (set y2_on and y2's range and title before drawing): marks in its
  // units are placed through y_of_y2().
  Axis y2;
  bool y2_on = false;
  double y_of_y2(double v) const;
  int left = 64, right = 16, top = 34, bottom = 52;  // margins around the plot area
  int legend_width = 0;  // extra space at the right for the legend / colour bar (set by the add_*)

  // Plot-area pixel of a data value (after the axes are set).
  double px(double v) const;
  double py(double v) const;
  int area_width() const { return width_ - left - right - legend_width; }
  int area_height() const { return height_ - top - bottom; }

  void points(const std::vector<double>& xs, const std::vector<double>& ys, Rgb c, double radius = 2.5,
              double opacity = 1.0);
  void polyline(const std::vector<double>& xs, const std::vector<double>& ys, Rgb c, double width = 1.5,
                bool dashed = false);
  void polygon(const std::vector<double>& xs, const std::vector<double>& ys, Rgb fill, Rgb stroke,
               double opacity = 1.0);
  void rect(double x0, double y0, double x1, double y1, Rgb fill, Rgb stroke = {}, bool stroked = false);
  void circle(double x, double y, double radius_px, Rgb fill, Rgb stroke = {}, bool stroked = false);
  void text(double x, double y, const std::string& s, int size = 11, const char* anchor = "middle",
            Rgb c = {30, 30, 30}, bool bold = false);
  // A threshold: a dashed line across the plot area at x = v (vertical) or y = v, labelled.
  void vline(double v, const std::string& label, Rgb c);
  void hline(double v, const std::string& label, Rgb c);
  // A raster image over the whole plot area (its pixels map onto the area; PNG data URI).
  void image(const Image& im);

  void legend(const std::string& title, const std::vector<LegendItem>& items);
  // A vertical viridis colour bar from lo to hi, titled.
  void colorbar(const std::string& title, double lo, double hi, bool log = false);
  // A free note under the title (e.g. "n = 1,000,000 cells, rasterised").
  void subtitle(const std::string& s) { subtitle_ = s; }

  std::string svg() const;

 private:
  int width_, height_;
  std::string title_, subtitle_;
  std::string marks_, side_;
  int legend_rows_ = 0;
  void axis_x(std::string& o) const;
  void axis_y(std::string& o) const;
};

}  // namespace scurry::report
