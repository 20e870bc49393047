// Shamir secret sharing (Shamir 1979) over the prime field GF(p), p = 2^61 - 1 (a Mersenne
// prime, so products reduce with shifts). A secret is a vector of field elements; each is the
// constant term of its own random polynomial of degree t - 1, and share x (x = 1..n) holds the
// polynomials' values at x. Any t shares recover the secret by Lagrange interpolation at 0;
// fewer reveal nothing about it. Byte strings are packed 7 bytes (56 bits < 61) per element.
// Coefficients come from libsodium's randombytes (rejection-sampled into [0, p)).
// Cost: split O(n t) and combine O(t^2) field operations per element.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::fed::shamir {

constexpr uint64_t kPrime = (uint64_t(1) << 61) - 1;

uint64_t add(uint64_t a, uint64_t b);
uint64_t sub(uint64_t a, uint64_t b);
uint64_t mul(uint64_t a, uint64_t b);
uint64_t inverse(uint64_t a);  // a != 0

struct Share {
  uint32_t x = 0;              // evaluation point, 1..n
  std::vector<uint64_t> y;     // one value per secret element
};

// n shares of `secret` (elements < kPrime), any t of which recover it. 1 <= t <= n.
std::vector<Share> split(const std::vector<uint64_t>& secret, int t, int n);
// The secret from at least t shares with distinct x (only the first t are used). Throws
// naming the numbers when there are fewer than t, or on a repeated or zero x.
std::vector<uint64_t> combine(const std::vector<Share>& shares, int t);

std::vector<uint64_t> pack(const uint8_t* bytes, size_t n);    // ceil(n / 7) elements
void unpack(const std::vector<uint64_t>& elems, uint8_t* bytes, size_t n);

}  // namespace strata::fed::shamir
