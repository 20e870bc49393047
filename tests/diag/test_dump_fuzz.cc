// Dump files as a careless or hostile run directory holds them: cut off at every point,
// huge and negative numbers, wrong types, stray file names, a FIFO. Loading never throws for
// a bad file, lists it, and bounds every number by what the other dumps agree on; the
// diagnosis never names a rank outside the job and never allocates by a number it read.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>

#include "diag/flight_dump.h"
#include "diag/hang_doctor.h"
#include "diag/json_salvage.h"
#include "dump_sim.h"
#include "test_util.h"

using namespace strata::diag;
using nlohmann::json;
using strata::test::TempDir;

namespace test_dump_fuzz {  // its own names in a unity build
namespace {

using Dumps = std::map<int, json>;

// Rank 1 of 3 stops in forward of step 2: ranks 0 and 2 wait for it.
std::map<int, json> base_set() {
  sim::Config c;
  c.world = 3;
  c.steps = 3;
  c.faults = {{sim::Fault::stop_in_forward, 1, 2, 1}};
  return sim::simulate(c);
}

bool mentions(const std::vector<std::string>& v, const std::string& s) {
  for (auto& x : v)
    if (x.find(s) != std::string::npos) return true;
  return false;
}

std::string problems_of(const DumpSet& set) {
  std::string s;
  for (auto& p : set.problems) s += "  " + p + "\n";
  return s;
}

// The checks every loaded set passes: a world the dumps agree on, ranks inside it.
void check_bounded(const DumpSet& set, int max_world, const std::string& what) {
  EXPECT_LE(set.world, max_world) << what << problems_of(set);
  HangReport r = diagnose_hang(set);
  json j = hang_report_json(r);
  for (auto& c : j["culprits"]) {
    if (c["rank"].is_null()) continue;
    ASSERT_TRUE(c["rank"].is_number_integer()) << what;
    EXPECT_GE(c["rank"].get<int>(), 0) << what;
    EXPECT_LT(c["rank"].get<int>(), set.world) << what << "\n" << format_hang_report(r);
  }
  for (const char* list : {"dead", "no_dump", "dumped"})
    for (auto& rk : j[list]) EXPECT_TRUE(rk.get<int>() >= 0 && rk.get<int>() < set.world) << what << " " << list;
  for (auto& s : j["stuck"])
    for (const char* list : {"waiting", "missing", "absent", "unknown", "group_ranks"})
      for (auto& rk : s[list]) EXPECT_TRUE(rk.get<int>() >= 0 && rk.get<int>() < set.world) << what << " " << list;
}

DumpSet load_with(const std::function<void(std::map<int, json>&)>& mutate, TempDir& dir) {
  auto dumps = base_set();
  mutate(dumps);
  std::filesystem::remove_all(dir.str());
  std::filesystem::create_directories(dir.str());
  strata::test::write_dumps(dir, dumps);
  return load_flight_dumps(dir.str());
}

}  // namespace

// ~300 cuts of rank 2's dump, and every byte of its last 64: it is salvaged or refused,
// never thrown, and rank 1 stays a culprit (rank 0's full dump shows it).
TEST(DumpFuzz, CutOffAnywhere) {
  auto dumps = base_set();
  std::string text = dumps[2].dump();
  DumpSet good;
  good.dir = "fuzz";
  for (int r : {0, 1}) good.dumps.push_back(parse_flight_dump(dumps[r], "flight-rank" + std::to_string(r) + ".json"));
  std::vector<size_t> cuts;
  for (size_t cut = 0; cut < text.size(); cut += text.size() / 300 + 1) cuts.push_back(cut);
  for (size_t cut = text.size() > 64 ? text.size() - 64 : 0; cut < text.size(); ++cut) cuts.push_back(cut);
  for (size_t cut : cuts) {
    DumpSet set = good;
    set.world = 3;
    ParsedJson parsed;
    std::string error;
    if (parse_json_salvaging(text.substr(0, cut), parsed, error)) {
      try {
        set.dumps.push_back(parse_flight_dump(parsed.value, "flight-rank2.json", parsed.truncated, 2));
      } catch (const std::exception&) {
        // listed as a problem by load_flight_dumps; the diagnosis goes on without it
      }
    }
    HangReport r = diagnose_hang(set);
    bool named = std::any_of(r.culprits.begin(), r.culprits.end(),
                             [](auto& c) { return c.rank == 1 && c.cause == Cause::outside_comm; });
    EXPECT_TRUE(named) << "cut at " << cut << "\n" << format_hang_report(r);
    for (auto& c : r.culprits) EXPECT_TRUE(c.rank >= -1 && c.rank < 3) << "cut at " << cut;
  }
}

TEST(DumpFuzz, HugeNegativeAndWrongNumbersAreBounded) {
  TempDir dir;
  struct Case {
    const char* what;
    std::function<void(std::map<int, json>&)> mutate;
    const char* problem;  // expected in the problems list
  };
  const json big = json::parse("18446744073709551615");  // uint64 max: wraps to -1 as int64
  std::vector<Case> cases = {
      {"world 2^31-1 on one dump", [](Dumps& d) { d[2]["world"] = 2147483647; }, "flight-rank2.json: field 'world'"},
      {"world 2^31-1 on two of three", [](Dumps& d) { d[1]["world"] = d[2]["world"] = 2147483647; }, "field 'world'"},
      {"world 5 on one dump", [](Dumps& d) { d[2]["world"] = 5; }, "flight-rank2.json: says world size 5, others say 3"},
      {"world 0", [](Dumps& d) { d[2]["world"] = 0; }, "flight-rank2.json: field 'world' is 0"},
      {"world -4", [](Dumps& d) { d[2]["world"] = -4; }, "flight-rank2.json: field 'world' is -4"},
      {"rank 99999999999", [](Dumps& d) { d[2]["rank"] = 99999999999; }, "flight-rank2.json: field 'rank' is 99999999999"},
      {"rank -1", [](Dumps& d) { d[2]["rank"] = -1; }, "flight-rank2.json: field 'rank' is -1"},
      {"rank uint64 max", [&](Dumps& d) { d[2]["rank"] = big; }, "flight-rank2.json: field 'rank' is 18446744073709551615"},
      {"rank 1e300", [](Dumps& d) { d[2]["rank"] = 1e300; }, "flight-rank2.json: field 'rank' is not an integer"},
      {"rank as text", [](Dumps& d) { d[2]["rank"] = "2"; }, "flight-rank2.json: field 'rank' is not an integer"},
      {"dead peer 99999999999 in detail",
       [](Dumps& d) {
         d[2]["reason"] = "peer-dead";
         d[2]["detail"] = "allreduce on group world: peer rank 99999999999 (pid 5) died while waiting";
       },
       nullptr},
      {"dead peer 7 listed", [](Dumps& d) { d[2]["dead_peers"] = {7}; }, "names rank 7 as a dead peer, outside world size 3"},
      {"dead peer -3 listed", [](Dumps& d) { d[2]["dead_peers"] = {-3}; }, "names rank -3 as a dead peer"},
      {"group member 2^31-1", [](Dumps& d) { d[2]["entries"][0]["group_ranks"] = {0, 1, 2147483647}; }, "entries name ranks outside world size 3"},
      {"group member 2^40", [](Dumps& d) { d[2]["entries"][0]["group_ranks"] = {0, 1, int64_t(1) << 40}; }, "1 malformed entries skipped"},
      {"group member 5", [](Dumps& d) { d[2]["entries"].back()["group_ranks"] = {0, 1, 5}; }, "entries name ranks outside world size 3"},
      {"peer 2^40", [](Dumps& d) { d[2]["entries"][0]["peer"] = int64_t(1) << 40; }, "1 malformed entries skipped"},
      {"root 9", [](Dumps& d) { d[2]["entries"][0]["root"] = 9; }, "entries name ranks outside world size 3"},
      {"layer 2^40", [](Dumps& d) { d[2]["phase"]["layer"] = int64_t(1) << 40; }, "flight-rank2.json: field 'layer'"},
      {"negative times and seq", [](Dumps& d) {
         for (auto& e : d[2]["entries"]) e["t_started_ns"] = -5, e["seq"] = -int64_t(e["seq"].get<int64_t>()) - 1;
       }, nullptr},
      {"entries an object", [](Dumps& d) { d[2]["entries"] = json::object(); }, "field 'entries' is not a list"},
      {"entry a number", [](Dumps& d) { d[2]["entries"][0] = 42; }, "1 malformed entries skipped"},
      {"phase a list", [](Dumps& d) { d[2]["phase"] = {1, 2}; }, "field 'phase' is not an object"},
      {"counts of text", [](Dumps& d) { d[2]["entries"][0]["counts"] = {"a"}; }, "1 malformed entries skipped"},
      {"state unknown", [](Dumps& d) { d[2]["entries"][0]["state"] = "exploded"; }, "1 malformed entries skipped"},
      {"not an object", [](Dumps& d) { d[2] = json::array({1, 2}); }, "flight-rank2.json: not a JSON object"},
  };
  for (const Case& c : cases) {
    auto t0 = std::chrono::steady_clock::now();
    DumpSet set = load_with(c.mutate, dir);
    if (c.problem) {
      EXPECT_TRUE(mentions(set.problems, c.problem)) << c.what << "\n" << problems_of(set);
    }
    EXPECT_EQ(set.world, 3) << c.what << "\n" << problems_of(set);
    check_bounded(set, 3, c.what);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << c.what;  // no work sized by a number read from a dump
  }
}

TEST(DumpFuzz, StrayFileNamesAreListedAndTheRestDiagnosed) {
  TempDir dir;
  strata::test::write_dumps(dir, base_set());
  strata::test::write_file(dir.file("flight-rank99999999999999999999.json"), "{}");
  strata::test::write_file(dir.file("flight-rank2147483648.json"), "{}");
  strata::test::write_file(dir.file("flight-rank131072.json"), R"({"rank": 131072, "world": 131073, "entries": []})");
  strata::test::write_file(dir.file("flight-rank7.json"), R"({"rank": 7, "world": 3, "entries": []})");
  std::filesystem::create_directories(dir.file("flight-rank8.json"));
  ASSERT_EQ(mkfifo(dir.file("flight-rank9.json").c_str(), 0600), 0);
  DumpSet set = load_flight_dumps(dir.str());
  EXPECT_EQ(set.world, 3) << problems_of(set);
  EXPECT_EQ(set.dumps.size(), 3u) << problems_of(set);
  EXPECT_TRUE(mentions(set.problems, "flight-rank99999999999999999999.json: the rank in the file name is beyond any job"))
      << problems_of(set);
  EXPECT_TRUE(mentions(set.problems, "flight-rank2147483648.json: the rank in the file name")) << problems_of(set);
  EXPECT_TRUE(mentions(set.problems, "flight-rank131072.json: the rank in the file name")) << problems_of(set);
  EXPECT_TRUE(mentions(set.problems, "flight-rank7.json: rank 7 does not fit world size 3")) << problems_of(set);
  EXPECT_TRUE(mentions(set.problems, "flight-rank8.json: not a regular file")) << problems_of(set);
  EXPECT_TRUE(mentions(set.problems, "flight-rank9.json: not a regular file")) << problems_of(set);
  check_bounded(set, 3, "stray files");
}

// Through the command: a lone dump claiming 2^31-1 ranks, a stray name and a dead peer of
// 11 digits end in a diagnosis (or one line saying no dump is usable), at once.
TEST(DumpFuzz, DoctorCommandSurvivesHostileDumps) {
  TempDir dir;
  auto dumps = base_set();
  dumps[0]["reason"] = "peer-dead";
  dumps[0]["detail"] = "allreduce on group world: peer rank 99999999999 (pid 5) died while this rank was waiting";
  strata::test::write_dumps(dir, dumps);
  strata::test::write_file(dir.file("flight-rank99999999999999999999.json"), "{}");
  auto r = strata::test::run_strata("doctor hang --json " + dir.str());
  EXPECT_EQ(r.status, 0) << r.out;
  ASSERT_NE(r.out.find('{'), std::string::npos) << r.out;
  json j = json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["world"], 3);
  ASSERT_FALSE(j["culprits"].empty()) << r.out;
  EXPECT_EQ(j["culprits"][0]["rank"], 1) << r.out;
  EXPECT_NE(r.out.find("flight-rank99999999999999999999.json: the rank in the file name"), std::string::npos) << r.out;

  TempDir lone;
  strata::test::write_file(lone.file("flight-rank0.json"),
                       R"({"rank": 0, "world": 2147483647, "reason": "timeout", "entries": []})");
  auto t0 = std::chrono::steady_clock::now();
  auto l = strata::test::run_strata("doctor hang --json " + lone.str());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << l.out;
  EXPECT_EQ(l.status, 1) << l.out;
  EXPECT_NE(l.out.find("field 'world' is 2147483647, outside [1, 131072]"), std::string::npos) << l.out;
  EXPECT_EQ(std::count(l.out.begin(), l.out.end(), '\n'), 1) << l.out;
}

}  // namespace test_dump_fuzz
