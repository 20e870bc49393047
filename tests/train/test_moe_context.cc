// Context parallelism with MoE blocks (docs/moe.md): a micro-batch's sequences are split over
// the cp ranks, but the routing group is still the whole micro-batch, as in one process. The
// ranks sum the per-expert counts for the load-balancing loss and serve capacity in the
// group's token order, so every mode (capacity drops, router jitter, dropless with the aux
// loss) equals one process: the same losses within the bound the MoE layout tests use, and
// the same tokens dropped in every block at every step. Every mode trains micro-batches of one
// sequence: under data parallelism (ep is carved out of it) a group is a rank's micro-batch,
// so one process's micro-batch must be the same sequences for the groups to match.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_util.h"
#include "core/error.h"

namespace strata::test {
namespace {

using nlohmann::json;

const std::string kBase =
    "train --layers 2 --dim 32 --heads 2 --seq 16 --max-seq 16 --batch 4 --steps 6 "
    "--peak-gflops 1000 --data synthetic:300 --sample-tokens 0 --eval-every 0 --experts 4 ";

struct Curve {
  std::vector<double> loss;
  std::vector<std::vector<int64_t>> dropped;  // per step, per MoE block
};

Curve run(const std::string& args, const std::string& run_dir) {
  RunResult r = run_strata(args + " --run-dir " + run_dir, "OMP_NUM_THREADS=1 ", Streams::separate);
  EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  Curve c;
  if (r.status != 0) return c;
  for (const json& rec : step_records(run_dir + "/metrics.jsonl")) {
    c.loss.push_back(rec["loss"].get<double>());
    std::vector<int64_t> d;
    for (const json& b : rec["moe"]) d.push_back(b["dropped"].get<int64_t>());
    c.dropped.push_back(d);
  }
  return c;
}

TEST(MoEContextParallel, EveryRoutingModeEqualsOneProcess) {
  TempDir dir("moe_cp");
  struct Mode {
    const char* name;
    std::string flags;
    bool drops;
  };
  const Mode modes[] = {
      {"capacity", "--top-k 1 --capacity-factor 1.0 --micro-batch 1", true},
      {"capacity+jitter", "--top-k 1 --capacity-factor 1.0 --micro-batch 1 --router-jitter 0.05", true},
      {"dropless+aux", "--top-k 2 --dropless --micro-batch 1", false},
  };
  int k = 0;
  for (const Mode& m : modes) {
    const Curve ref = run(kBase + m.flags, dir.file(cat("ref", k)));
    ASSERT_EQ(ref.loss.size(), 6u) << m.name;
    int64_t drops = 0;
    for (const auto& step : ref.dropped)
      for (int64_t d : step) drops += d;
    if (m.drops) {
      EXPECT_GT(drops, 0) << m.name << ": no token was dropped; the test would not see the order";
    }
    for (const char* layout :
         {"--nproc 2 --cp 2", "--nproc 2 --cp 2 --cp-mode ulysses", "--nproc 2 --cp 2 --cp-chunks contiguous",
          "--nproc 4 --cp 2 --ep 2", "--nproc 4 --tp 2 --cp 2", "--nproc 4 --pp 2 --cp 2"}) {
      const std::string what = cat(m.name, " at ", layout);
      const Curve got = run(kBase + m.flags + " " + layout, dir.file(cat("l", k++)));
      ASSERT_EQ(got.loss.size(), ref.loss.size()) << what;
      EXPECT_LE(max_abs_diff(got.loss, ref.loss), 1e-5) << what;
      EXPECT_EQ(got.dropped, ref.dropped) << what;
    }
  }
}

}  // namespace
}  // namespace strata::test
