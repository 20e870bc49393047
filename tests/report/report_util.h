// Synthetic run directories with known values, and readers of the report's SVG.
#pragma once
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::test {

// A run of `steps` steps with values that are simple functions of the step:
//   loss 4 - 2 s / steps, tokens_per_s 1000 + 10 s, mfu 0.5 + s / (4 steps), ms 20,
//   split data 1, compute 12, optimizer 3, comm_wait 3 (straggler 1 on even steps),
//   evals every 10 steps at loss 3.5 - s / steps with floor 1.25, a checkpoint every 20 steps
//   (stall 2 ms); summary with memory and the planner's model states.
inline void write_synthetic_run(const std::filesystem::path& dir, int steps, int dim = 64,
                                bool summary = true) {
  std::filesystem::create_directories(dir);
  std::ofstream m(dir / "metrics.jsonl");
  for (int s = 1; s <= steps; ++s) {
    nlohmann::json r = {{"step", s},
                        {"loss", 4.0 - 2.0 * s / steps},
                        {"lr", 1e-3},
                        {"grad_norm", 0.5},
                        {"tokens_per_s", 1000.0 + 10.0 * s},
                        {"mfu", 0.5 + s / (4.0 * steps)},
                        {"ms", 20.0},
                        {"tokens", 256},
                        {"data_ms", 1.0},
                        {"compute_ms", 12.0},
                        {"optimizer_ms", 3.0},
                        {"comm_wait_ms", 3.0}};
    if (s % 2 == 0) {
      r["straggler_wait_ms"] = 1.0;
      r["compute_median_ms"] = 12.0;
      r["stragglers"] = nlohmann::json::array();
    }
    m << r.dump() << "\n";
    if (s % 10 == 0)
      m << nlohmann::json{{"step", s}, {"eval_loss", 3.5 - double(s) / steps}, {"floor", 1.25}}.dump() << "\n";
    if (s % 20 == 0)
      m << nlohmann::json{{"step", s}, {"ckpt", {{"stall_ms", 2.0}, {"bytes", 1000}, {"ok", true}}}}.dump()
        << "\n";
  }
  m.close();
  if (!summary) return;
  nlohmann::json mem;
  const char* cats[] = {"parameters", "gradients", "optimizer", "activations", "comm", "other"};
  for (int i = 0; i < 6; ++i) mem[cats[i]] = {{"current", 0}, {"peak", (i + 1) * 1048576}};
  nlohmann::json sum = {{"config", {{"layers", 2}, {"dim", dim}, {"heads", 4}, {"vocab", 256}, {"seq", 32}}},
                        {"world", 2},
                        {"entropy_floor", 1.25},
                        {"median_tokens_per_s", 1500.0},
                        {"median_mfu", 0.6},
                        {"median_ms", 20.0},
                        {"wall_s", 3.0},
                        {"memory", mem},
                        {"model_states_formula",
                         {{"parameters", 1048576}, {"gradients", 2097152}, {"optimizer", 3145728}}},
                        {"overlap", {{"gradient_comm_ms", 100.0}, {"hidden_ms", 60.0}, {"hidden_share", 0.6}}}};
  std::ofstream(dir / "summary.json") << sum.dump(2);
}

struct Plot {
  double x0, x1, y0, y1, left, top, w, h;
  double data_x(double px) const { return x0 + (px - left) / w * (x1 - x0); }
  double data_y(double py) const { return y0 + (top + h - py) / h * (y1 - y0); }
};

struct Chart {
  std::string svg, title, kind;
  Plot plot{};
  std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> series;  // data coords
  int x_ticks = 0, y_ticks = 0;
};

inline std::string attr(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (std::regex_search(tag, m, std::regex(" " + name + "=\"([^\"]*)\""))) return m[1];
  return "";
}

inline std::vector<Chart> charts(const std::string& html) {
  std::vector<Chart> out;
  size_t pos = 0;
  while ((pos = html.find("<svg class=\"chart\"", pos)) != std::string::npos) {
    const size_t end = html.find("</svg>", pos);
    Chart c;
    c.svg = html.substr(pos, end - pos);
    pos = end;
    c.kind = attr(c.svg.substr(0, 200), "data-kind");
    std::smatch m;
    if (std::regex_search(c.svg, m, std::regex("<title>([^<]*)</title>"))) c.title = m[1];
    const size_t g = c.svg.find("<g class=\"plot\"");
    const std::string gtag = c.svg.substr(g, c.svg.find('>', g) - g);
    c.plot = {std::stod(attr(gtag, "data-x0")),  std::stod(attr(gtag, "data-x1")),
              std::stod(attr(gtag, "data-y0")),  std::stod(attr(gtag, "data-y1")),
              std::stod(attr(gtag, "data-left")), std::stod(attr(gtag, "data-top")),
              std::stod(attr(gtag, "data-w")),   std::stod(attr(gtag, "data-h"))};
    auto count = [&](const char* axis) {
      const size_t a = c.svg.find(std::string("<g class=\"axis ") + axis + "\"");
      if (a == std::string::npos) return 0;
      const std::string body = c.svg.substr(a, c.svg.find("</g>", a) - a);
      int n = 0;
      for (size_t p = 0; (p = body.find("class=\"tick\"", p)) != std::string::npos; ++p) ++n;
      return n;
    };
    c.x_ticks = count("x");
    c.y_ticks = count("y");
    std::regex poly("<polyline class=\"series\" data-name=\"([^\"]*)\"[^>]* points=\"([^\"]*)\"");
    for (std::sregex_iterator it(c.svg.begin(), c.svg.end(), poly), e; it != e; ++it) {
      std::vector<std::pair<double, double>> pts;
      std::stringstream ss((*it)[2].str());
      for (std::string xy; ss >> xy;) {
        const size_t comma = xy.find(',');
        pts.push_back({c.plot.data_x(std::stod(xy.substr(0, comma))),
                       c.plot.data_y(std::stod(xy.substr(comma + 1)))});
      }
      c.series.push_back({(*it)[1].str(), pts});
    }
    out.push_back(c);
  }
  return out;
}

inline const Chart* find_chart(const std::vector<Chart>& cs, const std::string& title_prefix) {
  for (const Chart& c : cs)
    if (c.title.rfind(title_prefix, 0) == 0) return &c;
  return nullptr;
}

}  // namespace strata::test
