#include "report/svg.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <set>

namespace scurry::report {

namespace {

// Okabe & Ito (2008), "Color Universal Design": orange, sky blue, bluish green, blue, vermillion,
// reddish purple, yellow, black (yellow and black last: yellow is faint on white).
constexpr uint32_t kOkabeIto[8] = {0xE69F00, 0x56B4E9, 0x009E73, 0x0072B2, 0xD55E00, 0xCC79A7, 0xF0E442, 0x000000};
// Vega/d3 category20 in scanpy's default_20 order (the ten saturated colours, then the ten light).
constexpr uint32_t kCat20[20] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2,
                                 0xbcbd22, 0x17becf, 0x7f7f7f, 0xaec7e8, 0xffbb78, 0x98df8a, 0xff9896,
                                 0xc5b0d5, 0xc49c94, 0xf7b6d2, 0xdbdb8d, 0x9edae5, 0xc7c7c7};
// matplotlib's viridis at t = 0, 1/9, ..., 1.
constexpr uint32_t kViridis[10] = {0x440154, 0x482878, 0x3e4989, 0x31688e, 0x26828e,
                                   0x1f9e89, 0x35b779, 0x6ece58, 0xb5de2b, 0xfde725};

std::string num(double v) {  // coordinates: 2 decimals, no trailing zeros
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  std::string s = b;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::string fixed(double v, int decimals) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  std::string s = b;
  if (s == "-0" || (s.size() > 1 && s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos)) s = s.substr(1);
  return s;
}

// The label of tick v for a step: an SI suffix for the whole axis when its largest |tick| `a` is at
// least 10^4 (so that one axis never mixes "8000" and "10k"), decimals from the step.
std::string tick_label(double v, double step, int extra, double a) {
  double div = 1;
  const char* suf = "";
  if (a >= 1e9) div = 1e9, suf = "G";
  else if (a >= 1e6) div = 1e6, suf = "M";
  else if (a >= 1e4) div = 1e3, suf = "k";
  const double s = step / div;
  int dec = s >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(s) - 1e-9));
  dec = std::max(0, dec) + extra;
  if (v == 0) return "0";
  return fixed(v / div, dec) + suf;
}

// Keeps the integral ticks, labelled as integers (a K axis: 4, 5, 6; never 4.5).
void integral_only(Ticks& t) {
  Ticks o;
  for (double v : t.values)
    if (std::fabs(v - std::round(v)) < 1e-9) o.values.push_back(std::round(v)), o.labels.push_back(fmt_num(std::round(v), 9));
  if (!o.values.empty()) t = std::move(o);
}

}  // namespace

Rgb category_color(int i, int n) {
  if (n <= 8) return rgb_hex(kOkabeIto[i % 8]);
  return rgb_hex(kCat20[i % 20]);
}

Rgb viridis(double t) {
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  const double s = t * 9;
  const int i = std::min(8, static_cast<int>(s));
  return mix(rgb_hex(kViridis[i]), rgb_hex(kViridis[i + 1]), s - i);
}

Rgb grey(int l) { return {static_cast<uint8_t>(l), static_cast<uint8_t>(l), static_cast<uint8_t>(l)}; }

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') o += ' ';
        else o += c;
    }
  }
  return o;
}

std::string fmt_num(double v, int digits) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  const double a = std::fabs(v);
  char b[48];
  if (a >= 1e9) std::snprintf(b, sizeof b, "%.*gG", digits, v / 1e9);
  else if (a >= 1e6) std::snprintf(b, sizeof b, "%.*gM", digits, v / 1e6);
  else if (a >= 1e4) std::snprintf(b, sizeof b, "%.*gk", digits, v / 1e3);
  else if (a != 0 && a < 1e-3) std::snprintf(b, sizeof b, "%.*e", std::max(0, digits - 1), v);
  else std::snprintf(b, sizeof b, "%.*g", std::max(digits, 4), v);  // up to 9999 without an exponent
  return b;
}

Ticks nice_ticks(double lo, double hi, int target) {
  Ticks t;
  if (!(hi > lo)) {  // one value: one tick
    t.values = {lo};
    t.labels = {fmt_num(lo, 4)};
    return t;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (double v = first; v <= hi + step * 1e-9; v += step) t.values.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  double amax = 0;
  for (double v : t.values) amax = std::max(amax, std::fabs(v));
  for (int extra = 0; extra < 8; ++extra) {
    t.labels.clear();
    for (double v : t.values) t.labels.push_back(tick_label(v, step, extra, amax));
    if (std::set<std::string>(t.labels.begin(), t.labels.end()).size() == t.labels.size()) break;
  }
  return t;
}

Ticks log_ticks(double lo, double hi) {
  Ticks t;
  if (!(lo > 0) || !(hi > lo)) return nice_ticks(lo, hi);
  const int e0 = static_cast<int>(std::floor(std::log10(lo))), e1 = static_cast<int>(std::ceil(std::log10(hi)));
  const bool fine = std::log10(hi / lo) < 2;
  for (int e = e0; e <= e1; ++e)
    for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
      const double v = m * std::pow(10.0, e);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.values.push_back(v);
    }
  if (t.values.size() < 2) return nice_ticks(lo, hi);
  for (double v : t.values) t.labels.push_back(fmt_num(v, 3));
  return t;
}

void Axis::fit(const std::vector<double>& v, double pad, bool include_zero) {
  double a = include_zero ? 0 : INFINITY, b = include_zero ? 0 : -INFINITY;
  for (double x : v)
    if (std::isfinite(x) && (!log || x > 0)) a = std::min(a, x), b = std::max(b, x);
  if (!std::isfinite(a)) a = log ? 1 : 0, b = log ? 10 : 1;
  if (log) {
    const double la = std::log10(a), lb = std::log10(b), s = std::max(lb - la, 0.3);
    lo = std::pow(10.0, la - s * pad), hi = std::pow(10.0, lb + s * pad);
    return;
  }
  double s = b - a;
  if (s <= 0) s = std::max(1.0, std::fabs(a));
  lo = (include_zero && a == 0) ? 0 : a - s * pad;
  hi = b + s * pad;
}

Plot::Plot(int width, int height, std::string title) : width_(width), height_(height), title_(std::move(title)) {}

static double axis_frac(const Axis& a, double v) {
  if (!a.categories.empty()) return (v + 0.5) / static_cast<double>(a.categories.size());
  if (a.log) return (std::log10(std::max(v, 1e-300)) - std::log10(a.lo)) / (std::log10(a.hi) - std::log10(a.lo));
  return a.hi > a.lo ? (v - a.lo) / (a.hi - a.lo) : 0.5;
}

double Plot::y_of_y2(double v) const {
  const double f = y2.hi > y2.lo ? (v - y2.lo) / (y2.hi - y2.lo) : 0.5;
  return y.lo + f * (y.hi - y.lo);
}

double Plot::px(double v) const { return left + axis_frac(x, v) * area_width(); }
double Plot::py(double v) const { return top + (1 - axis_frac(y, v)) * area_height(); }

void Plot::points(const std::vector<double>& xs, const std::vector<double>& ys, Rgb c, double radius, double opacity) {
  marks_ += "<g fill=\"" + css(c) + "\"" + (opacity < 1 ? " fill-opacity=\"" + num(opacity) + "\"" : "") + ">";
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i)
    if (std::isfinite(xs[i]) && std::isfinite(ys[i]))
      marks_ += "<circle cx=\"" + num(px(xs[i])) + "\" cy=\"" + num(py(ys[i])) + "\" r=\"" + num(radius) + "\"/>";
  marks_ += "</g>\n";
}

void Plot::polyline(const std::vector<double>& xs, const std::vector<double>& ys, Rgb c, double w, bool dashed) {
  std::string pts;
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i)
    if (std::isfinite(xs[i]) && std::isfinite(ys[i])) pts += num(px(xs[i])) + "," + num(py(ys[i])) + " ";
  if (pts.empty()) return;
  pts.pop_back();
  marks_ += "<polyline fill=\"none\" stroke=\"" + css(c) + "\" stroke-width=\"" + num(w) + "\"" +
            (dashed ? " stroke-dasharray=\"5,4\"" : "") + " points=\"" + pts + "\"/>\n";
}

void Plot::polygon(const std::vector<double>& xs, const std::vector<double>& ys, Rgb fill, Rgb stroke, double op) {
  std::string pts;
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i) pts += num(px(xs[i])) + "," + num(py(ys[i])) + " ";
  if (pts.empty()) return;
  pts.pop_back();
  marks_ += "<polygon fill=\"" + css(fill) + "\" fill-opacity=\"" + num(op) + "\" stroke=\"" + css(stroke) +
            "\" stroke-width=\"1\" points=\"" + pts + "\"/>\n";
}

void Plot::rect(double x0, double y0, double x1, double y1, Rgb fill, Rgb stroke, bool stroked) {
  const double a = px(x0), b = px(x1), c = py(y0), d = py(y1);
  marks_ += "<rect x=\"" + num(std::min(a, b)) + "\" y=\"" + num(std::min(c, d)) + "\" width=\"" +
            num(std::fabs(b - a)) + "\" height=\"" + num(std::fabs(d - c)) + "\" fill=\"" + css(fill) + "\"" +
            (stroked ? " stroke=\"" + css(stroke) + "\"" : "") + "/>\n";
}

void Plot::circle(double cx, double cy, double r, Rgb fill, Rgb stroke, bool stroked) {
  marks_ += "<circle cx=\"" + num(px(cx)) + "\" cy=\"" + num(py(cy)) + "\" r=\"" + num(r) + "\" fill=\"" + css(fill) +
            "\"" + (stroked ? " stroke=\"" + css(stroke) + "\" stroke-width=\"0.8\"" : "") + "/>\n";
}

void Plot::text(double tx, double ty, const std::string& s, int size, const char* anchor, Rgb c, bool bold) {
  marks_ += "<text x=\"" + num(px(tx)) + "\" y=\"" + num(py(ty)) + "\" font-size=\"" + std::to_string(size) +
            "\" text-anchor=\"" + anchor + "\" fill=\"" + css(c) + "\"" + (bold ? " font-weight=\"bold\"" : "") +
            " paint-order=\"stroke\" stroke=\"#ffffff\" stroke-width=\"3\" stroke-opacity=\"0.8\">" + xml_escape(s) +
            "</text>\n";
}

void Plot::vline(double v, const std::string& label, Rgb c) {
  const double X = px(v);
  marks_ += "<line x1=\"" + num(X) + "\" x2=\"" + num(X) + "\" y1=\"" + std::to_string(top) + "\" y2=\"" +
            std::to_string(top + area_height()) + "\" stroke=\"" + css(c) + "\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
  marks_ += "<text x=\"" + num(X + 4) + "\" y=\"" + std::to_string(top + 12) + "\" font-size=\"11\" fill=\"" + css(c) +
            "\">" + xml_escape(label) + "</text>\n";
}

void Plot::hline(double v, const std::string& label, Rgb c) {
  const double Y = py(v);
  marks_ += "<line x1=\"" + std::to_string(left) + "\" x2=\"" + std::to_string(left + area_width()) + "\" y1=\"" +
            num(Y) + "\" y2=\"" + num(Y) + "\" stroke=\"" + css(c) + "\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
  marks_ += "<text x=\"" + std::to_string(left + area_width() - 4) + "\" y=\"" + num(Y - 4) +
            "\" font-size=\"11\" text-anchor=\"end\" fill=\"" + css(c) + "\">" + xml_escape(label) + "</text>\n";
}

void Plot::image(const Image& im) {
  marks_ += "<image x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(top) + "\" width=\"" +
            std::to_string(area_width()) + "\" height=\"" + std::to_string(area_height()) +
            "\" preserveAspectRatio=\"none\" href=\"" + data_uri("image/png", encode_png(im)) + "\"/>\n";
}

void Plot::legend(const std::string& title, const std::vector<LegendItem>& items) {
  size_t longest = title.size();
  for (const auto& it : items) longest = std::max(longest, it.label.size());
  const int rows_fit = std::max(1, (height_ - top - 20) / 16);
  const int cols = std::max<int>(1, (static_cast<int>(items.size()) + rows_fit - 1) / rows_fit);
  const int colw = 22 + static_cast<int>(std::min<size_t>(longest, 28)) * 7;
  legend_width = std::max(legend_width, cols * colw + 12);
  const int x0 = width_ - legend_width + 8;
  side_ += "<g font-size=\"12\" fill=\"#1e1e1e\">";
  side_ += "<text x=\"" + std::to_string(x0) + "\" y=\"" + std::to_string(top + 4) + "\" font-weight=\"bold\">" +
           xml_escape(title) + "</text>";
  for (size_t i = 0; i < items.size(); ++i) {
    const int col = static_cast<int>(i) / rows_fit, row = static_cast<int>(i) % rows_fit;
    const int X = x0 + col * colw, Y = top + 20 + row * 16;
    if (items[i].size >= 0)
      side_ += "<circle cx=\"" + std::to_string(X + 6) + "\" cy=\"" + std::to_string(Y - 4) + "\" r=\"" +
               num(items[i].size) + "\" fill=\"" + css(items[i].color) + "\"/>";
    else
      side_ += "<rect x=\"" + std::to_string(X) + "\" y=\"" + std::to_string(Y - 10) + "\" width=\"12\" height=\"12\" fill=\"" +
               css(items[i].color) + "\"/>";
    std::string lab = items[i].label;
    if (lab.size() > 28) lab = lab.substr(0, 27) + "~";
    side_ += "<text x=\"" + std::to_string(X + 18) + "\" y=\"" + std::to_string(Y) + "\">" + xml_escape(lab) + "</text>";
  }
  side_ += "</g>\n";
  legend_rows_ += static_cast<int>(std::min<size_t>(items.size(), rows_fit)) + 2;
}

void Plot::colorbar(const std::string& title, double lo, double hi, bool log) {
  const int w = 14, h = std::min(area_height() - 30, 180);
  const int labw = 52;
  const int tw = static_cast<int>(title.size()) * 7;
  legend_width = std::max(legend_width, std::max(w + labw + 16, tw + 12));
  const int x0 = width_ - legend_width + 8, y0 = top + 24 + legend_rows_ * 16;
  side_ += "<g font-size=\"11\" fill=\"#1e1e1e\"><text x=\"" + std::to_string(x0) + "\" y=\"" + std::to_string(y0 - 10) +
           "\" font-size=\"12\" font-weight=\"bold\">" + xml_escape(title) + "</text>";
  const int steps = 32;
  for (int i = 0; i < steps; ++i) {
    const double t = 1 - (i + 0.5) / steps;
    side_ += "<rect x=\"" + std::to_string(x0) + "\" y=\"" + num(y0 + h * i / static_cast<double>(steps)) +
             "\" width=\"" + std::to_string(w) + "\" height=\"" + num(h / static_cast<double>(steps) + 0.5) +
             "\" fill=\"" + css(viridis(t)) + "\"/>";
  }
  Ticks t = log && lo > 0 ? log_ticks(lo, hi) : nice_ticks(lo, hi, 4);
  for (size_t i = 0; i < t.values.size(); ++i) {
    double f = log && lo > 0 ? (std::log10(t.values[i]) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                             : (hi > lo ? (t.values[i] - lo) / (hi - lo) : 0.5);
    if (f < -1e-9 || f > 1 + 1e-9) continue;
    const double Y = y0 + (1 - f) * h;
    side_ += "<line x1=\"" + std::to_string(x0 + w) + "\" x2=\"" + std::to_string(x0 + w + 4) + "\" y1=\"" + num(Y) +
             "\" y2=\"" + num(Y) + "\" stroke=\"#1e1e1e\"/><text x=\"" + std::to_string(x0 + w + 6) + "\" y=\"" +
             num(Y + 4) + "\">" + xml_escape(t.labels[i]) + "</text>";
  }
  side_ += "</g>\n";
}

void Plot::axis_x(std::string& o) const {
  const int y0 = top + area_height();
  o += "<line x1=\"" + std::to_string(left) + "\" x2=\"" + std::to_string(left + area_width()) + "\" y1=\"" +
       std::to_string(y0) + "\" y2=\"" + std::to_string(y0) + "\" stroke=\"#1e1e1e\"/>\n";
  if (x.show_ticks) {
    Ticks t;
    if (!x.categories.empty()) {
      for (size_t i = 0; i < x.categories.size(); ++i) t.values.push_back(static_cast<double>(i)), t.labels.push_back(x.categories[i]);
    } else {
      t = x.log ? log_ticks(x.lo, x.hi) : nice_ticks(x.lo, x.hi);
      if (x.integer) integral_only(t);
    }
    o += "<g font-size=\"11\" fill=\"#1e1e1e\">";
    for (size_t i = 0; i < t.values.size(); ++i) {
      const double X = px(t.values[i]);
      if (X < left - 0.5 || X > left + area_width() + 0.5) continue;
      o += "<line x1=\"" + num(X) + "\" x2=\"" + num(X) + "\" y1=\"" + std::to_string(y0) + "\" y2=\"" +
           std::to_string(y0 + 4) + "\" stroke=\"#1e1e1e\"/>";
      if (x.rotate_labels)
        o += "<text transform=\"translate(" + num(X + 3) + "," + std::to_string(y0 + 10) +
             ") rotate(-45)\" text-anchor=\"end\">" + xml_escape(t.labels[i]) + "</text>";
      else
        o += "<text x=\"" + num(X) + "\" y=\"" + std::to_string(y0 + 16) + "\" text-anchor=\"middle\">" +
             xml_escape(t.labels[i]) + "</text>";
    }
    o += "</g>\n";
  }
  o += "<text x=\"" + std::to_string(left + area_width() / 2) + "\" y=\"" + std::to_string(height_ - 8) +
       "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#1e1e1e\">" + xml_escape(x.title) + "</text>\n";
}

void Plot::axis_y(std::string& o) const {
  o += "<line x1=\"" + std::to_string(left) + "\" x2=\"" + std::to_string(left) + "\" y1=\"" + std::to_string(top) +
       "\" y2=\"" + std::to_string(top + area_height()) + "\" stroke=\"#1e1e1e\"/>\n";
  if (y.show_ticks) {
    Ticks t;
    if (!y.categories.empty()) {
      for (size_t i = 0; i < y.categories.size(); ++i) t.values.push_back(static_cast<double>(i)), t.labels.push_back(y.categories[i]);
    } else {
      t = y.log ? log_ticks(y.lo, y.hi) : nice_ticks(y.lo, y.hi);
      if (y.integer) integral_only(t);
    }
    o += "<g font-size=\"11\" fill=\"#1e1e1e\">";
    for (size_t i = 0; i < t.values.size(); ++i) {
      const double Y = py(t.values[i]);
      if (Y < top - 0.5 || Y > top + area_height() + 0.5) continue;
      o += "<line x1=\"" + std::to_string(left - 4) + "\" x2=\"" + std::to_string(left) + "\" y1=\"" + num(Y) +
           "\" y2=\"" + num(Y) + "\" stroke=\"#1e1e1e\"/><text x=\"" + std::to_string(left - 6) + "\" y=\"" +
           num(Y + 4) + "\" text-anchor=\"end\">" + xml_escape(t.labels[i]) + "</text>";
    }
    o += "</g>\n";
  }
  o += "<text transform=\"translate(14," + std::to_string(top + area_height() / 2) +
       ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#1e1e1e\">" + xml_escape(y.title) + "</text>\n";
  if (!y2_on) return;
  const int x0 = left + area_width();
  o += "<line x1=\"" + std::to_string(x0) + "\" x2=\"" + std::to_string(x0) + "\" y1=\"" + std::to_string(top) +
       "\" y2=\"" + std::to_string(top + area_height()) + "\" stroke=\"#1e1e1e\"/>\n<g font-size=\"11\" fill=\"#1e1e1e\">";
  const Ticks t = nice_ticks(y2.lo, y2.hi);
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double Y = py(y_of_y2(t.values[i]));
    if (Y < top - 0.5 || Y > top + area_height() + 0.5) continue;
    o += "<line x1=\"" + std::to_string(x0) + "\" x2=\"" + std::to_string(x0 + 4) + "\" y1=\"" + num(Y) + "\" y2=\"" +
         num(Y) + "\" stroke=\"#1e1e1e\"/><text x=\"" + std::to_string(x0 + 6) + "\" y=\"" + num(Y + 4) + "\">" +
         xml_escape(t.labels[i]) + "</text>";
  }
  o += "</g>\n<text transform=\"translate(" + std::to_string(x0 + right - 10) + "," + std::to_string(top + area_height() / 2) +
       ") rotate(90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#1e1e1e\">" + xml_escape(y2.title) + "</text>\n";
}

std::string Plot::svg() const {
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width_) + "\" height=\"" +
                  std::to_string(height_) + "\" viewBox=\"0 0 " + std::to_string(width_) + " " +
                  std::to_string(height_) + "\" font-family=\"Helvetica, Arial, sans-serif\" role=\"img\">\n";
  o += "<title>" + xml_escape(title_) + "</title>\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  o += "<text x=\"" + std::to_string(left) + "\" y=\"16\" font-size=\"14\" font-weight=\"bold\" fill=\"#1e1e1e\">" +
       xml_escape(title_) + "</text>\n";
  if (!subtitle_.empty())
    o += "<text x=\"" + std::to_string(left) + "\" y=\"29\" font-size=\"11\" fill=\"#555555\">" + xml_escape(subtitle_) +
         "</text>\n";
  static std::atomic<int> clip_id{0};  // ids unique within the page
  const std::string id = "c" + std::to_string(++clip_id);
  o += "<clipPath id=\"" + id + "\"><rect x=\"" + std::to_string(left - 8) + "\" y=\"" + std::to_string(top - 8) +
       "\" width=\"" + std::to_string(area_width() + 16) + "\" height=\"" + std::to_string(area_height() + 16) +
       "\"/></clipPath>\n";
  o += "<g clip-path=\"url(#" + id + ")\">\n" + marks_ + "</g>\n";
  axis_x(o);
  axis_y(o);
  o += side_;
  o += "</svg>\n";
  return o;
}

}  // namespace scurry::report
