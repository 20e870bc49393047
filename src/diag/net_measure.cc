// The bandwidth doctor's measurements over a process group (terms and cost in net_doctor.h).
#include <algorithm>
#include <cmath>
#include <thread>

#include "comm/benchmark.h"
#include "comm/process_group.h"
#include "core/error.h"
#include "core/timer.h"
#include "diag/net_doctor.h"

namespace strata::diag {

namespace {

using comm::ProcessGroup;

// Waits until `deadline_ns`: sleeps most of a long wait, spins the rest, so short
// throttle delays (microseconds) are not rounded up to the scheduler's tick.
void wait_until(int64_t deadline_ns) {
  int64_t left = deadline_ns - now_ns();
  if (left > 200'000) std::this_thread::sleep_for(std::chrono::nanoseconds(left - 100'000));
  while (now_ns() < deadline_ns) {
  }
}

// Ends a timed region that began at t0: with throttle factor f < 1, stretches it to
// elapsed / f. Returns the (stretched) elapsed ns.
int64_t end_timed(int64_t t0, double f) {
  int64_t elapsed = now_ns() - t0;
  if (f < 1) {
    wait_until(t0 + int64_t(double(elapsed) / f));
    elapsed = now_ns() - t0;
  }
  return elapsed;
}

// Best round trip of an 8-byte message over `iters` tries, in ns (initiator side; 0 on the
// responder). One untimed round trip first.
int64_t pair_round_trip(ProcessGroup& pg, int peer, bool initiator, int iters, double f) {
  uint8_t msg[8] = {};
  int64_t best = INT64_MAX;
  for (int k = 0; k < iters + 1; ++k) {
    int64_t t0 = now_ns();
    if (initiator) {
      pg.send(msg, sizeof msg, DType::u8, peer);
      pg.recv(msg, sizeof msg, DType::u8, peer);
      int64_t dt = end_timed(t0, f);
      if (k > 0) best = std::min(best, dt);
    } else {
      pg.recv(msg, sizeof msg, DType::u8, peer);
      pg.send(msg, sizeof msg, DType::u8, peer);
    }
  }
  return initiator ? best : 0;
}

// One-way bandwidth in GB/s of one repetition: `messages` sends of `bytes`, then a 1-byte ack.
double pair_bandwidth(ProcessGroup& pg, int peer, bool initiator, const NetConfig& cfg, std::vector<uint8_t>& buf,
                      double f) {
  uint8_t ack = 0;
  int64_t t0 = now_ns();
  if (!initiator) {
    for (int m = 0; m < cfg.p2p_messages; ++m) pg.recv(buf.data(), buf.size(), DType::u8, peer);
    pg.send(&ack, 1, DType::u8, peer);
    return 0;
  }
  for (int m = 0; m < cfg.p2p_messages; ++m) pg.send(buf.data(), buf.size(), DType::u8, peer);
  pg.recv(&ack, 1, DType::u8, peer);
  return double(buf.size()) * cfg.p2p_messages / double(end_timed(t0, f));  // bytes/ns = GB/s
}

// Buffers and the call of one collective at the configured size (nccl-tests sizes).
struct CollectiveRun {
  comm::BenchOp op;
  size_t block = 0, total = 0;  // elements: per-rank block of the sharded ops; whole buffer
  std::vector<float> send, recv;
  double best_ns = INFINITY;

  CollectiveRun(comm::BenchOp o, size_t bytes, int n) : op(o) {
    size_t elems = std::max<size_t>(bytes / sizeof(float), size_t(n));
    block = elems / size_t(n);
    total = op == comm::BenchOp::allreduce ? elems : block * size_t(n);
    send.assign(total, 1.0f);
    recv.assign(total, 0.0f);
  }
  void run(ProcessGroup& pg) {
    switch (op) {
      case comm::BenchOp::allreduce: pg.all_reduce(send.data(), recv.data(), total, DType::f32, comm::ReduceOp::sum); break;
      case comm::BenchOp::allgather: pg.all_gather(send.data(), recv.data(), block, DType::f32); break;
      case comm::BenchOp::reducescatter:
        pg.reduce_scatter(send.data(), recv.data(), block, DType::f32, comm::ReduceOp::sum);
        break;
      case comm::BenchOp::alltoall: pg.all_to_all(send.data(), recv.data(), block, DType::f32); break;
      default: fail("the network doctor does not time ", comm::bench_op_name(op));
    }
  }
};

// Times every collective, iterations interleaved across ops (noise spreads over all of
// them); each iteration counts at the slowest rank's time, and the best iteration is kept.
std::vector<CollectiveResult> time_collectives(ProcessGroup& pg, const NetConfig& cfg) {
  int n = pg.size();
  std::vector<CollectiveRun> runs;
  for (comm::BenchOp op : {comm::BenchOp::allreduce, comm::BenchOp::allgather, comm::BenchOp::reducescatter,
                           comm::BenchOp::alltoall})
    runs.emplace_back(op, cfg.coll_bytes, n);
  double f = slowest_factor(cfg.throttle, n);
  for (int it = 0; it < cfg.coll_warmup + cfg.coll_iters; ++it)
    for (CollectiveRun& c : runs) {
      pg.barrier();
      int64_t t0 = now_ns();
      c.run(pg);
      double dt = double(end_timed(t0, f));
      pg.all_reduce(&dt, &dt, 1, DType::f64, comm::ReduceOp::max);
      if (it >= cfg.coll_warmup) c.best_ns = std::min(c.best_ns, dt);
    }
  std::vector<CollectiveResult> out;
  for (const CollectiveRun& c : runs) {
    CollectiveResult r;
    r.op = comm::bench_op_name(c.op);
    r.bytes = c.total * sizeof(float);
    r.time_us = c.best_ns * 1e-3;
    r.algbw_gbps = double(r.bytes) / c.best_ns;
    r.busbw_gbps = r.algbw_gbps * comm::bus_factor(c.op, n);
    out.push_back(r);
  }
  return out;
}

}  // namespace

NetResult measure_net(ProcessGroup& pg, const NetConfig& cfg) {
  int n = pg.size(), me = pg.rank();
  STRATA_CHECK(n >= 2, "the network doctor needs at least 2 ranks, got ", n);
  STRATA_CHECK(cfg.p2p_bytes >= 1 && cfg.reps >= 1 && cfg.latency_iters >= 1 && cfg.coll_iters >= 1,
               "network doctor: sizes and repetition counts must be positive");
  NetResult r;
  r.world = n;
  r.backend = comm::backend_name(pg.backend());
  r.p2p_bytes = cfg.p2p_bytes;
  std::vector<double> bw(size_t(n) * n, 0), lat(size_t(n) * n, 0);
  std::vector<uint8_t> buf(cfg.p2p_bytes, 0x5a);
  // Pairs one at a time (the lower rank times, the higher answers, the rest wait), in
  // rounds: each round visits every pair once, so a burst of noise from other work on the
  // machine hits one repetition of several pairs rather than every repetition of one pair.
  // Round 0 is a warm-up.
  int trips = std::max(1, cfg.latency_iters / cfg.reps);
  for (int round = 0; round <= cfg.reps; ++round)
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        pg.barrier();
        if (me != i && me != j) continue;
        bool initiator = me == i;
        int peer = initiator ? j : i;
        double f = throttle_factor(cfg.throttle, i, j);
        int64_t rtt = pair_round_trip(pg, peer, initiator, trips, f);
        double gbps = pair_bandwidth(pg, peer, initiator, cfg, buf, f);
        if (!initiator || round == 0) continue;
        double& l = lat[size_t(i) * n + j];
        l = l == 0 ? double(rtt) * 1e-3 / 2 : std::min(l, double(rtt) * 1e-3 / 2);
        bw[size_t(i) * n + j] = std::max(bw[size_t(i) * n + j], gbps);
      }
  pg.all_reduce(bw.data(), bw.data(), bw.size(), DType::f64, comm::ReduceOp::sum);
  pg.all_reduce(lat.data(), lat.data(), lat.size(), DType::f64, comm::ReduceOp::sum);
  r.bw_gbps.assign(n, std::vector<double>(n, 0));
  r.latency_us.assign(n, std::vector<double>(n, 0));
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      r.bw_gbps[i][j] = r.bw_gbps[j][i] = bw[size_t(i) * n + j];
      r.latency_us[i][j] = r.latency_us[j][i] = lat[size_t(i) * n + j];
    }
  r.collectives = time_collectives(pg, cfg);
  return r;
}

}  // namespace strata::diag
