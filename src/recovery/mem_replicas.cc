#include "recovery/mem_replicas.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/timer.h"

namespace strata::recovery {

namespace {

constexpr int kHeaderTag = 2, kChunkTag = 3;
constexpr double kPollS = 0.01;        // how often a wait looks at `abandon`

}  // namespace

ReplicaLink::ReplicaLink(comm::ProcessGroup& group, int to, int from, double mbps, std::function<bool()> hurry,
                         std::function<bool()> abandon, std::function<bool(double)> gap)
    : g_(group),
      to_(to),
      from_(from),
      mbps_(mbps),
      hurry_(std::move(hurry)),
      abandon_(std::move(abandon)),
      gap_(std::move(gap)) {}

void ReplicaLink::wait(const comm::WorkPtr& w) {
  while (!w->wait_for(kPollS))
    if (abandon_ && abandon_()) fail("replica exchange abandoned: this rank is stopping");
}

void ReplicaLink::wait_for_gap() {
  if (!gap_ || gap_(0)) return;
  Stopwatch sw;
  for (;;) {
    const double left = max_defer_s_.load() - sw.seconds();
    if (left <= 0) {
      ++deferred_out_;
      break;
    }
    if (gap_(std::min(left, kPollS)) || (hurry_ && hurry_())) break;
    if (abandon_ && abandon_()) fail("replica exchange abandoned: this rank is stopping");
  }
  deferred_s_ += sw.seconds();
}

void ReplicaLink::agree_max(int64_t* v, size_t n) {
  STRATA_CHECK(n <= sizeof agreed_ / sizeof agreed_[0], "replica agreement of ", n, " values");
  std::copy(v, v + n, agreed_);
  wait(g_.all_reduce_async(agreed_, agreed_, n, DType::i64, comm::ReduceOp::max));
  std::copy(agreed_, agreed_ + n, v);
}

ReplicaHeader ReplicaLink::round(const ReplicaHeader& out, const unsigned char* payload,
                                 const std::function<unsigned char*(const ReplicaHeader&)>& where) {
  const double rate = mbps_ * 1e6;  // bytes per second; 0: unpaced
  out_ = out;
  out_.chunk = out_.bytes == 0 ? 0 : rate > 0 ? std::min<uint64_t>(kChunk, out_.bytes) : out_.bytes;
  comm::WorkPtr sent_header = g_.send_async(&out_, sizeof out_, DType::u8, to_, kHeaderTag);
  in_ = ReplicaHeader{};
  comm::WorkPtr got_header = g_.recv_async(&in_, sizeof in_, DType::u8, from_, kHeaderTag);
  wait(sent_header);
  wait(got_header);

  // Chunk i of each direction moves at once (a send waits for its receive to be posted), and
  // both sides wait after it until the bytes so far took bytes / pace: the same schedule on
  // both, so between chunks no operation is pending (the group's progress thread sleeps
  // instead of polling a receive for the whole round, which cost the ranks' cores their
  // compute).
  unsigned char* to = nullptr;
  const uint64_t rbytes = in_.bytes, sbytes = out_.bytes;
  if (rbytes > 0) {
    STRATA_CHECK(in_.chunk > 0 && in_.chunk <= rbytes, "replica of rank ", from_, "'s copy of step ", in_.step,
                 " announces chunks of ", in_.chunk, " bytes for ", rbytes, " bytes");
    to = where(in_);
  }
  const uint64_t nsend = sbytes == 0 ? 0 : (sbytes + out_.chunk - 1) / out_.chunk;
  const uint64_t nrecv = rbytes == 0 ? 0 : (rbytes + in_.chunk - 1) / in_.chunk;
  Stopwatch since;
  for (uint64_t i = 0; i < std::max(nsend, nrecv); ++i) {
    wait_for_gap();
    comm::WorkPtr sent, got;
    if (i < nsend) {
      const uint64_t at = i * out_.chunk;
      sent = g_.send_async(payload + at, size_t(std::min(out_.chunk, sbytes - at)), DType::u8, to_, kChunkTag);
    }
    if (i < nrecv) {
      const uint64_t at = i * in_.chunk;
      got = g_.recv_async(to + at, size_t(std::min(in_.chunk, rbytes - at)), DType::u8, from_, kChunkTag);
    }
    if (sent) wait(sent);
    if (got) wait(got);
    if (rate <= 0 || i + 1 >= nsend) continue;
    const double due = double((i + 1) * out_.chunk) / rate;
    for (double left = due - since.seconds(); left > 0 && !(hurry_ && hurry_()); left = due - since.seconds()) {
      if (abandon_ && abandon_()) fail("replica exchange abandoned: this rank is stopping");
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, kPollS * 5)));
    }
  }
  return in_;
}

}  // namespace strata::recovery
