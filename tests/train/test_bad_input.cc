// `strata train` on bad input: one line on stderr naming the problem, non-zero exit, no crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_util.h"

using namespace strata::test;

namespace {

// Small and fast: the failure should come before (or instead of) any training.
const std::string kSmall =
    "train --layers 2 --dim 64 --heads 4 --seq 32 --batch 4 --steps 2 --peak-gflops 10 "
    "--sample-tokens 0 --data synthetic:20000 ";

// Expects a clean failure whose single stderr line contains every `needle`.
void expect_error(const std::string& args, std::initializer_list<std::string> needles) {
  SCOPED_TRACE(args);
  RunResult r = run_strata(args, "", Streams::separate);
  EXPECT_GT(r.status, 0) << "stdout:\n" << r.out << "stderr:\n" << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.rfind("strata: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
}

}  // namespace

TEST(TrainBadInput, UnknownFlag) {
  expect_error(kSmall + "--bogus-flag 3", {"--bogus-flag"});
  expect_error("train --model huge --peak-gflops 10", {"huge"});
}

TEST(TrainBadInput, DimNotDivisibleByHeads) {
  expect_error(kSmall + "--dim 66", {"66", "4"});
}

TEST(TrainBadInput, SeqAboveModelMaximum) {
  expect_error("train --model tiny --seq 512 --peak-gflops 10", {"--seq 512", "256"});
  expect_error(kSmall + "--max-seq 16", {"--seq 32", "16"});
}

TEST(TrainBadInput, ZeroOrNegativeSizes) {
  expect_error(kSmall + "--layers 0", {"--layers", "0"});
  expect_error(kSmall + "--dim -64", {"--dim", "-64"});
  expect_error(kSmall + "--heads 0", {"--heads"});
  expect_error(kSmall + "--vocab 0", {"--vocab"});
  expect_error(kSmall + "--seq 0", {"--seq"});
  expect_error(kSmall + "--max-seq -1", {"--max-seq"});
  expect_error(kSmall + "--batch 0", {"--batch"});
  expect_error(kSmall + "--micro-batch 0", {"--micro-batch"});
  expect_error(kSmall + "--steps 0", {"--steps"});
  expect_error(kSmall + "--steps -3", {"--steps"});
  expect_error(kSmall + "--lr -0.1", {"--lr"});
  expect_error(kSmall + "--eval-batches 0", {"--eval-batches"});
  expect_error(kSmall + "--threads -2", {"--threads"});
}

TEST(TrainBadInput, BatchNotDivisibleByMicroBatch) {
  expect_error(kSmall + "--batch 8 --micro-batch 3", {"--batch 8", "--micro-batch 3"});
}

TEST(TrainBadInput, MissingDataFile) {
  expect_error(kSmall + "--data /nonexistent/strata/tokens.bin", {"/nonexistent/strata/tokens.bin"});
  TempDir dir("emptydir");
  expect_error(kSmall + "--data " + dir.str(), {dir.str()});
}

TEST(TrainBadInput, CorruptTokenFiles) {
  TempDir dir("corrupt");
  std::vector<uint16_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 200);

  write_bin_file(dir.file("magic.bin"), tokens, /*magic=*/12345);
  expect_error(kSmall + "--data " + (dir.file("magic.bin")), {"magic.bin", "magic"});

  write_bin_file(dir.file("version.bin"), tokens, 20240520, /*version=*/7);
  expect_error(kSmall + "--data " + (dir.file("version.bin")), {"version.bin", "version"});

  write_bin_file(dir.file("short.bin"), tokens, 20240520, 1, /*count=*/int64_t(tokens.size()) + 100);
  expect_error(kSmall + "--data " + (dir.file("short.bin")), {"short.bin"});

  std::ofstream(dir.file("stub.bin")) << "tiny";  // shorter than the header
  expect_error(kSmall + "--data " + (dir.file("stub.bin")), {"stub.bin"});

  tokens[1000] = 300;  // >= the model's vocabulary of 256
  write_bin_file(dir.file("range.bin"), tokens);
  expect_error(kSmall + "--data " + (dir.file("range.bin")), {"range.bin", "300"});
  tokens[1000] = 60000;  // >= GPT-2's 50257 as well
  write_bin_file(dir.file("range2.bin"), tokens);
  expect_error(kSmall + "--vocab 50257 --data " + (dir.file("range2.bin")), {"range2.bin", "60000"});
}

TEST(TrainBadInput, VocabSmallerThanData) {
  expect_error(kSmall + "--vocab 128",
               {"the synthetic corpus has 256 token ids but the model's vocabulary is 128"});
}

TEST(TrainBadInput, UnwritableRunDir) {
  TempDir dir("rundir");
  std::ofstream(dir.file("file")) << "x";
  std::string bad = dir.file("file/run");
  expect_error(kSmall + "--run-dir " + bad, {bad});
}

// STRATA_RANK/STRATA_WORLD_SIZE/STRATA_JOB_ID left in the shell from another job: asked for
// --nproc 2, train refuses in one line naming them instead of joining that job as one rank
// and waiting out the timeout; run as a lone rank, it says so before it waits.
TEST(TrainBadInput, LeftoverRankEnvironment) {
  const std::string env = "STRATA_RANK=0 STRATA_WORLD_SIZE=2 STRATA_JOB_ID=leftover-job STRATA_TIMEOUT=1 ";
  RunResult r = run_strata(kSmall + "--nproc 2", env, Streams::separate);
  EXPECT_GT(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const char* n : {"--nproc 2", "STRATA_RANK=0 STRATA_WORLD_SIZE=2 STRATA_JOB_ID=leftover-job",
                        "no strata launcher started this process", "unset them"})
    EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
  RunResult lone = run_strata(kSmall, env, Streams::separate);
  EXPECT_GT(lone.status, 0) << lone.err;
  EXPECT_NE(lone.err.find("running as rank 0 of 2 from the environment"), std::string::npos) << lone.err;
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/strata-leftover-job-w"));
}

// Tensor-parallel layouts the model or the world cannot take fail before any rank starts.
TEST(TrainBadInput, TensorParallelLayouts) {
  expect_error(kSmall + "--nproc 3 --tp 3", {"--tp 3", "4 attention heads"});
  expect_error(kSmall + "--nproc 4 --tp 2 --dp 3", {"--tp 2 x --dp 3 = 6 ranks", "4"});
  expect_error(kSmall + "--nproc 3 --tp 2", {"--tp 2", "world of 3"});
  expect_error(kSmall + "--nproc 2 --tp 2 --seq 31", {"--sp", "31", "not divisible by 2"});
}

// Context-parallel layouts the sequence or the heads cannot take fail before any rank starts.
TEST(TrainBadInput, ContextParallelLayouts) {
  expect_error(kSmall + "--nproc 2 --cp 2 --seq 30", {"--seq 30", "2 x --cp = 4"});
  expect_error(kSmall + "--nproc 2 --cp 2 --cp-chunks contiguous --seq 31", {"--seq 31", "--cp = 2"});
  expect_error(kSmall + "--nproc 3 --cp 3 --cp-mode ulysses --seq 30",
               {"--cp-mode ulysses", "heads (4)", "--cp 3"});
  expect_error(kSmall + "--nproc 4 --cp 4 --seq 2", {"--cp 4", "larger than the sequence", "--seq 2"});
  expect_error(kSmall + "--nproc 2 --cp 2 --cp-mode spiral", {"--cp-mode spiral"});
  expect_error(kSmall + "--nproc 3 --cp 2", {"--cp 2", "world of 3"});
  expect_error(kSmall + "--nproc 2 --cp 2 --max-activation-mb 0.5",
               {"--max-activation-mb 0.5", "--seq 32 at --cp 2", "MiB of activations per rank"});
  expect_error(kSmall + "--max-activation-mb 0.5", {"--max-activation-mb 0.5", "--cp 1"});
}
