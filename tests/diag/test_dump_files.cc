// Reading dump files: truncated, corrupt, malformed and missing dumps are reported by
// name and the diagnosis comes from the rest; `strata doctor hang` end to end.
#include <gtest/gtest.h>

#include "comm/flight_recorder.h"
#include "core/error.h"
#include "diag/flight_dump.h"
#include "diag/hang_doctor.h"
#include "diag/json_salvage.h"
#include "dump_sim.h"
#include "test_util.h"

using namespace strata::diag;
using sim::Fault;
using strata::test::TempDir;

namespace {

bool mentions(const std::vector<std::string>& problems, const std::string& what) {
  for (auto& p : problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

std::map<int, nlohmann::json> stuck_in_forward_set(int world, int culprit) {
  sim::Config c;
  c.world = world;
  c.faults = {{Fault::stop_in_forward, culprit, 2, 1}};
  return sim::simulate(c);
}

}  // namespace

TEST(JsonSalvage, ClosesATruncatedDocumentAtItsLastCompleteElement) {
  std::string full = R"({"a": 1, "list": [{"x": 1}, {"x": 2}, {"x": 3, "y": "a,b"}], "z": 2})";
  ParsedJson p;
  std::string err;
  ASSERT_TRUE(parse_json_salvaging(full, p, err));
  EXPECT_FALSE(p.truncated);
  for (size_t cut : {size_t(30), size_t(40), size_t(50), full.size() - 3}) {
    ASSERT_TRUE(parse_json_salvaging(full.substr(0, cut), p, err)) << cut << ": " << err;
    EXPECT_TRUE(p.truncated);
    EXPECT_EQ(p.value["a"], 1);
    EXPECT_GE(p.value["list"].size(), 1u) << cut;
  }
  // A cut inside a string holding a comma must not split the string.
  ASSERT_TRUE(parse_json_salvaging(full.substr(0, full.find("a,b") + 2), p, err));
  EXPECT_EQ(p.value["list"].size(), 3u);
  EXPECT_FALSE(p.value["list"][2].contains("y"));
}

TEST(JsonSalvage, RefusesTextThatIsNotJson) {
  ParsedJson p;
  std::string err;
  EXPECT_FALSE(parse_json_salvaging("", p, err));
  EXPECT_EQ(err, "empty file");
  EXPECT_FALSE(parse_json_salvaging("\x01\x02garbage}", p, err));
  EXPECT_NE(err.find("not valid JSON"), std::string::npos) << err;
  EXPECT_FALSE(parse_json_salvaging("{\"a\": ]", p, err));
}

// The recorder writes every state by the name the doctor reads back (one definition of
// OpState for both), and a state the recorder never writes is a named problem.
TEST(DumpFiles, EveryRecordedStateReadsBack) {
  using strata::comm::OpState;
  TempDir dir;
  strata::comm::FlightRecorder rec(8);
  rec.set_identity(0, 1);
  const strata::comm::GroupInfo* g = rec.intern("world", {0});
  for (OpState s : strata::comm::kOpStates) {
    strata::comm::FlightEntry e;
    e.group = g;
    e.count = 4;
    const uint64_t id = rec.record(e);
    if (s != OpState::scheduled) rec.update(id, s);
  }
  rec.dump("manual", "test", dir.str());
  DumpSet set = load_flight_dumps(dir.str());
  ASSERT_EQ(set.dumps.size(), 1u) << (set.problems.empty() ? "" : set.problems[0]);
  const auto& entries = set.dumps[0].entries;
  ASSERT_EQ(entries.size(), std::size(strata::comm::kOpStates));
  for (size_t i = 0; i < entries.size(); ++i) EXPECT_EQ(entries[i].state, strata::comm::kOpStates[i]);
  EXPECT_FALSE(strata::comm::parse_op_state("finished").has_value());
}

TEST(DumpFiles, MissingDirectoryIsAnError) {
  EXPECT_THROW(load_flight_dumps("/nonexistent/strata-run"), strata::Error);
}

TEST(DumpFiles, CorruptDumpIsNamedAndTheRestDiagnosed) {
  TempDir dir;
  auto dumps = stuck_in_forward_set(4, 2);
  strata::test::write_dumps(dir, dumps);
  strata::test::write_file(dir.file("flight-rank1.json"), "\x7f\x45\x4c\x46 this is not json");
  DumpSet set = load_flight_dumps(dir.str());
  EXPECT_EQ(set.dumps.size(), 3u);
  EXPECT_TRUE(mentions(set.problems, "flight-rank1.json: not valid JSON")) << set.problems[0];
  HangReport r = diagnose_hang(set);
  // Rank 1 was waiting like the others; without its dump it is one more silent member.
  ASSERT_FALSE(r.culprits.empty());
  bool names_2 = false;
  for (auto& c : r.culprits) names_2 |= c.rank == 2 && c.cause == Cause::outside_comm;
  EXPECT_TRUE(names_2) << format_hang_report(r);
  EXPECT_NE(format_hang_report(r).find("flight-rank1.json: not valid JSON"), std::string::npos);
}

TEST(DumpFiles, TruncatedDumpIsSalvaged) {
  TempDir dir;
  auto dumps = stuck_in_forward_set(3, 0);
  strata::test::write_dumps(dir, dumps);
  // Rank 2's writer died mid-file: keep the first 70% of its bytes, with "entries" last.
  nlohmann::json d2 = dumps[2];
  nlohmann::json entries = d2["entries"];
  d2.erase("entries");
  std::string text = d2.dump();
  text.pop_back();
  text += ",\"entries\":" + entries.dump() + "}";
  strata::test::write_file(dir.file("flight-rank2.json"), text.substr(0, text.size() * 7 / 10));
  DumpSet set = load_flight_dumps(dir.str());
  ASSERT_EQ(set.dumps.size(), 3u);
  EXPECT_TRUE(set.dumps[2].truncated);
  EXPECT_LT(set.dumps[2].entries.size(), entries.size());
  EXPECT_GT(set.dumps[2].entries.size(), 0u);
  EXPECT_TRUE(mentions(set.problems, "flight-rank2.json: cut off; used the"));
  HangReport r = diagnose_hang(set);
  ASSERT_EQ(r.culprits.size(), 1u) << format_hang_report(r);
  EXPECT_EQ(r.culprits[0].rank, 0);
}

TEST(DumpFiles, MalformedFieldsAreNamed) {
  TempDir dir;
  auto dumps = stuck_in_forward_set(2, 1);
  dumps[0]["rank"] = "zero";
  strata::test::write_dumps(dir, dumps);
  strata::test::write_file(dir.file("flight-rank5.json"), R"({"rank": 5, "world": 2, "entries": []})");
  strata::test::write_file(dir.file("flight-rank6.json"), R"({"rank": 6, "world": 8})");
  DumpSet set = load_flight_dumps(dir.str());
  EXPECT_TRUE(mentions(set.problems, "flight-rank0.json: field 'rank' is not an integer"));
  EXPECT_TRUE(mentions(set.problems, "flight-rank5.json: rank 5 does not fit world size 2"));
  EXPECT_TRUE(mentions(set.problems, "flight-rank6.json: field 'entries' is missing"));
  ASSERT_EQ(set.dumps.size(), 1u);
  EXPECT_EQ(set.dumps[0].rank, 1);
}

TEST(DumpFiles, UnfinishedFileStandsInForAMissingOne) {
  TempDir dir;
  auto dumps = stuck_in_forward_set(2, 1);
  strata::test::write_file(dir.file("flight-rank0.json"), dumps[0].dump());
  strata::test::write_file(dir.file("flight-rank1.json.tmp"), dumps[1].dump());
  DumpSet set = load_flight_dumps(dir.str());
  ASSERT_EQ(set.dumps.size(), 2u);
  EXPECT_TRUE(mentions(set.problems, "flight-rank1.json.tmp: an unfinished dump"));
}

TEST(DumpFiles, DeadPeersReadFromDetailWhenNotListed) {
  nlohmann::json j = {{"rank", 0}, {"world", 4}, {"reason", "peer-dead"}, {"entries", nlohmann::json::array()}};
  auto dead = [&](const std::string& detail) {
    j["detail"] = detail;
    return parse_flight_dump(j, "f").dead_peers;
  };
  // The transports' wordings (comm/shm).
  EXPECT_EQ(dead("group world: rank 2 (pid 77) died; rank 2 is inside allreduce #3"), std::vector<int>{2});
  EXPECT_EQ(dead("group world: rank 1 (pid 76) died; rank 2 (pid 77) died; rank 1 is inside allreduce #3"),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(dead("allreduce #5 on group world: aborted because rank 1 reported: allreduce #5 on group "
                 "world: peer rank 3 (pid 99) died while this rank was waiting for it"),
            std::vector<int>{3});
  EXPECT_EQ(dead("send #2: peer rank 2 left the group (its process exited) while this rank was sending it"),
            std::vector<int>{2});
  j["dead_peers"] = {1};
  EXPECT_EQ(dead("anything"), std::vector<int>{1});
  j.erase("dead_peers");
  j["reason"] = "timeout";  // a timeout's detail names ranks that are not dead
  EXPECT_TRUE(dead("rank 2 (pid 7) died").empty());
}

TEST(DoctorHangCli, NamesTheCulpritAndExitsZero) {
  TempDir dir;
  strata::test::write_dumps(dir, stuck_in_forward_set(3, 2));
  auto r = strata::test::run_strata("doctor hang " + dir.str());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("Stuck on allreduce #8 of group \"world\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 2 is still in forward of layer 1 (step 2)"), std::string::npos) << r.out;
  auto j = strata::test::run_strata("doctor hang --json " + dir.str());
  EXPECT_EQ(j.status, 0);
  nlohmann::json parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed["culprits"][0]["rank"], 2);
  EXPECT_EQ(parsed["stuck"][0]["seq"], 8);
}

TEST(DoctorHangCli, HealthySetExitsOne) {
  TempDir dir;
  sim::Config c;
  c.world = 2;
  strata::test::write_dumps(dir, sim::simulate(c));
  auto r = strata::test::run_strata("doctor hang " + dir.str());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("No hang found"), std::string::npos) << r.out;
}

TEST(DoctorHangCli, BadInputIsOneLine) {
  TempDir dir;
  auto missing = strata::test::run_strata("doctor hang " + dir.str() + "/nope");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.out.find("does not exist"), std::string::npos) << missing.out;
  auto empty = strata::test::run_strata("doctor hang " + dir.str());
  EXPECT_EQ(empty.status, 1);
  EXPECT_NE(empty.out.find("no usable flight-recorder dump"), std::string::npos) << empty.out;
  strata::test::write_file(dir.file("flight-rank0.json"), "{");
  auto corrupt = strata::test::run_strata("doctor hang " + dir.str());
  EXPECT_EQ(corrupt.status, 1);
  EXPECT_NE(corrupt.out.find("flight-rank0.json"), std::string::npos) << corrupt.out;
  auto noarg = strata::test::run_strata("doctor hang");
  EXPECT_EQ(noarg.status, 2) << noarg.out;
}
