// How often to checkpoint, from the measured save stall δ and the mean time between failures
// M, with the cost models of cost/reliability.h (Young's first-order τ = sqrt(2δM) and Daly's
// higher-order correction). The expected work lost per failure is τ/2 of recomputation plus
// the restart time R; the expected fraction of time wasted is δ/τ + (τ/2 + R)/M. With
// in-memory copies every K steps of t, a failure that leaves the host loses K·t + R instead.
#pragma once
#include <cstdint>
#include <string>

#include "nlohmann/json_fwd.hpp"

namespace strata::ckpt {

// "4h", "30m", "90s", "250ms", "2d", "1h30m", "1.5h"; a bare number is seconds. Throws
// naming the text for anything else or a negative value.
double parse_duration(const std::string& text);
// 0.25 -> "250ms", 5400 -> "1h30m", 42.5 -> "42.5s".
std::string format_duration(double seconds);

struct IntervalAdvice {
  double delta_s = 0;        // stall per checkpoint
  double mtbf_s = 0;
  double restart_s = 0;
  double step_s = 0;         // time per training step (0: unknown)
  double young_s = 0;
  double daly_s = 0;
  int64_t every_steps = 0;   // Daly's interval in steps (0 when step_s is unknown)
  double loss_per_failure_s = 0;  // at Daly's interval
  double waste_fraction = 0;      // δ/τ + (τ/2 + R)/M at Daly's interval
  // With in-memory copies every mem_every steps (0: none, or the step time is unknown): the
  // work a failure that leaves the host loses, K·t + R (cost/reliability.h).
  int64_t mem_every = 0;
  double mem_restart_s = 0;  // R of a restart from memory
  double mem_loss_per_failure_s = 0;
  // The same copies under live recovery (--recovery live): K·t + R_live; 0 when not given.
  double live_restart_s = 0;
  double live_loss_per_failure_s = 0;
  std::string text() const;       // a few lines for a person
  nlohmann::json to_json() const;
};

// Throws for a non-positive MTBF or a negative δ, R, step time or mem_every. mem_restart_s
// < 0: the same restart as from disk; live_restart_s < 0: no live-recovery figure.
IntervalAdvice advise_interval(double delta_s, double mtbf_s, double restart_s = 0,
                               double step_s = 0, int64_t mem_every = 0, double mem_restart_s = -1,
                               double live_restart_s = -1);

}  // namespace strata::ckpt
