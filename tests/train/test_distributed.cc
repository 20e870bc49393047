// `strata train --nproc N --zero S`: the same losses as one process for every stage and
// rank count, bit-identical stage 0 reruns, accumulation equivalence, model-state bytes that
// equal the ZeRO formula, per-rank traces, and bad input rejected before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli_util.h"
#include "comm/mpi/mpi_transport.h"

namespace strata::test::test_distributed {
namespace {

using nlohmann::json;

// A model small enough for 16+ runs in a few seconds; batch 12 splits over 1, 2, 3 and 4.
const std::string kModel =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 12 "
    "--lr 3e-3 --eval-every 0 --eval-batches 1 --sample-tokens 0 --peak-gflops 100 --threads 1 ";

TrainRun train(const std::string& extra, int steps = 20) {
  return train_run(kModel + "--steps " + std::to_string(steps) + " " + extra, "dist");
}

TEST(TrainDistributed, EveryStageAndRankCountMatchesOneProcess) {
  TrainRun ref = train("");
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  ASSERT_EQ(ref.losses.size(), 20u);
  for (int n : {1, 2, 3, 4})
    for (int stage = 0; stage <= 3; ++stage) {
      TrainRun r = train("--nproc " + std::to_string(n) + " --zero " + std::to_string(stage));
      ASSERT_EQ(r.cli.status, 0) << "N " << n << " stage " << stage << ": " << r.cli.err;
      EXPECT_LE(max_abs_diff(ref.losses, r.losses), 1e-5) << "N " << n << " stage " << stage;
      EXPECT_EQ(r.summary["world"], n);
      EXPECT_EQ(r.summary["parallel"]["zero"], stage);
    }
}

// The same job over the mpi backend (mpirun started by the launcher).
TEST(TrainDistributed, MpiBackendMatchesOneProcess) {
  TrainRun ref = train("", 6);
  TrainRun r = train("--nproc 2 --backend mpi --zero 1", 6);
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  ASSERT_EQ(r.cli.status, 0) << r.cli.err;
  EXPECT_LE(max_abs_diff(ref.losses, r.losses), 1e-5);
}

// Under mpirun, rank 0's --json records stay pure JSON: mpirun's --tag-output tags each
// forwarded chunk, also mid-line where stdio's 4 KiB buffer cut a record, and the launcher
// takes those tags out (launcher/mpirun_output.h). 30 records pass several buffer boundaries.
TEST(TrainDistributed, MpiBackendJsonOutputParses) {
  if (!comm::detail::mpi_available() || std::system("command -v mpirun >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no MPI (this build lacks the mpi backend, or mpirun is not in PATH)";
  RunResult r = run_strata(kModel + "--steps 30 --nproc 2 --backend mpi --zero 1 --json", "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  int records = 0;
  size_t pos = 0;
  while (pos < r.out.size()) {
    size_t nl = r.out.find('\n', pos);
    ASSERT_NE(nl, std::string::npos) << "unterminated last line: " << r.out.substr(pos);
    const std::string line = r.out.substr(pos, nl - pos);
    pos = nl + 1;
    EXPECT_TRUE(nlohmann::json::accept(line)) << "not JSON: " << line;
    records += line.find("\"loss\"") != std::string::npos && line.find("\"step\"") != std::string::npos;
  }
  EXPECT_GE(records, 30) << r.out;
  EXPECT_EQ(r.out.find("<stdout>"), std::string::npos) << r.out;
}

TEST(TrainDistributed, Bf16StagesStayCloseToFp32) {
  TrainRun ref = train("");
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  for (int stage : {0, 3}) {
    TrainRun r = train("--nproc 2 --precision bf16 --zero " + std::to_string(stage));
    ASSERT_EQ(r.cli.status, 0) << r.cli.err;
    EXPECT_LE(max_abs_diff(ref.losses, r.losses), 1e-2) << "stage " << stage;
    EXPECT_GT(max_abs_diff(ref.losses, r.losses), 0) << "bf16 should round differently";
  }
}

TEST(TrainDistributed, StageZeroIsBitIdenticalRunToRun) {
  TrainRun a = train("--nproc 2 --zero 0", 8);
  TrainRun b = train("--nproc 2 --zero 0", 8);
  ASSERT_EQ(a.cli.status, 0) << a.cli.err;
  ASSERT_EQ(b.cli.status, 0) << b.cli.err;
  EXPECT_EQ(a.losses, b.losses);
}

// 2 ranks x micro-batch 2 x 3 accumulation = 1 rank x micro-batch 2 x 6 accumulation.
TEST(TrainDistributed, AccumulationOverRanksEqualsOneRankAccumulating) {
  TrainRun one = train("--micro-batch 2", 8);
  TrainRun two = train("--nproc 2 --micro-batch 2 --zero 2", 8);
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  ASSERT_EQ(two.cli.status, 0) << two.cli.err;
  EXPECT_EQ(two.summary["accum"], 3);
  EXPECT_EQ(one.summary["accum"], 6);
  EXPECT_LE(max_abs_diff(one.losses, two.losses), 1e-5);
}

TEST(TrainDistributed, TraceHasLayersCollectivesAndOverlap) {
  TempDir dir("trace");
  RunResult r = run_strata(kModel + "--steps 3 --nproc 2 --zero 3 --bucket-mb 0.001 --trace --run-dir " +
                           dir.str(), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    json t = json::parse(read_file(dir.file("trace-rank" + std::to_string(rank) + ".json")));
    std::set<std::string> cats;
    bool fwd = false, bwd = false, gather = false, step = false;
    for (const json& e : t["traceEvents"]) {
      if (!e.contains("cat")) continue;
      cats.insert(e["cat"].get<std::string>());
      std::string name = e["name"];
      fwd |= name.find("forward") != std::string::npos;
      bwd |= name.find("backward") != std::string::npos;
      gather |= name.rfind("allgather", 0) == 0 || name.rfind("all_gather", 0) == 0;
      step |= name == "step 2";
    }
    EXPECT_TRUE(cats.count("compute") && cats.count("comm") && cats.count("data")) << rank;
    EXPECT_TRUE(fwd && bwd && step) << rank;
    EXPECT_TRUE(gather) << "stage 3 gathers parameters, rank " << rank;
  }
  json s = json::parse(read_file(dir.file("summary.json")));
  // hidden_share is hidden / total gradient communication of the same traces. At stage 3 with
  // tiny buckets every bucket but the last overlaps the backward of the next, so some of it
  // hides (share > 0), and the last bucket, issued after the last backward span, cannot
  // (share < 1): a share of 1 would be the "no communication" default, 0 no overlap at all.
  const json& ov = s["overlap"];
  const double share = ov["hidden_share"], comm = ov["gradient_comm_ms"], hidden = ov["hidden_ms"];
  ASSERT_GT(comm, 0.0) << ov.dump();
  EXPECT_NEAR(share, hidden / comm, 1e-6) << ov.dump();
  EXPECT_GT(share, 0.0) << ov.dump();
  EXPECT_LT(share, 1.0) << ov.dump();
  const std::string line = "gradient communication hidden behind compute: " +
                           std::to_string(int(100 * share + 0.5)) + "% of ";
  EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST(TrainDistributed, BadParallelSettingsFailBeforeAnyWork) {
  struct Case {
    std::string flags, says;
  } cases[] = {
      {"--zero 4", "--zero"},
      {"--precision fp16", "fp16"},
      {"--bucket-mb 0", "bucket"},
      {"--nproc 0", "--nproc"},
      {"--nproc 5", "5"},  // batch 12 does not split over 5 ranks
      {"--trace", "--run-dir"},
      {"--backend gloo", "gloo"},
  };
  for (const Case& c : cases) {
    RunResult r = run_strata(kModel + "--steps 2 " + c.flags, "", Streams::separate);
    EXPECT_NE(r.status, 0) << c.flags;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.flags << ": " << r.err;
    EXPECT_EQ(r.out.find("step"), std::string::npos) << c.flags << ": trained anyway";
    EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.flags << ": " << r.err;
  }
}

}  // namespace
}  // namespace strata::test::test_distributed

namespace strata::test::test_distributed {
namespace {

// A small text file whose epoch ends mid-batch: with --tail uneven the last global batch is
// smaller and 2 or 3 ranks get unequal shares (some none); with pad it is filled with masked
// rows. Either way the loss per step equals one process's on the same global batches.
TEST(TrainDistributed, UnevenAndPaddedTailsMatchOneProcess) {
  TempDir dir("tail");
  write_small_text(dir.file("small.txt"), 12345);
  const std::string base = "train --layers 1 --dim 32 --heads 2 --seq 16 --max-seq 16 --data " +
                           (dir.file("small.txt")) +
                           " --batch 12 --steps 10 --lr 3e-3 --eval-every 0 --eval-batches 1 "
                           "--sample-tokens 0 --peak-gflops 100 --json ";
  for (const char* tail : {"uneven", "pad"}) {
    std::vector<std::vector<double>> curves;
    for (int n : {1, 2, 3}) {
      RunResult r = run_strata(base + "--tail " + tail + " --nproc " + std::to_string(n), "", Streams::separate);
      ASSERT_EQ(r.status, 0) << tail << " N " << n << ": " << r.err;
      const auto [losses, fewest_tokens] = losses_and_fewest_tokens(r.out);
      ASSERT_EQ(losses.size(), 10u) << r.out;
      EXPECT_LT(fewest_tokens, 12 * 16) << "no step met the epoch's incomplete tail";
      curves.push_back(losses);
    }
    EXPECT_LE(max_abs_diff(curves[0], curves[1]), 1e-5) << tail;
    EXPECT_LE(max_abs_diff(curves[0], curves[2]), 1e-5) << tail;
  }
}

}  // namespace
}  // namespace strata::test::test_distributed

namespace strata::test::test_distributed {
namespace {

// Injected faults in a 3-rank `strata train`, diagnosed from the run dir by the hang doctor.
struct Diagnosis {
  RunResult train;
  json report;
};

Diagnosis inject(const TempDir& dir, const std::string& fault, double timeout_s = 3) {
  Diagnosis d;
  d.train = run_strata(kModel + "--steps 6 --nproc 3 --run-dir " + dir.str() + " --timeout " +
                       std::to_string(timeout_s) + " --inject-rank 1 --inject-step 3 --inject " +
                       fault, "", Streams::separate);
  RunResult doc = run_strata("doctor hang --json " + dir.str(), "", Streams::separate);
  EXPECT_EQ(doc.status, 0) << doc.out << doc.err;
  if (doc.out.find('{') != std::string::npos) d.report = json::parse(doc.out.substr(doc.out.find('{')));
  return d;
}

TEST(TrainDiagnosis, KilledRankIsNamedDeadAndSurvivorsDump) {
  TempDir dir("diag_kill");
  Diagnosis d = inject(dir, "kill");
  EXPECT_NE(d.train.status, 0);
  EXPECT_NE(d.train.err.find("rank 1 was killed by signal 9"), std::string::npos) << d.train.err;
  EXPECT_TRUE(std::filesystem::exists(dir.file("flight-rank0.json")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("flight-rank2.json")));
  ASSERT_EQ(d.report["culprits"].size(), 1u) << d.report.dump(1);
  EXPECT_EQ(d.report["culprits"][0]["rank"], 1);
  EXPECT_EQ(d.report["culprits"][0]["cause"], "dead");
}

// A rank that skips the step's loss all-reduce, or calls it with another count: the doctor
// names it and the kind of mismatch.
TEST(TrainDiagnosis, SkippedCollectiveAndWrongCountNameTheRank) {
  for (auto [fault, cause] : {std::pair{"skip-collective", "skipped"}, {"wrong-count", "mismatch"}}) {
    TempDir dir("diag_mismatch");
    Diagnosis d = inject(dir, fault);
    EXPECT_NE(d.train.status, 0) << fault;
    ASSERT_EQ(d.report["culprits"].size(), 1u) << fault << d.report.dump(1);
    EXPECT_EQ(d.report["culprits"][0]["rank"], 1) << fault;
    EXPECT_EQ(d.report["culprits"][0]["cause"], cause) << fault;
  }
}

// Under ZeRO the gradients are reduce-scattered and the parameters all-gathered with uneven
// per-rank counts (a bucket may lie in one rank's shard: counts [0,0,n]); the doctor must
// not read those as a mismatch. Each fault on a rank that is not the last, stages 1 and 3.
TEST(TrainDiagnosis, UnderZeroTheInjectedRankIsNamed) {
  struct Case {
    const char* zero;
    const char* fault;
    int rank;
    double timeout_s;
    const char* cause;
  };
  for (const Case& c : {Case{"1", "wrong-count", 0, 3, "mismatch"}, Case{"3", "skip-collective", 1, 3, "skipped"},
                        Case{"1", "hang", 1, 1, "outside-comm"}, Case{"3", "kill", 0, 3, "dead"}}) {
    TempDir dir("diag_zero");
    RunResult t = run_strata(kModel + "--steps 4 --nproc 3 --zero " + c.zero + " --run-dir " + dir.str() +
                             " --timeout " + std::to_string(c.timeout_s) + " --inject-rank " +
                             std::to_string(c.rank) + " --inject-step 2 --inject " + c.fault, "", Streams::separate);
    std::string what = std::string("ZeRO ") + c.zero + ", " + c.fault + " on rank " + std::to_string(c.rank);
    EXPECT_NE(t.status, 0) << what;
    RunResult doc = run_strata("doctor hang --json " + dir.str(), "", Streams::separate);
    ASSERT_EQ(doc.status, 0) << what << doc.out << doc.err << t.err;
    json report = json::parse(doc.out.substr(doc.out.find('{')));
    EXPECT_TRUE(report["mismatches"].size() <= 1) << what << report.dump(1);
    ASSERT_EQ(report["culprits"].size(), 1u) << what << report.dump(1);
    EXPECT_EQ(report["culprits"][0]["rank"], c.rank) << what << report.dump(1);
    EXPECT_EQ(report["culprits"][0]["cause"], c.cause) << what << report.dump(1);
  }
}

// A rank stuck in compute past the timeout: the others time out waiting for it, and the
// doctor says where it was.
TEST(TrainDiagnosis, RankStuckInComputeIsNamed) {
  TempDir dir("diag_sleep");
  Diagnosis d = inject(dir, "sleep:6", 1);
  EXPECT_NE(d.train.status, 0);
  ASSERT_GE(d.report["culprits"].size(), 1u) << d.report.dump(1);
  EXPECT_EQ(d.report["culprits"][0]["rank"], 1) << d.report.dump(1);
}

// A slow rank below the timeout is a straggler: named in the log and in metrics.jsonl.
TEST(TrainDiagnosis, StragglerIsNamedInTheLogAndMetrics) {
  TempDir dir("straggler");
  RunResult r = run_strata(kModel + "--steps 4 --nproc 3 --straggler-every 2 --inject sleep:0.4 "
                           "--inject-rank 2 --inject-step 1 --run-dir " + dir.str(), "", Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("stragglers at step 2: rank 2"), std::string::npos) << r.out;
  bool found = false;
  for (const json& rec : json_lines(read_file(dir.file("metrics.jsonl"))))
    if (rec.value("step", 0) == 2 && rec.contains("stragglers")) {
      ASSERT_FALSE(rec["stragglers"].empty());
      EXPECT_EQ(rec["stragglers"][0]["rank"], 2);
      EXPECT_GT(rec["stragglers"][0]["compute_ms"].get<double>(), 300);
      found = true;
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace strata::test::test_distributed

// `strata train --tp 2` learns the one-process loss curve, and summary.json reports each
// rank's model states, activation buffers and tp bytes per step next to `strata plan
// --local`'s prediction for the same layout, equal to the byte.
TEST(TensorParallelCli, LossesMatchAndSummaryAgreesWithPlan) {
  using namespace strata::test;
  TempDir one("tp_one"), two("tp_two");
  const std::string common =
      "train --layers 2 --dim 64 --heads 4 --max-seq 32 --seq 32 --batch 4 --steps 4 "
      "--peak-gflops 10 --sample-tokens 8 --eval-every 0 --data synthetic:20000 ";
  RunResult a = run_strata(common + "--run-dir " + one.str(), "OMP_NUM_THREADS=1 ", Streams::separate);
  ASSERT_EQ(a.status, 0) << a.err;
  RunResult b = run_strata(
      common + "--nproc 2 --tp 2 --zero 1 --trace --run-dir " + two.str(),
      "OMP_NUM_THREADS=1 ", Streams::separate);
  ASSERT_EQ(b.status, 0) << b.err;
  // The tp collectives are on their own track, the tp group's communication thread.
  const nlohmann::json trace = nlohmann::json::parse(read_file(two.file("trace-rank0.json")));
  const nlohmann::json& events = trace.is_array() ? trace : trace.at("traceEvents");
  int64_t tp_tid = -1, on_track = 0;
  for (const nlohmann::json& e : events)
    if (e.value("ph", "") == "M" && e.contains("args") &&
        e["args"].value("name", "") == "comm tp(dp=0)")
      tp_tid = e.at("tid").get<int64_t>();
  ASSERT_GE(tp_tid, 0) << "no track named \"comm tp(dp=0)\"";
  for (const nlohmann::json& e : events)
    if (e.value("cat", "") == "comm" && e.value("name", "").find("tp(dp=0)") != std::string::npos)
      on_track += e.at("tid").get<int64_t>() == tp_tid ? 1 : -1000;
  EXPECT_GT(on_track, 0);
  auto losses = [](const TempDir& d) {
    std::vector<double> l;
    for (const nlohmann::json& j : json_lines(read_file(d.file("metrics.jsonl"))))
      if (j.contains("loss")) l.push_back(j["loss"].get<double>());
    return l;
  };
  const std::vector<double> la = losses(one), lb = losses(two);
  ASSERT_EQ(la.size(), 4u);
  ASSERT_EQ(lb.size(), 4u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5) << "step " << i + 1;
  const nlohmann::json s = nlohmann::json::parse(read_file(two.file("summary.json")));
  const nlohmann::json& tp = s.at("tensor_parallel");
  ASSERT_EQ(tp.at("ranks").size(), 2u);
  RunResult plan = run_strata(
      "plan --local --layers 2 --dim 64 --heads 4 --model tiny --max-seq 32 --seq 32 --tp 2 "
      "--dp 1 --zero 1 --precision fp32 --micro-batch 4 --json", "", Streams::separate);
  ASSERT_EQ(plan.status, 0) << plan.err;
  const nlohmann::json p = nlohmann::json::parse(plan.out);
  for (const nlohmann::json& r : tp.at("ranks")) {
    const nlohmann::json& want = p.at("ranks").at(r.at("tp_rank").get<size_t>());
    EXPECT_EQ(r.at("tp_bytes_per_step"), want.at("tp_bytes_per_step"));
    EXPECT_EQ(r.at("model_states"), want.at("model_states"));
    EXPECT_EQ(r.at("activations"), want.at("activations"));
    EXPECT_GT(r.at("tp_bytes_per_step").get<int64_t>(), 0);
    EXPECT_EQ(r.at("tp_bytes_per_step"), r.at("tp_bytes_per_step_plan"));
    EXPECT_EQ(r.at("model_states"), r.at("model_states_plan"));
    EXPECT_EQ(r.at("activations"), r.at("activations_plan"));
  }
}

// A checkpoint saved by tp 2 x dp 2 at ZeRO 1 resumes on one process, on tp 4 and on dp 4 at
// ZeRO 3, continuing the uninterrupted loss curve (within fp32 reduction order), and on the
// same layout bit for bit.
TEST(TensorParallelCli, CheckpointsResumeAcrossLayouts) {
  using namespace strata::test;
  TempDir saved("tp_ckpt");
  const std::string common =
      "train --layers 2 --dim 64 --heads 4 --max-seq 32 --seq 32 --batch 8 --steps 8 "
      "--peak-gflops 10 --sample-tokens 0 --eval-every 0 --data synthetic:20000 --json ";
  auto losses = [](const std::string& out) {
    std::vector<double> l;
    for (const nlohmann::json& j : json_lines(out))
      if (j.contains("loss") && j.contains("step")) l.push_back(j["loss"].get<double>());
    return l;
  };
  RunResult full = run_strata(common + "--nproc 4 --tp 2 --dp 2 --zero 1 --ckpt-every 4 "
                              "--ckpt-keep 0 --run-dir " + saved.str(),
                              "OMP_NUM_THREADS=1 ", Streams::separate);
  ASSERT_EQ(full.status, 0) << full.err;
  const std::vector<double> want = losses(full.out);
  ASSERT_EQ(want.size(), 8u);
  std::filesystem::remove_all(saved.file("ckpt/step-000008"));
  std::ofstream(saved.file("ckpt/latest")) << "step-000004\n";
  for (const std::string layout : {"", "--nproc 4 --tp 4", "--nproc 4 --zero 3",
                                   "--nproc 4 --tp 2 --dp 2 --zero 1"}) {
    SCOPED_TRACE(layout);
    TempDir run("tp_resume");
    std::filesystem::copy(saved.file("ckpt"), run.file("ckpt"),
                          std::filesystem::copy_options::recursive);
    RunResult r = run_strata(common + layout + " --resume auto --run-dir " + run.str(),
                             "OMP_NUM_THREADS=1 ", Streams::separate);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<double> got = losses(r.out);
    ASSERT_EQ(got.size(), 4u) << r.out;
    for (size_t i = 0; i < 4; ++i) {
      if (layout == "--nproc 4 --tp 2 --dp 2 --zero 1")
        EXPECT_EQ(got[i], want[4 + i]) << "step " << 5 + i;
      else
        EXPECT_NEAR(got[i], want[4 + i], 1e-5) << "step " << 5 + i;
    }
  }
}

// An epoch's uneven last batch with tp 2 x dp 2 (ZeRO 2) gives the one-process losses.
TEST(TensorParallelCli, UnevenTailMatchesOneProcess) {
  using namespace strata::test;
  const std::string common =
      "train --layers 2 --dim 64 --heads 4 --max-seq 32 --seq 32 --batch 8 --steps 10 "
      "--peak-gflops 10 --sample-tokens 0 --eval-every 0 --data synthetic:2400 --tail uneven "
      "--json ";
  RunResult a = run_strata(common, "OMP_NUM_THREADS=1 ", Streams::separate);
  RunResult b = run_strata(common + "--nproc 4 --tp 2 --zero 2", "OMP_NUM_THREADS=1 ", Streams::separate);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  const auto ra = loss_and_tokens(a.out), rb = loss_and_tokens(b.out);
  ASSERT_EQ(ra.size(), 10u);
  ASSERT_EQ(rb.size(), 10u);
  EXPECT_LT(ra.back().second, ra.front().second) << "no uneven tail in this data";
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].second, rb[i].second) << "step " << i + 1;
    EXPECT_NEAR(ra[i].first, rb[i].first, 1e-5) << "step " << i + 1;
  }
}

// A tp rank that hangs: its peer times out in a tp collective and `strata doctor hang`
// names the group by its mesh coordinates and the rank that never arrived.
TEST(TensorParallelCli, HangInTpGroupIsDiagnosed) {
  using namespace strata::test;
  TempDir run("tp_hang");
  RunResult r = run_strata(
      "train --layers 2 --dim 64 --heads 4 --max-seq 32 --seq 32 --batch 4 --steps 4 "
      "--peak-gflops 10 --sample-tokens 0 --eval-every 0 --data synthetic:20000 --nproc 2 "
      "--tp 2 --inject hang --inject-rank 1 --inject-step 2 --timeout 2 --run-dir " +
          run.str(),
      "OMP_NUM_THREADS=1 ", Streams::separate);
  EXPECT_NE(r.status, 0);
  RunResult d = run_strata("doctor hang " + run.str(), "", Streams::separate);
  EXPECT_NE(d.out.find("of group \"tp(dp=0)\""), std::string::npos) << d.out << d.err;
  EXPECT_NE(d.out.find("never reached it: rank 1"), std::string::npos) << d.out << d.err;
}
