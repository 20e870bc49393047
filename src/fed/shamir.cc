// Shamir secret sharing over GF(2^61 - 1): see shamir.h.
#include "fed/shamir.h"

#include <sodium.h>

#include "core/error.h"

namespace strata::fed::shamir {

uint64_t add(uint64_t a, uint64_t b) {
  uint64_t s = a + b;  // < 2^62, no overflow
  return s >= kPrime ? s - kPrime : s;
}

uint64_t sub(uint64_t a, uint64_t b) { return a >= b ? a - b : a + kPrime - b; }

uint64_t mul(uint64_t a, uint64_t b) {
  const unsigned __int128 p = (unsigned __int128)a * b;
  // p = hi * 2^61 + lo, and 2^61 = 1 (mod p).
  uint64_t r = uint64_t(p & kPrime) + uint64_t(p >> 61);
  r = (r & kPrime) + (r >> 61);
  return r >= kPrime ? r - kPrime : r;
}

uint64_t inverse(uint64_t a) {
  STRATA_CHECK(a % kPrime != 0, "shamir: inverse of zero");
  uint64_t result = 1, base = a % kPrime, e = kPrime - 2;  // Fermat: a^(p-2)
  while (e) {
    if (e & 1) result = mul(result, base);
    base = mul(base, base);
    e >>= 1;
  }
  return result;
}

static uint64_t random_element() {
  for (;;) {
    uint64_t v;
    randombytes_buf(&v, sizeof(v));
    v &= kPrime;  // 61 bits
    if (v < kPrime) return v;
  }
}

std::vector<Share> split(const std::vector<uint64_t>& secret, int t, int n) {
  STRATA_CHECK(t >= 1 && t <= n, "shamir: threshold ", t, " must be in [1, ", n, " shares]");
  std::vector<Share> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    out[size_t(i)].x = uint32_t(i + 1);
    out[size_t(i)].y.resize(secret.size());
  }
  std::vector<uint64_t> coef(static_cast<size_t>(t));
  for (size_t e = 0; e < secret.size(); ++e) {
    STRATA_CHECK(secret[e] < kPrime, "shamir: secret element ", e, " is not below the prime");
    coef[0] = secret[e];
    for (int c = 1; c < t; ++c) coef[size_t(c)] = random_element();
    for (int i = 0; i < n; ++i) {  // Horner at x = i + 1
      uint64_t y = 0;
      for (int c = t - 1; c >= 0; --c) y = add(mul(y, uint64_t(i + 1)), coef[size_t(c)]);
      out[size_t(i)].y[e] = y;
    }
  }
  return out;
}

std::vector<uint64_t> combine(const std::vector<Share>& shares, int t) {
  STRATA_CHECK(t >= 1 && int(shares.size()) >= t, "shamir: ", shares.size(),
               " shares cannot recover a secret with threshold ", t);
  const size_t m = shares[0].y.size();
  for (int i = 0; i < t; ++i) {
    STRATA_CHECK(shares[size_t(i)].x != 0 && shares[size_t(i)].y.size() == m,
                 "shamir: malformed share (x = ", shares[size_t(i)].x, ")");
    for (int j = 0; j < i; ++j)
      STRATA_CHECK(shares[size_t(i)].x != shares[size_t(j)].x, "shamir: share x = ",
                   shares[size_t(i)].x, " given twice");
  }
  // Lagrange basis at 0: l_i = prod_{j != i} x_j / (x_j - x_i).
  std::vector<uint64_t> secret(m, 0);
  for (int i = 0; i < t; ++i) {
    uint64_t num = 1, den = 1;
    const uint64_t xi = shares[size_t(i)].x;
    for (int j = 0; j < t; ++j) {
      if (j == i) continue;
      const uint64_t xj = shares[size_t(j)].x;
      num = mul(num, xj);
      den = mul(den, sub(xj, xi));
    }
    const uint64_t li = mul(num, inverse(den));
    for (size_t e = 0; e < m; ++e) secret[e] = add(secret[e], mul(li, shares[size_t(i)].y[e]));
  }
  return secret;
}

std::vector<uint64_t> pack(const uint8_t* bytes, size_t n) {
  std::vector<uint64_t> out((n + 6) / 7, 0);
  for (size_t i = 0; i < n; ++i) out[i / 7] |= uint64_t(bytes[i]) << (8 * (i % 7));
  return out;
}

void unpack(const std::vector<uint64_t>& elems, uint8_t* bytes, size_t n) {
  STRATA_CHECK(elems.size() * 7 >= n, "shamir: ", elems.size(), " elements cannot hold ", n, " bytes");
  for (size_t i = 0; i < n; ++i) bytes[i] = uint8_t(elems[i / 7] >> (8 * (i % 7)));
}

}  // namespace strata::fed::shamir
