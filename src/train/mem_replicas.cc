#include "train/mem_replicas.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>

#include "core/error.h"
#include "core/timer.h"

namespace strata::train {

namespace {

constexpr int kHeaderTag = 2, kChunkTag = 3;
constexpr size_t kRecvWindow = 4;     // chunk receives posted ahead of the sender
constexpr double kPollS = 0.002;      // how often a wait looks at `abandon`

}  // namespace

ReplicaLink::ReplicaLink(comm::ProcessGroup& group, int to, int from, double mbps, std::function<bool()> hurry,
                         std::function<bool()> abandon)
    : g_(group), to_(to), from_(from), mbps_(mbps), hurry_(std::move(hurry)), abandon_(std::move(abandon)) {}

void ReplicaLink::wait(const comm::WorkPtr& w) {
  for (;;) {
    try {
      w->wait(kPollS);
      return;
    } catch (const TimeoutError&) {
      // This wait ran out, or the operation failed with its own timeout: the latter rethrows.
      if (w->test()) return w->wait();
    }
    if (abandon_ && abandon_()) fail("replica exchange abandoned: this rank is stopping");
  }
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

  // The receives run a few chunks ahead of the peer's sender; the sends are paced here.
  unsigned char* to = nullptr;
  const uint64_t rbytes = in_.bytes;
  if (rbytes > 0) {
    STRATA_CHECK(in_.chunk > 0 && in_.chunk <= rbytes, "replica of rank ", from_, "'s copy of step ", in_.step,
                 " announces chunks of ", in_.chunk, " bytes for ", rbytes, " bytes");
    to = where(in_);
  }
  std::deque<comm::WorkPtr> pending;
  uint64_t posted = 0;
  auto top_up = [&] {
    while (!pending.empty() && pending.front()->test()) {
      pending.front()->wait();
      pending.pop_front();
    }
    while (pending.size() < kRecvWindow && posted < rbytes) {
      const uint64_t n = std::min(in_.chunk, rbytes - posted);
      pending.push_back(g_.recv_async(to + posted, size_t(n), DType::u8, from_, kChunkTag));
      posted += n;
    }
  };
  top_up();
  const uint64_t sbytes = out_.bytes;
  Stopwatch since;
  for (uint64_t done = 0; done < sbytes;) {
    const uint64_t n = std::min(out_.chunk, sbytes - done);
    comm::WorkPtr w = g_.send_async(payload + done, size_t(n), DType::u8, to_, kChunkTag);
    while (!w->test()) {  // the receives stay topped up meanwhile
      top_up();
      std::this_thread::sleep_for(std::chrono::duration<double>(kPollS / 4));
      if (abandon_ && abandon_()) fail("replica exchange abandoned: this rank is stopping");
    }
    w->wait();
    done += n;
    if (rate <= 0 || (hurry_ && hurry_())) continue;
    // Paced: the bytes sent so far may not have taken less than bytes / rate.
    for (double left = double(done) / rate - since.seconds(); left > 0; left = double(done) / rate - since.seconds()) {
      top_up();
      if (hurry_ && hurry_()) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, kPollS)));
    }
  }
  while (posted < rbytes || !pending.empty()) {
    top_up();
    if (!pending.empty()) wait(pending.front());
  }
  return in_;
}

}  // namespace strata::train
