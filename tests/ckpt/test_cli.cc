// The `strata ckpt` commands as a user runs them.
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
  // The layout each was saved with: world, tp, dp, ZeRO stage, precision, manifest version.
  EXPECT_TRUE(has(ls.out, "WORLD  TP  DP ZERO PREC  FMT")) << ls.out;
  EXPECT_TRUE(has(ls.out, "    2   1   2    0 fp32  v2")) << ls.out;
  EXPECT_TRUE(has(ls.out, "    3   1   3    2 fp32  v2")) << ls.out;
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
