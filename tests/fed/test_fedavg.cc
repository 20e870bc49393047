// Server and clients as ranks of one group (threads here; processes in test_cli.cc):
// FedAvg with full-batch local GD equals centralized GD, partitions and sampling are seeded,
// dropouts, deadlines and malformed updates leave the round going, secure aggregation gives
// the plain result, DP noise differs across clients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <map>
#include <set>

#include "comm/process_group.h"
#include "core/error.h"
#include "data/sampler.h"
#include "fed/dp.h"
#include "fed/local.h"
#include "fed/partition.h"
#include "fed/secagg.h"
#include "fed/server.h"
#include "fed/wire.h"

namespace strata::fed {
namespace {

FedConfig tiny(int clients, int per_round, int rounds) {
  FedConfig c;
  c.model.layers = 1, c.model.dim = 16, c.model.heads = 2, c.model.seq = 16;
  c.model.vocab = 256, c.model.padded_vocab = 256;
  c.data = "synthetic:1601";  // 100 windows of 17 tokens
  c.clients = clients, c.per_round = per_round, c.rounds = rounds;
  c.local.seq = 16, c.local.batch = 0, c.local.steps = 1, c.local.lr = 0.5f;
  c.eval_windows = 8;
  return c;
}

FedResult run(const FedConfig& cfg, std::vector<RoundRecord>* rounds = nullptr,
              const std::function<void(int, const Message&)>& inspect = {}) {
  FedResult out;
  comm::run_threads(cfg.clients + 1, [&](comm::ProcessGroup& g) {
    if (g.rank() == 0)
      out = run_server(g, cfg, {}, inspect);
    else
      run_client(g, cfg);
  });
  if (rounds) *rounds = out.rounds;
  return out;
}

// Centralized full-batch gradient descent on the union of the clients' windows.
std::vector<float> centralized_gd(const FedConfig& cfg) {
  data::Split split = data::open_split(cfg.data, cfg.seed);
  const int64_t n = data::num_windows(split.train->size(), cfg.local.seq, cfg.local.seq);
  model::GPT m(cfg.model, 64);
  m.init(cfg.seed);
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
  for (int r = 0; r < cfg.rounds; ++r) {
    gradient(m, *split.train, all.data(), int(n), cfg.local.seq);
    for (int64_t i = 0; i < m.num_params(); ++i) m.params()[i] -= cfg.local.lr * m.grads()[i];
  }
  return std::vector<float>(m.params(), m.params() + m.num_params());
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rel) {
  ASSERT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    norm = std::max(norm, double(std::fabs(b[i])));
  }
  EXPECT_LE(diff, rel * norm) << "max |a - b| " << diff << " vs max |b| " << norm;
}

TEST(FedAvg, FullBatchOneStepAllClientsEqualsCentralizedGD) {
  for (const char* part : {"iid", "dirichlet:0.3"}) {
    FedConfig cfg = tiny(3, 3, 3);
    cfg.partition = PartitionSpec::parse(part);
    const FedResult r = run(cfg);
    // Uneven client sizes under dirichlet: the sample weighting is what makes this hold.
    expect_close(r.params, centralized_gd(cfg), 2e-5);
    ASSERT_EQ(r.rounds.size(), 3u);
    EXPECT_GT(r.eval_loss, 0);
    for (const auto& rec : r.rounds) EXPECT_EQ(rec.survivors, 3);
  }
}

TEST(FedAvg, SecureAggregationMatchesPlainAggregation) {
  FedConfig cfg = tiny(4, 4, 2);
  cfg.partition = PartitionSpec::parse("dirichlet:0.5");
  const FedResult plain = run(cfg);
  cfg.secure_agg = true;
  cfg.threshold = 3;
  const FedResult secure = run(cfg);
  // Only quantization separates them: 4 / scale = 4 * range * C / 2^31 per coordinate.
  double diff = 0;
  for (size_t i = 0; i < plain.params.size(); ++i)
    diff = std::max(diff, double(std::fabs(plain.params[i] - secure.params[i])));
  EXPECT_LT(diff, 1e-6);
  EXPECT_GT(secure.bytes_total, plain.bytes_total);
}

// The share of 32-bit words that look like a quantized update (|int32| < 2^24: updates are
// a few thousandths, times a scale of ~2^29): nearly all of a real update, ~0.8% of
// uniformly random (masked) words.
double small_word_share(const std::vector<uint8_t>& p) {
  size_t small = 0, n = p.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    int32_t v;
    std::memcpy(&v, p.data() + 4 * i, 4);
    small += v > -(1 << 24) && v < (1 << 24);
  }
  return double(small) / double(std::max<size_t>(n, 1));
}

TEST(FedAvg, SecureServerNeverReceivesAnUnmaskedUpdate) {
  FedConfig cfg = tiny(4, 4, 2);
  cfg.secure_agg = true;
  cfg.threshold = 3;
  cfg.dropout = 0.2;
  std::map<Kind, int> kinds;
  double worst = 0;
  run(cfg, nullptr, [&](int, const Message& m) {
    ++kinds[Kind(m.h.kind)];
    if (m.h.kind == uint16_t(Kind::masked)) worst = std::max(worst, small_word_share(m.payload));
  });
  EXPECT_EQ(kinds.count(Kind::update), 0u);
  EXPECT_GT(kinds[Kind::masked], 0);
  EXPECT_LT(worst, 0.03);
  // The same measure on what the clients would send without masks: a real update is "small".
  secagg::Quantizer q(cfg.sa_range, cfg.per_round);
  std::vector<uint8_t> clear(4000);
  for (size_t i = 0; i < 1000; ++i) {
    const uint32_t w = q.encode(0.002f * float(std::sin(double(i))));
    std::memcpy(clear.data() + 4 * i, &w, 4);
  }
  EXPECT_GT(small_word_share(clear), 0.99);
}

TEST(FedAvg, FedProxPullsTowardTheGlobalModelAndFedAdamRuns) {
  FedConfig cfg = tiny(3, 3, 2);
  cfg.local.batch = 4, cfg.local.steps = 5;
  model::GPT init(cfg.model, 1);
  init.init(cfg.seed);
  auto moved = [&](const FedResult& r) {
    double d = 0;
    for (size_t i = 0; i < r.params.size(); ++i) d += std::pow(r.params[i] - init.params()[i], 2);
    return std::sqrt(d);
  };
  const double avg = moved(run(cfg));
  cfg.local.prox_mu = 50;  // mu * lr must stay below 1
  cfg.local.lr = 0.01f;
  const double prox = moved(run(cfg));
  cfg.local.prox_mu = 0;
  const double plain_small_lr = moved(run(cfg));
  EXPECT_LT(prox, 0.5 * plain_small_lr);
  EXPECT_GT(avg, 0);
  // FedAdam's first step from the FedAvg mean update D: w += lr m / (sqrt(v) + tau) with
  // m = (1 - beta1) D, v = (1 - beta2) D^2 (Reddi et al. 2021, no bias correction).
  cfg.rounds = 1;
  const FedResult one = run(cfg);
  cfg.server_opt = ServerOpt::adam;
  cfg.server_lr = 0.01f;
  const FedResult adam = run(cfg);
  double worst = 0;
  for (size_t i = 0; i < adam.params.size(); ++i) {
    const double d = double(one.params[i]) - init.params()[i];
    const double m = (1 - cfg.adam_beta1) * d, v = (1 - cfg.adam_beta2) * d * d;
    const double want = init.params()[i] + cfg.server_lr * m / (std::sqrt(v) + cfg.adam_tau);
    worst = std::max(worst, std::fabs(want - adam.params[i]));
  }
  EXPECT_LT(worst, 1e-5);
}

TEST(FedAvg, PartitionsAreSeededDisjointAndComplete) {
  std::vector<int> labels(1000);
  for (int i = 0; i < 1000; ++i) labels[size_t(i)] = (i * 7) % 10;
  for (const char* p : {"iid", "dirichlet:0.1", "dirichlet:100"}) {
    const auto a = partition_windows(PartitionSpec::parse(p), labels, 5, 3);
    EXPECT_EQ(a, partition_windows(PartitionSpec::parse(p), labels, 5, 3)) << p;
    EXPECT_NE(a, partition_windows(PartitionSpec::parse(p), labels, 5, 4)) << p;
    std::set<int64_t> seen;
    for (const auto& s : a)
      for (int64_t w : s) EXPECT_TRUE(seen.insert(w).second) << p;
    EXPECT_EQ(seen.size(), 1000u) << p;
  }
  // Small alpha concentrates labels: clients hold fewer distinct labels than under alpha 100.
  auto labels_per_client = [&](const char* p) {
    double total = 0;
    for (const auto& s : partition_windows(PartitionSpec::parse(p), labels, 5, 3)) {
      std::set<int> ls;
      for (int64_t w : s) ls.insert(labels[size_t(w)]);
      total += double(ls.size()) / 5;
    }
    return total;
  };
  EXPECT_LT(labels_per_client("dirichlet:0.1"), 7.0);
  EXPECT_EQ(labels_per_client("dirichlet:100"), 10.0);
  // Client sampling: seeded, C distinct of K, varying by round.
  EXPECT_EQ(sample_clients(9, 4, 10, 3), sample_clients(9, 4, 10, 3));
  EXPECT_NE(sample_clients(9, 4, 10, 3), sample_clients(9, 5, 10, 3));
  const auto all = sample_clients(9, 4, 10, 10);
  EXPECT_EQ(std::set<int>(all.begin(), all.end()).size(), 10u);
}

TEST(FedAvg, NaturalSyntheticSplitGivesEachClientItsOwnChain) {
  const PartitionSpec nat = PartitionSpec::parse("natural");
  FedData a = open_fed_data("synthetic:3400", 1, nat, 2, 0, 16);
  FedData b = open_fed_data("synthetic:3400", 1, nat, 2, 1, 16);
  EXPECT_NE(a.train->describe(), b.train->describe());
  EXPECT_EQ(int64_t(a.windows.size()), data::num_windows(1700, 16, 16));
  FedData server = open_fed_data("synthetic:3400", 1, nat, 2, -1, 16);
  EXPECT_TRUE(server.windows.empty());
  EXPECT_GT(server.val->size(), 0);
  // Text: client k holds the k-th contiguous third of the training stream's windows.
  const std::string path = std::filesystem::temp_directory_path() / ("strata_fed_nat_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream f(path);
    for (int i = 0; i < 400; ++i) f << "line " << i << " of a text file\n";
  }
  std::vector<int64_t> all;
  for (int k = 0; k < 3; ++k) {
    FedData d = open_fed_data(path, 1, nat, 3, k, 16);
    ASSERT_FALSE(d.windows.empty());
    for (size_t i = 1; i < d.windows.size(); ++i) EXPECT_EQ(d.windows[i], d.windows[i - 1] + 1);
    all.insert(all.end(), d.windows.begin(), d.windows.end());
  }
  std::filesystem::remove(path);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], int64_t(i));
}

TEST(FedAvg, DropoutsAndMalformedUpdatesLeaveTheRoundGoing) {
  FedConfig cfg = tiny(5, 4, 6);
  cfg.local.batch = 4;
  cfg.dropout = 0.3;
  const FedResult a = run(cfg), b = run(cfg);
  EXPECT_EQ(a.params, b.params);  // dropouts are seeded: the same run twice
  int dropped = 0, applied = 0;
  for (const auto& rec : a.rounds) {
    dropped += rec.dropped;
    applied += rec.applied;
    EXPECT_EQ(rec.survivors + rec.dropped + rec.rejected + rec.late, rec.selected);
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GE(applied, 5);
  // A client sends a half-sized update: rejected and counted, the others' update applied.
  cfg.dropout = 0;
  cfg.bad_client = 2;
  for (int r = 0; r < cfg.rounds && cfg.bad_round < 0; ++r) {
    const auto sel = sample_clients(cfg.seed, r, cfg.clients, cfg.per_round);
    if (std::find(sel.begin(), sel.end(), 2) != sel.end()) cfg.bad_round = r;
  }
  ASSERT_GE(cfg.bad_round, 0);
  const FedResult c = run(cfg);
  EXPECT_EQ(c.rejected, 1);
  const RoundRecord& bad = c.rounds[size_t(cfg.bad_round)];
  EXPECT_EQ(bad.rejected, 1);
  EXPECT_EQ(bad.survivors, 3);
  EXPECT_TRUE(bad.applied);
  cfg.secure_agg = true;  // the same under secure aggregation (a wrong-sized masked input)
  const FedResult d = run(cfg);
  EXPECT_EQ(d.rejected, 1);
  EXPECT_TRUE(d.rounds[size_t(cfg.bad_round)].applied);
}

TEST(FedAvg, LateClientsMissTheDeadlineAndAreDrainedLater) {
  FedConfig cfg = tiny(3, 3, 2);
  cfg.deadline_s = 0.5;
  cfg.slow_client = 1, cfg.slow_s = 1.0;
  const FedResult r = run(cfg);
  for (const auto& rec : r.rounds) {
    EXPECT_EQ(rec.late, 1);
    EXPECT_EQ(rec.survivors, 2);
    EXPECT_TRUE(rec.applied);
  }
}

TEST(FedAvg, SecureRoundRecoversTheMasksOfAClientThatMissedTheDeadline) {
  FedConfig cfg = tiny(3, 3, 2);
  cfg.secure_agg = true;
  cfg.threshold = 2;
  cfg.deadline_s = 0.5;
  cfg.slow_client = 2, cfg.slow_s = 1.0;  // late with its masked input, after sharing
  const FedResult r = run(cfg);
  for (const auto& rec : r.rounds) {
    EXPECT_EQ(rec.late, 1);
    EXPECT_EQ(rec.survivors, 2);
    EXPECT_TRUE(rec.applied) << rec.note;
  }
  EXPECT_GT(r.eval_loss, 0);
}

TEST(FedAvg, SecureAggregationSurvivesDropoutsAndAbortsBelowThreshold) {
  FedConfig cfg = tiny(5, 5, 4);
  cfg.secure_agg = true;
  cfg.threshold = 3;
  cfg.dropout = 0.25;
  FedResult r = run(cfg);
  int recovered = 0;
  for (const auto& rec : r.rounds) {
    if (rec.applied) recovered += rec.dropped > 0;
    if (!rec.applied) {
      EXPECT_NE(rec.note.find("below the threshold"), std::string::npos);
    }
  }
  EXPECT_GT(recovered, 0) << "no round exercised dropout recovery";
  // Threshold 5 of 5 with dropouts: those rounds abort and leave the model untouched.
  cfg.threshold = 5;
  cfg.dropout = 0.5;
  cfg.rounds = 1;
  r = run(cfg);
  ASSERT_FALSE(r.rounds[0].applied) << "seed gave no dropout in round 0";
  EXPECT_NE(r.rounds[0].note.find("nothing applied"), std::string::npos) << r.rounds[0].note;
  model::GPT init(cfg.model, 1);
  init.init(cfg.seed);
  EXPECT_EQ(r.params, std::vector<float>(init.params(), init.params() + init.num_params()));
}

TEST(FedAvg, DpNoiseIsSeededAndDiffersAcrossClients) {
  Rng a = client_noise_rng(1, 0, 3), b = client_noise_rng(1, 1, 3), a2 = client_noise_rng(1, 0, 3);
  std::vector<float> x(64, 0.0f), y(64, 0.0f), z(64, 0.0f);
  add_gaussian(x.data(), 64, 1.0, a);
  add_gaussian(y.data(), 64, 1.0, b);
  add_gaussian(z.data(), 64, 1.0, a2);
  EXPECT_EQ(x, z);
  EXPECT_NE(x, y);
  std::vector<float> v = {3, 4};
  EXPECT_DOUBLE_EQ(clip_to_norm(v.data(), 2, 1.0), 5.0);
  EXPECT_NEAR(std::hypot(v[0], v[1]), 1.0, 1e-6);
  FedConfig cfg = tiny(4, 2, 3);
  cfg.dp_clip = 0.5, cfg.dp_noise = 1.0;
  const FedResult r1 = run(cfg), r2 = run(cfg);
  EXPECT_EQ(r1.params, r2.params);
  EXPECT_GT(r1.epsilon, 0);
  cfg.seed = 2;
  EXPECT_NE(run(cfg).params, r1.params);
}

TEST(DpSgd, ClipsEachExampleAndMatchesSgdWhenClippingIsInactive) {
  FedConfig cfg = tiny(1, 1, 1);
  data::Split split = data::open_split(cfg.data, cfg.seed);
  const int64_t n = data::num_windows(split.train->size(), 16, 16);
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
  DpSgdConfig d;
  d.seq = 16, d.batch = int(n), d.steps = 1, d.lr = 0.5f, d.seed = 3;
  auto step = [&](double clip, double noise) {
    model::GPT m(cfg.model, 64);
    m.init(cfg.seed);
    d.clip = clip, d.noise = noise;
    train_dp_sgd(m, *split.train, all, d);
    return std::vector<float>(m.params(), m.params() + m.num_params());
  };
  model::GPT ref(cfg.model, 64);
  ref.init(cfg.seed);
  const std::vector<float> w0(ref.params(), ref.params() + ref.num_params());
  // Full batch, clipping far above any gradient, negligible noise: one SGD step on the mean
  // of the per-example gradients = the mean gradient.
  gradient(ref, *split.train, all.data(), int(n), 16);
  std::vector<float> want(w0);
  for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5f * ref.grads()[i];
  expect_close(step(1e6, 1e-9), want, 5e-5);  // fp32 sums in another order
  // A tiny clip bounds the step: |mean of clipped| <= S, so |w1 - w0| <= lr S (+ noise).
  const std::vector<float> w1 = step(1e-3, 1e-9);
  double moved = 0;
  for (size_t i = 0; i < w1.size(); ++i) moved += std::pow(double(w1[i]) - w0[i], 2);
  EXPECT_LE(std::sqrt(moved), 0.5 * 1e-3 * 1.001);
  EXPECT_GT(std::sqrt(moved), 0.5 * 1e-3 * 0.1);  // clipped examples still agree in part
  // Noise: sigma S per coordinate on the sum, / B.
  const std::vector<float> w2 = step(1e-3, 100.0);
  double noise_moved = 0;
  for (size_t i = 0; i < w2.size(); ++i) noise_moved += std::pow(double(w2[i]) - w1[i], 2);
  const double expect = 0.5 * 100.0 * 1e-3 / double(n) * std::sqrt(double(w2.size()));
  EXPECT_NEAR(std::sqrt(noise_moved), expect, 0.1 * expect);
}

TEST(FedAvg, BadSettingsAreOneLine) {
  auto msg = [](FedConfig c) {
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  FedConfig c = tiny(4, 3, 1);
  c.secure_agg = true, c.threshold = 4;
  EXPECT_NE(msg(c).find("--threshold 4 is larger than the clients per round (3)"), std::string::npos);
  c = tiny(4, 3, 1);
  c.dp_clip = 1, c.dp_noise = 0;
  EXPECT_NE(msg(c).find("--noise-multiplier must be > 0 (got 0)"), std::string::npos);
  c.dp_clip = -1, c.dp_noise = 1;
  EXPECT_NE(msg(c).find("--clip-norm must be > 0 (got -1)"), std::string::npos);
  c = tiny(4, 5, 1);
  EXPECT_NE(msg(c).find("--per-round must be in [1, --clients = 4] (got 5)"), std::string::npos);
  try {
    open_fed_data("synthetic:100", 1, PartitionSpec{}, 8, 0, 16);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--clients 8 is more than the data's shards"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(PartitionSpec::parse("dirichlet:0"), Error);
  EXPECT_THROW(PartitionSpec::parse("zipf"), Error);
}

}  // namespace
}  // namespace strata::fed
