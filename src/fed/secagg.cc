// Secure-aggregation primitives (libsodium): see secagg.h.
#include "fed/secagg.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace strata::fed::secagg {

void init() { STRATA_CHECK(sodium_init() >= 0, "libsodium failed to initialise"); }

KeyPair keypair() {
  KeyPair k;
  crypto_box_keypair(k.pk.data(), k.sk.data());
  return k;
}

Key public_of(const Key& sk) {
  Key pk;
  crypto_scalarmult_base(pk.data(), sk.data());
  return pk;
}

Key random_seed() {
  Key k;
  randombytes_buf(k.data(), k.size());
  return k;
}

Key pair_seed(const Key& my_sk, const Key& my_pk, const Key& peer_pk) {
  uint8_t shared[crypto_scalarmult_BYTES];
  STRATA_CHECK(crypto_scalarmult(shared, my_sk.data(), peer_pk.data()) == 0,
               "secure aggregation: a peer's public key is degenerate (X25519 gave zero)");
  const bool mine_first = std::memcmp(my_pk.data(), peer_pk.data(), 32) < 0;
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, 32);
  crypto_generichash_update(&st, shared, sizeof(shared));
  crypto_generichash_update(&st, (mine_first ? my_pk : peer_pk).data(), 32);
  crypto_generichash_update(&st, (mine_first ? peer_pk : my_pk).data(), 32);
  Key seed;
  crypto_generichash_final(&st, seed.data(), seed.size());
  sodium_memzero(shared, sizeof(shared));
  return seed;
}

void apply_mask(const Key& seed, uint64_t round, uint32_t* v, size_t n, bool subtract) {
  uint8_t nonce[crypto_stream_chacha20_NONCEBYTES] = {};
  std::memcpy(nonce, &round, std::min(sizeof(round), sizeof(nonce)));
  constexpr size_t kBlock = 4096;  // words per keystream chunk
  std::vector<uint32_t> ks(std::min(n, kBlock)), zeros(ks.size(), 0);
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t m = std::min(kBlock, n - at);
    // The keystream at byte offset 4*at: chacha20's block counter is offset / 64.
    crypto_stream_chacha20_xor_ic(reinterpret_cast<uint8_t*>(ks.data()),
                                  reinterpret_cast<const uint8_t*>(zeros.data()),
                                  m * 4, nonce, uint64_t(at * 4 / 64), seed.data());
    if (subtract)
      for (size_t i = 0; i < m; ++i) v[at + i] -= ks[i];
    else
      for (size_t i = 0; i < m; ++i) v[at + i] += ks[i];
  }
}

size_t sealed_size(size_t msg_bytes) {
  return crypto_box_NONCEBYTES + crypto_box_MACBYTES + msg_bytes;
}

std::vector<uint8_t> seal(const std::vector<uint8_t>& msg, const Key& peer_pk, const Key& my_sk) {
  std::vector<uint8_t> out(sealed_size(msg.size()));
  randombytes_buf(out.data(), crypto_box_NONCEBYTES);
  STRATA_CHECK(crypto_box_easy(out.data() + crypto_box_NONCEBYTES, msg.data(), msg.size(),
                               out.data(), peer_pk.data(), my_sk.data()) == 0,
               "secure aggregation: encrypting a share failed");
  return out;
}

bool open(const uint8_t* sealed, size_t n, const Key& peer_pk, const Key& my_sk,
          std::vector<uint8_t>& msg) {
  if (n < sealed_size(0)) return false;
  msg.resize(n - sealed_size(0));
  return crypto_box_open_easy(msg.data(), sealed + crypto_box_NONCEBYTES, n - crypto_box_NONCEBYTES,
                              sealed, peer_pk.data(), my_sk.data()) == 0;
}

Quantizer::Quantizer(double r, int m) : range(r), summands(m) {
  STRATA_CHECK(r > 0 && m >= 1, "quantizer: range ", r, " and summands ", m, " must be positive");
  scale = std::floor(2147483647.0 / (r * m));
  STRATA_CHECK(scale >= 1, "quantizer: range ", r, " times ", m, " clients leaves no resolution");
}

uint32_t Quantizer::encode(float v) const {
  const double c = std::clamp(double(v), -range, range);
  return uint32_t(int32_t(std::llround(c * scale)));
}

double Quantizer::decode(uint32_t sum) const { return double(int32_t(sum)) / scale; }

}  // namespace strata::fed::secagg
