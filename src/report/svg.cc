// SVG charts: axes with 1-2-5 ticks, polylines with per-column downsampling, bars, legends.
#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace strata::report {

const char* const kPalette[8] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                 "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

namespace {

constexpr int kLeft = 64, kRight = 16, kTop = 30, kBottom = 62;

std::string num(double v) {  // pixel coordinates: 2 decimals, no trailing noise
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string full(double v) {  // data values in attributes: round-trip precision
  char b[40];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// A 1-2-5 step giving about `target` ticks over [lo, hi].
double nice_step(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

// Widens [lo, hi] to tick multiples (and a zero span to a small one). head: room above the
// highest value, as a share of the span, so a line at the top stays off the frame.
void nice_range(double& lo, double& hi, int target, double& step, double head = 0) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= lo == 0 ? 0 : pad;
    hi += pad;
  }
  hi += (hi - lo) * head;
  step = nice_step(lo, hi, target);
  lo = std::floor(lo / step + 1e-9) * step;
  hi = std::ceil(hi / step - 1e-9) * step;
}

struct Frame {
  double x0, x1, y0, y1, left, top, w, h;
  double px(double x) const { return left + (x - x0) / (x1 - x0) * w; }
  double py(double y) const { return top + h - (y - y0) / (y1 - y0) * h; }
};

std::string open_svg(const char* kind, int width, int height, const std::string& title) {
  return "<svg class=\"chart\" data-kind=\"" + std::string(kind) +
         "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) +
         " " + std::to_string(height) + "\" role=\"img\"><title>" + escape(title) +
         "</title><rect class=\"bg\" x=\"0\" y=\"0\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" fill=\"#fff\"/><text x=\"" +
         std::to_string(kLeft) + "\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" +
         escape(title) + "</text>";
}

std::string open_plot(const Frame& f) {
  return "<g class=\"plot\" data-x0=\"" + full(f.x0) + "\" data-x1=\"" + full(f.x1) +
         "\" data-y0=\"" + full(f.y0) + "\" data-y1=\"" + full(f.y1) + "\" data-left=\"" +
         num(f.left) + "\" data-top=\"" + num(f.top) + "\" data-w=\"" + num(f.w) +
         "\" data-h=\"" + num(f.h) + "\"><rect x=\"" + num(f.left) + "\" y=\"" + num(f.top) +
         "\" width=\"" + num(f.w) + "\" height=\"" + num(f.h) +
         "\" fill=\"#fafafa\" stroke=\"#999\"/>";
}

// Y axis with grid lines; the x axis is drawn by the caller (numbers or categories).
std::string y_axis(const Frame& f, double step, const std::string& label) {
  std::string s = "<g class=\"axis y\" font-size=\"11\" text-anchor=\"end\">";
  for (double v = f.y0; v <= f.y1 + step * 1e-6; v += step) {
    const double y = f.py(v);
    s += "<line class=\"tick\" x1=\"" + num(f.left) + "\" x2=\"" + num(f.left + f.w) + "\" y1=\"" +
         num(y) + "\" y2=\"" + num(y) + "\" stroke=\"#e4e4e4\"/><text x=\"" + num(f.left - 5) +
         "\" y=\"" + num(y + 4) + "\">" + short_number(std::fabs(v) < step * 1e-6 ? 0 : v) +
         "</text>";
  }
  s += "<text class=\"label\" transform=\"translate(14," + num(f.top + f.h / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + escape(label) + "</text></g>";
  return s;
}

std::string x_axis(const Frame& f, double step, const std::string& label) {
  std::string s = "<g class=\"axis x\" font-size=\"11\" text-anchor=\"middle\">";
  for (double v = f.x0; v <= f.x1 + step * 1e-6; v += step) {
    const double x = f.px(v);
    s += "<line class=\"tick\" x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" +
         num(f.top + f.h) + "\" y2=\"" + num(f.top + f.h + 4) + "\" stroke=\"#666\"/><text x=\"" +
         num(x) + "\" y=\"" + num(f.top + f.h + 16) + "\">" +
         short_number(std::fabs(v) < step * 1e-6 ? 0 : v) + "</text>";
  }
  s += "<text class=\"label\" x=\"" + num(f.left + f.w / 2) + "\" y=\"" + num(f.top + f.h + 32) +
       "\">" + escape(label) + "</text></g>";
  return s;
}

// Legend entries in rows under the x-axis label; returns the rows used (the svg grows by
// kLegendRow per row beyond the first).
constexpr int kLegendRow = 14;

int legend_rows(const std::vector<std::string>& names, int width) {
  double x = kLeft;
  int rows = 1;
  for (const std::string& n : names) {
    const double w = 28 + 6.2 * double(n.size());
    if (x + w > width - kRight && x > kLeft) x = kLeft, ++rows;
    x += w;
  }
  return rows;
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& items, int width,
                   double y0, const std::vector<bool>& dashed) {
  std::string s = "<g class=\"legend\" font-size=\"11\">";
  double x = kLeft, y = y0;
  for (size_t i = 0; i < items.size(); ++i) {
    const double w = 28 + 6.2 * double(items[i].first.size());
    if (x + w > width - kRight && x > kLeft) x = kLeft, y += kLegendRow;
    s += "<line x1=\"" + num(x) + "\" x2=\"" + num(x + 18) + "\" y1=\"" + num(y - 4) +
         "\" y2=\"" + num(y - 4) + "\" stroke=\"" + items[i].second + "\" stroke-width=\"3\"" +
         (i < dashed.size() && dashed[i] ? " stroke-dasharray=\"5,3\"" : "") + "/><text x=\"" +
         num(x + 22) + "\" y=\"" + num(y) + "\">" + escape(items[i].first) + "</text>";
    x += w;
  }
  return s + "</g>";
}

std::string empty_note(const Frame& f, const char* what) {
  return "<text class=\"empty\" x=\"" + num(f.left + f.w / 2) + "\" y=\"" +
         num(f.top + f.h / 2) + "\" text-anchor=\"middle\" fill=\"#888\">" + what + "</text>";
}

}  // namespace

std::string short_number(double v) {
  char b[32];
  const double a = std::fabs(v);
  if (a >= 1e9)
    std::snprintf(b, sizeof b, "%.3gG", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(b, sizeof b, "%.3gM", v / 1e6);
  else if (a >= 1e4)
    std::snprintf(b, sizeof b, "%.3gk", v / 1e3);
  else
    std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

void downsample(const std::vector<double>& x, const std::vector<double>& y, int buckets,
                std::vector<double>& ox, std::vector<double>& oy) {
  ox.clear();
  oy.clear();
  const size_t n = std::min(x.size(), y.size());
  if (n <= size_t(2 * buckets)) {
    ox.assign(x.begin(), x.begin() + long(n));
    oy.assign(y.begin(), y.begin() + long(n));
    return;
  }
  Range r;
  for (size_t i = 0; i < n; ++i) r.add(x[i]);
  const double span = r.hi > r.lo ? r.hi - r.lo : 1;
  size_t i = 0;
  while (i < n) {
    const long b = std::min<long>(buckets - 1, long((x[i] - r.lo) / span * buckets));
    size_t lo = i, hi = i, j = i;
    for (; j < n && std::min<long>(buckets - 1, long((x[j] - r.lo) / span * buckets)) == b; ++j) {
      if (std::isnan(y[j])) continue;
      if (std::isnan(y[lo]) || y[j] < y[lo]) lo = j;
      if (std::isnan(y[hi]) || y[j] > y[hi]) hi = j;
    }
    if (j == i) ++j;  // x not increasing: take the point alone
    for (size_t k : {std::min(lo, hi), std::max(lo, hi)}) {
      if (!ox.empty() && ox.back() == x[k] && oy.back() == y[k]) continue;
      ox.push_back(x[k]);
      oy.push_back(y[k]);
    }
    i = j;
  }
}

std::string render(const LineChart& c, int width, int height) {
  Range xr, yr;
  std::vector<Series> shown;
  const int cols = width - kLeft - kRight;
  for (const Series& s : c.series) {
    Series d = s;
    downsample(s.x, s.y, cols / 2, d.x, d.y);
    for (size_t i = 0; i < d.x.size(); ++i)
      if (std::isfinite(d.y[i])) xr.add(d.x[i]), yr.add(d.y[i]);
    shown.push_back(std::move(d));
  }
  for (const LineChart::Mark& m : c.vlines) xr.add(m.x);
  std::vector<std::string> names;
  for (const Series& d : shown) names.push_back(d.name);
  const int plot_h = height - kTop - kBottom;
  height += (legend_rows(names, width) - 1) * kLegendRow;
  std::string s = open_svg("line", width, height, c.title);
  Frame f{0, 1, 0, 1, kLeft, kTop, double(cols), double(plot_h)};
  if (xr.empty() || yr.empty()) {
    s += open_plot(f) + empty_note(f, "no data") + "</g></svg>";
    return s;
  }
  if (c.y_from_zero) yr.lo = std::min(0.0, yr.lo);
  double xs, ys;
  f.x0 = xr.lo, f.x1 = xr.hi, f.y0 = yr.lo, f.y1 = yr.hi;
  nice_range(f.x0, f.x1, 8, xs);
  nice_range(f.y0, f.y1, 5, ys, 0.04);
  s += open_plot(f) + y_axis(f, ys, c.y_label) + x_axis(f, xs, c.x_label);
  for (const LineChart::Mark& m : c.vlines)
    s += "<line class=\"event\" data-x=\"" + full(m.x) + "\" x1=\"" + num(f.px(m.x)) + "\" x2=\"" +
         num(f.px(m.x)) + "\" y1=\"" + num(f.top) + "\" y2=\"" + num(f.top + f.h) + "\" stroke=\"" +
         m.color + "\" stroke-dasharray=\"2,2\"><title>" + escape(m.label) + "</title></line>";
  std::vector<std::pair<std::string, std::string>> items;
  std::vector<bool> dashed;
  for (const Series& d : shown) {
    std::string pts;
    for (size_t i = 0; i < d.x.size(); ++i) {
      if (!std::isfinite(d.y[i])) continue;
      if (!pts.empty()) pts += ' ';
      pts += num(f.px(d.x[i])) + "," + num(f.py(d.y[i]));
    }
    s += "<polyline class=\"series\" data-name=\"" + escape(d.name) + "\" data-points=\"" +
         std::to_string(d.x.size()) + "\" fill=\"none\" stroke=\"" + d.color +
         "\" stroke-width=\"1.6\"" + (d.dashed ? " stroke-dasharray=\"6,4\"" : "") + " points=\"" +
         pts + "\"/>";
    if (d.markers)
      for (size_t i = 0; i < d.x.size(); ++i)
        if (std::isfinite(d.y[i]))
          s += "<circle cx=\"" + num(f.px(d.x[i])) + "\" cy=\"" + num(f.py(d.y[i])) +
               "\" r=\"3\" fill=\"" + d.color + "\"/>";
    items.push_back({d.name, d.color});
    dashed.push_back(d.dashed);
  }
  s += "</g>" + legend(items, width, f.top + f.h + 48, dashed) + "</svg>";
  return s;
}

std::string render(const BarChart& c, int width, int height) {
  const size_t n = c.categories.size();
  Range yr;
  yr.add(0);
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (const BarPart& p : c.parts) {
      const double v = i < p.values.size() && std::isfinite(p.values[i]) ? p.values[i] : 0;
      if (c.stacked)
        sum += std::max(0.0, v);
      else
        yr.add(v);
    }
    if (c.stacked) yr.add(sum);
  }
  std::vector<std::string> names;
  for (const BarPart& p : c.parts) names.push_back(p.name);
  const int plot_h = height - kTop - kBottom;
  height += (legend_rows(names, width) - 1) * kLegendRow;
  std::string s = open_svg("bars", width, height, c.title);
  Frame f{0, double(std::max<size_t>(n, 1)), 0, 1, kLeft, kTop, double(width - kLeft - kRight),
          double(plot_h)};
  if (n == 0 || c.parts.empty()) {
    s += open_plot(f) + empty_note(f, "no data") + "</g></svg>";
    return s;
  }
  double ys;
  f.y0 = yr.lo, f.y1 = yr.hi;
  nice_range(f.y0, f.y1, 5, ys, 0.04);
  s += open_plot(f) + y_axis(f, ys, c.y_label);
  s += "<g class=\"axis x\" font-size=\"11\" text-anchor=\"middle\">";
  const double slot = f.w / double(n), bw = slot * 0.7;
  const size_t every = n > 12 ? n / 10 : 1;  // labels of many bars: about ten shown
  for (size_t i = 0; i < n; i += every)
    s += "<text x=\"" + num(f.left + slot * (double(i) + 0.5)) + "\" y=\"" + num(f.top + f.h + 16) +
         "\">" + escape(c.categories[i]) + "</text>";
  s += "<text class=\"label\" x=\"" + num(f.left + f.w / 2) + "\" y=\"" + num(f.top + f.h + 32) +
       "\">" + escape(c.x_label) + "</text></g>";
  std::vector<std::pair<std::string, std::string>> items;
  const double parts = double(c.parts.size());
  for (size_t i = 0; i < n; ++i) {
    double base = 0;
    for (size_t k = 0; k < c.parts.size(); ++k) {
      const BarPart& p = c.parts[k];
      const double v = i < p.values.size() && std::isfinite(p.values[i]) ? p.values[i] : 0;
      double x0, y_top, y_bot, w;
      if (c.stacked) {
        if (v <= 0) continue;
        x0 = f.left + slot * double(i) + (slot - bw) / 2;
        w = bw;
        y_bot = f.py(base);
        base += v;
        y_top = f.py(base);
      } else {
        w = bw / parts;
        x0 = f.left + slot * double(i) + (slot - bw) / 2 + w * double(k);
        y_bot = f.py(std::min(0.0, v) > f.y0 ? 0.0 : f.y0);
        y_top = f.py(v);
      }
      s += "<rect class=\"bar\" shape-rendering=\"crispEdges\" data-name=\"" + escape(p.name) + "\" data-category=\"" +
           escape(c.categories[i]) + "\" data-value=\"" + full(v) + "\" x=\"" + num(x0) +
           "\" y=\"" + num(std::min(y_top, y_bot)) + "\" width=\"" + num(w) + "\" height=\"" +
           num(std::fabs(y_bot - y_top)) + "\" fill=\"" + p.color + "\"><title>" +
           escape(p.name + " " + c.categories[i] + ": " + short_number(v)) + "</title></rect>";
    }
  }
  for (const BarPart& p : c.parts) items.push_back({p.name, p.color});
  s += "</g>" + legend(items, width, f.top + f.h + 48, {}) + "</svg>";
  return s;
}

}  // namespace strata::report
