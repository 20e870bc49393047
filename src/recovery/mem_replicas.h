// The exchange of in-memory copies between hosts (--mem-ckpt-replicas 1,
// recovery/mem_checkpoints.h), on a process group of its own: each rank sends its copies to
// `to` (the same local rank on the next host) and receives `from`'s (the previous host's).
//
// Terms. Message: one header (step, bytes, payload checksum, layout fingerprint, chunk size),
// then, when bytes > 0, the payload cut into chunks of `chunk` bytes (the last one shorter),
// one point-to-point message each. Round: this rank sends one message and receives one; the
// messages of each direction are a stream the two sides read in the same order. Agreement: an
// all-reduce (max) over the whole group between rounds, so every rank does the same rounds
// (recovery/mem_checkpoints.cc decides what they carry).
// Pace: with mbps > 0 the sender cuts the payload into kChunk-byte chunks and sleeps after each
// until the bytes sent so far took at least bytes / (mbps * 10^6) seconds, so the training's
// own collectives find the link free between chunks; mbps 0 sends the payload as one message,
// at whatever rate the link gives. The receiver posts chunk i when it sends its own chunk i
// (both sides keep the same schedule), so no receive waits posted between chunks: a pending
// operation keeps the group's progress thread polling, which took the ranks' cores.
// Gaps: with `gap` (waits for a moment when none of the training's collectives or sends is in
// flight on this rank: comm/process_group.h's wait_foreground_idle), each chunk also waits for
// one, at most half a training step (set_step_s) and never more than kMaxDeferS: the replicas
// take the link while the training computes (its forward, its optimizer step) rather than
// while it reduces gradients, which they slowed as much as their share of the link; and a
// replica of millisecond steps stays a few steps old.
// Cost: per round, one header each way and the payload each way; nothing is copied (chunks are
// sent from and received into the segments' slots).
// Threading: one thread per link calls round(); the group is used by no other thread.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>

#include "comm/process_group.h"

namespace strata::recovery {

struct ReplicaHeader {
  int64_t step = -1;
  uint64_t bytes = 0;  // 0: no payload follows (an end mark, or a commit that failed)
  uint64_t payload_hash = 0;
  uint64_t layout = 0;
  uint64_t chunk = 0;  // payload bytes per message
};

class ReplicaLink {
 public:
  static constexpr uint64_t kChunk = 256 << 10;  // paced sends: small enough to interleave
  static constexpr double kMaxDeferS = 0.25;      // the longest a chunk waits for a gap

  // Polled while sending and waiting: `hurry` true ends the pacing (the rest goes at once: the
  // run is ending); `abandon` true makes round() throw at once (the rank is failing and stops
  // waiting for a peer that may never answer); its operations may then still run, so the
  // buffers they use (this object, the payloads) must outlive them.
  // `gap(s)` (may be null) sleeps until the training does not communicate, s seconds at most,
  // and says whether it found that moment: each chunk waits for one.
  ReplicaLink(comm::ProcessGroup& group, int to, int from, double mbps, std::function<bool()> hurry,
              std::function<bool()> abandon, std::function<bool(double)> gap = nullptr);

  // One round: sends `out` (with `payload` when out.bytes > 0) and receives one message, its
  // payload into where(header) (which throws when the header cannot be taken). Returns the
  // header received.
  ReplicaHeader round(const ReplicaHeader& out, const unsigned char* payload,
                      const std::function<unsigned char*(const ReplicaHeader&)>& where);
  // Collective over the group: `v` becomes the element-wise maximum over its ranks.
  void agree_max(int64_t* v, size_t n);

  double mbps() const { return mbps_; }
  // The training's step time (any thread): a chunk waits for a gap half of it at most.
  void set_step_s(double s) { max_defer_s_.store(std::min(kMaxDeferS, s / 2)); }
  // Seconds the chunks so far waited for a gap in the training's communication, and how many
  // waited as long as they may.
  double deferred_s() const { return deferred_s_; }
  int64_t deferred_out() const { return deferred_out_; }

 private:
  // Waits for `w`: throws its error, or one line when `abandon` says so first.
  void wait(const comm::WorkPtr& w);
  // Waits for a gap, max_defer_s_ at most (none when hurried).
  void wait_for_gap();

  comm::ProcessGroup& g_;
  int to_, from_;
  double mbps_;
  std::function<bool()> hurry_, abandon_;
  std::function<bool(double)> gap_;
  std::atomic<double> max_defer_s_{kMaxDeferS};  // until set_step_s
  double deferred_s_ = 0;
  int64_t deferred_out_ = 0;
  ReplicaHeader out_, in_;  // the headers in flight (members: they may outlive an abandoned round)
  int64_t agreed_[4] = {};
};

}  // namespace strata::recovery
