// Numeric flags as a new user would get them wrong (item by item where a value was accepted
// silently, or refused without naming the flag): each case ends in one line naming the flag
// and the value, with a non-zero exit, within seconds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/bad_input.h"

using namespace strata::bad_input;

TEST(BadNumbers, AcceptedOrUnnamedBefore) {
  std::vector<Case> cases = {
      // --cp-chunks orders the ring's chunks: with one cp rank there is no ring (as --cp-mode).
      {"cp_chunks_without_cp", kTrain + "--cp-chunks contiguous", {"--cp-chunks contiguous", "--cp 1"}},
      {"bench_e_word", "bench comm -e huge", {"-e/--maxbytes huge", "not a number"}},
      {"bench_b_word", "bench comm -b x", {"-b/--minbytes x"}},
      {"bench_e_digits", "bench comm -e " + std::string(400, '9'), {"-e/--maxbytes", "more bytes"}},
      {"data_plan_steps_neg", "data plan --samples 100 --steps -4", {"--steps", "-4"}},
      {"data_plan_samples_neg", "data plan --samples -4", {"--samples", "must be a number in [0,", "-4"}},
  };
  // Seconds: inf, 1e400 (which parses as inf) and 2^63 were waits that never end.
  for (const char* flag : {"--timeout", "--grace"}) {
    for (const char* v : {"inf", "1e400", "9223372036854775808", "nan"})
      cases.push_back({std::string("launch") + flag + v, std::string("launch -n 1 ") + flag + " " + v + " -- true",
                       {flag, v, "finite number of at most 31536000"}});
    cases.push_back({std::string("launch") + flag + "_neg", std::string("launch -n 1 ") + flag + " -1 -- true",
                     {flag, "-1", "negative"}});
  }
  run_cases(cases);
}
