// The four message rounds of secure aggregation (Bonawitz et al. 2017, the semi-honest
// variant), as two state machines that the server and client loops drive with messages
// (server.cc, client.cc) and that tests drive directly.
//
//   0 advertise   client -> server  c_u^PK, s_u^PK                      U1 = senders
//                 server -> U1      roster: (id, c^PK, s^PK) of U1
//   1 share keys  client -> server  for each v in U1: box_{c_u -> c_v}(u, v, share_v(s_u^SK),
//                                   share_v(b_u))                       U2 = senders
//                 server -> v       the boxes addressed to v from U2
//   2 masked      client -> server  y_u (secagg.h)                      U3 = senders
//                 server -> U3      the list U3
//   3 unmask      client -> server  for u in U3: its share of b_u;
//                                   for u in U2 \ U3: its share of s_u^SK   U4 = senders
// Each of |U2|, |U3|, |U4| must be at least the threshold t, else the round is aborted
// (RoundAborted) and nothing is applied. Shares are dealt to U1 in roster order (x = index + 1).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "fed/secagg.h"
#include "fed/shamir.h"

namespace strata::fed::secagg {

class RoundAborted : public Error {
 public:
  using Error::Error;
};

struct RosterEntry {
  int32_t id = 0;
  Key c_pk{}, s_pk{};
};
constexpr size_t kRosterEntryBytes = 4 + 32 + 32;
constexpr size_t kShareElems = 5;  // 32 bytes in 7-byte field elements
constexpr size_t kSharePlainBytes = 4 + 4 + 4 + 2 * kShareElems * 8;
constexpr size_t kUnmaskEntryBytes = 4 + 4 + kShareElems * 8;  // u, x, y[5]

class ClientRound {
 public:
  ClientRound(int id, uint64_t round, int threshold);
  std::vector<uint8_t> advertise() const;  // c^PK || s^PK
  // Returns the |U1| sealed shares, in roster order. Throws on a malformed roster, one that
  // does not list this client, or one shorter than the threshold.
  std::vector<uint8_t> share_keys(const std::vector<uint8_t>& roster);
  // The boxes addressed to this client: entries (int32 from, sealed share). Defines U2.
  void receive_shares(const std::vector<uint8_t>& fwd);
  // y = x + masks, in place.
  void mask(std::vector<uint32_t>& x) const;
  // For the survivors list U3 (int32 ids): the unmasking shares (kUnmaskEntryBytes each).
  std::vector<uint8_t> unmask(const std::vector<uint8_t>& survivors) const;
  const std::vector<int>& u2() const { return u2_; }

 private:
  int id_;
  uint64_t round_;
  int t_;
  KeyPair c_, s_;
  Key b_;
  std::vector<RosterEntry> roster_;
  std::vector<int> u2_;
  std::map<int, std::vector<uint8_t>> held_;  // u -> plain share record from u
};

class ServerRound {
 public:
  ServerRound(uint64_t round, int threshold, size_t words);
  // Each returns false (and records nothing) for a malformed or unexpected message.
  bool add_keys(int id, const std::vector<uint8_t>& payload);
  std::vector<uint8_t> roster();  // closes stage 0
  bool add_shares(int id, const std::vector<uint8_t>& payload);
  std::vector<uint8_t> forward_for(int v);  // closes stage 1 (throws RoundAborted if |U2| < t)
  bool add_masked(int id, const std::vector<uint8_t>& payload);
  std::vector<uint8_t> survivors();  // closes stage 2 (throws RoundAborted if |U3| < t)
  bool add_unmask(int id, const std::vector<uint8_t>& payload);
  // The sum over U3 of the inputs x_u (throws RoundAborted if |U4| < t).
  std::vector<uint32_t> finish();

  const std::vector<int>& u1() const { return u1_; }
  std::vector<int> u2() const;
  std::vector<int> u3() const;
  // What the server holds of client u's input: y_u only (tests inspect it).
  const std::map<int, std::vector<uint32_t>>& masked_inputs() const { return masked_; }

 private:
  uint64_t round_;
  int t_;
  size_t words_;
  std::vector<RosterEntry> roster_;
  std::vector<int> u1_;
  std::map<int, std::vector<uint8_t>> shares_;  // u -> |U1| sealed boxes
  bool u2_closed_ = false, u3_closed_ = false;
  std::map<int, std::vector<uint32_t>> masked_;
  std::map<int, std::vector<uint8_t>> unmask_;  // v -> entries
};

}  // namespace strata::fed::secagg
