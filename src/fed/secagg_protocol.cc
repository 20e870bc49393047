// Secure-aggregation state machines: see secagg_protocol.h.
#include "fed/secagg_protocol.h"

#include <algorithm>
#include <cstring>

namespace strata::fed::secagg {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, const T& v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::vector<RosterEntry> parse_roster(const std::vector<uint8_t>& b) {
  STRATA_CHECK(b.size() % kRosterEntryBytes == 0, "secure aggregation: roster of ", b.size(),
               " bytes is not a whole number of ", kRosterEntryBytes, "-byte entries");
  std::vector<RosterEntry> r(b.size() / kRosterEntryBytes);
  for (size_t i = 0; i < r.size(); ++i) {
    const uint8_t* p = b.data() + i * kRosterEntryBytes;
    r[i].id = get<int32_t>(p);
    std::memcpy(r[i].c_pk.data(), p + 4, 32);
    std::memcpy(r[i].s_pk.data(), p + 36, 32);
    STRATA_CHECK(i == 0 || r[i].id > r[i - 1].id, "secure aggregation: roster ids not increasing");
  }
  return r;
}

std::vector<int> parse_ids(const std::vector<uint8_t>& b) {
  STRATA_CHECK(b.size() % 4 == 0, "secure aggregation: id list of ", b.size(), " bytes");
  std::vector<int> ids(b.size() / 4);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = get<int32_t>(b.data() + 4 * i);
  return ids;
}

size_t index_of(const std::vector<RosterEntry>& r, int id) {
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].id == id) return i;
  return r.size();
}

Key key_from(const std::vector<uint64_t>& elems) {
  Key k;
  shamir::unpack(elems, k.data(), k.size());
  return k;
}

const size_t kSealedShare = sealed_size(kSharePlainBytes);

}  // namespace

// ---- client ----

ClientRound::ClientRound(int id, uint64_t round, int threshold)
    : id_(id), round_(round), t_(threshold), c_(keypair()), s_(keypair()), b_(random_seed()) {}

std::vector<uint8_t> ClientRound::advertise() const {
  std::vector<uint8_t> out(c_.pk.begin(), c_.pk.end());
  out.insert(out.end(), s_.pk.begin(), s_.pk.end());
  return out;
}

std::vector<uint8_t> ClientRound::share_keys(const std::vector<uint8_t>& roster) {
  roster_ = parse_roster(roster);
  const size_t me = index_of(roster_, id_);
  STRATA_CHECK(me < roster_.size(), "secure aggregation: the roster does not list client ", id_);
  STRATA_CHECK(int(roster_.size()) >= t_, "secure aggregation: roster of ", roster_.size(),
               " clients is below the threshold ", t_);
  STRATA_CHECK(roster_[me].s_pk == s_.pk && roster_[me].c_pk == c_.pk,
               "secure aggregation: the roster carries other keys for client ", id_);
  std::vector<uint64_t> secret = shamir::pack(s_.sk.data(), 32), b = shamir::pack(b_.data(), 32);
  secret.insert(secret.end(), b.begin(), b.end());
  const auto shares = shamir::split(secret, t_, int(roster_.size()));
  std::vector<uint8_t> out;
  for (size_t j = 0; j < roster_.size(); ++j) {
    std::vector<uint8_t> plain;
    put(plain, int32_t(id_));
    put(plain, int32_t(roster_[j].id));
    put(plain, uint32_t(shares[j].x));
    for (uint64_t y : shares[j].y) put(plain, y);
    const auto sealed = seal(plain, roster_[j].c_pk, c_.sk);
    out.insert(out.end(), sealed.begin(), sealed.end());
  }
  return out;
}

void ClientRound::receive_shares(const std::vector<uint8_t>& fwd) {
  const size_t entry = 4 + kSealedShare;
  STRATA_CHECK(fwd.size() % entry == 0, "secure aggregation: forwarded shares of ", fwd.size(),
               " bytes are not whole ", entry, "-byte entries");
  u2_.clear();
  held_.clear();
  for (size_t at = 0; at < fwd.size(); at += entry) {
    const int from = get<int32_t>(fwd.data() + at);
    const size_t i = index_of(roster_, from);
    STRATA_CHECK(i < roster_.size(), "secure aggregation: share from client ", from,
                 " who is not on the roster");
    std::vector<uint8_t> plain;
    STRATA_CHECK(open(fwd.data() + at + 4, kSealedShare, roster_[i].c_pk, c_.sk, plain) &&
                     plain.size() == kSharePlainBytes && get<int32_t>(plain.data()) == from &&
                     get<int32_t>(plain.data() + 4) == id_,
                 "secure aggregation: the share from client ", from, " to client ", id_,
                 " does not decrypt");
    u2_.push_back(from);
    held_[from] = std::move(plain);
  }
  std::sort(u2_.begin(), u2_.end());
  STRATA_CHECK(std::find(u2_.begin(), u2_.end(), id_) != u2_.end(),
               "secure aggregation: client ", id_, "'s own share was not forwarded back");
}

void ClientRound::mask(std::vector<uint32_t>& x) const {
  apply_mask(b_, round_, x.data(), x.size(), false);
  for (int v : u2_) {
    if (v == id_) continue;
    const Key seed = pair_seed(s_.sk, s_.pk, roster_[index_of(roster_, v)].s_pk);
    apply_mask(seed, round_, x.data(), x.size(), v < id_);
  }
}

std::vector<uint8_t> ClientRound::unmask(const std::vector<uint8_t>& survivors) const {
  const std::vector<int> u3 = parse_ids(survivors);
  STRATA_CHECK(int(u3.size()) >= t_, "secure aggregation: ", u3.size(),
               " survivors are below the threshold ", t_);
  std::vector<uint8_t> out;
  for (int u : u2_) {
    const std::vector<uint8_t>& rec = held_.at(u);
    const bool survived = std::find(u3.begin(), u3.end(), u) != u3.end();
    put(out, int32_t(u));
    put(out, get<uint32_t>(rec.data() + 8));
    // Elements 0..4 share s_u^SK, 5..9 share b_u: reveal exactly one of them.
    const uint8_t* y = rec.data() + 12 + (survived ? kShareElems * 8 : 0);
    out.insert(out.end(), y, y + kShareElems * 8);
  }
  return out;
}

// ---- server ----

ServerRound::ServerRound(uint64_t round, int threshold, size_t words)
    : round_(round), t_(threshold), words_(words) {}

bool ServerRound::add_keys(int id, const std::vector<uint8_t>& p) {
  if (p.size() != 64 || !u1_.empty() || index_of(roster_, id) < roster_.size()) return false;
  RosterEntry e;
  e.id = id;
  std::memcpy(e.c_pk.data(), p.data(), 32);
  std::memcpy(e.s_pk.data(), p.data() + 32, 32);
  roster_.push_back(e);
  return true;
}

std::vector<uint8_t> ServerRound::roster() {
  std::sort(roster_.begin(), roster_.end(), [](auto& a, auto& b) { return a.id < b.id; });
  u1_.clear();
  for (auto& e : roster_) u1_.push_back(e.id);
  if (int(u1_.size()) < t_)
    throw RoundAborted(cat("only ", u1_.size(), " clients sent keys, below the threshold ", t_));
  std::vector<uint8_t> out;
  for (auto& e : roster_) {
    put(out, e.id);
    out.insert(out.end(), e.c_pk.begin(), e.c_pk.end());
    out.insert(out.end(), e.s_pk.begin(), e.s_pk.end());
  }
  return out;
}

bool ServerRound::add_shares(int id, const std::vector<uint8_t>& p) {
  if (u2_closed_ || index_of(roster_, id) == roster_.size() || shares_.count(id) ||
      p.size() != roster_.size() * kSealedShare)
    return false;
  shares_[id] = p;
  return true;
}

std::vector<int> ServerRound::u2() const {
  std::vector<int> r;
  for (auto& [u, _] : shares_) r.push_back(u);
  return r;
}

std::vector<int> ServerRound::u3() const {
  std::vector<int> r;
  for (auto& [u, _] : masked_) r.push_back(u);
  return r;
}

std::vector<uint8_t> ServerRound::forward_for(int v) {
  if (!u2_closed_) {
    u2_closed_ = true;
    if (int(shares_.size()) < t_)
      throw RoundAborted(cat("only ", shares_.size(), " of ", u1_.size(),
                             " clients shared their keys, below the threshold ", t_));
  }
  const size_t j = index_of(roster_, v);
  STRATA_CHECK(j < roster_.size(), "secure aggregation: forward to client ", v, " not on the roster");
  std::vector<uint8_t> out;
  for (auto& [u, boxes] : shares_) {
    put(out, int32_t(u));
    out.insert(out.end(), boxes.begin() + long(j * kSealedShare),
               boxes.begin() + long((j + 1) * kSealedShare));
  }
  return out;
}

bool ServerRound::add_masked(int id, const std::vector<uint8_t>& p) {
  if (!u2_closed_ || u3_closed_ || !shares_.count(id) || masked_.count(id) || p.size() != words_ * 4)
    return false;
  std::vector<uint32_t> y(words_);
  std::memcpy(y.data(), p.data(), p.size());
  masked_[id] = std::move(y);
  return true;
}

std::vector<uint8_t> ServerRound::survivors() {
  u3_closed_ = true;
  if (int(masked_.size()) < t_)
    throw RoundAborted(cat("only ", masked_.size(), " of ", shares_.size(),
                           " clients sent their masked update, below the threshold ", t_));
  std::vector<uint8_t> out;
  for (auto& [u, _] : masked_) put(out, int32_t(u));
  return out;
}

bool ServerRound::add_unmask(int id, const std::vector<uint8_t>& p) {
  if (!u3_closed_ || !masked_.count(id) || unmask_.count(id) ||
      p.size() != shares_.size() * kUnmaskEntryBytes)
    return false;
  for (size_t at = 0; at < p.size(); at += kUnmaskEntryBytes)
    if (!shares_.count(get<int32_t>(p.data() + at))) return false;
  unmask_[id] = p;
  return true;
}

std::vector<uint32_t> ServerRound::finish() {
  if (int(unmask_.size()) < t_)
    throw RoundAborted(cat("only ", unmask_.size(), " of ", masked_.size(),
                           " surviving clients sent unmasking shares, below the threshold ", t_));
  std::vector<uint32_t> sum(words_, 0);
  for (auto& [u, y] : masked_)
    for (size_t i = 0; i < words_; ++i) sum[i] += y[i];
  for (auto& [u, _] : shares_) {
    std::vector<shamir::Share> sh;
    for (auto& [v, p] : unmask_)
      for (size_t at = 0; at < p.size(); at += kUnmaskEntryBytes)
        if (get<int32_t>(p.data() + at) == u) {
          shamir::Share s;
          s.x = get<uint32_t>(p.data() + at + 4);
          for (size_t e = 0; e < kShareElems; ++e)
            s.y.push_back(get<uint64_t>(p.data() + at + 8 + 8 * e));
          sh.push_back(std::move(s));
        }
    const Key secret = key_from(shamir::combine(sh, t_));
    const RosterEntry& ue = roster_[index_of(roster_, u)];
    if (masked_.count(u)) {  // survivor: remove its self mask
      apply_mask(secret, round_, sum.data(), words_, true);
      continue;
    }
    // Dropped after sharing: recompute and remove its pairwise masks from the survivors' y.
    if (public_of(secret) != ue.s_pk)
      throw RoundAborted(cat("the shares of dropped client ", u, " do not rebuild its key"));
    for (auto& [v, _] : masked_) {
      const Key seed = pair_seed(secret, ue.s_pk, roster_[index_of(roster_, v)].s_pk);
      apply_mask(seed, round_, sum.data(), words_, u > v);  // v added +PRG for u > v
    }
  }
  return sum;
}

}  // namespace strata::fed::secagg
