// Numeric flags as a new user would get them wrong (item by item where a value was accepted
// silently, or refused without naming the flag): each case ends in one line naming the flag
// and the value, with a non-zero exit, within seconds.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "cli/bad_input.h"

using namespace strata::bad_input;

TEST(BadNumbers, AcceptedOrUnnamedBefore) {
  std::vector<Case> cases = {
      // --cp-chunks orders the ring's chunks: with one cp rank there is no ring (as --cp-mode).
      {"cp_chunks_without_cp", kTrain + "--cp-chunks contiguous", {"--cp-chunks contiguous", "--cp 1"}},
      {"bench_e_word", "bench comm -e huge", {"-e/--maxbytes", "'huge' is not a number"}},
      {"bench_b_word", "bench comm -b x", {"-b/--minbytes", "'x'"}},
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

TEST(BadNumbers, PlanAndCkptNameTheFlag) {
  run_cases({
      // 2^31 sequences passed the check and came back as "--micro-batches ... (got -2147483648)".
      {"global_batch_2p31", "plan --model gpt2 --global-batch 2147483648", {"--global-batch", "2147483648"}},
      {"advise_restart_neg", "ckpt advise --mtbf 4h --stall 1s --restart -4", {"--restart", "'-4'"}},
      {"advise_step_time_nan", "ckpt advise --mtbf 4h --stall 1s --step-time nan", {"--step-time", "'nan'"}},
      {"advise_mtbf_word", "ckpt advise --mtbf soon --stall 1s", {"--mtbf", "'soon'"}},
      {"advise_stall_huge", "ckpt advise --mtbf 4h --stall 9223372036854775808", {"--stall", "100 years"}},
  });
}

// Every numeric flag of data plan, plan, ckpt advise and bench comm against 0, negatives,
// non-numbers, infinities, 2^31, 2^63 and 400 digits: a value either runs (exit 0, or 3 for a
// plan nothing fits, printing no NaN, inf or wrapped negative) or fails in one line naming the
// flag, within seconds. (trace merge / overlap take no numeric flags.)
TEST(BadNumbers, SweepOfDataPlanCkptAndBenchFlags) {
  struct Flags {
    std::string base;
    std::vector<std::string> flags;
  };
  const std::vector<Flags> all = {
      {"data plan --samples 100", {"--world", "--micro-batch", "--accum", "--seed", "--epoch", "--rank",
                                   "--resume-from", "--steps"}},
      {"plan --model gpt2", {"--layers", "--hidden", "--heads", "--kv-heads", "--ffn", "--experts", "--top-k",
                             "--virtual-stages", "--micro-batches", "--ep", "--rollout-batch", "--max-seq",
                             "--accum", "--moe-every"}},
      {"ckpt advise --mtbf 4h --stall 1s", {"--restart", "--step-time"}},
      {"bench comm --nproc 1 -b 8 -e 8", {"-f|--stepfactor", "--iters", "--warmup", "--timeout"}},
  };
  const std::vector<std::string> values = {"0", "-4", "nan", "inf", "1e400", "2147483648",
                                           "9223372036854775808", std::string(400, '9')};
  const std::regex junk("nan|inf[^oe]|-[0-9]{4,}");
  TempDir dir("number_sweep");
  for (const Flags& f : all)
    for (const std::string& names : f.flags)  // "-f|--stepfactor": typed as the first, named as either
      for (const std::string& v : values) {
        const std::string flag = names.substr(0, names.find('|'));
        const std::string other = names.substr(names.find('|') + 1);
        SCOPED_TRACE(f.base + " " + flag + " " + v.substr(0, 24));
        const Outcome r = run(dir.str(), f.base + " " + flag + " " + v, "", 20);
        EXPECT_FALSE(r.timed_out);
        EXPECT_EQ(r.signal, 0) << r.err;
        if (r.status == 0 || (r.status == 3 && f.base.rfind("plan", 0) == 0)) {
          EXPECT_FALSE(std::regex_search(r.out, junk)) << r.out;
          continue;
        }
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        const std::string line = last_line(r.err);
        EXPECT_TRUE(line.find(flag) != std::string::npos || line.find(other) != std::string::npos) << r.err;
        EXPECT_LT(r.err.size(), 400u) << "the value is echoed whole";
      }
}
