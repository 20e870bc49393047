// Straggler detection (pure) and the fault-injection flag family.
#include <gtest/gtest.h>

#include <cmath>

#include "CLI/CLI.hpp"
#include "cli/flags/fault.h"
#include "core/error.h"
#include "diag/fault_inject.h"
#include "diag/straggler.h"
#include "nlohmann/json.hpp"
#include "support/error_of.h"

using namespace strata::diag;

TEST(Straggler, NamesRanksSlowerThanTheMedianByMoreThanX) {
  // Median of {1.0, 1.1, 1.5, 0.9, 1.0} is 1.0: rank 2 is +50%, rank 1 +10%.
  StragglerCheck c = find_stragglers({1.0, 1.1, 1.5, 0.9, 1.0}, 20.0, 200);
  EXPECT_DOUBLE_EQ(c.median_s, 1.0);
  ASSERT_EQ(c.slow.size(), 1u);
  EXPECT_EQ(c.slow[0].rank, 2);
  EXPECT_NEAR(c.slow[0].over_median_pct, 50.0, 1e-9);
  EXPECT_EQ(find_stragglers({1.0, 1.1, 1.5, 0.9, 1.0}, 5.0).slow.size(), 2u);
  EXPECT_EQ(find_stragglers({1.0, 1.1, 1.5, 0.9, 1.0}, 5.0).slow[0].rank, 2);  // slowest first
}

TEST(Straggler, EvenCountsUseTheMeanOfTheMiddleTwo) {
  StragglerCheck c = find_stragglers({0.2, 0.4, 0.3, 0.5}, 30.0);
  EXPECT_DOUBLE_EQ(c.median_s, 0.35);
  ASSERT_EQ(c.slow.size(), 1u);  // 0.5 is +42.9%; 0.4 is +14.3%
  EXPECT_EQ(c.slow[0].rank, 3);
}

TEST(Straggler, BalancedRanksAndEdgeCases) {
  EXPECT_TRUE(find_stragglers({1.0, 1.0, 1.0}, 0.0).slow.empty());
  EXPECT_TRUE(find_stragglers({2.0}, 10.0).slow.empty());
  EXPECT_TRUE(find_stragglers({0.0, 0.0, 5.0}, 10.0).slow.empty());  // median 0: nothing measured
  // Two ranks: the median is their mean, so a 2x slower rank is +33%.
  StragglerCheck two = find_stragglers({1.0, 2.0}, 20.0);
  ASSERT_EQ(two.slow.size(), 1u);
  EXPECT_EQ(two.slow[0].rank, 1);
  EXPECT_THROW(find_stragglers({}, 10.0), strata::Error);
  EXPECT_THROW(find_stragglers({1.0, -1.0}, 10.0), strata::Error);
  EXPECT_THROW(find_stragglers({1.0, NAN}, 10.0), strata::Error);
  EXPECT_THROW(find_stragglers({1.0}, -5.0), strata::Error);
}

TEST(Straggler, LogLineAndMetricsFields) {
  StragglerCheck c = find_stragglers({0.3461, 0.5123, 0.3461}, 20.0, 200);
  EXPECT_EQ(straggler_log_line(c), "stragglers at step 200: rank 1 compute 512.3 ms (+48.0% over median 346.1 ms)");
  nlohmann::json rec = {{"step", 200}};
  add_straggler_metrics(c, rec);
  EXPECT_DOUBLE_EQ(rec["compute_median_ms"].get<double>(), 346.1);
  ASSERT_EQ(rec["stragglers"].size(), 1u);
  EXPECT_EQ(rec["stragglers"][0]["rank"], 1);
  EXPECT_DOUBLE_EQ(rec["stragglers"][0]["compute_ms"].get<double>(), 512.3);
  EXPECT_DOUBLE_EQ(rec["stragglers"][0]["over_median_pct"].get<double>(), 48.0);
  StragglerCheck none = find_stragglers({1.0, 1.0}, 20.0, 50);
  EXPECT_EQ(straggler_log_line(none), "");
  nlohmann::json rec2;
  add_straggler_metrics(none, rec2);
  EXPECT_TRUE(rec2["stragglers"].empty());
}

TEST(Straggler, WindowAndSchedule) {
  ComputeWindow w;
  w.add(0.25);
  w.add(0.5);
  EXPECT_DOUBLE_EQ(w.take(), 0.75);
  EXPECT_DOUBLE_EQ(w.current(), 0.0);
  EXPECT_FALSE(straggler_check_due(0, 50));
  EXPECT_FALSE(straggler_check_due(49, 50));
  EXPECT_TRUE(straggler_check_due(50, 50));
  EXPECT_TRUE(straggler_check_due(100, 50));
  EXPECT_FALSE(straggler_check_due(100, 0));
}

TEST(FaultInject, ParsesEveryKind) {
  struct {
    const char* text;
    FaultKind kind;
  } cases[] = {{"kill", FaultKind::kill},
               {"exit", FaultKind::exit},
               {"hang", FaultKind::hang},
               {"kill-during-save", FaultKind::kill_during_save},
               {"skip-collective", FaultKind::skip_collective},
               {"wrong-count", FaultKind::wrong_count}};
  for (auto& c : cases) {
    FaultSpec f = parse_fault(c.text, 2, 5);
    EXPECT_EQ(f.kind, c.kind) << c.text;
    EXPECT_EQ(std::string(fault_kind_name(f.kind)), c.text);
    EXPECT_TRUE(f.fires(2, 5));
    EXPECT_FALSE(f.fires(1, 5));
    EXPECT_FALSE(f.fires(2, 4));
  }
  FaultSpec s = parse_fault("sleep:2.5", 1, 3);
  EXPECT_EQ(s.kind, FaultKind::sleep);
  EXPECT_DOUBLE_EQ(s.sleep_s, 2.5);
  EXPECT_EQ(s.describe(), "sleep 2.5 s on rank 1 at step 3");
  EXPECT_EQ(parse_fault("skip-collective", 1, 3).describe(), "skip-collective on rank 1 at step 3");
  EXPECT_FALSE(FaultSpec{}.active());
  EXPECT_FALSE(FaultSpec{}.fires(0, 1));
}

TEST(FaultInject, RejectsBadKindsWithOneClearLine) {
  auto message = [](const char* text) {
    const std::string e = strata::test::error_of([&] { parse_fault(text, 0, 1); });
    return e.empty() ? std::string("no error") : e;
  };
  EXPECT_NE(message("explode").find("--inject explode is not a fault kind; use one of kill, exit"), std::string::npos);
  EXPECT_NE(message("sleep").find("sleep:SECONDS"), std::string::npos);
  EXPECT_NE(message("sleep:").find("positive number"), std::string::npos);
  EXPECT_NE(message("sleep:-1").find("positive number"), std::string::npos);
  EXPECT_NE(message("sleep:abc").find("positive number"), std::string::npos);
  EXPECT_NE(message("sleep:inf").find("positive number"), std::string::npos);
  EXPECT_NE(message("KILL").find("not a fault kind"), std::string::npos);
}

TEST(FaultInject, ValidatesAgainstTheJob) {
  EXPECT_NO_THROW(validate_fault(parse_fault("kill", 3, 0), 4, 10));
  EXPECT_THROW(validate_fault(parse_fault("kill", 4, 0), 4, 10), strata::Error);
  EXPECT_THROW(validate_fault(parse_fault("kill", -1, 0), 4, 10), strata::Error);
  EXPECT_THROW(validate_fault(parse_fault("kill", 0, -1), 4, 10), strata::Error);
  EXPECT_THROW(validate_fault(parse_fault("kill", 0, 10), 4, 10), strata::Error);
  EXPECT_NO_THROW(validate_fault(parse_fault("kill", 0, 10), 4));  // steps unknown
  EXPECT_NO_THROW(validate_fault(FaultSpec{}, 1, 0));
}

TEST(FaultInject, FlagFamilyOnACommand) {
  auto parse = [](std::vector<std::string> args, int world) {
    CLI::App app;
    strata::cli::FaultFlags flags;
    flags.add_to(app);
    std::reverse(args.begin(), args.end());
    app.parse(args);
    return std::make_pair(flags.resolve(world, 20), flags.timeout_s);
  };
  auto [f, timeout] = parse({"--inject", "wrong-count", "--inject-rank", "1", "--inject-step", "4", "--timeout", "30"}, 2);
  EXPECT_EQ(f.kind, FaultKind::wrong_count);
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step, 4);
  EXPECT_DOUBLE_EQ(timeout, 30.0);
  auto [d, t2] = parse({"--inject", "hang"}, 2);
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.step, 1);
  EXPECT_FALSE(parse({}, 2).first.active());
  EXPECT_THROW(parse({"--inject-rank", "1"}, 2), strata::Error);
  EXPECT_THROW(parse({"--inject", "kill", "--inject-rank", "2"}, 2), strata::Error);
  EXPECT_THROW(parse({"--inject", "kill", "--timeout", "-3"}, 2), strata::Error);
}
