// Metrics writer: file contents, stdout modes, unwritable run directories.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "nlohmann/json.hpp"
#include "support/temp_dir.h"
#include "train/metrics.h"

namespace fs = std::filesystem;
using nlohmann::json;
using strata::test::read_file;
using strata::test::TempDir;
using strata::train::MetricsWriter;

namespace {

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  return s;
}

}  // namespace

TEST(Metrics, HumanModeWritesFilesAndHumanLines) {
  TempDir tmp;
  fs::path dir = tmp.path() / "nested";
  std::FILE* out = std::tmpfile();
  {
    MetricsWriter w(dir.string(), /*json_stdout=*/false, out);
    w.note("banner");
    w.record({{"step", 1}, {"loss", 2.5}}, "step 1 loss 2.5");
    w.record({{"step", 2}, {"loss", 2.25}}, "");  // quiet step: file only
    w.summary({{"final_loss", 2.25}, {"memory", {{"total", {{"peak", 10}}}}}}, "done");
  }
  EXPECT_EQ(read_all(out), "banner\nstep 1 loss 2.5\ndone\n");
  std::fclose(out);
  EXPECT_EQ(read_file((dir / "metrics.jsonl").string()),
            "{\"loss\":2.5,\"step\":1}\n{\"loss\":2.25,\"step\":2}\n");
  json summary = json::parse(read_file((dir / "summary.json").string()));
  EXPECT_EQ(summary["final_loss"], 2.25);
  EXPECT_EQ(summary["memory"]["total"]["peak"], 10);
}

TEST(Metrics, JsonModePrintsObjectsOnlyAndTruncatesOldMetrics) {
  TempDir tmp;
  fs::path dir = tmp.path();
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << "stale line\n";
  std::FILE* out = std::tmpfile();
  {
    MetricsWriter w(dir.string(), /*json_stdout=*/true, out);
    w.note("banner is suppressed");
    w.record({{"step", 1}, {"eval_loss", 1.5}}, "human text is suppressed");
    w.summary({{"steps", 1}}, "done");
  }
  EXPECT_EQ(read_all(out), "{\"eval_loss\":1.5,\"step\":1}\n{\"steps\":1}\n");
  std::fclose(out);
  EXPECT_EQ(read_file((dir / "metrics.jsonl").string()), "{\"eval_loss\":1.5,\"step\":1}\n");
}

TEST(Metrics, NoRunDirWritesNoFiles) {
  std::FILE* out = std::tmpfile();
  MetricsWriter w("", false, out);
  w.record({{"step", 1}}, "line");
  w.summary({{"steps", 1}}, "done");
  EXPECT_EQ(read_all(out), "line\ndone\n");
  std::fclose(out);
}

TEST(Metrics, UnwritableRunDirThrowsNamingIt) {
  // A regular file where a directory is needed fails even for root.
  TempDir tmp;
  fs::path base = tmp.path();
  std::ofstream(base / "file") << "x";
  std::string bad = (base / "file" / "run").string();
  try {
    MetricsWriter w(bad, false, stdout);
    FAIL() << "expected an error";
  } catch (const strata::Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}
