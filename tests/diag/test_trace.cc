// Trace tools: the overlap report on hand-made traces of known overlap, merging, and bad
// trace files.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/trace.h"
#include "diag/overlap.h"
#include "diag/trace_file.h"
#include "test_util.h"

using namespace strata::diag;
using nlohmann::json;
using strata::test::TempDir;

namespace {

// A complete event; times in microseconds as Chrome traces store them.
json span(const char* name, const char* cat, double ts_us, double dur_us, int tid) {
  return {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", tid}, {"ts", ts_us}, {"dur", dur_us}};
}

json thread_name(int tid, const char* name) {
  return {{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", tid}, {"args", {{"name", name}}}};
}

// Rank 0, two steps of 100 us each (t = 1000..1100, 1100..1200).
// Step 0: compute [0,40) [50,90); comm [30,60) on the comm thread and [85,100) on the
//   compute thread (a wait). comm = 30 + 15 = 45; hidden = [30,40) + [50,60) + [85,90) = 25;
//   exposed 20.
// Step 1: compute [0,100); comm [10,30) and [20,50) overlapping each other -> union
//   [10,50) = 40, all hidden; plus [95,110), clipped to the step at 100 -> 5, hidden.
//   comm 45, hidden 45, exposed 0.
json rank0_trace() {
  json ev = json::array({thread_name(0, "compute"), thread_name(1, "comm"),
                         span("step 0", "step", 1000, 100, 0), span("forward L0", "compute", 1000, 40, 0),
                         span("backward L0", "compute", 1050, 40, 0), span("allreduce bucket 0", "comm", 1030, 30, 1),
                         span("wait allreduce", "comm", 1085, 15, 0), span("step 1", "step", 1100, 100, 0),
                         span("forward L0", "compute", 1100, 100, 0), span("allgather", "comm", 1110, 20, 1),
                         span("allgather", "comm", 1120, 30, 1), span("allreduce", "comm", 1195, 15, 1)});
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
}

// Rank 1: step 0 all comm exposed (no compute): comm [10,70) = 60, exposed 60.
json rank1_trace() {
  json ev = json::array({span("step 0", "step", 5000, 80, 0), span("allreduce", "comm", 5010, 60, 1),
                         span("other", "misc", 5000, 80, 2)});
  for (auto& e : ev) e["pid"] = 1;
  return ev;  // a bare array is a valid Chrome trace too
}

std::map<int, std::vector<Span>> spans_of(std::initializer_list<std::pair<int, json>> traces) {
  std::map<int, std::vector<Span>> m;
  for (auto& [r, j] : traces) m[r] = parse_trace(j, r, "t").spans;
  return m;
}

}  // namespace

TEST(Overlap, KnownOverlapGivesExactNumbers) {
  OverlapReport r = compute_overlap(spans_of({{0, rank0_trace()}, {1, rank1_trace()}}));
  ASSERT_EQ(r.per_rank.size(), 3u);
  const RankStepOverlap& s0 = r.per_rank[0];  // step 0, rank 0
  EXPECT_EQ(s0.rank, 0);
  EXPECT_EQ(s0.step, 0);
  EXPECT_EQ(s0.step_ns, 100'000);
  EXPECT_EQ(s0.compute_ns, 80'000);
  EXPECT_EQ(s0.comm_ns, 45'000);
  EXPECT_EQ(s0.hidden_ns, 25'000);
  EXPECT_EQ(s0.exposed_ns, 20'000);
  const RankStepOverlap& s1 = r.per_rank[1];  // step 0, rank 1
  EXPECT_EQ(s1.rank, 1);
  EXPECT_EQ(s1.comm_ns, 60'000);
  EXPECT_EQ(s1.exposed_ns, 60'000);
  EXPECT_EQ(s1.hidden_ns, 0);
  const RankStepOverlap& s2 = r.per_rank[2];  // step 1, rank 0
  EXPECT_EQ(s2.step, 1);
  EXPECT_EQ(s2.comm_ns, 45'000);
  EXPECT_EQ(s2.hidden_ns, 45'000);
  EXPECT_EQ(s2.exposed_ns, 0);

  ASSERT_EQ(r.steps.size(), 2u);
  const StepOverlap& step0 = r.steps[0];
  EXPECT_EQ(step0.ranks, 2);
  EXPECT_DOUBLE_EQ(step0.comm_ms, (0.045 + 0.060) / 2);
  EXPECT_DOUBLE_EQ(step0.exposed_ms, (0.020 + 0.060) / 2);
  EXPECT_DOUBLE_EQ(step0.hidden_share, 0.025 / 0.105);
  EXPECT_EQ(step0.worst_rank, 1);
  EXPECT_DOUBLE_EQ(step0.worst_exposed_ms, 0.060);
  EXPECT_DOUBLE_EQ(r.steps[1].hidden_share, 1.0);
  EXPECT_DOUBLE_EQ(r.total.hidden_share, (0.025 + 0.045) / (0.045 + 0.060 + 0.045));
  std::string table = format_overlap(r);
  EXPECT_NE(table.find("23.8%"), std::string::npos) << table;  // 25 / 105
  EXPECT_NE(table.find("100%"), std::string::npos) << table;
}

TEST(Overlap, MeasureWindowClipsAndMerges) {
  std::vector<Span> s = {{"a", "comm", 0, 50, 0}, {"b", "comm", 40, 120, 1}, {"c", "compute", 100, 200, 0}};
  RankStepOverlap r = measure_window(s, 20, 150);
  EXPECT_EQ(r.comm_ns, 100);   // [20,120)
  EXPECT_EQ(r.compute_ns, 50);  // [100,150)
  EXPECT_EQ(r.hidden_ns, 20);   // [100,120)
  EXPECT_EQ(r.exposed_ns, 80);
}

TEST(Overlap, TraceWithoutStepSpansIsOneWindow) {
  json ev = json::array({span("forward L0", "compute", 0, 10, 0), span("allreduce", "comm", 5, 10, 1)});
  OverlapReport r = compute_overlap(spans_of({{0, ev}}));
  ASSERT_EQ(r.per_rank.size(), 1u);
  EXPECT_EQ(r.per_rank[0].step, -1);
  EXPECT_EQ(r.per_rank[0].step_ns, 15'000);
  EXPECT_EQ(r.per_rank[0].exposed_ns, 5'000);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("no \"step N\" spans"), std::string::npos);
}

TEST(TraceMerge, OneTrackPerRankAndThread) {
  TempDir dir;
  strata::test::write_file(dir.file("trace-rank0.json"), rank0_trace().dump());
  strata::test::write_file(dir.file("trace-rank1.json"), rank1_trace().dump());
  TraceSet set = load_traces(dir.str());
  ASSERT_EQ(set.ranks.size(), 2u);
  EXPECT_TRUE(set.problems.empty());
  json merged = merge_traces(set);
  std::set<std::pair<int, int>> tracks;
  std::map<int, std::string> process_names;
  size_t x_events = 0;
  for (const json& e : merged["traceEvents"]) {
    if (e["ph"] == "X") {
      ++x_events;
      tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    }
    if (e["ph"] == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
  }
  EXPECT_EQ(x_events, 10u + 3u);
  EXPECT_EQ(tracks, (std::set<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, 2}}));
  EXPECT_EQ(process_names, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  json aligned = merge_traces(set, {true});
  double min_ts = 1e18;
  for (const json& e : aligned["traceEvents"])
    if (e.contains("ts") && e["pid"] == 1) min_ts = std::min(min_ts, e["ts"].get<double>());
  EXPECT_EQ(min_ts, 0.0);
}

TEST(TraceMerge, BadFilesAreNamedAndTheRestUsed) {
  TempDir dir;
  strata::test::write_file(dir.file("trace-rank0.json"), rank0_trace().dump());
  std::string cut = rank1_trace().dump();
  strata::test::write_file(dir.file("trace-rank1.json"), cut.substr(0, cut.size() * 2 / 3));
  strata::test::write_file(dir.file("trace-rank2.json"), "not json at all");
  strata::test::write_file(dir.file("trace-rank3.json"), R"({"events": []})");
  TraceSet set = load_traces(dir.str());
  ASSERT_EQ(set.ranks.size(), 2u);
  EXPECT_TRUE(set.ranks[1].truncated);
  EXPECT_GE(set.ranks[1].events.size(), 1u);
  ASSERT_EQ(set.problems.size(), 3u);
  EXPECT_NE(set.problems[0].find("trace-rank1.json: cut off"), std::string::npos);
  EXPECT_NE(set.problems[1].find("trace-rank2.json: not valid JSON"), std::string::npos);
  EXPECT_NE(set.problems[2].find("trace-rank3.json: no 'traceEvents' list"), std::string::npos);
  EXPECT_THROW(load_traces(dir.file("missing")), strata::Error);
}

TEST(TraceCli, MergeAndOverlapEndToEnd) {
  TempDir dir;
  strata::test::write_file(dir.file("trace-rank0.json"), rank0_trace().dump());
  strata::test::write_file(dir.file("trace-rank1.json"), rank1_trace().dump());
  auto m = strata::test::run_strata("trace merge " + dir.str() + " -o " + dir.file("merged.json"));
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_NE(m.out.find("merged 2 ranks"), std::string::npos) << m.out;
  json merged = json::parse(strata::test::read_file(dir.file("merged.json")));
  EXPECT_TRUE(merged["traceEvents"].is_array());
  auto o = strata::test::run_strata("trace overlap --json " + dir.str());
  ASSERT_EQ(o.status, 0) << o.out;
  json rep = json::parse(o.out);
  EXPECT_DOUBLE_EQ(rep["steps"][0]["exposed_ms"].get<double>(), 0.04);
  auto text = strata::test::run_strata("trace overlap " + dir.str());
  EXPECT_NE(text.out.find("23.8%"), std::string::npos) << text.out;
  auto none = strata::test::run_strata("trace overlap " + dir.file("nope"));
  EXPECT_EQ(none.status, 1);
  TempDir empty;
  auto e = strata::test::run_strata("trace merge " + empty.str() + " -o " + empty.file("x.json"));
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.out.find("no usable trace"), std::string::npos) << e.out;
}

// Files written by the tracer the trainer uses (core/trace.h), read back by the tools.
TEST(Overlap, ReadsTracesWrittenByTheTracer) {
  TempDir dir;
  for (int rank = 0; rank < 2; ++rank) {
    strata::Tracer t;
    t.enable(rank);
    t.name_thread("compute");
    int64_t base = 5'000'000 + rank * 1000;  // ns
    t.add("step 7", "step", base, 1'000'000);
    t.add("forward L0", "compute", base, 600'000);
    t.add("allreduce bucket 0", "comm", base + 500'000, 300'000);  // 100 us hidden, 200 us exposed
    t.write(dir.file("trace-rank" + std::to_string(rank) + ".json"));
  }
  TraceSet set = load_traces(dir.str());
  ASSERT_EQ(set.ranks.size(), 2u);
  std::map<int, std::vector<Span>> spans;
  for (auto& t : set.ranks) spans[t.rank] = t.spans;
  OverlapReport r = compute_overlap(spans);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].step, 7);
  EXPECT_EQ(r.steps[0].ranks, 2);
  EXPECT_NEAR(r.steps[0].comm_ms, 0.3, 1e-9);
  EXPECT_NEAR(r.steps[0].exposed_ms, 0.2, 1e-9);
  EXPECT_NEAR(r.steps[0].hidden_share, 1.0 / 3.0, 1e-9);
  json merged = merge_traces(set);
  std::set<int> pids;
  for (auto& e : merged["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
}
