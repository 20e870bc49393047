// The flight recorder: entries, states, phases, ring wrap-around, the dump file format.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "comm/flight_recorder.h"
#include "comm/process_group.h"
#include "comm/watchdog.h"
#include "nlohmann/json.hpp"
#include "support/run.h"
#include "support/temp_dir.h"

namespace strata::comm {
namespace {

TEST(FlightRecorder, RecordsOpsWithStatesAndPhases) {
  run_threads(2, [](ProcessGroup& pg) {
    current_phase().set(12, 4, PhaseKind::forward);
    std::vector<float> x(100, 1.0f);
    pg.all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::avg);
    pg.all_gather_v(x.data(), x.data() + 50, {3, 0}, DType::f32);
  });
  auto entries = flight_recorder().snapshot();
  ASSERT_GE(entries.size(), 4u);
  bool found = false;
  for (const FlightEntry& e : entries) {
    if (e.op != OpType::allreduce || e.count != 100) continue;
    found = true;
    EXPECT_EQ(e.state, OpState::completed);
    EXPECT_EQ(e.redop, ReduceOp::avg);
    EXPECT_EQ(e.group->name, "world");
    EXPECT_EQ(e.group->world_ranks, (std::vector<int>{0, 1}));
    EXPECT_GT(e.t_started_ns, 0);
    EXPECT_GE(e.t_completed_ns, e.t_started_ns);
    EXPECT_GE(e.t_started_ns, e.t_scheduled_ns);
    EXPECT_EQ(e.phase.step, 12);
    EXPECT_EQ(e.phase.layer, 4);
    EXPECT_EQ(e.phase.kind, PhaseKind::forward);
  }
  EXPECT_TRUE(found);
  auto j = flight_recorder().to_json("manual", "test");
  bool v_found = false;
  for (auto& e : j["entries"])
    if (e["op"] == "allgatherv") {
      v_found = true;
      EXPECT_EQ(e["counts"], (std::vector<int>{3, 0}));
      EXPECT_EQ(e["count"], 3);
    }
  EXPECT_TRUE(v_found);
}

TEST(FlightRecorder, RingKeepsTheNewestEntries) {
  FlightRecorder r(4);
  const GroupInfo* g = r.intern("g", {0, 1});
  EXPECT_EQ(r.intern("g", {0, 1}), g);
  uint64_t ids[10];
  for (int i = 0; i < 10; ++i) {
    FlightEntry e;
    e.group = g;
    e.seq = uint64_t(i);
    ids[i] = r.record(e);
  }
  r.update(ids[1], OpState::completed);  // overwritten: ignored
  r.update(ids[9], OpState::started);
  auto s = r.snapshot();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s.front().seq, 6u);
  EXPECT_EQ(s.back().seq, 9u);
  EXPECT_EQ(s.back().state, OpState::started);
}

TEST(FlightRecorder, DumpIsAtomicAndFollowsTheFormat) {
  test::TempDir tmp;
  const std::string dir = tmp.str();
  FlightRecorder r(8);
  r.set_identity(3, 4);
  FlightEntry e;
  e.group = r.intern("world", {0, 1, 2, 3});
  e.seq = 17;
  e.op = OpType::allreduce;
  e.count = 1024;
  e.phase = {3, 2, PhaseKind::backward};
  e.t_scheduled_ns = 5;
  r.update(r.record(e), OpState::started);
  std::string path = r.dump("timeout", "one line", dir);
  EXPECT_EQ(path, dir + "/flight-rank3.json");
  size_t files = 0;
  for (auto& f : std::filesystem::directory_iterator(dir)) ++files, (void)f;
  EXPECT_EQ(files, 1u);  // no temporary left behind
  std::ifstream f(path);
  auto j = nlohmann::json::parse(f);
  for (const char* k : {"rank", "world", "pid", "host", "reason", "detail", "time_ns", "phase", "entries"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["reason"], "timeout");
  auto& x = j["entries"][0];
  EXPECT_EQ(x["group"], "world");
  EXPECT_EQ(x["group_ranks"], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(x["seq"], 17);
  EXPECT_EQ(x["op"], "allreduce");
  EXPECT_EQ(x["dtype"], "float");
  EXPECT_EQ(x["count"], 1024);
  EXPECT_EQ(x["peer"], -1);
  EXPECT_EQ(x["tag"], 0);
  EXPECT_EQ(x["state"], "started");
  EXPECT_EQ(x["t_scheduled_ns"], 5);
  EXPECT_GT(x["t_started_ns"].get<int64_t>(), 0);
  EXPECT_EQ(x["t_completed_ns"], 0);
  EXPECT_EQ(x["phase"]["step"], 3);
  EXPECT_EQ(x["phase"]["layer"], 2);
  EXPECT_EQ(x["phase"]["kind"], "backward");
}

TEST(FlightRecorder, SizeFromTheEnvironment) {
  auto p = test::run({COMM_WORKER, "recorder-size"}, {{"STRATA_FLIGHT_RECORDER_SIZE", "50"}});
  EXPECT_NE(p.output().find("capacity 50"), std::string::npos) << p.output();
  auto bad = test::run({COMM_WORKER, "recorder-size"}, {{"STRATA_FLIGHT_RECORDER_SIZE", "many"}});
  EXPECT_NE(bad.output().find("STRATA_FLIGHT_RECORDER_SIZE='many' is not an integer"), std::string::npos)
      << bad.output();
}

}  // namespace
}  // namespace strata::comm
