// The source tree keeps its layering (core <- kernels <- model <- parallel <- train <- cli,
// comm beside kernels, ckpt/data/diag/plan as rooms of their own): an area includes headers
// only of the areas it builds on, CLI11 stays in cli/, and every STRATA_* variable read
// with getenv is declared in the environment registry (listed by `strata --help-env`).
#include <gtest/gtest.h>

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
  // The planner uses the engine's own cost models (parallel/zero_memory.h, train/flops.h,
  // ckpt/reliability.h), header-only; cli sits on top of everything.
  const std::map<std::string, std::set<std::string>> allowed = {
      {"core", {"core"}},
      {"kernels", {"core", "kernels"}},
      {"comm", {"core", "comm"}},
      {"model", {"core", "kernels", "comm", "model"}},
      {"data", {"core", "data"}},
      {"parallel", {"core", "kernels", "comm", "model", "parallel"}},
      {"ckpt", {"core", "ckpt"}},
      {"diag", {"core", "comm", "diag"}},
      {"plan", {"core", "plan", "parallel", "ckpt", "train"}},
      {"train", {"core", "kernels", "comm", "model", "data", "parallel", "ckpt", "diag", "train"}},
      {"fed", {"core", "comm", "model", "data", "ckpt", "train", "fed"}},
      {"rlhf", {"core", "kernels", "comm", "model", "parallel", "ckpt", "train", "plan", "rlhf"}},
      {"report", {"core", "comm", "plan", "train", "report"}},
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
