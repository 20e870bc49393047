// Replica groups (DiLoCo, parallel/outer.h) through `strata train`: where the arithmetic says a
// run must equal another, it does bit for bit; a run killed mid-round resumes bit for bit; the
// bytes across groups and the global state are counted; bad settings are one line each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli_util.h"
#include "core/error.h"
#include "live_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

const std::string kRun =
    "train --layers 2 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 8 --steps 6 --lr 1e-2 "
    "--threads 1 --sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 ";

// (step, loss, grad_norm) of every step record, and the final eval's loss.
std::vector<std::vector<double>> records(const std::string& run_dir) {
  std::vector<std::vector<double>> out;
  for (const json& j : json_lines(read_file(run_dir + "/metrics.jsonl"))) {
    if (j.contains("loss") && j.contains("grad_norm"))
      out.push_back({j["step"].get<double>(), j["loss"].get<double>(), j["grad_norm"].get<double>()});
    if (j.contains("eval_loss")) out.push_back({-1, j["eval_loss"].get<double>(), 0});
  }
  return out;
}

std::vector<std::vector<double>> train(const std::string& args, const std::string& run_dir) {
  RunResult r = run_strata(args + " --run-dir " + run_dir, "", Streams::separate);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
  return records(run_dir);
}

// One group at outer lr 1 without momentum averages one group's parameters: the plain run's
// bits, whatever H (the update is computed as mean + (1 - lr)·Δ - lr·μ·m, exactly the mean).
TEST(Diloco, OneGroupAtOuterLrOneIsPlainTraining) {
  TempDir dir("diloco_one");
  for (const char* zero : {"0", "1"}) {
    const std::string layout = std::string("--nproc 2 --zero ") + zero;
    const auto plain = train(kRun + layout, dir.file(cat("plain", zero)));
    const auto outer = train(kRun + layout + " --inner-steps 1 --outer-lr 1 --outer-momentum 0", dir.file(cat("outer", zero)));
    ASSERT_EQ(plain.size(), 7u) << zero;
    EXPECT_EQ(outer, plain) << "ZeRO " << zero;
  }
  // With an outer step that does something, the curve differs (the test above can fail).
  EXPECT_NE(train(kRun + "--nproc 2 --inner-steps 2", dir.file("moved")), records(dir.file("plain0")));
}

// Two groups that read the same batches hold the same parameters at every sync, and their mean
// is exact: every layout inside a group gives the one-group run's bits.
class DilocoSameData : public ::testing::TestWithParam<const char*> {};

TEST_P(DilocoSameData, TwoGroupsEqualOneGroup) {
  TempDir dir("diloco_same");
  const std::string outer = "--inner-steps 2 --outer-lr 0.8 --outer-momentum 0.5 ";
  const std::string layout = GetParam();
  const auto one = train(kRun + outer + layout + " --nproc 2", dir.file("one"));
  const auto two = train(kRun + outer + layout + " --nproc 4 --replica-groups 2 --group-data same", dir.file("two"));
  ASSERT_EQ(one.size(), 7u);
  EXPECT_EQ(two, one) << layout;
  const json s = json::parse(read_file(dir.file("two") + "/summary.json"));
  EXPECT_EQ(s["outer"]["groups"], 2);
  EXPECT_EQ(s["outer"]["syncs"], 3);  // after steps 2, 4 and 6
}

INSTANTIATE_TEST_SUITE_P(Layouts, DilocoSameData,
                         ::testing::Values("--zero 1", "--zero 3", "--tp 2", "--pp 2", "--cp 2", "--experts 4 --ep 2"),
                         [](const auto& info) {  // "--experts 4 --ep 2" -> experts_4_ep_2
                           std::string n;
                           for (const char* c = info.param; *c; ++c)
                             if (std::isalnum(static_cast<unsigned char>(*c))) n += *c;
                             else if (!n.empty() && n.back() != '_') n += '_';
                           return n;
                         });

// The hashes of a checkpoint's state, by tensor, for each state name.
std::map<std::string, std::map<std::string, std::string>> hashes_by_state(const std::string& step_dir) {
  std::map<std::string, std::map<std::string, std::string>> out;
  const json m = json::parse(read_file(step_dir + "/manifest.json"));
  for (const json& shard : m["shards"])
    for (const json& p : shard["pieces"])
      out[p["state"].get<std::string>()][cat(p["tensor"].get<std::string>(), "@", p["flat"].dump())] = p["xxh64"].dump();
  return out;
}

// Killed mid-round (between syncs), resumed: the curve and every state of the uninterrupted
// run, the groups' own states (which differ between syncs) and the global ones alike. After
// the last step's sync every group holds the global parameters.
TEST(Diloco, KilledRunResumesMidRoundBitExact) {
  TempDir dir("diloco_resume");
  const std::string args =
      "train --layers 1 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 4 --steps 8 --warmup 2 "
      "--lr 1e-2 --threads 1 --sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 --ckpt-every 2 "
      "--ckpt-keep 0 --nproc 2 --replica-groups 2 --inner-steps 3 --run-dir ";
  const std::string ref = dir.file("ref"), run = dir.file("run");
  ASSERT_EQ(run_strata(args + ref, "", Streams::separate).status, 0);
  RunResult killed = run_strata(args + run + " --inject kill --inject-step 6", "", Streams::separate);
  EXPECT_NE(killed.status, 0);
  const std::string at = read_file(run + "/ckpt/latest");
  ASSERT_TRUE(at.rfind("step-000002", 0) == 0 || at.rfind("step-000004", 0) == 0) << at;  // mid-round
  RunResult resumed = run_strata(args + run + " --resume auto", "", Streams::separate);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from step "), std::string::npos) << resumed.err;
  EXPECT_EQ(records(run), records(ref));
  const auto want = hashes_by_state(ref + "/ckpt/step-000008"), got = hashes_by_state(run + "/ckpt/step-000008");
  EXPECT_EQ(got, want);
  ASSERT_TRUE(got.count("group0.params") && got.count("group1.params") && got.count("outer.params"));
  EXPECT_EQ(got.at("group0.params"), got.at("outer.params"));
  EXPECT_EQ(got.at("group1.params"), got.at("outer.params"));
  // Between syncs the groups' parameters differ (they read different data).
  const auto mid = hashes_by_state(ref + "/ckpt/step-000004");
  EXPECT_NE(mid.at("group0.params"), mid.at("group1.params"));
}

// Streaming: two fragments at staggered steps, each exchange merged one step after it started,
// int4 outer gradients with error feedback (its residuals are checkpoint states too). Killed
// while an exchange is in flight (the checkpoint of step 4 holds fragment 0's, started after
// step 4 and merged after step 5), resumed: the uninterrupted run bit for bit, its curve and
// every state.
TEST(Diloco, StreamingRunKilledWithAnExchangeInFlightResumesBitExact) {
  TempDir dir("diloco_stream");
  const std::string args =
      "train --layers 2 --dim 32 --heads 2 --max-seq 16 --seq 16 --vocab 256 --batch 4 --steps 10 --warmup 2 "
      "--lr 1e-2 --threads 1 --sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 --ckpt-every 2 "
      "--ckpt-keep 0 --nproc 2 --replica-groups 2 --inner-steps 4 --fragments 2 --outer-overlap 1 --outer-dtype int4 "
      "--outer-error-feedback --run-dir ";
  const std::string ref = dir.file("ref"), run = dir.file("run");
  RunResult once = run_strata(args + ref, "", Streams::separate);
  ASSERT_EQ(once.status, 0) << once.err;
  EXPECT_NE(once.err.find("in 2 staggered fragments, merged 1 step later (mix 0.5)"), std::string::npos) << once.err;
  EXPECT_NE(once.err.find("sent as int4"), std::string::npos) << once.err;
  RunResult killed = run_strata(args + run + " --inject kill --inject-step 7", "", Streams::separate);
  EXPECT_NE(killed.status, 0);
  const std::string at = read_file(run + "/ckpt/latest");
  ASSERT_TRUE(at.rfind("step-000004", 0) == 0 || at.rfind("step-000002", 0) == 0) << at;  // both with one in flight
  RunResult resumed = run_strata(args + run + " --resume auto", "", Streams::separate);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(records(run), records(ref));
  EXPECT_EQ(hashes_by_state(run + "/ckpt/step-000010"), hashes_by_state(ref + "/ckpt/step-000010"));
  // Fragment 1 (layer 1) meets at steps 2 and 6, fragment 0 (layer 0, the embeddings) at 4 and
  // 8, both at the last step.
  std::vector<int64_t> synced;
  for (const json& j : step_records(ref + "/metrics.jsonl"))
    if (j.contains("outer_bytes")) synced.push_back(j["step"].get<int64_t>());
  EXPECT_EQ(synced, (std::vector<int64_t>{2, 4, 6, 8, 10}));
}

// Fragments under ZeRO: a rank's shard may hold none of a fragment (here rank 0 of each group
// holds the embeddings and layer 0, fragment 1 is layer 1), and the job still meets at every
// fragment's steps, without waiting on a rank that had nothing to send; killed and resumed
// mid-round, it is the uninterrupted run bit for bit.
TEST(Diloco, FragmentsOverZeroShardsThatHoldNoneOfOneMeetAndResume) {
  TempDir dir("diloco_zero_frag");
  const std::string args = kRun + "--nproc 4 --replica-groups 2 --zero 1 --inner-steps 4 --fragments 2 --outer-overlap 1 "
                                  "--timeout 30 --ckpt-every 2 --ckpt-keep 0 --run-dir ";
  const std::string ref = dir.file("ref"), run = dir.file("run");
  RunResult once = run_strata(args + ref, "", Streams::separate);
  ASSERT_EQ(once.status, 0) << once.err;
  std::vector<int64_t> synced;
  for (const json& j : step_records(ref + "/metrics.jsonl"))
    if (j.contains("outer_bytes")) synced.push_back(j["step"].get<int64_t>());
  EXPECT_EQ(synced, (std::vector<int64_t>{2, 4, 6}));
  RunResult killed = run_strata(args + run + " --inject kill --inject-step 5", "", Streams::separate);
  EXPECT_NE(killed.status, 0);
  RunResult resumed = run_strata(args + run + " --resume auto", "", Streams::separate);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(records(run), records(ref));
}

// int4 sends 4.5 bits per value (a 4-byte scale per 64), fp32 32: about 1/7 of the bytes.
TEST(Diloco, Int4SendsAboutASeventhOfFp32) {
  TempDir dir("diloco_int4");
  auto bytes = [&](const std::string& dtype) {
    train(kRun + "--nproc 2 --replica-groups 2 --inner-steps 3 --outer-dtype " + dtype, dir.file(dtype));
    return json::parse(read_file(dir.file(dtype) + "/summary.json"))["outer"]["bytes"].get<double>();
  };
  const double fp32 = bytes("fp32"), int4 = bytes("int4"), bf16 = bytes("bf16");
  EXPECT_EQ(bf16 * 2, fp32);
  EXPECT_NEAR(fp32 / int4, 32.0 / 4.5, 0.05);
}

// What crosses the groups: each rank's shard of the parameters at each sync (fp32), counted per
// sync step in metrics.jsonl and in all in summary.json, beside the global state every rank
// holds (8 bytes per parameter of its shard).
TEST(Diloco, BytesAcrossGroupsAndGlobalStateAreCounted) {
  TempDir dir("diloco_bytes");
  const std::string run = dir.file("run");
  train(kRun + "--nproc 4 --replica-groups 2 --zero 1 --inner-steps 4", run);
  const json s = json::parse(read_file(run + "/summary.json"));
  const int64_t params = s["params"].get<int64_t>();
  std::vector<int64_t> synced;
  for (const json& j : step_records(run + "/metrics.jsonl"))
    if (j.contains("outer_bytes")) {
      synced.push_back(j["step"].get<int64_t>());
      EXPECT_EQ(j["outer_bytes"].get<int64_t>(), 2 * 4 * params) << j.dump();  // 2 groups x every parameter x fp32
    }
  EXPECT_EQ(synced, (std::vector<int64_t>{4, 6}));  // every 4 steps, and the last
  const json& o = s["outer"];
  EXPECT_EQ(o["syncs"], 2);
  EXPECT_EQ(o["bytes"].get<int64_t>(), 2 * 2 * 4 * params);
  // ZeRO 1 over the group's 2 ranks: each holds θ and m for its shard, as the formula says.
  EXPECT_EQ(o["state_bytes_per_rank"].get<int64_t>(), o["state_bytes_per_rank_plan"].get<int64_t>());
  EXPECT_EQ(o["state_bytes_per_rank_plan"].get<int64_t>(), 8 * ((params + 1) / 2));
}

// Groups that split the data each train their share of every batch in any layout: two groups
// of a 2-stage pipeline follow two groups of one process each (to float rounding: the
// pipeline's sums run in another order).
TEST(Diloco, SplitDataPipelineGroupsTrainTheirShare) {
  TempDir dir("diloco_split_pp");
  const std::string groups = "--replica-groups 2 --inner-steps 2 ";
  const auto flat = train(kRun + groups + "--nproc 2", dir.file("flat"));
  const auto piped = train(kRun + groups + "--nproc 4 --pp 2", dir.file("pp"));
  ASSERT_EQ(piped.size(), flat.size());
  for (size_t i = 0; i < flat.size(); ++i)
    EXPECT_NEAR(piped[i][1], flat[i][1], 1e-6 * flat[i][1]) << "record " << i;
  // Each stage holds the activations of its group's share (4 sequences), as a one-group
  // pipeline of --batch 4 does.
  train(kRun + "--nproc 2 --pp 2 --batch 4", dir.file("pp_half"));
  auto stage0 = [&](const std::string& run) {
    return json::parse(read_file(dir.file(run) + "/summary.json"))["pipeline"]["stages"][0]["activation_bytes"];
  };
  EXPECT_EQ(stage0("pp"), stage0("pp_half"));
}

TEST(Diloco, BadSettingsAreOneLineBeforeAnyRankStarts) {
  TempDir dir("diloco_bad");
  expect_one_line_errors(kRun, {
      {"--nproc 2 --inner-steps 0", "--inner-steps must be at least 1 (got 0)"},
      {"--nproc 2 --replica-groups 2 --outer-lr 0", "--outer-lr must be positive and finite (got 0)"},
      {"--nproc 2 --replica-groups 2 --outer-lr nan", "--outer-lr"},
      {"--nproc 2 --replica-groups 2 --outer-momentum 1", "--outer-momentum must be in [0, 1) (got 1)"},
      {"--nproc 3 --replica-groups 2", "--replica-groups 2 does not divide the job's 3 rank(s)"},
      {"--nproc 2 --replica-groups 0", "--replica-groups must be at least 1 (got 0)"},
      {"--nproc 2 --replica-groups 2 --batch 7 --micro-batch 1", "--batch 7 does not split over --replica-groups 2"},
      {"--nproc 2 --replica-groups 2 --group-data both", "--group-data"},
      {"--nproc 2 --replica-groups 2 --fragments 3", "--fragments must be in [1, 2] (the model's layers; got 3)"},
      {"--nproc 2 --replica-groups 2 --inner-steps 4 --outer-overlap 4", "--outer-overlap must be in [0, --inner-steps 4) (got 4)"},
      {"--nproc 2 --inner-steps 4 --outer-dtype int4", "--outer-dtype int4 encodes what crosses the groups: it needs --replica-groups 2 or more (got 1)"},
      {"--nproc 2 --replica-groups 2 --outer-overlap 1 --outer-mix 1.5", "--outer-mix must be in [0, 1] (got 1.5)"},
      {"--nproc 2 --fragments 2", "this run has none"},
      {"--nproc 2 --replica-groups 2 --outer-error-feedback", "--outer-error-feedback corrects the rounding of"},
      {"--nproc 6 --batch 6 --hosts a:3,b:3 --backend tcp --replica-groups 3",
       "--replica-groups 3: group 1 (ranks 2-3) holds part of --hosts host a and ranks of another"},
  }, dir.file("run"));
}

// A checkpoint of replica groups exports the model they define: the global parameters of the
// last outer step (`outer.params`; the groups keep their own as group<g>.params). After the
// last step's sync every group holds them, so the Hugging Face directory, loaded back and
// evaluated, gives the run's own held-out loss to the last digit.
TEST(Diloco, AMultiGroupCheckpointExportsItsGlobalParameters) {
  TempDir dir("diloco_export");
  const std::string run = dir.file("run"), hf = dir.file("hf"), back = dir.file("back");
  train(kRun + "--nproc 2 --replica-groups 2 --inner-steps 3 --ckpt-every 6", run);
  RunResult x = run_strata("ckpt export " + run + "/ckpt/step-000006 --hf " + hf, "", Streams::separate);
  ASSERT_EQ(x.status, 0) << x.err;
  EXPECT_NE(x.out.find("of 'outer.params'"), std::string::npos) << x.out;
  std::string again = kRun;
  again.replace(again.find("--steps 6 --lr 1e-2"), 19, "--steps 1 --lr 1e-30 --weight-decay 0 --warmup 0");
  train(again + "--init-from " + hf, back);
  const auto want = records(run), got = records(back);
  ASSERT_FALSE(want.empty());
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(want.back()[0], -1);  // the final eval
  EXPECT_EQ(got.back()[0], -1);
  EXPECT_EQ(got.back()[1], want.back()[1]);
}


// A run of replica groups resumes with another number of groups: a group the checkpoint lacks
// starts from group 0's states, and one group from a checkpoint of several takes group 0's.
// Groups that read the same batches hold the same states (DilocoSameData), so 2 groups resumed
// as 1, and 1 resumed as 2, continue the uninterrupted runs' curves bit for bit.
TEST(Diloco, ResumesWithAnotherNumberOfGroups) {
  TempDir dir("diloco_regroup");
  const std::string outer = "--inner-steps 2 --outer-lr 0.8 --outer-momentum 0.5 --ckpt-every 2 --ckpt-keep 0 ";
  const std::string two_groups = "--nproc 4 --replica-groups 2 --group-data same ";
  const auto one = train(kRun + outer + "--nproc 2", dir.file("one"));
  const auto two = train(kRun + outer + two_groups, dir.file("two"));
  ASSERT_EQ(one.size(), 7u);
  ASSERT_EQ(two, one);
  const std::vector<std::vector<double>> tail(one.begin() + 4, one.end());  // steps 5, 6 and the eval
  const auto fewer = train(kRun + outer + "--nproc 2 --resume " + dir.file("two") + "/ckpt/step-000004",
                           dir.file("fewer"));
  EXPECT_EQ(fewer, tail);
  const auto more = train(kRun + outer + two_groups + "--resume " + dir.file("one") + "/ckpt/step-000004",
                          dir.file("more"));
  EXPECT_EQ(more, tail);
  // With groups that read their own data the resumed curve is another run's, not an error.
  const auto split = train(kRun + outer + "--nproc 4 --replica-groups 2 --resume " + dir.file("one") +
                               "/ckpt/step-000004",
                           dir.file("split"));
  EXPECT_EQ(split.size(), 3u);
}

// A replica group that loses a rank mid-round under --recovery live is a dropout, not a
// restart: the launcher stops the rest of that group, the other groups go on from their own
// in-memory copies (at most the step in flight is trained again) and leave it out of the
// round's outer sync, so their losses up to that sync are the uninterrupted run's, bit for
// bit; the replacement group joins at the end of a round from the survivors' states (the
// outer sync's θ) and trains its share again. Nothing is left behind.
struct LostGroup {
  const char* layout;
  int groups, kill_rank, lost_group;
};
void PrintTo(const LostGroup& c, std::ostream* os) {
  *os << c.layout << " --replica-groups " << c.groups << ", rank " << c.kill_rank << " killed";
}
class DilocoLive : public ::testing::TestWithParam<LostGroup> {};

TEST_P(DilocoLive, ALostGroupIsLeftOutOfTheRoundAndItsReplacementJoinsAtTheNext) {
  const LostGroup c = GetParam();
  TempDir dir("diloco_live");
  const int H = 4, steps = 12, kill_at = 6, next_sync = 8;
  const std::string args = cat(c.layout, " --replica-groups ", c.groups, " --inner-steps ", H,
                               " --mem-ckpt-every 1 --recovery live --ckpt-every ", H, " --ckpt-keep 0");
  const std::string ref = dir.file("ref"), run = dir.file("run");
  RunResult a = run_strata(live_run(ref, args, steps), "", Streams::separate, 120);
  ASSERT_EQ(a.status, 0) << a.err;
  RunResult r = run_strata(live_run(run, cat(args, " --inject kill --inject-rank ", c.kill_rank, " --inject-step ", kill_at), steps),
                           "STRATA_LIVE_AWAIT_JOIN=1 ", Streams::separate, 120);
  ASSERT_EQ(r.status, 0) << r.err;
  const int64_t k = live_resume_step(r.err, 0), joined = live_resume_step(r.err, 1);
  ASSERT_TRUE(k == kill_at - 1 || k == kill_at - 2) << r.err;
  ASSERT_GT(joined, k) << "the replacement did not join before the run ended\n" << r.err;
  EXPECT_EQ(joined % H, 0) << "a group joins at the end of a round\n" << r.err;

  const std::vector<json> want = group_losses(ref), got = group_losses(run);
  ASSERT_EQ(want.size(), size_t(steps));
  ASSERT_EQ(got.size(), size_t(steps)) << r.err;
  for (int s = 1; s <= steps; ++s) {
    const json& w = want[size_t(s - 1)];
    const json& g = got[size_t(s - 1)];
    ASSERT_EQ(g.size(), size_t(c.groups)) << "step " << s;
    for (int grp = 0; grp < c.groups; ++grp) {
      const bool lost = grp == c.lost_group && s >= kill_at && s <= joined;
      EXPECT_EQ(g[size_t(grp)].is_null(), lost) << "step " << s << " group " << grp;
      // Before the kill every group, and up to the round's sync the survivors, as if nothing died.
      if (s < kill_at || (!lost && s <= next_sync)) {
        EXPECT_EQ(g[size_t(grp)], w[size_t(grp)]) << "step " << s << " group " << grp;
      }
    }
  }
  // The sync without the lost group moved the survivors elsewhere: the test can fail.
  EXPECT_NE(got[size_t(next_sync)], want[size_t(next_sync)]);
  // While a group is lost, the job's loss is the others' mean (equal shares of the batch).
  const json lost_step = got[size_t(kill_at - 1)];
  double mean = 0;
  for (int grp = 0; grp < c.groups; ++grp)
    if (grp != c.lost_group) mean += lost_step[size_t(grp)].get<double>() / (c.groups - 1);
  EXPECT_NEAR(step_records(run + "/metrics.jsonl")[size_t(kill_at - 1)]["loss"].get<double>(), mean, 1e-9);

  const json summary = json::parse(read_file(run + "/summary.json"));
  ASSERT_EQ(summary["live_recovery"].size(), 2u) << summary.dump();
  std::vector<int> all, survivors, rejoined;
  for (int grp = 0; grp < c.groups; ++grp) {
    all.push_back(grp);
    if (grp != c.lost_group) survivors.push_back(grp);
  }
  rejoined = survivors;
  rejoined.push_back(c.lost_group);  // the replacement group joins as the last
  EXPECT_EQ(summary["live_recovery"][0]["groups_before"], json(all));
  EXPECT_EQ(summary["live_recovery"][0]["groups_after"], json(survivors));
  EXPECT_EQ(summary["live_recovery"][1]["groups_after"], json(rejoined));
  EXPECT_EQ(summary["live_recovery"][1]["steps_lost"], 0);
  expect_nothing_left(run, c.layout);

  // The replacement took what a resume of every group from the checkpoint of that step (saved
  // by the world without it) takes: a group the checkpoint lacks starts from the lowest saved
  // group's states, group 0's or, when group 0 was lost, the next one's. The runs go on alike,
  // bit for bit, each outer sync summing the groups in group order.
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/ckpt/step-%06lld", (long long)joined);
  const std::string resumed = dir.file("resumed");
  RunResult b = run_strata(live_run(resumed, cat(args, " --resume ", run, step_dir), steps), "", Streams::separate, 120);
  ASSERT_EQ(b.status, 0) << b.err;
  const std::vector<json> after = group_losses(resumed);
  ASSERT_EQ(after.size(), size_t(steps - joined));
  for (int64_t s = joined + 1; s <= steps; ++s)
    EXPECT_EQ(after[size_t(s - joined - 1)], got[size_t(s - 1)]) << "step " << s;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DilocoLive,
                         ::testing::Values(LostGroup{"--nproc 3", 3, 1, 1},
                                           LostGroup{"--nproc 3", 3, 0, 0},  // its checkpoints lack group 0
                                           LostGroup{"--nproc 4 --tp 2", 2, 3, 1}),
                         [](const auto& info) {
                           return cat(info.param.groups == 3 ? "ThreeGroups" : "TwoGroupsOfTp2", "Lose", info.param.lost_group);
                         });

TEST(DilocoLive, BadSettingsAreOneLineBeforeAnyRankStarts) {
  TempDir dir("diloco_live_bad");
  const std::string live = " --mem-ckpt-every 1 --recovery live";
  expect_one_line_errors(kRun, {
      {"--nproc 2 --inner-steps 4" + live, "--recovery live with --inner-steps goes on without a lost replica group: "
                                           "it needs --replica-groups 2 or more (got 1)"},
      {"--nproc 2 --replica-groups 2 --inner-steps 4 --outer-overlap 1" + live,
       "--recovery live with --replica-groups: a group lost with exchanges in flight (--outer-overlap 1)"},
      {"--nproc 2 --replica-groups 2 --inner-steps 4 --mem-ckpt-every 3 --recovery live",
       "--mem-ckpt-every 3 must divide --inner-steps 4"},
      {"--nproc 2 --replica-groups 2 --inner-steps 4 --recovery live", "needs --mem-ckpt-every K"},
  }, dir.file("run"));
}

}  // namespace
}  // namespace strata::test
