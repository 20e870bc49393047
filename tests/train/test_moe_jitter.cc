// Router jitter (`--router-jitter`, docs/moe.md) is keyed by the data, not by the layout or
// the process: every layout of `strata train --experts` draws the one process's noise for
// each token, so its losses equal the one-process run's within the bound the MoE layout
// tests use without jitter (dropless, no aux loss: the loss does not depend on how tokens
// are grouped), over an epoch boundary; and a run resumed from a checkpoint draws what the
// uninterrupted run drew, so its losses are the same bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_util.h"

using namespace strata::test;
using nlohmann::json;

namespace {

// 6 steps of 4 sequences over a training split of 18 sequences (the tail dropped: 4 steps
// per epoch), so the runs cross an epoch boundary (the epoch is part of the noise's key).
const std::string kJitter =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --batch 4 --steps 6 "
    "--peak-gflops 1000 --data synthetic:300 --sample-tokens 0 --eval-every 0 --experts 4 "
    "--top-k 2 --dropless --aux-loss-coef 0 --router-jitter 0.05 ";

std::vector<double> losses(const std::vector<json>& recs) {
  std::vector<double> out;
  for (const json& r : recs) out.push_back(r["loss"].get<double>());
  return out;
}

std::vector<double> run_losses(const std::string& args, const std::string& run_dir) {
  RunResult r = run_strata(args + " --run-dir " + run_dir, "OMP_NUM_THREADS=1 ", Streams::separate);
  EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  return r.status == 0 ? losses(step_records(run_dir + "/metrics.jsonl")) : std::vector<double>{};
}

TEST(MoEJitterTrain, EveryLayoutDrawsTheOneProcessNoise) {
  TempDir dir("moe_jitter");
  const std::vector<double> ref = run_losses(kJitter, dir.file("ref"));
  ASSERT_EQ(ref.size(), 6u);
  // The noise moves the losses far more than the bound: a layout that drew other noise fails.
  const std::vector<double> plain = run_losses(kJitter + "--router-jitter 0", dir.file("plain"));
  EXPECT_GT(max_abs_diff(ref, plain), 1e-4);
  int k = 0;
  for (const char* layout :
       {"--micro-batch 1", "--micro-batch 2", "--nproc 2 --dp 2", "--nproc 2 --ep 2",
        "--nproc 2 --dp 2 --ep 2 --micro-batch 1", "--nproc 2 --cp 2",
        "--nproc 2 --cp 2 --cp-mode ulysses", "--nproc 2 --cp 2 --cp-chunks contiguous",
        "--nproc 2 --tp 2 --micro-batch 1", "--nproc 4 --tp 2 --dp 2 --ep 2 --micro-batch 1",
        "--nproc 4 --cp 2 --dp 2 --ep 2"}) {
    const std::vector<double> got =
        run_losses(kJitter + layout, dir.file("l" + std::to_string(k++)));
    ASSERT_EQ(got.size(), ref.size()) << layout;
    EXPECT_LE(max_abs_diff(got, ref), 1e-5) << layout;
  }
}

// Resumed from step 3 (in the first epoch) and from step 5 (in the second) on the same
// layout, a run's later losses are the uninterrupted run's bit for bit: no noise state is
// saved, none replays.
TEST(MoEJitterTrain, ResumedRunDrawsTheUninterruptedNoise) {
  TempDir dir("moe_jitter_resume");
  for (const std::string layout : {"", "--nproc 2 --ep 2 --micro-batch 1"}) {
    const std::string full = dir.file("full");
    std::filesystem::remove_all(full);
    const std::vector<double> want =
        run_losses(kJitter + layout + " --ckpt-every 1 --ckpt-keep 0", full);
    ASSERT_EQ(want.size(), 6u) << layout;
    const json m = json::parse(read_file(full + "/ckpt/step-000001/manifest.json"));
    ASSERT_EQ(m["train"]["extra"]["loader_samples"], 18) << "4 steps per epoch";
    for (int from : {3, 5}) {
      const std::string run = dir.file("resumed" + std::to_string(from));
      std::filesystem::remove_all(run);
      std::filesystem::create_directories(run);
      char step[32];
      std::snprintf(step, sizeof step, "step-%06d", from);
      const std::vector<double> got =
          run_losses(kJitter + layout + " --resume " + full + "/ckpt/" + step, run);
      ASSERT_EQ(got.size(), size_t(6 - from)) << layout << " from " << from;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(got[i], want[size_t(from) + i]) << layout << " step " << from + 1 + int(i);
    }
  }
}

}  // namespace
