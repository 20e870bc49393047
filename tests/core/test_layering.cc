// The source tree keeps its layering (core <- kernels <- model <- parallel <- train <- cli,
// comm on kernels (its reduction loops run at the kernels' instruction-set level), launcher on comm, cost on core alone, ckpt/data/diag/plan as rooms of
// their own): an
// area includes headers only of the areas it builds on, CLI11 stays in cli/, and every
// STRATA_* variable read with getenv is declared in the environment registry (listed by
// `strata --help-env`).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "support/run.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;

// Every source file of src/AREA, for each area.
std::map<std::string, std::vector<fs::path>> sources_by_area() {
  std::map<std::string, std::vector<fs::path>> out;
  const fs::path src = fs::path(STRATA_SOURCE_DIR) / "src";
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".h" && ext != ".cc")) continue;
    out[fs::relative(e.path(), src).begin()->string()].push_back(e.path());
  }
  return out;
}

TEST(Layering, AreasIncludeOnlyTheAreasTheyBuildOn) {
  // cost/ holds the closed-form costs (memory, bytes, FLOPs, bubble, checkpoint interval) that
  // the engine's accounting and the planner share; it builds on core/ only, so the planner
  // reaches the engine's formulas without the engine; it checks layouts with the model's own
  // rules (model/parallel_rules.h, header-only predicates). cli sits on top of everything.
  const std::map<std::string, std::set<std::string>> allowed = {
      {"core", {"core"}},
      {"cost", {"core", "cost"}},
      {"kernels", {"core", "kernels"}},
      // comm takes the instruction-set level of its reduction loops from kernels/isa.h.
      {"comm", {"core", "kernels", "comm"}},
      {"launcher", {"core", "comm", "launcher"}},
      {"model", {"core", "cost", "kernels", "comm", "model"}},
      {"data", {"core", "data"}},
      {"parallel", {"core", "cost", "kernels", "comm", "model", "parallel"}},
      {"ckpt", {"core", "cost", "ckpt"}},
      {"diag", {"core", "comm", "launcher", "diag"}},
      {"plan", {"core", "cost", "model", "plan", "parallel"}},
      // recovery: the training state's in-memory copies and what a re-formed world resumes from.
      {"recovery", {"core", "comm", "launcher", "data", "parallel", "ckpt", "diag", "recovery"}},
      {"train", {"core", "cost", "kernels", "comm", "launcher", "model", "data", "parallel", "ckpt",
                 "diag", "recovery", "train"}},
      {"fed", {"core", "comm", "launcher", "model", "data", "ckpt", "train", "fed"}},
      {"rlhf", {"core", "cost", "kernels", "comm", "model", "parallel", "ckpt", "train", "plan",
                "rlhf"}},
      {"report", {"core", "cost", "comm", "launcher", "plan", "train", "report"}},
  };
  const std::regex include(R"re(#include "([A-Za-z0-9_]+)/)re");
  const auto areas = sources_by_area();
  ASSERT_GE(areas.size(), allowed.size() + 1);  // + cli
  for (const auto& [area, files] : areas) {
    for (const fs::path& f : files) {
      const std::string text = strata::test::read_file(f);
      for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
        const std::string to = (*it)[1];
        if (to == "nlohmann") continue;
        if (to == "CLI") {
          EXPECT_EQ(area, "cli") << f << " includes CLI11: command-line parsing belongs in cli/";
          continue;
        }
        if (area == "cli") continue;
        ASSERT_TRUE(allowed.count(area)) << "src/" << area << " is not a known area";
        EXPECT_TRUE(allowed.at(area).count(to)) << f << " includes a header of " << to << "/";
      }
    }
  }
}

// Inside model/: the layers of its sub-folders (tensor/, context/, expert/) and the one block
// (model/block.*) see shapes and communicators, never the model that calls them: none of
// them includes the model's internals (gpt_impl.h, part.h, stage.h) or, for the block and
// tensor/, the model itself (gpt.h).
TEST(Layering, ModelLayersAndTheBlockNeverSeeTheModel) {
  const fs::path src = fs::path(STRATA_SOURCE_DIR) / "src";
  const std::set<std::string> internals = {"model/gpt_impl.h", "model/part.h", "model/stage.h"};
  const std::regex include(R"re(#include "(model/[A-Za-z0-9_/]+\.h)")re");
  int checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(src / "model")) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), src).string();
    const bool sub = std::count(rel.begin(), rel.end(), '/') >= 2;  // model/X/file
    const bool block = rel == "model/block.h" || rel == "model/block.cc";
    if (!sub && !block) continue;
    const bool no_model = block || rel.rfind("model/tensor/", 0) == 0;
    ++checked;
    const std::string text = strata::test::read_file(e.path());
    for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
      const std::string to = (*it)[1];
      EXPECT_FALSE(internals.count(to)) << rel << " includes the model's internals " << to;
      if (no_model) {
        EXPECT_NE(to, "model/gpt.h") << rel << " includes the model (" << to << ")";
      }
      if (block) {
        EXPECT_EQ(to.find("model/context/gpt_cp"), std::string::npos) << rel;
      }
    }
  }
  EXPECT_GE(checked, 20) << "the model's sub-folders were not found";
}

TEST(Layering, EveryEnvironmentVariableReadIsRegistered) {
  const strata::test::RunResult help = strata::test::run_strata("--help-env");
  ASSERT_EQ(help.status, 0) << help.out;
  const std::string& listed = help.out;
  const std::regex read(R"re(getenv\("(STRATA_[A-Z0-9_]+)"\))re");
  int reads = 0;
  for (const auto& [area, files] : sources_by_area())
    for (const fs::path& f : files) {
      const std::string text = strata::test::read_file(f);
      for (std::sregex_iterator it(text.begin(), text.end(), read), end; it != end; ++it, ++reads)
        EXPECT_NE(listed.find((*it)[1].str() + " "), std::string::npos)
            << f << " reads " << (*it)[1] << ", which `strata --help-env` does not list";
    }
  EXPECT_GT(reads, 0);
}

}  // namespace
