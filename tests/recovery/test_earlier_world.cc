// EarlierWorld (recovery/earlier_world.h) with ranks as threads, each given a host of its own
// (on_this_host): a 3-rank world on hosts 0-2, with replicas (old rank q's copy also on host
// q+1), loses host 1; the new world of 2 ranks on hosts 0 and 2 sees rank 0's copy and rank
// 2's replica on host 0, rank 2's own and rank 1's replica on host 2. The ranks agree on the
// steps and holders, load each element from the right old rank (ZeRO-1-like optimizer shards
// of psi = 10, which 3 and 2 ranks do not divide), and only bytes a rank cannot read on its
// own host move; a corrupt copy with no second copy drops its step; an old rank on no host is
// the same one line on every rank; a copy another world of the job wrote, of a step the
// failed world also holds, is passed over.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/mem_slots.h"
#include "ckpt/ranges.h"
#include "comm/process_group.h"
#include "support/temp_dir.h"
#include "recovery/earlier_world.h"

namespace strata::test {
namespace {

constexpr int kOld = 3;
constexpr int64_t kPsi = 10;

// An element's value in the copies of `step`: the same in every old rank that holds it.
float value(const std::string& state, int64_t step, int64_t i) {
  return float(step * 1000 + (state == "m" ? 500 : 0) + i);
}

// Old rank q's copy of `step` in `slot`, in the payload format of recovery/mem_checkpoints.cc:
// the length-prefixed state record, then the shards where mem_shard_records places them.
// zero1: "m" sharded over the old ranks; else every copy holds all of it (ZeRO 0). `world`:
// the world that wrote it (w1 is the one that failed).
void write_copy(ckpt::MemSegment& seg, const std::string& run, int q, int slot, int64_t step, bool zero1,
                const std::string& world = "w1") {
  const ckpt::Range m = zero1 ? ckpt::zero_shard(kPsi, q, kOld) : ckpt::Range{0, kPsi};
  const nlohmann::json record = {{"step", step},
                                 {"world", world},
                                 {"shards", {{"params", "f32", 0, kPsi}, {"m", "f32", m.begin, m.end}}},
                                 {"tokens_seen", step * 64},
                                 {"loader_epoch", 0},
                                 {"loader_consumed", step * 4},
                                 {"loader_samples", 100},
                                 {"loader_fingerprint", 7}};
  unsigned char* p = seg.begin_write(slot, step);
  const std::string text = record.dump();
  const uint64_t len = text.size();
  std::memcpy(p, &len, sizeof len);
  std::memcpy(p + sizeof len, text.data(), len);
  uint64_t end = 0;
  for (const recovery::MemShardRecord& s : recovery::mem_shard_records(record, "test")) {
    for (int64_t i = s.begin; i < s.end; ++i) {
      const float v = value(s.name, step, i);
      std::memcpy(p + s.offset + uint64_t(i - s.begin) * 4, &v, 4);
    }
    end = s.offset + uint64_t(s.end - s.begin) * 4;
  }
  ckpt::MemSlotMeta meta;
  meta.job = "job-1";
  meta.run = run;
  meta.step = step;
  meta.bytes = end;
  seg.commit(slot, meta);
}

struct OldWorld {
  TempDir dir{"earlier_world"};
  std::string run_dir = dir.file("run");
  std::vector<std::unique_ptr<ckpt::MemSegment>> segments;
  // slots[q]: old rank q's segment has 2 slots (steps 5 and 6) or 3 (steps 7, 5, 6: the third
  // copy written into slot 0).
  explicit OldWorld(bool zero1, std::vector<int> slots = {2, 2, 2}) {
    std::filesystem::create_directories(run_dir);
    const std::string run = recovery::mem_run_key(run_dir);
    for (int q = 0; q < kOld; ++q) {
      const int n = slots[size_t(q)];
      segments.push_back(ckpt::MemSegment::create(ckpt::MemSegment::name_for(run, q), 64 << 10, n));
      write_copy(*segments.back(), run, q, n - 2, 5, zero1);
      write_copy(*segments.back(), run, q, n - 1, 6, zero1);
      if (n == 3) write_copy(*segments.back(), run, q, 0, 7, zero1);
    }
  }
  ~OldWorld() {
    for (const auto& s : segments) ckpt::MemSegment::remove(s->name());
  }
};

// New rank 0 on host 0 (old rank 0, and 2's replica), new rank 1 on host 2 (old rank 2, and
// 1's replica).
bool on_host(int new_rank, int q) { return new_rank == 0 ? q != 1 : q != 0; }

struct Loaded {
  int64_t step = -1;
  std::vector<float> params, m;
  uint64_t received = 0;
  int64_t tokens = 0;
};

// worlds[r]: the id of the world that failed as new rank r knows it ("": none; any world's
// copies will do when no rank knows one).
std::vector<Loaded> load_in_new_world(const OldWorld& w, std::vector<std::string>* lines = nullptr,
                                      const std::vector<std::string>& worlds = {"", ""}) {
  std::vector<Loaded> out(2);
  std::mutex mu;
  comm::run_threads(2, [&](comm::ProcessGroup& g) {
    const int r = g.rank();
    recovery::EarlierWorld old(w.run_dir, "job-1", worlds[size_t(r)], kOld, &g, [&](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      if (lines) lines->push_back(line);
    }, [r](int q) { return on_host(r, q); });
    Loaded& l = out[size_t(r)];
    for (int64_t step : old.common_steps())
      if (old.verify(step)) {
        l.step = step;
        break;
      }
    if (l.step < 0) return;
    // This world's ZeRO-1 shards of m: 5 elements each; the params whole.
    const ckpt::Range m = ckpt::zero_shard(kPsi, r, 2);
    l.params.assign(size_t(kPsi), -1.0f);
    l.m.assign(size_t(m.size()), -1.0f);
    std::vector<parallel::StateShard> shards(2);
    shards[0].name = "params", shards[0].begin = 0, shards[0].end = kPsi, shards[0].data = l.params.data();
    shards[1].name = "m", shards[1].begin = m.begin, shards[1].end = m.end, shards[1].data = l.m.data();
    const recovery::MemCopy c = old.load(l.step, kPsi, shards);
    l.tokens = c.tokens_seen;
    l.received = old.received_bytes();
  });
  return out;
}

TEST(EarlierWorld, CopiesSpreadOverHostsAreLoadedAndReshardedWhereTheyLie) {
  OldWorld w(true);
  const std::vector<Loaded> got = load_in_new_world(w);
  for (int r = 0; r < 2; ++r) {
    const Loaded& l = got[size_t(r)];
    ASSERT_EQ(l.step, 6) << "new rank " << r;
    EXPECT_EQ(l.tokens, 6 * 64);
    for (int64_t i = 0; i < kPsi; ++i) EXPECT_EQ(l.params[size_t(i)], value("params", 6, i)) << r << " " << i;
    const ckpt::Range m = ckpt::zero_shard(kPsi, r, 2);
    for (int64_t i = m.begin; i < m.end; ++i) EXPECT_EQ(l.m[size_t(i - m.begin)], value("m", 6, i)) << r << " " << i;
  }
  // New rank 0 needs m[4, 5) of old rank 1, which only host 2 holds: that one float moves to
  // it. New rank 1 reads m[5, 10) from old ranks 1 and 2 on its own host.
  EXPECT_EQ(got[0].received, 4u);
  EXPECT_EQ(got[1].received, 0u);
}

TEST(EarlierWorld, AtZeroZeroNothingMoves) {
  OldWorld w(false);
  const std::vector<Loaded> got = load_in_new_world(w);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[size_t(r)].step, 6);
    EXPECT_EQ(got[size_t(r)].received, 0u) << "new rank " << r << ": its own host's copy covers everything";
    EXPECT_EQ(got[size_t(r)].m.back(), value("m", 6, ckpt::zero_shard(kPsi, r, 2).end - 1));
  }
}

TEST(EarlierWorld, ACorruptCopyWithoutASecondOneDropsItsStep) {
  OldWorld w(true);
  w.segments[1]->flip_byte(1, 16400);  // a parameter byte of old rank 1's copy of step 6 (only on host 2)
  std::vector<std::string> lines;
  const std::vector<Loaded> got = load_in_new_world(w, &lines);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[size_t(r)].step, 5) << "new rank " << r;
    EXPECT_EQ(got[size_t(r)].m.front(), value("m", 5, ckpt::zero_shard(kPsi, r, 2).begin));
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("rank 1's in-memory copy of step 6"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("failed its checksum"), std::string::npos) << lines[0];
}

// Old ranks with 3-slot segments (live recovery) beside one with 2 (an older binary's, or
// another setting): the common steps are those every old rank holds in any of its slots.
TEST(EarlierWorld, TwoAndThreeSlotSegmentsAgreeOnTheirCommonSteps) {
  {
    OldWorld w(true, {3, 2, 3});
    const std::vector<Loaded> got = load_in_new_world(w);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(got[size_t(r)].step, 6) << "new rank " << r << ": step 7 lies in ranks 0 and 2's third slot only";
      EXPECT_EQ(got[size_t(r)].params.back(), value("params", 6, kPsi - 1));
    }
  }
  OldWorld w(true, {3, 3, 3});
  const std::vector<Loaded> got = load_in_new_world(w);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[size_t(r)].step, 7) << "new rank " << r;
    const ckpt::Range m = ckpt::zero_shard(kPsi, r, 2);
    for (int64_t i = m.begin; i < m.end; ++i) EXPECT_EQ(got[size_t(r)].m[size_t(i - m.begin)], value("m", 7, i)) << r;
  }
}

// Live recovery's join on a host where no rank of the smaller world ran: that host still
// holds the segments of the world before it, of the same names and, one step after the
// re-formation, of the same step (in its own layout). Only the failed world's copies count,
// though only the survivors (new rank 0 here) know which world that was.
TEST(EarlierWorld, ACopyAnotherWorldWroteIsPassedOver) {
  OldWorld w(true, {3, 3, 3});
  for (int q = 0; q < kOld; ++q) write_copy(*w.segments[size_t(q)], recovery::mem_run_key(w.run_dir), q, 0, 7, true, "w0");
  std::vector<std::string> lines;
  const std::vector<Loaded> got = load_in_new_world(w, &lines, {"w1", ""});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[size_t(r)].step, 6) << "new rank " << r << ": step 7 is another world's";
    EXPECT_EQ(got[size_t(r)].m.front(), value("m", 6, ckpt::zero_shard(kPsi, r, 2).begin));
  }
  ASSERT_EQ(lines.size(), 3u);  // one per old rank's file (old rank 2's is on both hosts here)
  for (const std::string& line : lines) {
    EXPECT_NE(line.find("'s in-memory copy of step 7 (slot 0 of /dev/shm"), std::string::npos) << line;
    EXPECT_NE(line.find("was written by another world of this job (w0), not the 3-rank world that failed; "
                        "ignored"), std::string::npos) << line;
  }
  // No rank knows the world that failed (an --elastic restart): every copy counts.
  EXPECT_EQ(load_in_new_world(w).front().step, 7);
}

TEST(EarlierWorld, AnOldRankOnNoHostIsTheSameLineOnEveryRank) {
  OldWorld w(true);
  std::vector<std::string> errors(2);
  comm::run_threads(2, [&](comm::ProcessGroup& g) {
    const int r = g.rank();
    try {
      recovery::EarlierWorld old(w.run_dir, "job-1", "", kOld, &g, [](const std::string&) {},
                              [](int q) { return q != 1; });  // old rank 1's host and replica lost
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 1 of the 3-rank world that failed left no in-memory copies on this "
                           "world's hosts"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[0], errors[1]);
}

}  // namespace
}  // namespace strata::test
