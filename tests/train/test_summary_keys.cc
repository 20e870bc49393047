// summary.json and metrics.jsonl keep every key they had: tests/train/data/summary_keys.txt
// (written by tools/summary_keys/gen_summary_keys.py from the binary before the summary
// builder) lists the layouts it ran and the key paths each wrote; every one of them must
// still be written by this build (new keys may be added).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

// "a.b" for an object member, "a[]" for the elements of an array (their union), as the
// generator writes them.
void key_paths(const json& value, const std::string& prefix, std::set<std::string>& out) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
      out.insert(path);
      key_paths(it.value(), path, out);
    }
  } else if (value.is_array()) {
    for (const json& element : value) key_paths(element, prefix + "[]", out);
  }
}

struct Layout {
  std::string name, args;
  std::map<std::string, std::set<std::string>> expected;  // file -> key paths
};

std::vector<Layout> read_fixture() {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/tests/train/data/summary_keys.txt");
  std::vector<Layout> layouts;
  std::map<std::string, size_t> index;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream fs(line);
    for (std::string f; std::getline(fs, f, '\t');) fields.push_back(f);
    if (fields.size() == 2 && fields[0].rfind("layout ", 0) == 0) {
      index[fields[0].substr(7)] = layouts.size();
      layouts.push_back({fields[0].substr(7), fields[1], {}});
    } else if (fields.size() == 3 && index.count(fields[0])) {
      layouts[index[fields[0]]].expected[fields[1]].insert(fields[2]);
    } else {
      ADD_FAILURE() << "summary_keys.txt: unreadable line '" << line << "'";
    }
  }
  return layouts;
}

TEST(SummaryKeys, EveryLayoutKeepsEveryRecordedKey) {
  const std::vector<Layout> layouts = read_fixture();
  ASSERT_EQ(layouts.size(), 8u);
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.name);
    ASSERT_EQ(layout.expected.size(), 2u);
    TempDir dir("keys");
    const RunResult r = run_strata(layout.args + " --run-dir " + dir.str(), "OMP_NUM_THREADS=1 ",
                                   Streams::separate);
    ASSERT_EQ(r.status, 0) << r.err;
    std::map<std::string, std::set<std::string>> written;
    key_paths(json::parse(read_file(dir.file("summary.json"))), "", written["summary.json"]);
    for (const json& record : json_lines(read_file(dir.file("metrics.jsonl"))))
      key_paths(record, "", written["metrics.jsonl"]);
    for (const auto& [file, keys] : layout.expected) {
      EXPECT_GT(keys.size(), 10u) << file;
      for (const std::string& key : keys)
        EXPECT_TRUE(written[file].count(key)) << file << " lost " << key;
    }
  }
}

}  // namespace
}  // namespace strata::test
