// Shamir sharing over GF(2^61 - 1) and the secure-aggregation state machines, driven in one
// process: exact sums with and without dropouts, aborts below the threshold, and what the
// server holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>

#include "fed/secagg_protocol.h"
#include "fed/shamir.h"

namespace strata::fed {
namespace {

using secagg::ClientRound;
using secagg::ServerRound;

TEST(Shamir, FieldArithmetic) {
  const uint64_t p = shamir::kPrime;
  EXPECT_EQ(shamir::mul(p - 1, p - 1), 1u);  // (-1)^2
  EXPECT_EQ(shamir::add(p - 1, 1), 0u);
  EXPECT_EQ(shamir::sub(0, 1), p - 1);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t a = rng() % (p - 1) + 1;
    EXPECT_EQ(shamir::mul(a, shamir::inverse(a)), 1u);
    const uint64_t b = rng() % p;
    EXPECT_EQ(shamir::mul(a, b), uint64_t((unsigned __int128)a * b % p));
  }
}

TEST(Shamir, AnyTSharesRecoverFewerDoNot) {
  secagg::init();
  uint8_t secret[32];
  for (int i = 0; i < 32; ++i) secret[i] = uint8_t(7 * i + 1);
  const auto elems = shamir::pack(secret, 32);
  ASSERT_EQ(elems.size(), 5u);
  for (int n : {1, 2, 5, 9})
    for (int t = 1; t <= n; ++t) {
      auto shares = shamir::split(elems, t, n);
      std::mt19937 rng(unsigned(n * 10 + t));
      std::shuffle(shares.begin(), shares.end(), rng);
      std::vector<shamir::Share> pick(shares.begin(), shares.begin() + t);
      uint8_t back[32];
      shamir::unpack(shamir::combine(pick, t), back, 32);
      EXPECT_EQ(std::memcmp(back, secret, 32), 0) << "n " << n << " t " << t;
      if (t >= 2) {  // t - 1 shares interpolate a different value (with overwhelming odds)
        std::vector<shamir::Share> few(shares.begin(), shares.begin() + t - 1);
        EXPECT_NE(shamir::combine(few, t - 1), elems);
        EXPECT_THROW(shamir::combine(few, t), Error);
      }
    }
  auto shares = shamir::split(elems, 2, 3);
  shares[1].x = shares[0].x;
  EXPECT_THROW(shamir::combine(shares, 2), Error);
  EXPECT_THROW(shamir::split(elems, 4, 3), Error);
}

TEST(SecAgg, QuantizerSumsWithoutWrapping) {
  secagg::Quantizer q(1.0, 8);
  uint32_t s = 0;
  for (int i = 0; i < 8; ++i) s += q.encode(5.0f);  // clipped to 1
  EXPECT_NEAR(q.decode(s), 8.0, 1e-6);
  s = 0;
  for (int i = 0; i < 8; ++i) s += q.encode(-1.0f);
  EXPECT_NEAR(q.decode(s), -8.0, 1e-6);
  EXPECT_NEAR(q.decode(q.encode(0.123f)), double(0.123f), 0.5 / q.scale + 1e-12);
}

// Runs one round over `n` clients with inputs x_u; drop_before_mask clients share keys and
// then vanish; drop_before_unmask clients send y_u but no unmasking shares.
struct Outcome {
  std::vector<uint32_t> sum;
  std::map<int, std::vector<uint32_t>> held;
};
Outcome run_round(int n, int t, const std::vector<std::vector<uint32_t>>& x,
                  std::set<int> drop_before_mask, std::set<int> drop_before_unmask) {
  const size_t words = x[0].size();
  std::vector<std::unique_ptr<ClientRound>> c;
  ServerRound s(42, t, words);
  for (int u = 0; u < n; ++u) {
    c.push_back(std::make_unique<ClientRound>(u, 42, t));
    EXPECT_TRUE(s.add_keys(u, c[size_t(u)]->advertise()));
  }
  const auto roster = s.roster();
  for (int u = 0; u < n; ++u) EXPECT_TRUE(s.add_shares(u, c[size_t(u)]->share_keys(roster)));
  for (int u = 0; u < n; ++u) c[size_t(u)]->receive_shares(s.forward_for(u));
  for (int u = 0; u < n; ++u) {
    if (drop_before_mask.count(u)) continue;
    std::vector<uint32_t> y = x[size_t(u)];
    c[size_t(u)]->mask(y);
    std::vector<uint8_t> p(y.size() * 4);
    std::memcpy(p.data(), y.data(), p.size());
    EXPECT_TRUE(s.add_masked(u, p));
  }
  const auto surv = s.survivors();
  for (int u = 0; u < n; ++u)
    if (!drop_before_mask.count(u) && !drop_before_unmask.count(u)) {
      EXPECT_TRUE(s.add_unmask(u, c[size_t(u)]->unmask(surv)));
    }
  return {s.finish(), s.masked_inputs()};
}

std::vector<std::vector<uint32_t>> inputs(int n, size_t words, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint32_t>> x(static_cast<size_t>(n), std::vector<uint32_t>(words));
  for (auto& v : x)
    for (auto& w : v) w = rng();
  return x;
}

std::vector<uint32_t> plain_sum(const std::vector<std::vector<uint32_t>>& x, std::set<int> skip) {
  std::vector<uint32_t> s(x[0].size(), 0);
  for (size_t u = 0; u < x.size(); ++u)
    if (!skip.count(int(u)))
      for (size_t i = 0; i < s.size(); ++i) s[i] += x[u][i];
  return s;
}

TEST(SecAgg, ExactSumWithoutDropouts) {
  secagg::init();
  for (int n : {2, 3, 5}) {
    auto x = inputs(n, 10000 + 3, unsigned(n));  // not a multiple of the keystream chunk
    Outcome o = run_round(n, n / 2 + 1, x, {}, {});
    EXPECT_EQ(o.sum, plain_sum(x, {})) << n << " clients";
  }
}

TEST(SecAgg, ExactSumWhenClientsDropAfterSharingBelowTheThreshold) {
  secagg::init();
  auto x = inputs(6, 777, 9);
  // 6 clients, t = 3: two vanish after sharing keys (their masks are rebuilt from shares),
  // one more survivor withholds its unmasking shares (3 of 4 answer, still >= t).
  Outcome o = run_round(6, 3, x, {1, 4}, {5});
  EXPECT_EQ(o.sum, plain_sum(x, {1, 4}));
}

TEST(SecAgg, ServerHoldsOnlyMaskedInputs) {
  secagg::init();
  auto x = inputs(4, 4096, 5);
  for (auto& v : x) std::fill(v.begin(), v.end(), 7u);  // highly structured inputs
  Outcome o = run_round(4, 3, x, {}, {});
  ASSERT_EQ(o.held.size(), 4u);
  for (auto& [u, y] : o.held) {
    ASSERT_EQ(y.size(), x[size_t(u)].size());
    size_t equal = 0;
    for (size_t i = 0; i < y.size(); ++i) equal += y[i] == x[size_t(u)][i];
    EXPECT_LE(equal, 2u) << "client " << u << ": the server saw its input words";
    // Masked words look uniform: mean near 2^31.
    double mean = 0;
    for (uint32_t w : y) mean += double(w) / double(y.size());
    EXPECT_NEAR(mean / 4294967296.0, 0.5, 0.03);
  }
  EXPECT_EQ(o.sum, plain_sum(x, {}));
}

TEST(SecAgg, AbortsBelowTheThreshold) {
  secagg::init();
  auto x = inputs(5, 64, 2);
  EXPECT_THROW(run_round(5, 3, x, {0, 1, 2}, {}), secagg::RoundAborted);  // 2 masked inputs < 3
  try {
    run_round(5, 4, x, {}, {0, 1});  // 3 of 5 unmask < 4
    FAIL();
  } catch (const secagg::RoundAborted& e) {
    EXPECT_NE(std::string(e.what()).find("below the threshold 4"), std::string::npos) << e.what();
  }
}

TEST(SecAgg, RejectsMalformedMessages) {
  secagg::init();
  ServerRound s(1, 2, 16);
  EXPECT_FALSE(s.add_keys(0, std::vector<uint8_t>(63)));
  ClientRound a(0, 1, 2), b(1, 1, 2);
  EXPECT_TRUE(s.add_keys(0, a.advertise()));
  EXPECT_FALSE(s.add_keys(0, a.advertise()));  // twice
  EXPECT_TRUE(s.add_keys(1, b.advertise()));
  const auto r = s.roster();
  EXPECT_FALSE(s.add_shares(0, std::vector<uint8_t>(10)));
  EXPECT_FALSE(s.add_shares(7, a.share_keys(r)));  // not on the roster
  EXPECT_TRUE(s.add_shares(0, a.share_keys(r)));
  EXPECT_TRUE(s.add_shares(1, b.share_keys(r)));
  auto fa = s.forward_for(0);
  fa[20] ^= 1;  // tampered box
  EXPECT_THROW(a.receive_shares(fa), Error);
  EXPECT_FALSE(s.add_masked(0, std::vector<uint8_t>(15 * 4)));  // wrong size
}

}  // namespace
}  // namespace strata::fed
