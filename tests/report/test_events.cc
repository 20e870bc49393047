// Checkpoints, restarts and faults reach the report: a resumed run records where it resumed
// (metrics.jsonl), a flight-recorder dump names a fault, and the page lists and marks both.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "../train/cli_util.h"
#include "cost/reliability.h"
#include "report/report.h"
#include "report_util.h"

namespace strata::test {
namespace {

TEST(ReportEvents, ResumeAndDumpAreListedAndMarked) {
  TempDir dir("events");
  const std::string run = dir.file("run");
  const std::string args = "train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --threads 1 "
                           "--sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 "
                           "--ckpt-every 3 --run-dir " + run;
  ASSERT_EQ(run_strata(args + " --steps 6", "", Streams::separate).status, 0);
  RunResult r = run_strata(args + " --steps 8 --resume auto", "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  bool resumed = false;
  for (const nlohmann::json& j : json_lines(read_file(run + "/metrics.jsonl")))
    if (j.contains("restart")) {
      resumed = true;
      EXPECT_EQ(j["step"], 6);
      EXPECT_EQ(j["restart"], 0);
      EXPECT_EQ(j["steps_lost"], 0);
      EXPECT_NE(j["resumed_from"].get<std::string>().find("step-000006"), std::string::npos);
    }
  EXPECT_TRUE(resumed) << read_file(run + "/metrics.jsonl");
  std::ofstream(run + "/flight-rank1.json")
      << R"({"rank": 1, "world": 2, "reason": "peer-dead", "detail": "rank 0 died",
            "phase": {"step": 7, "layer": -1, "kind": "forward"}, "entries": []})";

  std::vector<std::string> w;
  const std::string html = report::build_report(report::load_runs({run}, w)).html;
  EXPECT_NE(html.find("restart 0: resumed at step 6, 0 step(s) redone"), std::string::npos);
  EXPECT_NE(html.find("rank 1 dumped (peer-dead): rank 0 died"), std::string::npos);
  EXPECT_NE(html.find("Events: 2 checkpoint, 1 fault, 1 restart."), std::string::npos)
      << "saves at steps 3 and 6 in the first run; step 6's again after the resume is not due";
  const std::vector<Chart> cs = charts(html);
  const Chart* loss = find_chart(cs, "Loss");
  ASSERT_NE(loss, nullptr);
  size_t marks = 0;
  for (size_t p = 0; (p = loss->svg.find("class=\"event\"", p)) != std::string::npos; ++p) ++marks;
  EXPECT_EQ(marks, 2u);  // the restart and the fault
}

// A step the guard skipped (train/spike_guard.h) is an event of the page.
// The report page of a 4-step run of one layer with `flags`, trained in a fresh directory.
std::string report_of_guarded_run(const std::string& flags, const std::string& tag) {
  TempDir dir(tag);
  const std::string run = dir.file("run");
  RunResult r = run_strata("train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --threads 1 "
                           "--sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 "
                           "--steps 4 --run-dir " + run + " " + flags,
                           "", Streams::separate);
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::string> w;
  return report::build_report(report::load_runs({run}, w)).html;
}

TEST(ReportEvents, SkippedStepIsListed) {
  const std::string html =
      report_of_guarded_run("--inject nan-grad --inject-step 2 --skip-nonfinite", "events_skip");
  EXPECT_NE(html.find("update skipped: gradient norm is nan (--skip-nonfinite)"), std::string::npos);
  EXPECT_NE(html.find("Events: 1 skipped step."), std::string::npos);
}

TEST(ReportEvents, RollbackIsListed) {
  const std::string html = report_of_guarded_run(
      "--inject nan-grad --inject-step 2 --skip-nonfinite --mem-ckpt-every 1 "
      "--spike-action rollback",
      "events_rollback");
  EXPECT_NE(html.find("rolled back to the in-memory copy of step 1, batch skipped: gradient norm "
                      "is nan (--skip-nonfinite)"),
            std::string::npos);
  EXPECT_NE(html.find("Events: 1 rollback."), std::string::npos);
}

// The recovery table: each run's lost work per failure from its own median step and
// checkpoint intervals (cost/reliability.h), beside the restarts it measured.
TEST(ReportEvents, RecoveryTableFromTheRunsIntervals) {
  TempDir dir("events_recovery");
  const std::filesystem::path run = dir.file("run"), plain = dir.file("plain");
  write_synthetic_run(run, 30);  // median step 20 ms
  write_synthetic_run(plain, 30);
  nlohmann::json sum = nlohmann::json::parse(read_file((run / "summary.json").string()));
  sum["ckpt"] = {{"every", 10}};
  sum["mem_ckpt"] = {{"every", 2}};
  std::ofstream(run / "summary.json") << sum.dump();
  std::ofstream(run / "metrics.jsonl", std::ios::app)
      << R"({"step": 16, "restart": 1, "resumed_from": "in-memory copy of step 16", "steps_lost": 1})" << "\n"
      << R"({"step": 20, "restart": 2, "resumed_from": "/r/ckpt/step-000020", "steps_lost": 4})" << "\n";
  std::vector<std::string> w;
  const std::string html = report::build_report(report::load_runs({run.string(), plain.string()}, w)).html;
  const double Rd = cost::measured_restart_s(cost::Recovery::disk);
  const double Rm = cost::measured_restart_s(cost::Recovery::memory);
  const double Rl = cost::measured_restart_s(cost::Recovery::live);
  // disk every 10 steps of 20 ms: 10 x 0.02 / 2 + R; memory (and live) every 2: 2 x 0.02 + R.
  char want[300];
  std::snprintf(want, sizeof want, "<td>run</td><td>%.2f s (every 10)</td><td>%.2f s (every 2)</td>"
                "<td>%.2f s (every 2)</td><td>2 (1 from memory; steps redone: 1, 4)</td>",
                0.1 + Rd, 0.04 + Rm, 0.04 + Rl);
  EXPECT_NE(html.find(want), std::string::npos) << want << "\n" << html;
  const size_t table = html.find("<th>lost per failure, from disk</th>");
  ASSERT_NE(table, std::string::npos);
  const std::string rows = html.substr(table, html.find("</table>", table) - table);
  EXPECT_EQ(rows.find("plain"), std::string::npos) << "no checkpoints, no restarts: no row\n" << rows;
}

}  // namespace
}  // namespace strata::test
