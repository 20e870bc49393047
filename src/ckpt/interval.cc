#include "ckpt/interval.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/finite.h"
#include "cost/reliability.h"
#include "nlohmann/json.hpp"

namespace strata::ckpt {

// The longest duration accepted (100 years): every interval formula and format stays finite.
constexpr double kMaxDurationS = 100 * 365.25 * 86400;

double parse_duration(const std::string& text) {
  STRATA_CHECK(!text.empty(), "empty duration (expected e.g. 4h, 30m, 90s)");
  double total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text.substr(i), &used);
    } catch (const std::exception&) {
      fail("bad duration '", text, "' (expected e.g. 4h, 30m, 90s, 250ms)");
    }
    if (used == 0 || !std::isfinite(v) || v < 0 || text[i] == '+' || text[i] == '-')
      fail("bad duration '", text, "' (expected a non-negative number with a unit)");
    // The number read as every typed number is (core/finite.h): 1e-300s is not 0 s.
    const std::string problem = number_problem(text.substr(i, used));
    if (!problem.empty()) fail("bad duration '", text, "': ", problem);
    i += used;
    size_t j = i;
    while (j < text.size() && std::isalpha(static_cast<unsigned char>(text[j]))) ++j;
    const std::string unit = text.substr(i, j - i);
    double scale;
    if (unit.empty() || unit == "s") scale = 1;
    else if (unit == "ms") scale = 1e-3;
    else if (unit == "m" || unit == "min") scale = 60;
    else if (unit == "h") scale = 3600;
    else if (unit == "d") scale = 86400;
    else fail("bad duration '", text, "': unknown unit '", unit, "' (use ms, s, m, h or d)");
    if (unit.empty() && j < text.size()) fail("bad duration '", text, "'");
    total += v * scale;
    i = j;
  }
  // Longer than any job, and short enough that every formula and format stays finite.
  STRATA_CHECK(total <= kMaxDurationS, "duration '", text, "' is longer than 100 years");
  return total;
}

std::string format_duration(double s) {
  char buf[64];
  if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.0fms", s * 1e3);
  } else if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.3gs", s);
  } else if (s < 3600) {
    const int m = int(s / 60);
    std::snprintf(buf, sizeof buf, "%dm%02ds", m, int(std::lround(s - 60 * m)) % 60);
  } else {
    const long long h = (long long)(s / 3600);
    const int m = int(std::lround((s - 3600 * double(h)) / 60)) % 60;
    std::snprintf(buf, sizeof buf, "%lldh%02dm", h, m);
  }
  return buf;
}

IntervalAdvice advise_interval(double delta_s, double mtbf_s, double restart_s, double step_s,
                               int64_t mem_every, double mem_restart_s, double live_restart_s) {
  STRATA_CHECK_SETTING(mtbf_s > 0, setting("mtbf"), " must be positive (got ", mtbf_s, " s)");
  STRATA_CHECK(delta_s >= 0 && restart_s >= 0 && step_s >= 0,
               "checkpoint stall, restart and step times must be >= 0");
  STRATA_CHECK(mtbf_s <= kMaxDurationS && delta_s <= kMaxDurationS && restart_s <= kMaxDurationS &&
                   step_s <= kMaxDurationS,
               "durations must be at most 100 years (MTBF ", mtbf_s, " s, stall ", delta_s,
               " s, restart ", restart_s, " s, step ", step_s, " s)");
  IntervalAdvice a;
  a.delta_s = delta_s;
  a.mtbf_s = mtbf_s;
  a.restart_s = restart_s;
  a.step_s = step_s;
  a.young_s = cost::young_interval_s(delta_s, mtbf_s);
  a.daly_s = cost::daly_interval_s(delta_s, mtbf_s);
  if (step_s > 0) a.every_steps = std::max<int64_t>(1, std::llround(a.daly_s / step_s));
  a.loss_per_failure_s = cost::expected_loss_per_failure_s(a.daly_s, restart_s);
  a.waste_fraction = cost::checkpoint_overhead_fraction(a.daly_s, delta_s, mtbf_s, restart_s);
  STRATA_CHECK_SETTING(mem_every >= 0, setting("mem-ckpt-every"), " must be >= 0 (got ", mem_every,
                       ")");
  STRATA_CHECK(mem_restart_s <= kMaxDurationS, "a restart from memory must be at most 100 years (got ",
               mem_restart_s, " s)");
  if (mem_every > 0 && step_s > 0) {
    a.mem_every = mem_every;
    a.mem_restart_s = mem_restart_s < 0 ? restart_s : mem_restart_s;
    a.mem_loss_per_failure_s =
        cost::lost_work_per_failure_s(cost::Recovery::memory, double(mem_every) * step_s, a.mem_restart_s);
    if (live_restart_s >= 0) {
      STRATA_CHECK(live_restart_s <= kMaxDurationS, "a live recovery must be at most 100 years (got ",
                   live_restart_s, " s)");
      a.live_restart_s = live_restart_s;
      a.live_loss_per_failure_s =
          cost::lost_work_per_failure_s(cost::Recovery::live, double(mem_every) * step_s, live_restart_s);
    }
  }
  return a;
}

std::string IntervalAdvice::text() const {
  std::string s = cat("checkpoint stall δ = ", format_duration(delta_s), ", MTBF M = ",
                      format_duration(mtbf_s), "\n");
  s += cat("  Young  sqrt(2δM):        every ", format_duration(young_s), "\n");
  s += cat("  Daly   (higher order):   every ", format_duration(daly_s));
  if (every_steps > 0) s += cat(" = every ", every_steps, " steps of ", format_duration(step_s));
  s += "\n";
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.2f%%", 100 * waste_fraction);
  s += cat("  expected work lost per failure: ", format_duration(loss_per_failure_s),
           " (half an interval + restart ", format_duration(restart_s), "); time wasted overall ~",
           pct, "\n");
  if (mem_every > 0)
    s += cat("  with in-memory copies every ", mem_every, " step(s): ", format_duration(mem_loss_per_failure_s),
             " lost per failure (at most ", mem_every, " step(s) + restart ", format_duration(mem_restart_s),
             "); a lost host falls back to the disk figure (unless --mem-ckpt-replicas)\n");
  if (mem_every > 0 && live_loss_per_failure_s > 0)
    s += cat("  the same copies with --recovery live: ", format_duration(live_loss_per_failure_s),
             " lost per failure (at most ", mem_every, " step(s) + re-forming in process ",
             format_duration(live_restart_s), "), then one data-parallel replica short until the "
             "replacement joins\n");
  if (waste_fraction >= 1)
    s += "  warning: the stall is too long for this MTBF: no checkpoint interval makes progress "
         "(save faster, or make failures rarer)\n";
  return s;
}

nlohmann::json IntervalAdvice::to_json() const {
  return {{"delta_s", delta_s},     {"mtbf_s", mtbf_s},       {"restart_s", restart_s},
          {"step_s", step_s},       {"young_s", young_s},     {"daly_s", daly_s},
          {"every_steps", every_steps}, {"loss_per_failure_s", loss_per_failure_s},
          {"waste_fraction", waste_fraction}, {"mem_every", mem_every}, {"mem_restart_s", mem_restart_s},
          {"mem_loss_per_failure_s", mem_every > 0 ? nlohmann::json(mem_loss_per_failure_s) : nlohmann::json(nullptr)},
          {"live_restart_s", live_loss_per_failure_s > 0 ? nlohmann::json(live_restart_s) : nlohmann::json(nullptr)},
          {"live_loss_per_failure_s",
           live_loss_per_failure_s > 0 ? nlohmann::json(live_loss_per_failure_s) : nlohmann::json(nullptr)}};
}

}  // namespace strata::ckpt
