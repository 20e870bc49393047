// --mem-ckpt-replicas 1, the parts that need no second host: a copy received from a peer is
// committed into a segment of this host under the sender's name and read back checksummed; a
// byte damaged in transit (the sender's checksum disagrees) is not kept, and one flipped
// later fails the checksum like a local copy's; a restart finds the old world's size from
// the segments its host holds (its own and the replicas). The writer's slot never is one the
// replica thread holds; a paced exchange (ranks as threads) takes at least bytes / pace and
// delivers every byte both ways. The exchange itself across
// namespace hosts: MultiHost.LostHostResumesFromReplicasOnTheSurvivingHost (tests/comm).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/mem_slots.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "core/timer.h"
#include "support/temp_dir.h"
#include "recovery/mem_checkpoints.h"
#include "recovery/mem_replicas.h"

namespace strata::test {
namespace {

std::string run_key(const std::string& run_dir) {
  return std::filesystem::weakly_canonical(std::filesystem::absolute(run_dir)).string();
}

ckpt::MemSlotMeta meta_of(const std::string& run, int64_t step, uint64_t bytes) {
  ckpt::MemSlotMeta m;
  m.job = "job-1";
  m.run = run;
  m.layout = 0x1234;
  m.layout_text = "world 2 dp 2 tp 1";
  m.step = step;
  m.bytes = bytes;
  return m;
}

// The sender's committed copy, the bytes "sent" into the receiver's segment named as the
// sender's rank, committed there against the sender's checksum.
TEST(MemReplicas, AReceivedCopyIsCommittedAndReadBackChecksummed) {
  TempDir dir("mem_repl");
  const std::string run = run_key(dir.file("run"));
  const uint64_t n = 64 << 10;
  std::unique_ptr<ckpt::MemSegment> sender = ckpt::MemSegment::create(ckpt::MemSegment::name_for(run, 0), n);
  std::unique_ptr<ckpt::MemSegment> replica = ckpt::MemSegment::create(ckpt::MemSegment::name_for(run, 1), n);
  unsigned char* p = sender->begin_write(1, 7);
  for (uint64_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i * 131 + 7);
  sender->commit(1, meta_of(run, 7, n));
  const uint64_t sent = sender->payload_hash(1);
  ASSERT_NE(sent, 0u);

  unsigned char* to = replica->begin_write(1, 7);
  EXPECT_EQ(replica->inspect(1).state, ckpt::MemSlotState::incomplete) << "in transit: not a copy yet";
  std::memcpy(to, sender->payload(1), n);
  ASSERT_TRUE(replica->commit_received(1, meta_of(run, 7, n), sent));
  const ckpt::MemSlotView v = replica->inspect(1);
  EXPECT_EQ(v.state, ckpt::MemSlotState::complete) << v.problem;
  EXPECT_EQ(v.meta.step, 7);
  EXPECT_EQ(v.meta.job, "job-1");
  EXPECT_EQ(v.meta.run, run);
  EXPECT_EQ(std::memcmp(replica->payload(1), sender->payload(1), n), 0);
  EXPECT_EQ(replica->payload_hash(1), sent);

  // A byte flipped later, in the replica's slot: its checksum fails, as a local copy's does.
  replica->flip_byte(1, n / 3);
  const ckpt::MemSlotView bad = replica->inspect(1);
  EXPECT_EQ(bad.state, ckpt::MemSlotState::corrupt);
  EXPECT_NE(bad.problem.find("payload checksum"), std::string::npos) << bad.problem;

  // A byte damaged in transit: the received bytes disagree with the sender's checksum, so the
  // slot is not kept (cleared, not left complete under a wrong checksum).
  to = replica->begin_write(0, 8);
  std::memcpy(to, sender->payload(1), n);
  to[n / 2] ^= 0x01;
  EXPECT_FALSE(replica->commit_received(0, meta_of(run, 8, n), sent));
  EXPECT_EQ(replica->inspect(0).state, ckpt::MemSlotState::empty);
  EXPECT_EQ(replica->payload_hash(0), 0u);
  ckpt::MemSegment::remove(sender->name());
  ckpt::MemSegment::remove(replica->name());
}

// The world that failed, as a restart on the surviving host sees it: one past the highest
// rank whose segment (own or replica) this host holds for the run; other names do not count.
TEST(MemReplicas, TheOldWorldIsFoundFromTheSegmentsOnThisHost) {
  TempDir dir("mem_repl_world");
  const std::string run_dir = dir.file("run");
  const std::string run = run_key(run_dir);
  EXPECT_EQ(recovery::mem_segment_ranks(run_dir), 0);
  const std::string r0 = ckpt::MemSegment::name_for(run, 0), r3 = ckpt::MemSegment::name_for(run, 3);
  std::unique_ptr<ckpt::MemSegment> a = ckpt::MemSegment::create(r0, 4096);
  EXPECT_EQ(recovery::mem_segment_ranks(run_dir), 1);
  std::unique_ptr<ckpt::MemSegment> b = ckpt::MemSegment::create(r3, 4096);
  std::unique_ptr<ckpt::MemSegment> other =
      ckpt::MemSegment::create(ckpt::MemSegment::name_for(run + "-other", 9), 4096);
  EXPECT_EQ(recovery::mem_segment_ranks(run_dir), 4);
  ckpt::MemSegment::remove(r3);
  EXPECT_EQ(recovery::mem_segment_ranks(run_dir), 1);
  ckpt::MemSegment::remove(r0);
  ckpt::MemSegment::remove(other->name());
  EXPECT_EQ(recovery::mem_segment_ranks(run_dir), 0);
}

// Every state of 2 and 3 slots (steps -1 = empty or in writing, 1..3) and every set of slots
// the replica thread holds: the slot chosen is never a held one; it is the oldest of those that
// do not hold the newest step, and the newest's own only when every other slot is held.
TEST(MemReplicas, TheWriterNeverWritesAHeldSlot) {
  int cases = 0;
  for (int slots = 2; slots <= ckpt::kMaxMemSlots; ++slots)
    for (int code = 0; code < 64; ++code) {
      int64_t steps[ckpt::kMaxMemSlots] = {-1, -1, -1};
      int c = code;
      for (int s = 0; s < slots; ++s, c /= 4) steps[s] = c % 4 == 0 ? -1 : c % 4;
      int newest = -1;
      for (int s = 0; s < slots; ++s)
        if (steps[s] >= 0 && (newest < 0 || steps[s] > steps[newest])) newest = s;
      for (unsigned held = 0; held < (1u << slots); ++held) {
        const int w = recovery::mem_slot_to_write(steps, slots, held);
        ++cases;
        const std::string what = cat(slots, " slots, steps ", steps[0], " ", steps[1], " ", steps[2], ", held mask ", held);
        int free = 0;
        for (int s = 0; s < slots; ++s) free += !(held >> s & 1u);
        if (free == 0) {
          EXPECT_EQ(w, -1) << what;
          continue;
        }
        ASSERT_GE(w, 0) << what << ": a slot is free";
        EXPECT_FALSE(held >> w & 1u) << what << ": wrote a held slot";
        if (w == newest) {
          for (int s = 0; s < slots; ++s) {
            if (s != newest) {
              EXPECT_TRUE(held >> s & 1u) << what << ": overwrote the newest with slot " << s << " free";
            }
          }
        } else {
          for (int s = 0; s < slots; ++s) {
            if (s != newest && !(held >> s & 1u)) {
              EXPECT_LE(steps[w], steps[s]) << what << ": not the oldest";
            }
          }
        }
      }
    }
  EXPECT_GT(cases, 300);
}

// Two ranks as threads exchange 3 MiB each way at 6 MB/s: no faster than bytes / pace (loosely:
// the pace only ever waits), and every byte arrives; then an unpaced round (one message each)
// and an agreement on the maximum.
TEST(MemReplicas, APacedExchangeTakesAtLeastBytesOverThePace) {
  const uint64_t n = 3 << 20;
  for (const double mbps : {6.0, 0.0}) {
    std::vector<std::vector<unsigned char>> sent(2, std::vector<unsigned char>(n)), got(2, std::vector<unsigned char>(n));
    std::vector<double> seconds(2);
    std::vector<recovery::ReplicaHeader> heads(2);
    std::vector<int64_t> agreed(2);
    comm::run_threads(2, [&](comm::ProcessGroup& g) {
      const int r = g.rank();
      for (uint64_t i = 0; i < n; ++i) sent[size_t(r)][i] = static_cast<unsigned char>(i * 7 + uint64_t(r) * 13);
      recovery::ReplicaLink link(g, 1 - r, 1 - r, mbps, nullptr, nullptr);
      recovery::ReplicaHeader out;
      out.step = 10 + r;
      out.bytes = n;
      out.payload_hash = 99;
      Stopwatch sw;
      heads[size_t(r)] = link.round(out, sent[size_t(r)].data(), [&](const recovery::ReplicaHeader& h) {
        EXPECT_EQ(h.bytes, n);
        return got[size_t(r)].data();
      });
      seconds[size_t(r)] = sw.seconds();
      int64_t v[2] = {r == 0 ? 5 : 3, r};
      link.agree_max(v, 2);
      agreed[size_t(r)] = v[0] * 10 + v[1];
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(heads[size_t(r)].step, 10 + (1 - r)) << mbps;
      EXPECT_EQ(heads[size_t(r)].payload_hash, 99u);
      EXPECT_EQ(heads[size_t(r)].chunk, mbps > 0 ? recovery::ReplicaLink::kChunk : n) << mbps;
      EXPECT_TRUE(got[size_t(r)] == sent[size_t(1 - r)]) << "rank " << r << " at " << mbps << " MB/s";
      EXPECT_EQ(agreed[size_t(r)], 51);
      if (mbps > 0) {
        EXPECT_GE(seconds[size_t(r)], 0.9 * double(n) / (mbps * 1e6)) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace strata::test
