// The bandwidth doctor: point-to-point bandwidth and latency between every pair of ranks
// (a matrix) and the bus bandwidth of each collective, with the pairs and collectives that
// fall below a threshold named.
//
// Terms. Pair (i, j) is measured alone (the other ranks wait at a barrier), so links do not
// share the transport, in rounds that visit every pair once (noise then spreads over pairs
// instead of spoiling one): latency = half the best round trip of a small message;
// bandwidth = bytes moved one way / time of the best repetition (a stream of messages then
// a 1-byte ack). Collectives follow nccl-tests: bytes = the op's whole buffer (all-reduce: the vector;
// all-gather: the gathered output; reduce-scatter: the input; all-to-all: the send buffer),
// time = slowest rank's time of the best iteration, algbw = bytes / time, busbw = algbw x
// (2(n-1)/n all-reduce, (n-1)/n the others). "Best" of several repetitions, because noise
// on a shared machine only ever slows a measurement down: a link slow at its best is slow.
// Flags: a pair whose bandwidth is below threshold x the median pair (or x --expect-busbw),
// or whose latency is above the median pair / threshold; a collective whose busbw is below
// threshold x the median collective (or x --expect-busbw). Relative flags need >= 3 ranks
// (with 2 there is one pair, which is its own median).
//
// Throttle (tests, demos): STRATA_THROTTLE_LINK="0-2:0.25,1-3:0.5" makes the doctor's own
// measurements of link 0<->2 four times slower by sleeping, inside the timed region, for
// (1/factor - 1) x the time the transfer took. A collective involves every link of its group,
// and its speed is bounded by the slowest, so it is slowed by the smallest factor among its
// members' links. Only the doctor's measurement path sleeps; the transport is untouched.
//
// Cost: n(n-1)/2 pairs x rounds x (round trips + messages x bytes); 4 collectives x iters.
#pragma once
#include <string>
#include <vector>

#include "nlohmann/json_fwd.hpp"

namespace strata::comm {
class ProcessGroup;
}

namespace strata::diag {

struct LinkThrottle {
  int a = 0, b = 0;
  double factor = 1;  // (0, 1]: 0.25 = four times slower
};

// "0-2:0.25,1-3:0.5" -> throttles. Throws Error naming the bad entry. world > 0 also checks
// the ranks exist.
std::vector<LinkThrottle> parse_link_throttle(const std::string& text, int world = 0);
// From STRATA_THROTTLE_LINK (empty when unset).
std::vector<LinkThrottle> link_throttle_from_env(int world = 0);
double throttle_factor(const std::vector<LinkThrottle>& t, int a, int b);  // 1 when none
// The smallest factor among links whose both ends are < n (collective over ranks 0..n-1).
double slowest_factor(const std::vector<LinkThrottle>& t, int n);

struct NetConfig {
  size_t p2p_bytes = size_t(4) << 20;   // per message of the bandwidth test
  int p2p_messages = 4;                 // messages per repetition
  int reps = 10;                        // rounds over all pairs; the best repetition counts
  int latency_iters = 100;              // small round trips per pair over all rounds (best kept)
  size_t coll_bytes = size_t(16) << 20;  // collective buffer size (nccl-tests convention)
  int coll_iters = 8, coll_warmup = 2;
  std::vector<LinkThrottle> throttle;
};

struct CollectiveResult {
  std::string op;  // "allreduce", "allgather", "reducescatter", "alltoall"
  size_t bytes = 0;
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
};

struct NetResult {
  int world = 0;
  std::string backend;
  size_t p2p_bytes = 0;
  std::vector<std::vector<double>> bw_gbps;     // [i][j], i != j (symmetric); 0 on the diagonal
  std::vector<std::vector<double>> latency_us;  // [i][j]
  std::vector<CollectiveResult> collectives;
  // World rank -> host index (diag/host_net.h) when the ranks span several hosts; empty on
  // one host. Pairs are then judged against the median of their own kind (within a host,
  // between hosts), and collectives against the host links (judge_hosts), not each other.
  std::vector<int> host_of;
};

// Runs the measurements over every rank of `pg` (collective: call it on all ranks). Every
// rank returns the full result.
NetResult measure_net(comm::ProcessGroup& pg, const NetConfig& cfg);

struct NetFlag {
  std::string what;   // "pair 0-2" or "allreduce"
  std::string text;   // one sentence
};

struct NetVerdict {
  double median_pair_bw = 0, median_pair_latency = 0, median_busbw = 0;
  std::vector<NetFlag> flags;  // empty: healthy
};

// Pure: applies the thresholds. threshold in (0, 1]; expect_busbw_gbps <= 0: not given.
NetVerdict judge_net(const NetResult& r, double threshold, double expect_busbw_gbps);

std::string format_net_report(const NetResult& r, const NetVerdict& v, double threshold, double expect_busbw_gbps);
nlohmann::json net_report_json(const NetResult& r, const NetVerdict& v, double threshold, double expect_busbw_gbps);
// Reads back the "world", "backend", "p2p_bytes", matrices and collectives of net_report_json.
NetResult net_result_from_json(const nlohmann::json& j);

}  // namespace strata::diag
