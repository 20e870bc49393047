// α-β cost of collectives, shared by the planner and the communicator's documentation.
//
// Terms: n ranks; a link moves β bytes/s per direction per rank and every message step pays
// α seconds of latency; B is the buffer size in bytes as the caller sees it (the full vector
// for all-reduce, reduce-scatter and all-gather; one rank's whole send buffer for all-to-all).
// Ring algorithms (Patarasuk & Yuan 2009; Thakur et al. 2005):
//   all-reduce      2(n-1)·α + 2(n-1)/n · B/β   (reduce-scatter then all-gather)
//   reduce-scatter   (n-1)·α +  (n-1)/n · B/β
//   all-gather       (n-1)·α +  (n-1)/n · B/β
//   all-to-all       (n-1)·α +  (n-1)/n · B/β   (pairwise exchange)
//   send/recv              α +          B/β
// The factor in front of B/β is nccl-tests' bus-bandwidth factor: busbw = algbw · factor.
#pragma once
#include <string>

namespace strata::plan {

struct Link {
  double gbps = 0;      // β in GB/s (1e9 bytes/s), per direction, per rank
  double alpha_us = 0;  // α: latency of one message step in microseconds
};

enum class Collective { allreduce, reduce_scatter, all_gather, all_to_all, send_recv };

inline const char* collective_name(Collective c) {
  switch (c) {
    case Collective::allreduce:
      return "all-reduce";
    case Collective::reduce_scatter:
      return "reduce-scatter";
    case Collective::all_gather:
      return "all-gather";
    case Collective::all_to_all:
      return "all-to-all";
    case Collective::send_recv:
      return "send/recv";
  }
  return "?";
}

// Bytes each rank puts on the wire per byte of B (nccl-tests' bus-bandwidth factor).
inline double bus_factor(Collective c, int n) {
  if (n <= 1) return c == Collective::send_recv ? 1.0 : 0.0;
  switch (c) {
    case Collective::allreduce:
      return 2.0 * (n - 1) / n;
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all:
      return double(n - 1) / n;
    case Collective::send_recv:
      return 1.0;
  }
  return 0.0;
}

// Latency steps of the ring algorithm.
inline double latency_steps(Collective c, int n) {
  if (n <= 1) return c == Collective::send_recv ? 1.0 : 0.0;
  switch (c) {
    case Collective::allreduce:
      return 2.0 * (n - 1);
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all:
      return double(n - 1);
    case Collective::send_recv:
      return 1.0;
  }
  return 0.0;
}

// Seconds for one collective of B bytes over n ranks on `link`; 0 for a group of one.
inline double collective_s(Collective c, double bytes, int n, const Link& link) {
  if (n <= 1 && c != Collective::send_recv) return 0.0;
  if (bytes <= 0) return 0.0;
  return latency_steps(c, n) * link.alpha_us * 1e-6 + bus_factor(c, n) * bytes / (link.gbps * 1e9);
}

inline double allreduce_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::allreduce, bytes, n, l);
}
inline double reduce_scatter_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::reduce_scatter, bytes, n, l);
}
inline double all_gather_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::all_gather, bytes, n, l);
}
inline double all_to_all_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::all_to_all, bytes, n, l);
}
inline double send_recv_s(double bytes, const Link& l) {
  return collective_s(Collective::send_recv, bytes, 2, l);
}

}  // namespace strata::plan
