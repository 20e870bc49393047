// Checkpoints written before the one-model change (data/make_pre_one_model.sh: strata at
// d03a807, when a pipeline stage and one process each had an engine of their own) load into
// today's engine: resumed at the saving layout and at others, step 3 is the uninterrupted
// run's (its loss within 1e-5, the tolerance every layout keeps against one process).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/run.h"
#include "support/temp_dir.h"

namespace {

using strata::test::RunResult;
using strata::test::run_strata;
using strata::test::Streams;
using strata::test::TempDir;

const std::string kData = std::string(STRATA_SOURCE_DIR) + "/tests/ckpt/data/pre_one_model/";
const std::string kCommon =
    "train --layers 2 --dim 8 --heads 2 --seq 8 --max-seq 8 --vocab 256 --data synthetic:400 "
    "--steps 3 --batch 4 --eval-every 0 --sample-tokens 0 --threads 1 ";

nlohmann::json last_step(const std::string& metrics) {
  std::istringstream in(strata::test::read_file(metrics));
  nlohmann::json out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("step", 0) == 3 && j.contains("loss")) out = j;
  }
  return out;
}

void expect_resumes(const std::string& fixture, const std::string& model,
                    const std::vector<std::string>& layouts) {
  const nlohmann::json ref =
      nlohmann::json::parse(strata::test::read_file(kData + fixture + "/reference.jsonl"));
  for (const std::string& layout : layouts) {
    TempDir tmp("pre_one_model");
    const RunResult r = run_strata(kCommon + model + layout + " --resume " + kData + fixture +
                                       "/step-000002 --run-dir " + tmp.file("run"),
                                   "OMP_NUM_THREADS=1 ", Streams::separate);
    ASSERT_EQ(r.status, 0) << layout << ": " << r.err;
    EXPECT_NE(r.err.find("resuming from step 2"), std::string::npos) << r.err;
    const nlohmann::json step3 = last_step(tmp.file("run/metrics.jsonl"));
    ASSERT_FALSE(step3.is_null()) << layout << ": " << r.err;
    EXPECT_NEAR(step3["loss"].get<double>(), ref["loss"].get<double>(), 1e-5) << fixture << " " << layout;
    EXPECT_NEAR(step3["grad_norm"].get<double>(), ref["grad_norm"].get<double>(), 1e-4)
        << fixture << " " << layout;
  }
}

TEST(CkptPreOneModel, PipelineStageCheckpointResumes) {
  expect_resumes("pp2", "", {"--nproc 2 --pp 2 --micro-batches 2", "--micro-batch 2",
                             "--nproc 2 --pp 2 --micro-batches 2 --zero 3"});
}

TEST(CkptPreOneModel, OneProcessMoECheckpointResumes) {
  expect_resumes("moe", "--experts 4 --top-k 2 --capacity-factor 0.5 --micro-batch 1 ",
                 {"", "--nproc 2 --ep 2", "--nproc 2 --pp 2"});
}

}  // namespace
