// Secure aggregation after Bonawitz et al. 2017 ("Practical Secure Aggregation for
// Privacy-Preserving Machine Learning"): the cryptographic pieces and the arithmetic, apart
// from the message flow (secagg_protocol.h), so both can be tested alone.
//
// Terms (per round; u, v are clients).
//   field     Z_{2^32}: updates are quantized to uint32 words and every sum wraps.
//   quantize  a coordinate is clipped to [-range, range] and scaled by
//             scale = floor((2^31 - 1) / (range * C)) (C = clients per round), so the sum of up
//             to C of them never wraps as a signed 32-bit integer and decodes exactly;
//             resolution 1 / scale per client.
//   c_u, s_u  two X25519 key pairs of u: c for encrypting shares (crypto_box), s for masks.
//   s_uv      pairwise mask seed: BLAKE2b(X25519(s_u^SK, s_v^PK) || lower pk || higher pk), the
//             same for u and v (crypto_scalarmult + crypto_generichash).
//   b_u       u's self-mask seed (32 random bytes).
//   PRG(k)    crypto_stream_chacha20 keyed by k, nonce = round: the mask words.
//   y_u       masked input = x_u + PRG(b_u) + sum_{v > u} PRG(s_uv) - sum_{v < u} PRG(s_uv),
//             v over U2 (clients whose shares were delivered). Pairwise terms cancel in the sum
//             over survivors; the server removes PRG(b_u) of survivors and, for a client that
//             dropped after sharing, recomputes its pairwise terms from s_u^SK, both
//             recovered from t Shamir shares (shamir.h) held by the other clients.
// The server only ever holds y_u (uniformly random words to it), encrypted shares, and at
// most one of the two secrets of each client (b_u if u's masked input arrived, s_u^SK if
// not), never both: so it never learns an individual x_u.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::fed::secagg {

using Key = std::array<uint8_t, 32>;
struct KeyPair {
  Key pk{}, sk{};
};

void init();         // sodium_init, once per process; throws if libsodium cannot start
KeyPair keypair();   // fresh X25519 key pair
Key public_of(const Key& sk);
Key random_seed();
// s_uv from my secret key, my public key and the peer's public key (symmetric in u, v).
Key pair_seed(const Key& my_sk, const Key& my_pk, const Key& peer_pk);
// v[i] += PRG(seed, round)[i] (or -= when subtract), i < n, in Z_{2^32}.
void apply_mask(const Key& seed, uint64_t round, uint32_t* v, size_t n, bool subtract);

// Authenticated public-key encryption of a share for a peer (crypto_box_easy; a random nonce
// is prepended). open() returns false for anything not sealed by the peer for me.
std::vector<uint8_t> seal(const std::vector<uint8_t>& msg, const Key& peer_pk, const Key& my_sk);
bool open(const uint8_t* sealed, size_t n, const Key& peer_pk, const Key& my_sk,
          std::vector<uint8_t>& msg);
size_t sealed_size(size_t msg_bytes);

struct Quantizer {
  double range = 1;
  int summands = 1;
  double scale = 0;
  Quantizer(double range, int summands);
  uint32_t encode(float v) const;             // clips to [-range, range]
  double decode(uint32_t sum) const;          // a sum of up to `summands` encodings
};

}  // namespace strata::fed::secagg
