// Charts as inline SVG text: line charts (several series, optional dashes and markers,
// vertical event lines) and stacked or grouped bar charts, with axes and 1-2-5 ticks.
//
// Structure (what tests/report check): every chart is
//   <svg class="chart" data-kind="line|bars" ...>
//     <g class="plot" data-x0 data-x1 data-y0 data-y1 data-left data-top data-w data-h>
//       <g class="axis x">ticks</g> <g class="axis y">ticks</g>
//       <polyline class="series" data-name="..." points="px,py ..."/>   (line charts)
//       <rect class="bar" data-name="..." data-value="..." .../>        (bar charts)
//     <g class="legend">...</g>
// Pixel x = left + (x - x0) / (x1 - x0) * w; pixel y = top + h - (y - y0) / (y1 - y0) * h.
//
// Long series are downsampled to the min and max of every 2-pixel-wide bucket of x (in x
// order), so a 10,000-step run costs about as much as a 700-step one and spikes survive.
#pragma once
#include <string>
#include <vector>

namespace strata::report {

struct Series {
  std::string name;
  std::string color;
  std::vector<double> x, y;  // NaN y values are gaps
  bool dashed = false;
  bool markers = false;  // a dot per point (evals, few points)
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool y_from_zero = false;
  struct Mark {
    double x;
    std::string color, label;
  };
  std::vector<Mark> vlines;  // vertical event lines (restarts, checkpoints)
};

struct BarPart {
  std::string name, color;
  std::vector<double> values;  // one per category
};

struct BarChart {
  std::string title, x_label, y_label;
  std::vector<std::string> categories;
  std::vector<BarPart> parts;
  bool stacked = true;  // false: grouped side by side
};

extern const char* const kPalette[8];

std::string render(const LineChart& c, int width = 760, int height = 270);
std::string render(const BarChart& c, int width = 760, int height = 270);

// "1.5k", "2.4M", "0.031": short tick and table text.
std::string short_number(double v);
// Escapes &, <, >, " for HTML and SVG text.
std::string escape(const std::string& s);

// Keeps at most 2 points per bucket of x (its min and max, in order); exposed for tests.
void downsample(const std::vector<double>& x, const std::vector<double>& y, int buckets,
                std::vector<double>& out_x, std::vector<double>& out_y);

}  // namespace strata::report
