// Flag families (cli/flags/family.h): a setting is declared once, in its family, and its
// --help group, TOML section and presence in each command follow from that declaration.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "cli/flags/family.h"
#include "cli/flags/optimizer.h"
#include "cli/flags/parallel.h"
#include "support/run.h"

namespace strata {
namespace {

// The sections run configs written by earlier releases put each shared key in: a config keeps
// loading only if every family declares its keys in the same section.
const std::map<std::string, std::vector<std::string>>& earlier_sections() {
  static const std::map<std::string, std::vector<std::string>> s = {
      {"model", {"model", "init-from", "layers", "dim", "heads", "max-seq", "vocab", "arch", "kv-heads", "ffn",
                 "norm-eps", "rope-theta", "rope-scaling", "tie-embeddings", "no-tie-embeddings", "experts", "top-k",
                 "moe-every", "capacity-factor", "dropless", "aux-loss-coef", "z-loss-coef", "router-jitter"}},
      {"data", {"data", "tail", "doc-mask", "doc-token"}},
      {"training", {"steps", "seed", "seq", "batch", "micro-batch", "eval-every", "eval-batches", "sample-every",
                    "sample-tokens", "precision", "reduce-dtype", "recompute", "recompute-layers",
                    "recompute-inputs", "skip-nonfinite", "spike-zscore", "spike-window", "spike-action",
                    "max-skipped-steps"}},
      {"optimizer", {"lr", "min-lr", "warmup", "weight-decay", "grad-clip", "beta2"}},
      {"parallelism", {"nproc", "tp", "dp", "cp", "cp-mode", "cp-chunks", "pp", "schedule", "micro-batches",
                       "virtual-stages", "pp-split", "sp", "ep", "backend", "zero", "bucket-mb", "prefetch",
                       "no-reshard-after-forward", "threads", "max-activation-mb", "hosts", "hostfile", "slurm",
                       "rsh-agent", "iface"}},
      {"checkpoint", {"ckpt-every", "ckpt-keep", "ckpt-max-failures", "ckpt-keep-every", "resume", "mtbf",
                      "mem-ckpt-every", "mem-ckpt-replicas", "mem-ckpt-replica-mbps"}},
      {"metrics", {"log-every", "run-dir", "json", "trace", "peak-gflops", "straggler-every", "straggler-pct",
                   "collapse-pct", "collapse-steps"}},
      {"fault", {"max-restarts", "inject", "inject-rank", "inject-step", "timeout", "elastic", "preflight",
                 "recovery"}},
  };
  return s;
}

TEST(FlagFamilies, EveryEarlierKeyKeepsItsSection) {
  const std::map<std::string, std::string>& keys = cli::family_keys();
  for (const auto& [section, names] : earlier_sections())
    for (const std::string& key : names) {
      ASSERT_TRUE(keys.count(key)) << key << " is in no family";
      EXPECT_EQ(keys.at(key), section) << key;
    }
  for (const auto& [key, section] : keys)
    EXPECT_EQ(std::count(cli::family_sections().begin(), cli::family_sections().end(), section), 1) << key;
}

TEST(FlagFamilies, ACommandTakesPartOfAFamilyAndReusesTheRest) {
  CLI::App app;
  cli::OptimizerFlags optimizer;
  optimizer.add_to(app, {"--lr", "--grad-clip"});
  std::string own_beta2;
  app.add_option("--beta2", own_beta2, "this command's own --beta2");  // a name the family left out
  ASSERT_NE(app.get_option_no_throw("--lr"), nullptr);
  ASSERT_NE(app.get_option_no_throw("--grad-clip"), nullptr);
  EXPECT_EQ(app.get_option_no_throw("--warmup"), nullptr);
  EXPECT_EQ(cli::section_of(*app.get_option("--lr"), "own"), "optimizer");
  EXPECT_EQ(app.get_option("--lr")->get_group(), "Optimizer [optimizer]");
  EXPECT_EQ(cli::section_of(*app.get_option("--beta2"), "own"), "own");
  app.parse("--beta2 y --lr 0.5", false);
  EXPECT_EQ(optimizer.lr, 0.5);
  EXPECT_EQ(own_beta2, "y");
}

TEST(FlagFamilies, ParsedValuesReachTheLayout) {
  CLI::App app;
  cli::ParallelFlags parallel;
  parallel.add_to(app);
  app.parse("--no-sp --zero 3 --cp-mode ulysses --pp-split 2,3 --schedule gpipe --tp 2", false);
  const train::ParallelConfig pc = parallel.resolve(app, {});
  EXPECT_EQ(pc.dp.stage, 3);
  EXPECT_FALSE(pc.sequence_parallel);
  EXPECT_EQ(pc.mesh.tp, 2);
  EXPECT_EQ(pc.cp.mode, model::CpMode::ulysses);
  EXPECT_EQ(pc.pipeline.split, (std::vector<int>{2, 3}));
}

// --help lists the options by family, in the order of the families' sections.
TEST(FlagFamilies, HelpGroupsOptionsByFamily) {
  const test::RunResult r = test::run_strata("train --help", "", test::Streams::separate);
  ASSERT_EQ(r.status, 0) << r.err;
  size_t at = 0;
  for (const char* group : {"Model [model]:", "Data [data]:", "Training [training]:", "Optimizer [optimizer]:",
                            "Parallelism [parallelism]:", "Hosts [parallelism]:", "Checkpoints [checkpoint]:",
                            "Metrics [metrics]:", "Faults and timeouts [fault]:", "Recovery [fault]:"}) {
    const size_t found = r.out.find(group, at);
    ASSERT_NE(found, std::string::npos) << group << " after offset " << at << " in\n" << r.out;
    at = found;
  }
  const test::RunResult plan = test::run_strata("plan --help", "", test::Streams::separate);
  EXPECT_NE(plan.out.find("Model [model]:"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("--hidden"), std::string::npos) << "an old spelling is listed as such";
}

// Train's names in plan; the old spellings plan the same and say so once, on stderr.
TEST(FlagFamilies, PlanTakesTrainNamesAndOldSpellingsWithANote) {
  const std::string shape = "plan --layers 2 --heads 4 --seq 64 --vocab 512 --json ";
  const test::RunResult now = test::run_strata(shape + "--dim 64 --batch 8 --arch gpt2", "", test::Streams::separate);
  const test::RunResult old = test::run_strata(shape + "--hidden 64 --global-batch 8 --arch gpt", "",
                                               test::Streams::separate);
  ASSERT_TRUE(now.status == 0 || now.status == 3) << now.err;
  EXPECT_EQ(now.status, old.status);
  EXPECT_EQ(now.out, old.out);
  EXPECT_EQ(now.err, "");
  for (const char* note : {"--hidden is now --dim", "--global-batch is now --batch", "--arch gpt is now --arch gpt2"})
    EXPECT_NE(old.err.find(note), std::string::npos) << old.err;
}

}  // namespace
}  // namespace strata
