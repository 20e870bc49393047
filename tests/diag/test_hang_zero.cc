// The hang doctor under ZeRO 0-3 on simulated dump sets (dump_sim.h): every fault kind the
// trainer injects (kill, skip-collective, wrong-count, hang) x ZeRO stage x 2-4 ranks x an
// injected rank that is not the last. Uneven reduce-scatters and all-gathers record their
// per-rank counts and, per rank, "count" = the rank's own block: the doctor must compare the
// counts vectors, not the blocks, and never name a rank outside the job.
#include <gtest/gtest.h>

#include "diag/flight_dump.h"
#include "diag/hang_doctor.h"
#include "dump_sim.h"
#include "nlohmann/json.hpp"

using namespace strata::diag;
using sim::Fault;

namespace {

struct Expect {
  Fault fault;
  const char* name;
  std::vector<std::string> causes;  // any of these
};

}  // namespace

TEST(HangZero, HealthyUnevenCollectivesAreNoMismatch) {
  for (int zero = 1; zero <= 3; ++zero)
    for (int world : {2, 3, 4}) {
      sim::Config c;
      c.world = world;
      c.zero = zero;
      HangReport r = diagnose_hang(sim::to_set(sim::simulate(c)));
      EXPECT_TRUE(r.mismatches.empty()) << "zero " << zero << " world " << world << "\n" << format_hang_report(r);
      EXPECT_TRUE(r.culprits.empty()) << format_hang_report(r);
      EXPECT_TRUE(r.stuck.empty()) << format_hang_report(r);
    }
}

TEST(HangZero, EveryFaultEveryStageNamesTheInjectedRank) {
  const Expect kinds[] = {
      {Fault::kill, "kill", {"dead"}},
      {Fault::skip, "skip-collective", {"skipped"}},
      {Fault::wrong_count, "wrong-count", {"mismatch"}},
      {Fault::stop_in_forward, "hang", {"outside-comm"}},
  };
  int cases = 0;
  for (const Expect& k : kinds)
    for (int zero = 0; zero <= 3; ++zero)
      for (int world : {2, 3, 4})
        for (int rank = 0; rank + 1 < world; ++rank) {
          sim::Config c;
          c.world = world;
          c.zero = zero;
          c.faults = {{k.fault, rank, 2, 1}};  // step 2, layer 1
          HangReport r = diagnose_hang(sim::to_set(sim::simulate(c)));
          std::string where = std::string(k.name) + " on rank " + std::to_string(rank) + " of " +
                              std::to_string(world) + ", ZeRO " + std::to_string(zero) + ":\n" +
                              format_hang_report(r);
          ++cases;
          ASSERT_EQ(r.culprits.size(), 1u) << where;
          EXPECT_EQ(r.culprits[0].rank, rank) << where;
          EXPECT_EQ(cause_name(r.culprits[0].cause), k.causes[0]) << where;
          nlohmann::json j = hang_report_json(r);
          for (const auto& cj : j["culprits"]) {
            ASSERT_TRUE(cj["rank"].is_number_integer()) << cj.dump() << "\n" << where;
            EXPECT_GE(cj["rank"].get<int>(), 0) << where;
            EXPECT_LT(cj["rank"].get<int>(), world) << where;
          }
          if (k.fault == Fault::skip || k.fault == Fault::wrong_count) {
            ASSERT_EQ(r.mismatches.size(), 1u) << where;
            EXPECT_EQ(r.mismatches[0].culprits, std::vector<int>{rank}) << where;
          }
        }
  EXPECT_EQ(cases, 4 * 4 * (1 + 2 + 3));
}

// A culprit that is no rank (the transport itself stalled) appears in the JSON as null.
TEST(HangZero, StalledOperationHasNoRankInJson) {
  sim::Config c;
  c.world = 3;
  c.zero = 1;
  c.faults = {{Fault::stall, 0, 2, 1}};
  HangReport r = diagnose_hang(sim::to_set(sim::simulate(c)));
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].cause, Cause::comm_stalled);
  nlohmann::json j = hang_report_json(r);
  EXPECT_TRUE(j["culprits"][0]["rank"].is_null()) << j["culprits"].dump();
}
