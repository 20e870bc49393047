// The `strata ckpt` commands as a user runs them.
#include <sys/stat.h>

#include <fstream>

#include "helpers.h"
#include "support/run.h"

using namespace ckpt_test;

namespace {

using strata::test::run_strata;
using CmdResult = strata::test::RunResult;

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

}  // namespace

TEST(CkptCli, LsAndVerifyReportDamage) {
  TempDir tmp;
  save_step(tmp.str(), FullStates(3000, 10, false), 10, 2, 0);
  save_step(tmp.str(), FullStates(3000, 20, false), 20, 3, 2);
  CmdResult ls = run_strata("ckpt ls " + tmp.str());
  EXPECT_EQ(ls.status, 0) << ls.out;
  EXPECT_TRUE(has(ls.out, "latest -> step-000020")) << ls.out;
  EXPECT_TRUE(has(ls.out, "step-000010")) << ls.out;
  EXPECT_TRUE(has(ls.out, "ok (latest)")) << ls.out;
  // The layout each was saved with: world, tp, dp, pp, cp, ep, ZeRO stage, precision, manifest
  // version.
  EXPECT_TRUE(has(ls.out, "WORLD  TP  DP  PP  CP  EP ZERO PREC  FMT")) << ls.out;
  EXPECT_TRUE(has(ls.out, "    2   1   2   1   1   1    0 fp32  v2")) << ls.out;
  EXPECT_TRUE(has(ls.out, "    3   1   3   1   1   1    2 fp32  v2")) << ls.out;
  CmdResult v = run_strata("ckpt verify " + tmp.str());
  EXPECT_EQ(v.status, 0) << v.out;
  EXPECT_TRUE(has(v.out, "ok       " + tmp.str() + "/ckpt/step-000020")) << v.out;

  // Flip one data byte: `ls` (headers and sizes only) still says ok, `verify` finds it.
  const std::string shard = tmp.str() + "/ckpt/step-000020/shard-00002-of-00003.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  v = run_strata("ckpt verify " + tmp.str());
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_TRUE(has(v.out, "DAMAGED  " + shard + ": checksum mismatch")) << v.out;
  EXPECT_TRUE(has(v.out, "1 of 2 checkpoints")) << v.out;
  EXPECT_EQ(run_strata("ckpt verify " + tmp.str() + "/ckpt/step-000010").status, 0);
  EXPECT_EQ(run_strata("ckpt verify --quick " + tmp.str()).status, 0);

  std::filesystem::resize_file(shard, 100);
  ls = run_strata("ckpt ls " + tmp.str() + "/ckpt");
  EXPECT_EQ(ls.status, 0);
  EXPECT_TRUE(has(ls.out, "DAMAGED: " + shard + ": truncated shard (100 of")) << ls.out;
}

TEST(CkptCli, ExportImportAndAdvise) {
  TempDir tmp;
  save_step(tmp.str(), FullStates(3000, 10, false), 10, 2, 1);
  const std::string out = tmp.str() + "/model.safetensors";
  CmdResult e = run_strata("ckpt export " + tmp.str() + " --safetensors " + out);
  EXPECT_EQ(e.status, 0) << e.out;
  EXPECT_TRUE(has(e.out, "3 tensors of 'params'")) << e.out;
  CmdResult i = run_strata("ckpt import " + out);
  EXPECT_EQ(i.status, 0) << i.out;
  EXPECT_TRUE(has(i.out, "valid safetensors, 3 tensors, 3000 elements")) << i.out;
  EXPECT_TRUE(has(i.out, "h.0.weight")) << i.out;

  CmdResult a = run_strata("ckpt advise " + tmp.str() + " --mtbf 4h --restart 3s --step-time 250ms");
  EXPECT_EQ(a.status, 0) << a.out;
  EXPECT_TRUE(has(a.out, "Young") && has(a.out, "Daly") && has(a.out, "lost per failure")) << a.out;
  a = run_strata("ckpt advise --stall 2s --mtbf 4h");
  EXPECT_EQ(a.status, 0) << a.out;
  EXPECT_TRUE(has(a.out, "every 4m00s")) << a.out;  // Young: sqrt(2·2·14400) = 240 s
}

TEST(CkptCli, BadInputExitsNonZeroWithOneLine) {
  TempDir tmp;
  CmdResult r = run_strata("ckpt ls " + tmp.str() + "/nope");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "strata: error: " + tmp.str() + "/nope: no such file or directory")) << r.out;
  r = run_strata("ckpt verify " + tmp.str());
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "no checkpoints here")) << r.out;
  r = run_strata("ckpt advise --stall 1s --mtbf 4x");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "unknown unit 'x'")) << r.out;
  std::ofstream(tmp.str() + "/bad.safetensors") << "12345678{}";
  r = run_strata("ckpt import " + tmp.str() + "/bad.safetensors");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "does not fit")) << r.out;
  r = run_strata("ckpt export " + tmp.str());  // --safetensors missing
  EXPECT_EQ(r.status, 2) << r.out;
}

// `latest` names step 2 while complete steps 4 and 6 exist: `train --resume auto` resumed from
// step 2 ("4 step(s) lost") and deleted 4 and 6 as "uncommitted". It resumes from step 6,
// saying so in one line, and every checkpoint that verifies is still there.
TEST(CkptCli, ResumeTakesCheckpointsNewerThanLatestAndDeletesNone) {
  TempDir tmp;
  const std::string run = tmp.str() + "/run", root = run + "/ckpt";
  auto train = [&](int steps, const std::string& extra) {
    return run_strata("train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --peak-gflops 10 --sample-tokens 0 "
                      "--eval-batches 1 --data synthetic:20000 --ckpt-every 2 --ckpt-keep 0 --steps " +
                      std::to_string(steps) + " --run-dir " + run + " " + extra);
  };
  CmdResult t = train(6, "");
  ASSERT_EQ(t.status, 0) << t.out;
  atomic_write_file(root + "/latest", "step-000002\n");
  t = train(8, "--resume auto");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_TRUE(has(t.out, root + "/latest names step-000002, but step-000006 is newer and verifies: using it"))
      << t.out;
  EXPECT_TRUE(has(t.out, "resuming from step 6")) << t.out;
  EXPECT_FALSE(has(t.out, "uncommitted")) << t.out;
  EXPECT_EQ(list_steps(root), (std::vector<int64_t>{2, 4, 6, 8}));
  for (int64_t s : list_steps(root)) EXPECT_NO_THROW(CheckpointReader(root + "/" + step_dir_name(s)).verify(true));
  EXPECT_EQ(read_latest(root).value_or(""), "step-000008");
}

// What `ckpt verify`, `ls` and `export` say about a damaged `latest`, a symbolic link loop in
// place of a checkpoint or of ckpt/, checkpoints newer than `latest`, and bad flags.
TEST(CkptCli, DamagedPointerLoopsNewerCheckpointsAndBadFlags) {
  TempDir tmp;
  const std::string root = tmp.str() + "/ckpt";
  save_step(tmp.str(), FullStates(3000, 10, false), 10, 2, 1);
  save_step(tmp.str(), FullStates(3000, 20, false), 20, 2, 1);
  // A `latest` of garbage: the pointer is damaged, the checkpoints are not.
  std::ofstream(root + "/latest", std::ios::trunc) << "garbage\n";
  const auto separate = strata::test::Streams::separate;
  CmdResult v = run_strata("ckpt verify " + tmp.str(), "", separate);
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_EQ(v.err, "strata: error: " + root + "/latest is damaged; the 2 checkpoint(s) are ok (the "
                   "next `train --resume auto` rewrites it)\n") << v.out;
  EXPECT_TRUE(has(v.out, "DAMAGED  " + root + "/latest: malformed pointer 'garbage'")) << v.out;

  // `latest` names step 10: export takes step 20, the newest that verifies, as a resume does.
  atomic_write_file(root + "/latest", "step-000010\n");
  CmdResult e = run_strata("ckpt export " + tmp.str() + " --safetensors " + tmp.str() + "/m.safetensors");
  EXPECT_EQ(e.status, 0) << e.out;
  EXPECT_TRUE(has(e.out, "from " + root + "/step-000020")) << e.out;
  EXPECT_TRUE(has(e.out, root + "/latest names step-000010, but step-000020 is newer and verifies: using it"))
      << e.out;

  // A loop named like a checkpoint is one damaged entry, named; the others are still found.
  fs::create_symlink("step-000030", root + "/step-000030");
  const std::string loop = root + "/step-000030: Too many levels of symbolic links";
  CmdResult ls = run_strata("ckpt ls " + tmp.str());
  EXPECT_EQ(ls.status, 0) << ls.out;
  EXPECT_TRUE(has(ls.out, "DAMAGED: " + loop)) << ls.out;
  v = run_strata("ckpt verify " + tmp.str(), "", separate);
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_TRUE(has(v.out, "DAMAGED  " + loop)) << v.out;
  EXPECT_EQ(v.err, "strata: error: 1 of 3 checkpoints in " + root + " damaged\n");
  e = run_strata("ckpt export " + tmp.str() + " --safetensors " + tmp.str() + "/m.safetensors");
  EXPECT_EQ(e.status, 0) << e.out;
  EXPECT_TRUE(has(e.out, "from " + root + "/step-000020")) << e.out;
  std::vector<std::string> log;
  load_and_check_full(tmp.str(), 20, false, 3000, &log);
  for (const std::string& arg : {root + "/step-000030", root + "/step-000030/"}) {
    CmdResult r = run_strata("ckpt ls " + arg);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_EQ(r.out, "strata: error: " + loop + "\n");
  }
  // ckpt/ itself a loop.
  TempDir other;
  fs::create_symlink("ckpt", other.str() + "/ckpt");
  CmdResult r = run_strata("ckpt verify " + other.str());
  EXPECT_EQ(r.out, "strata: error: " + other.str() + "/ckpt: Too many levels of symbolic links\n");

  // A negative step is refused before anything is read or written.
  r = run_strata("ckpt export " + tmp.str() + " --step -1 --safetensors " + tmp.str() + "/n.safetensors");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out, "strata: error: --step -1: a checkpoint's step is the number of steps done, 0 or more\n");
  EXPECT_FALSE(fs::exists(tmp.str() + "/n.safetensors"));
}

// A pipeline run's checkpoints as a user meets them: `ls` shows the whole layout (pp, cp, ep),
// a `latest` of random bytes is reported by `verify` and rewritten by the next resume, and a
// FIFO in place of a shard is named as damaged within seconds (never opened: open(2) of a FIFO
// without a writer blocks) while resume falls back to the checkpoint before it.
TEST(CkptCli, PipelineRunLayoutBadPointerAndFifoShard) {
  TempDir tmp;
  const std::string run = tmp.str() + "/run";
  auto train = [&](int steps, const std::string& extra) {
    return run_strata("train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 8 "
                      "--lr 3e-3 --eval-every 0 --eval-batches 1 --sample-tokens 0 --peak-gflops 100 "
                      "--threads 1 --nproc 2 --pp 2 --micro-batches 4 --ckpt-every 2 --ckpt-keep 0 --steps " +
                          std::to_string(steps) + " --run-dir " + run + " " + extra,
                      "", strata::test::Streams::merged, 120);
  };
  CmdResult t = train(4, "");
  ASSERT_EQ(t.status, 0) << t.out;
  CmdResult ls = run_strata("ckpt ls " + run);
  EXPECT_EQ(ls.status, 0) << ls.out;
  EXPECT_TRUE(has(ls.out, "WORLD  TP  DP  PP  CP  EP ZERO PREC  FMT")) << ls.out;
  EXPECT_TRUE(has(ls.out, "    2   1   1   2   1   1    0 fp32  v2")) << ls.out;

  const std::string latest = run + "/ckpt/latest";
  std::ofstream(latest, std::ios::binary | std::ios::trunc) << std::string("\xff\xfe\x80 random \x01\x9c", 12);
  CmdResult v = run_strata("ckpt verify " + run);
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_TRUE(has(v.out, "DAMAGED  " + latest + ": malformed pointer (12 bytes")) << v.out;
  ls = run_strata("ckpt ls " + run);
  EXPECT_EQ(ls.status, 0) << ls.out;
  EXPECT_TRUE(has(ls.out, "latest -> DAMAGED")) << ls.out;
  t = train(6, "--resume auto");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_TRUE(has(t.out, "resuming from step 4")) << t.out;
  EXPECT_TRUE(has(t.out, latest + ": malformed pointer (12 bytes")) << t.out;
  EXPECT_TRUE(has(t.out, "; rewrote it to name " + run + "/ckpt/step-000004")) << t.out;
  EXPECT_FALSE(has(t.out, "json.exception")) << t.out;
  EXPECT_EQ(read_latest(run + "/ckpt").value_or(""), "step-000006");
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(run + "/summary.json"));
  EXPECT_EQ(summary.at("ckpt").value("resumed_from", ""), run + "/ckpt/step-000004") << summary.dump();
  EXPECT_EQ(run_strata("ckpt verify " + run).status, 0);

  const std::string shard = run + "/ckpt/step-000006/shard-00000-of-00002.bin";
  std::filesystem::remove(shard);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0644), 0);
  ls = run_strata("ckpt ls " + run, "", strata::test::Streams::merged, 30);
  EXPECT_EQ(ls.status, 0) << ls.out;
  EXPECT_TRUE(has(ls.out, "DAMAGED: shard " + shard + ": is a FIFO, not a regular file")) << ls.out;
  v = run_strata("ckpt verify " + run, "", strata::test::Streams::merged, 30);
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_TRUE(has(v.out, "DAMAGED  shard " + shard + ": is a FIFO")) << v.out;
  t = train(8, "--resume auto");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_TRUE(has(t.out, "is a FIFO, not a regular file; falling back")) << t.out;
  EXPECT_TRUE(has(t.out, "resuming from step 4")) << t.out;
  EXPECT_EQ(read_latest(run + "/ckpt").value_or(""), "step-000008");
}
