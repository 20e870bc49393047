#include "train/moe_load.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "nlohmann/json.hpp"

namespace strata::train {

using nlohmann::json;

static std::string fmt_ratio(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", x);
  return b;
}

json moe_load_json(const model::expert::LoadStats& s, int top_k, double tokens) {
  const int E = s.E;
  json blocks = json::array();
  for (int m = 0; m < s.layers; ++m) {
    const double* v = s.layer(m);
    std::vector<int64_t> kept(static_cast<size_t>(E)), wanted(static_cast<size_t>(E));
    double mx = 0, sum = 0;
    for (int e = 0; e < E; ++e) {
      wanted[size_t(e)] = int64_t(v[e]);
      kept[size_t(e)] = int64_t(v[E + e]);
      mx = std::max(mx, v[E + e]);
      sum += v[E + e];
    }
    const double n = v[2 * E + 1];
    blocks.push_back({{"tokens_per_expert", kept},
                      {"wanted_per_expert", wanted},
                      {"max_over_mean", sum > 0 ? mx / (sum / E) : 0.0},
                      {"dropped", int64_t(v[2 * E])},
                      {"dropped_fraction", n > 0 ? v[2 * E] / (n * top_k) : 0.0},
                      {"router_entropy", n > 0 ? v[2 * E + 2] / n : 0.0}});
  }
  return {{"aux_loss", s.aux() / tokens}, {"z_loss", s.z() / tokens}, {"blocks", blocks}};
}

std::string expert_load_text(const diag::StragglerCheck& check, const std::vector<double>& rows) {
  double mean = 0;
  for (double r : rows) mean += r / double(rows.size());
  std::string out;
  for (const diag::Straggler& s : check.slow) {
    if (s.rank < 0 || size_t(s.rank) >= rows.size() || mean <= 0) continue;
    out += cat(out.empty() ? "; expert load: " : ", ", "rank ", s.rank, " ",
               fmt_ratio(rows[size_t(s.rank)] / mean), "x the mean (", int64_t(rows[size_t(s.rank)]),
               " rows)");
  }
  return out;
}

std::string CollapseWatch::update(const model::expert::LoadStats& s, int64_t step) {
  run_.resize(size_t(s.layers), 0);
  std::string out;
  for (int m = 0; m < s.layers; ++m) {
    const double* v = s.layer(m);
    double total = 0, top = 0;
    int arg = 0;
    for (int e = 0; e < s.E; ++e) {
      total += v[e];
      if (v[e] > top) top = v[e], arg = e;
    }
    const double share = total > 0 ? 100.0 * top / total : 0.0;
    int& run = run_[size_t(m)];
    run = share > pct_ ? run + 1 : 0;
    if (run == steps_)
      out += cat(out.empty() ? "" : "\n", "warning: router collapse in MoE block ", m,
                 ": expert ", arg, " took ", int(share + 0.5), "% of the assignments for ",
                 steps_, " steps (step ", step, "; --collapse-pct ", pct_,
                 " --collapse-steps ", steps_, ")");
  }
  return out;
}

}  // namespace strata::train
