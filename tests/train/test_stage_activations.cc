// A pipeline stage's activations: the stage model's buffers equal the formula per stage
// (cost/stage_activations.h) under every schedule and recomputation policy, and
// --max-activation-mb under --pp compares each stage's own activations (what the summary
// reports per stage), not the one-process figure: a budget between the two is accepted, and
// one under a stage's figure is refused naming that stage and every stage's figure.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli_util.h"
#include "cost/stage_activations.h"
#include "parallel/pipeline/schedule.h"

namespace strata::test {
namespace {

using nlohmann::json;

// Vocabulary 4096: the logits make the one-process figure (every layer and the head at once)
// larger than either stage's. --pp-split 2,2 fixes the split (the default follows measured
// costs).
const std::string kPipe =
    "train --layers 4 --dim 64 --heads 2 --seq 64 --vocab 4096 --batch 8 --steps 2 "
    "--sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 --threads 1 "
    "--nproc 2 --pp 2 --micro-batches 4 --pp-split 2,2 ";

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1 << 20));
  return buf;
}

// Real `--pp 2` runs: each stage's bytes as allocated (summary.json's activation_bytes, its
// first rank's) equal the formula for its chunks (--pp-split fixes them: one block per virtual
// stage), its slots from the schedule, its head or embedding, the scratch and the cp buffers,
// computed here from the shape, and the summary's own planned figure; under 1F1B,
// interleaved and zero-bubble, every policy, bf16, and with tp 2 (SP) and cp 2 (ring and
// Ulysses) beside the pipeline. Full recomputation lowers every stage's bytes.
TEST(StageActivations, EachStageEqualsItsFormula) {
  namespace pl = strata::parallel::pipeline;
  const std::string base =
      "train --layers 4 --dim 64 --heads 2 --max-seq 64 --seq 64 --vocab 4096 --batch 8 "
      "--steps 1 --sample-tokens 0 --eval-every 0 --eval-batches 1 --peak-gflops 1 --threads 1 "
      "--pp 2 --micro-batches 4 ";
  struct Case {
    std::string flags;
    pl::ScheduleKind kind;
    int virt;
    int policy;  // GptShape::recompute
    int64_t recomputed = 0;  // blocks per chunk under full (--recompute-layers)
    bool bf16 = false;
    int tp = 1, cp = 1;
    bool ring = true;
  };
  const auto f1b = pl::ScheduleKind::one_f_one_b, inter = pl::ScheduleKind::interleaved;
  const std::vector<Case> cases = {
      {"--nproc 2 --pp-split 2,2", f1b, 1, 0},
      {"--nproc 2 --pp-split 2,2 --recompute full", f1b, 1, 2, 2},
      {"--nproc 2 --pp-split 1,1,1,1 --schedule interleaved --virtual-stages 2", inter, 2, 0},
      {"--nproc 2 --pp-split 1,1,1,1 --schedule interleaved --virtual-stages 2 --recompute full",
       inter, 2, 2, 1},
      {"--nproc 2 --pp-split 2,2 --schedule zb --recompute selective", pl::ScheduleKind::zb, 1, 1},
      {"--nproc 2 --pp-split 2,2 --recompute selective --precision bf16", f1b, 1, 1, 0, true},
      {"--nproc 4 --tp 2 --sp --pp-split 2,2 --precision bf16 --recompute full "
       "--recompute-layers 1", f1b, 1, 2, 1, true, 2},
      {"--nproc 4 --cp 2 --pp-split 2,2 --recompute full", f1b, 1, 2, 2, false, 1, 2},
      {"--nproc 4 --cp 2 --cp-mode ulysses --pp-split 2,2 --recompute selective", f1b, 1, 1, 0,
       false, 1, 2, false},
  };
  std::vector<int64_t> plain;  // per stage, the last case without recomputation
  for (const Case& c : cases) {
    const TrainRun r = train_run(base + c.flags, "stage_formula");
    ASSERT_EQ(r.cli.status, 0) << c.flags << "\n" << r.cli.err;
    const json& stages = r.summary["pipeline"]["stages"];
    ASSERT_EQ(stages.size(), 2u) << c.flags;
    const pl::Schedule sched = pl::make_schedule(c.kind, 2, 4, c.virt);
    strata::cost::GptShape m;
    m.layers = 4, m.dim = 64, m.heads = 2, m.max_seq = 64, m.vocab = 4096, m.padded_vocab = 4096;
    m.recompute = cost::Recompute(c.policy);
    std::vector<int64_t> bytes;
    for (int s = 0; s < 2; ++s) {
      std::vector<strata::cost::ChunkSlots> chunks;
      const int64_t blocks = 4 / (2 * c.virt);
      for (int ch = 0; ch < c.virt; ++ch) {
        const int v = sched.virtual_stage(s, ch);
        chunks.push_back({blocks, c.recomputed, v == 0, v == 2 * c.virt - 1,
                          std::max(1, pl::chunk_slots(sched, s, ch))});
      }
      const int64_t formula =
          strata::cost::stage_activation_buffers(m, chunks, sched.split_backward, c.tp, c.tp > 1,
                                                 0, 2, c.bf16, c.cp, c.ring, 64)
              .total();
      const int64_t measured = stages[size_t(s)]["activation_bytes"].get<int64_t>();
      EXPECT_EQ(measured, formula) << c.flags << ": stage " << s;
      EXPECT_EQ(stages[size_t(s)]["activation_bytes_planned"].get<int64_t>(), formula)
          << c.flags << ": stage " << s;
      bytes.push_back(measured);
    }
    if (c.policy == 0) plain = bytes;
    if (c.policy == 2 && c.tp == 1 && c.cp == 1) {
      for (int s = 0; s < 2; ++s) EXPECT_LT(bytes[size_t(s)], plain[size_t(s)]) << c.flags;
    }
  }
}

TEST(StageActivations, EachStageIsCheckedAgainstItsOwnFigure) {
  // The stages' figures, as the summary reports them.
  const TrainRun free = train_run(kPipe, "stage_acts");
  ASSERT_EQ(free.cli.status, 0) << free.cli.err;
  const json& stages = free.summary["pipeline"]["stages"];
  ASSERT_EQ(stages.size(), 2u);
  const int64_t s0 = stages[0]["activation_bytes"].get<int64_t>();
  const int64_t s1 = stages[1]["activation_bytes"].get<int64_t>();
  ASSERT_GT(s1, s0) << "stage 1 holds the logits";
  // The one-process figure for the same micro-batch (2 sequences), from its refusal.
  TempDir dir("stage_acts_one");
  const RunResult one = run_strata(
      "train --layers 4 --dim 64 --heads 2 --seq 64 --vocab 4096 --batch 8 --micro-batch 2 "
      "--steps 1 --sample-tokens 0 --peak-gflops 1 --max-activation-mb 0.01 --run-dir " +
          dir.str(),
      "", Streams::separate);
  ASSERT_NE(one.status, 0);
  const size_t at = one.err.find("needs ");
  ASSERT_NE(at, std::string::npos) << one.err;
  const double whole_mb = std::stod(one.err.substr(at + 6));
  const double s1_mb = double(s1) / (1 << 20);
  ASSERT_GT(whole_mb, s1_mb + 1) << one.err;

  // Between the largest stage and the one-process figure: both stages fit, it trains.
  const std::string fits = std::to_string((whole_mb + s1_mb) / 2);
  const TrainRun ok = train_run(kPipe + "--max-activation-mb " + fits, "stage_acts_ok");
  EXPECT_EQ(ok.cli.status, 0) << ok.cli.err;
  EXPECT_EQ(ok.losses.size(), 2u);

  // Between the stages: stage 1 does not fit, and the line says so with its own figure.
  const std::string tight = std::to_string((double(s0) + double(s1)) / 2 / (1 << 20));
  TempDir run("stage_acts_no");
  const RunResult no = run_strata(kPipe + "--max-activation-mb " + tight + " --run-dir " +
                                      run.str(), "", Streams::separate);
  EXPECT_EQ(no.status, 1) << no.err;
  for (const std::string& want : std::vector<std::string>{
           "strata: error: --max-activation-mb ", ": pipeline stage 1 (layers 2-3) needs " + mib(s1),
           "stage 0 " + mib(s0) + ", stage 1 " + mib(s1)})
    EXPECT_NE(no.err.find(want), std::string::npos) << want << "\n" << no.err;
  EXPECT_EQ(no.out.find("step     1/2"), std::string::npos) << "refused before step 1";
}

}  // namespace
}  // namespace strata::test
