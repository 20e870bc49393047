// The tcp backend: ranks on any hosts exchange data over TCP connections formed from a
// rendezvous store (store.h). A world can be torn down and formed again in the same process
// under a new job id (every key is namespaced by job), which is what live recovery across
// hosts needs (OpenMPI cannot shrink a communicator).
//
// Connections: every pair of ranks holds three: "coll" (collectives, one op at a time on the
// collective thread), "p2p" (framed point-to-point messages, on the point-to-point thread)
// and "ctrl" (abort messages and liveness: an EOF without a prior "bye" means the peer died).
//
// Ordering and threading contract: as ProcessGroup. run_collective runs one op at a time;
// p2p_* run on the point-to-point thread concurrently with it (they touch only the p2p
// connections); health() may run on the watchdog thread (the ctrl state has its own mutex).
//
// Waiting: poll() over the connections the op needs, the ctrl connections and an eventfd
// that a local abort rings; the op's deadline bounds every wait (PeerTimeoutError naming
// the peer still owing data).
#pragma once
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/tcp/socket.h"
#include "comm/transport.h"

namespace strata::comm::tcp {

// The three connections to one peer (invalid for this rank itself).
struct PeerLinks {
  Fd coll, p2p, ctrl;
};

// Forms the connections of one group: connects to lower ranks, accepts from higher ones
// on `listener`, each side checking a handshake of (job, group, rank, connection kind).
// addrs[r] = "ip:port" of rank r's listener. Throws TimeoutError naming the ranks that
// never connected by the deadline.
std::vector<PeerLinks> form_links(int listener, const std::vector<std::string>& addrs,
                                  const std::string& job, const std::string& group, int rank,
                                  int64_t deadline_ns);

class TcpTransport;
bool tcp_check_ops_enabled();  // STRATA_TCP_CHECK_OPS
// The world of a job: publishes this rank's listener under "<job>/w/addr/<rank>" in the store
// at store_addr, reads every peer's, forms the links. A world of 1 needs no store.
std::unique_ptr<TcpTransport> make_tcp_world(const std::string& store_addr, const std::string& job,
                                             int rank, int size, const Options& opt, int64_t deadline_ns);

class TcpTransport final : public detail::Transport {
 public:
  TcpTransport(std::vector<PeerLinks> links, std::string job, std::string group, int rank,
               std::vector<int> world_ranks, std::string ip, const Options& opt);
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::tcp; }
  void run_collective(detail::OpDesc& op) override;
  std::unique_ptr<Transport> split(detail::OpDesc& op, const std::vector<int>& world_ranks,
                                   std::vector<int>& world_ranks_out) override;
  bool p2p_progress(detail::OpDesc& op, detail::P2PState& st) override;
  void p2p_arm() override {}
  void p2p_wait(int64_t max_ns) override;
  void p2p_wake() override;
  void p2p_check_peer(const detail::OpDesc& op) override;
  void raise_abort(int reason_code, const std::string& message) override;
  std::string health(std::string& reason) override;
  void detach() override;

  // One peer's share of a collective exchange: bytes to send to it and to receive from it,
  // moved concurrently with every other peer's (full duplex, no ordering between peers).
  // `send_limit`, when set, caps the bytes sendable so far (a chain forwards what arrived).
  struct Xfer {
    int peer = -1;
    const char* sbuf = nullptr;
    size_t slen = 0, sent = 0;
    char* rbuf = nullptr;
    size_t rlen = 0, rcvd = 0;
    const size_t* send_limit = nullptr;
  };
  // Runs the transfers to completion, or throws naming the op and the peer.
  void exchange(std::vector<Xfer>& xs, const detail::OpDesc& op);

 private:
  // Collectives (tcp_collectives.cc).
  void allreduce(const detail::OpDesc& op);
  void allreduce_small(const detail::OpDesc& op);
  void reduce_blocks(const detail::OpDesc& op, const char* send, const std::vector<size_t>& offs,
                     const std::vector<size_t>& counts, char* out);
  void reduce_scatter(const detail::OpDesc& op);
  void allgather(const detail::OpDesc& op);
  void broadcast(const detail::OpDesc& op);
  void reduce(const detail::OpDesc& op);
  void alltoall(const detail::OpDesc& op);
  void barrier(const detail::OpDesc& op);
  size_t chunk_elems(DType dtype) const;
  void check_op(const detail::OpDesc& op);  // tcp_op_check.cc (STRATA_TCP_CHECK_OPS)
  bool check_ops_ = false;

  // Control connections (tcp_transport.cc).
  enum PeerState : int { kAlive = 0, kLeft = 1, kDead = 2 };
  void read_control_locked();  // non-blocking; updates peer states and the abort record
  void throw_if_failed(const detail::OpDesc& op, int peer);  // abort raised, or peer gone
  std::string op_label(const detail::OpDesc& op) const;
  std::string peer_name(int peer) const;  // "rank 2 (world rank 5)"
  [[noreturn]] void peer_lost(const detail::OpDesc& op, int peer, const char* doing);

  // Point-to-point (tcp_p2p.cc).
  static constexpr size_t kP2PHeader = 16;  // i32 tag, u32 reserved, u64 payload bytes
  struct P2PPeer {
    // Sending: the op whose frame is on the wire, and how much of header + payload left.
    detail::P2PState* sender = nullptr;
    char send_hdr[kP2PHeader] = {};
    size_t send_off = 0;
    bool send_blocked = false;
    // Receiving: the frame being read.
    char hdr[kP2PHeader] = {};
    size_t hdr_got = 0;
    bool in_msg = false;
    uint64_t len = 0, got = 0;
    char* dest = nullptr;
    detail::P2PState* dest_owner = nullptr;  // the recv its payload goes to directly, or null
    std::deque<std::pair<int, std::string>> unexpected;  // buffered messages: (tag, payload)
    bool closed = false;
  };
  bool p2p_send(detail::OpDesc& op, detail::P2PState& st);
  bool p2p_recv(detail::OpDesc& op, detail::P2PState& st);
  bool p2p_read(int peer, detail::OpDesc* op, detail::P2PState* st);
  void init_p2p();

  std::vector<PeerLinks> links_;
  std::string job_, group_;
  int rank_, size_;
  std::vector<int> world_ranks_;
  std::string ip_;  // this rank's interface address (listeners of split groups bind it)
  Options opt_;
  std::vector<char> tmp_;

  std::mutex ctrl_mu_;
  std::vector<int> peer_state_;
  std::vector<std::string> ctrl_in_;
  std::atomic<bool> aborted_{false};
  int abort_by_ = -1;
  std::string abort_msg_, abort_reason_ = "error";
  Fd abort_efd_;  // rung by raise_abort so a collective's poll wakes at once

  std::vector<std::unique_ptr<P2PPeer>> p2p_;
  Fd p2p_efd_;
};

}  // namespace strata::comm::tcp
