// Messages between the federated server (rank 0 of the group) and its clients (ranks 1..K),
// over the group's point-to-point channels. Every message is a fixed 56-byte header followed,
// when header.bytes > 0, by a payload of that many bytes (two p2p messages, so a receiver
// always knows the size to post). The header carries a magic number and version; the server
// validates kind, round, client and size against what the protocol step expects, and counts
// and drops anything else without stopping the round.
//
// Deadlines: a Link posts the receive of a client's next header asynchronously and waits for
// it up to a deadline. A client that misses it is treated as dropped for the round; its
// receive stays posted, and the late message is drained (read and discarded) before the next
// one is expected from that client, so the channel stays in step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace strata::fed {

enum class Kind : uint16_t {
  control = 1,   // server -> client: round, participate?, stop?
  model,         // server -> client: the global parameters (P floats)
  update,        // client -> server: plain update (P floats); a = samples, b = local loss
  gone,          // client -> server: dropped out of the round at this step
  keys,          // client -> server: two X25519 public keys (secure aggregation)
  roster,        // server -> client: every U1 member's id and keys
  shares,        // client -> server: encrypted Shamir shares, one per U1 member
  shares_fwd,    // server -> client: the shares other clients encrypted for it
  masked,        // client -> server: masked quantized update (P + 1 words)
  survivors,     // server -> client: ids of U3, whose masked input arrived
  unmask,        // client -> server: the shares that remove masks
};
const char* kind_name(Kind k);

struct Header {
  uint32_t magic = 0x53464544;  // "DEFS"
  uint16_t version = 1;
  uint16_t kind = 0;
  int64_t round = 0;
  int32_t client = -1;   // client id (0-based; rank = client + 1)
  uint32_t flags = 0;    // control: 1 = participate, 2 = stop
  uint64_t bytes = 0;    // payload bytes that follow
  double a = 0, b = 0;   // kind-specific numbers (update: samples, loss)
  uint64_t reserved = 0;
};
static_assert(sizeof(Header) == 56);

struct Message {
  Header h;
  std::vector<uint8_t> payload;
};

// Byte counters of one process (payload plus headers).
struct Traffic {
  uint64_t sent = 0, received = 0;
};

void send_message(comm::ProcessGroup& g, int peer, const Header& h, const void* payload,
                  Traffic& t);
Message recv_message(comm::ProcessGroup& g, int peer, Traffic& t);

// The server's view of one client's incoming channel.
class Link {
 public:
  Link(comm::ProcessGroup& g, int peer) : g_(&g), peer_(peer) {}
  // Posts the receive of the next header (after draining a late message still in flight).
  void post(Traffic& t);
  // Waits until the posted header arrives or `deadline_ns` (steady clock; 0 = no deadline)
  // passes. On arrival reads the payload and returns true with the message in `out`;
  // on a missed deadline returns false and leaves the receive posted for drain(). A peer
  // that died (a group with Options::may_die) throws comm::detail::PeerDeadError, with
  // nothing left posted.
  bool wait(int64_t deadline_ns, Message& out, Traffic& t);
  // Reads and discards a late message, if one is owed; returns how many were discarded.
  int drain(Traffic& t);

 private:
  comm::ProcessGroup* g_;
  int peer_;
  Header pending_h_;
  comm::WorkPtr pending_;
};

int64_t now_ns();

}  // namespace strata::fed
