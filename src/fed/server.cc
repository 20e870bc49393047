// The federated server loop: see server.h.
#include "fed/server.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "comm/transport.h"
#include "core/error.h"
#include "fed/accountant.h"
#include "fed/dp.h"
#include "fed/local.h"
#include "fed/secagg_protocol.h"
#include "fed/wire.h"

namespace strata::fed {
namespace {

struct Server {
  comm::ProcessGroup& g;
  const FedConfig& cfg;
  model::GPT model;
  int64_t P;
  FedData data;
  std::vector<Link> links;  // by client
  Traffic traffic;
  std::vector<uint64_t> client_bytes;
  std::vector<bool> took_part;  // sampled in at least one round
  std::vector<bool> dead;       // its process died: a dropout of every round from then on
  int64_t round_now = 0;
  std::vector<float> adam_m, adam_v;
  std::function<void(int, const Message&)> inspect;

  Server(comm::ProcessGroup& group, const FedConfig& c)
      : g(group), cfg(c), model(c.model, int(std::min<int64_t>(64, c.eval_windows))),
        P(model.num_params()),
        data(open_fed_data(c.data, c.seed, c.partition, c.clients, -1, c.local.seq)),
        client_bytes(size_t(c.clients), 0), took_part(size_t(c.clients), false),
        dead(size_t(c.clients), false) {
    for (int k = 0; k < c.clients; ++k) links.emplace_back(g, k + 1);
    model.init(c.seed);
  }

  // The transport tells a dead client (comm::Options::may_die) by failing the op with it;
  // `waited_s` is how long the server had been waiting on it when it learnt.
  void mark_dead(int client, const std::string& why, double waited_s) {
    dead[size_t(client)] = true;
    std::fprintf(stderr,
                 "strata fed: round %lld/%d: client %d died (%s), seen after %.3f s of waiting; a "
                 "dropout of this round and of every later one\n",
                 (long long)round_now + 1, cfg.rounds, client, why.c_str(), waited_s);
  }
  int alive() const { return int(std::count(dead.begin(), dead.end(), false)); }
  // Runs f, an op with `client`; false when it found the client dead (now marked so).
  template <typename F>
  bool with_client(int client, F&& f) {
    const int64_t t0 = now_ns();
    try {
      f();
      return true;
    } catch (const comm::detail::PeerDeadError& e) {
      mark_dead(client, e.what(), double(now_ns() - t0) / 1e9);
      return false;
    }
  }

  // Nothing goes to a dead client; a send that finds it dead marks it.
  void send(int client, Header h, const void* payload) {
    if (dead[size_t(client)]) return;
    h.client = client;
    const uint64_t before = traffic.sent;
    with_client(client, [&] { send_message(g, client + 1, h, payload, traffic); });
    client_bytes[size_t(client)] += traffic.sent - before;
  }
  void control(int client, int64_t round, uint32_t flags) {
    Header h;
    h.kind = uint16_t(Kind::control);
    h.round = round;
    h.flags = flags;
    send(client, h, nullptr);
  }
  void send_bytes(int client, Kind kind, int64_t round, const std::vector<uint8_t>& p) {
    Header h;
    h.kind = uint16_t(kind);
    h.round = round;
    h.bytes = p.size();
    send(client, h, p.data());
  }
};

// One message from each client in `from` before the deadline. accept(client, message) says
// whether it is valid; clients that were late or sent something invalid are told they are out
// of the round (they are still waiting for the server), those that announced leaving are not.
struct Collected {
  std::vector<int> accepted;
};
// The deadline (--deadline) runs from when the server starts waiting, after late messages
// still owed from earlier steps have been read.
Collected collect(Server& s, RoundRecord& rec, const std::vector<int>& from, Kind kind,
                  int64_t round, const std::function<bool(int, const Message&)>& accept,
                  uint64_t expect_bytes = 0) {
  for (int k : from)
    if (!s.dead[size_t(k)]) s.with_client(k, [&] { s.links[size_t(k)].post(s.traffic); });
  const int64_t deadline_ns = s.cfg.deadline_s > 0 ? now_ns() + int64_t(s.cfg.deadline_s * 1e9) : 0;
  Collected c;
  for (int k : from) {
    // A dead client counts as a dropout of the step it missed, as a `gone` would.
    if (s.dead[size_t(k)]) {
      ++rec.dropped, ++rec.died;
      continue;
    }
    Message m;
    const uint64_t before = s.traffic.received;
    bool arrived = false;
    if (!s.with_client(k, [&] { arrived = s.links[size_t(k)].wait(deadline_ns, m, s.traffic); })) {
      ++rec.dropped, ++rec.died;
      continue;
    }
    s.client_bytes[size_t(k)] += s.traffic.received - before;
    if (arrived && s.inspect) s.inspect(k, m);
    if (!arrived) {
      ++rec.late;
      s.control(k, round, kExcluded);
      continue;
    }
    const Header& h = m.h;
    if (h.magic == Header{}.magic && h.kind == uint16_t(Kind::gone) && h.round == round &&
        h.client == k) {
      ++rec.dropped;
      continue;
    }
    const bool framed = h.magic == Header{}.magic && h.version == Header{}.version &&
                        h.kind == uint16_t(kind) && h.round == round && h.client == k &&
                        (expect_bytes == 0 || h.bytes == expect_bytes);
    if (framed && accept(k, m)) {
      c.accepted.push_back(k);
      continue;
    }
    ++rec.rejected;
    std::fprintf(stderr,
                 "strata fed: round %lld: rejected client %d's message: %s of %llu bytes for round "
                 "%lld (expected %s%s for round %lld); the round goes on\n",
                 (long long)round, k, kind_name(Kind(h.kind)), (unsigned long long)h.bytes,
                 (long long)h.round, kind_name(kind),
                 expect_bytes ? cat(" of ", expect_bytes, " bytes").c_str() : "", (long long)round);
    s.control(k, round, kExcluded);
  }
  return c;
}

// Plain aggregation: the mean update over the survivors (weighted by samples; DP: clipped,
// noised, fixed denominator C). Returns false when nothing arrived.
bool aggregate_plain(Server& s, RoundRecord& rec, const std::vector<int>& sel, int64_t round,
                     std::vector<float>& mean) {
  const FedConfig& cfg = s.cfg;
  std::vector<double> sum(size_t(s.P), 0.0);
  double weight = 0, loss = 0;
  auto accept = [&](int k, const Message& m) {
    if (m.h.bytes != uint64_t(s.P) * 4 || !(m.h.a >= 1)) return false;
    const float* d = reinterpret_cast<const float*>(m.payload.data());
    const double w = cfg.dp() ? 1.0 : m.h.a;
    for (int64_t i = 0; i < s.P; ++i) sum[size_t(i)] += w * d[i];
    weight += w;
    loss += m.h.b;
    rec.max_local_s = std::max(rec.max_local_s, double(m.h.reserved) / 1e9);
    return true;
  };
  Collected c = collect(s, rec, sel, Kind::update, round, accept, uint64_t(s.P) * 4);
  rec.survivors = int(c.accepted.size());
  if (c.accepted.empty()) {
    rec.note = "no update arrived";
    return false;
  }
  rec.train_loss = loss / double(c.accepted.size());
  mean.assign(size_t(s.P), 0.0f);
  if (cfg.dp()) {
    for (int64_t i = 0; i < s.P; ++i) mean[size_t(i)] = float(sum[size_t(i)]);
    Rng noise = server_noise_rng(cfg.seed, round);
    add_gaussian(mean.data(), s.P, cfg.dp_noise * cfg.dp_clip, noise);
    for (float& x : mean) x /= float(cfg.per_round);
  } else {
    for (int64_t i = 0; i < s.P; ++i) mean[size_t(i)] = float(sum[size_t(i)] / weight);
  }
  return true;
}

// Secure aggregation: the four stages of secagg_protocol.h. Returns false (round aborted,
// nothing applied) below the threshold.
bool aggregate_secure(Server& s, RoundRecord& rec, const std::vector<int>& sel, int64_t round,
                      std::vector<float>& mean) {
  const FedConfig& cfg = s.cfg;
  const size_t words = size_t(s.P) + 1;
  secagg::ServerRound sr(uint64_t(round), cfg.t(), words);
  std::vector<int> in = sel;  // clients waiting for the server's next message
  auto abort_round = [&](const std::string& why) {
    for (int k : in) s.control(k, round, kAbort);
    rec.note = "secure aggregation aborted: " + why + "; nothing applied";
    return false;
  };
  try {
    in = collect(s, rec, in, Kind::keys, round,
                 [&](int k, const Message& m) { return sr.add_keys(k, m.payload); }).accepted;
    const auto roster = sr.roster();
    for (int k : in) s.send_bytes(k, Kind::roster, round, roster);
    in = collect(s, rec, in, Kind::shares, round,
                 [&](int k, const Message& m) { return sr.add_shares(k, m.payload); }).accepted;
    if (int(in.size()) < cfg.t())
      throw secagg::RoundAborted(cat("only ", in.size(), " of ", sel.size(),
                                     " clients shared their keys, below the threshold ", cfg.t()));
    for (int k : in) s.send_bytes(k, Kind::shares_fwd, round, sr.forward_for(k));
    auto masked = [&](int k, const Message& m) {
      if (!sr.add_masked(k, m.payload)) return false;
      rec.max_local_s = std::max(rec.max_local_s, double(m.h.reserved) / 1e9);
      return true;
    };
    in = collect(s, rec, in, Kind::masked, round, masked, words * 4).accepted;
    const auto surv = sr.survivors();
    for (int k : in) s.send_bytes(k, Kind::survivors, round, surv);
    rec.survivors = int(in.size());
    collect(s, rec, in, Kind::unmask, round,
            [&](int k, const Message& m) { return sr.add_unmask(k, m.payload); });
    in.clear();  // unmasking ends the round for every client
    const std::vector<uint32_t> sum = sr.finish();
    const secagg::Quantizer q(cfg.sa_range, cfg.per_round);
    const double denom = cfg.dp() ? double(cfg.per_round)
                                  : double(sum[words - 1]) / (double(s.data.total_windows) / cfg.clients);
    mean.resize(size_t(s.P));
    for (int64_t i = 0; i < s.P; ++i) mean[size_t(i)] = float(q.decode(sum[size_t(i)]) / denom);
    return true;
  } catch (const secagg::RoundAborted& e) {
    return abort_round(e.what());
  }
}

void apply_update(Server& s, const std::vector<float>& d) {
  float* w = s.model.params();
  const FedConfig& cfg = s.cfg;
  if (cfg.server_opt == ServerOpt::avg) {
    for (int64_t i = 0; i < s.P; ++i) w[i] += cfg.server_lr * d[size_t(i)];
    return;
  }
  if (s.adam_m.empty()) s.adam_m.assign(size_t(s.P), 0.0f), s.adam_v.assign(size_t(s.P), 0.0f);
  for (int64_t i = 0; i < s.P; ++i) {
    float& m = s.adam_m[size_t(i)];
    float& v = s.adam_v[size_t(i)];
    m = cfg.adam_beta1 * m + (1 - cfg.adam_beta1) * d[size_t(i)];
    v = cfg.adam_beta2 * v + (1 - cfg.adam_beta2) * d[size_t(i)] * d[size_t(i)];
    w[i] += cfg.server_lr * m / (std::sqrt(v) + cfg.adam_tau);
  }
}

// Every live client: its late message read, then told to stop.
void stop_clients(Server& s, int64_t round) {
  for (int k = 0; k < s.cfg.clients; ++k) {
    if (!s.dead[size_t(k)]) s.with_client(k, [&] { s.links[size_t(k)].drain(s.traffic); });
    s.control(k, round, kStop);
  }
}

// Waits (up to 10 s each) until the live clients told to stop have left the group, which
// fails a receive posted on them: a job that fails next has the launcher stop whoever is
// left with SIGTERM, and a client caught still exiting would write a flight dump for nothing.
void await_exits(Server& s) {
  for (int k = 0; k < s.cfg.clients; ++k) {
    if (s.dead[size_t(k)]) continue;
    try {
      Message m;
      s.links[size_t(k)].post(s.traffic);
      s.links[size_t(k)].wait(now_ns() + int64_t(10e9), m, s.traffic);
    } catch (const comm::detail::PeerDeadError&) {
    }
  }
}

RoundRecord run_round(Server& s, int64_t round) {
  const FedConfig& cfg = s.cfg;
  RoundRecord rec;
  rec.round = round;
  const Traffic before = s.traffic;
  const int64_t t0 = now_ns();
  s.round_now = round;
  const std::vector<int> sel = sample_clients(cfg.seed, round, cfg.clients, cfg.per_round);
  rec.selected = int(sel.size());
  size_t next = 0;
  for (int k = 0; k < cfg.clients; ++k) {
    const bool in = next < sel.size() && sel[next] == k;
    next += in;
    s.control(k, round, in ? kParticipate : 0);
    if (!in) continue;
    s.took_part[size_t(k)] = true;
    Header h;
    h.kind = uint16_t(Kind::model);
    h.round = round;
    h.bytes = uint64_t(s.P) * 4;
    s.send(k, h, s.model.params());
  }
  std::vector<float> mean;
  rec.applied = cfg.secure_agg ? aggregate_secure(s, rec, sel, round, mean)
                               : aggregate_plain(s, rec, sel, round, mean);
  if (rec.applied) apply_update(s, mean);
  rec.wall_s = double(now_ns() - t0) / 1e9;
  rec.bytes_down = s.traffic.sent - before.sent;
  rec.bytes_up = s.traffic.received - before.received;
  if ((cfg.eval_every > 0 && (round + 1) % cfg.eval_every == 0) || round + 1 == cfg.rounds)
    rec.eval_loss = evaluate(s.model, *s.data.val, cfg.eval_windows, cfg.local.seq);
  return rec;
}

}  // namespace

FedResult run_server(comm::ProcessGroup& g, const FedConfig& cfg,
                     const std::function<void(const RoundRecord&)>& on_round,
                     const std::function<void(int client, const Message&)>& inspect) {
  cfg.validate();
  STRATA_CHECK(g.rank() == 0 && g.size() == cfg.clients + 1, "fed: the server is rank 0 of ",
               cfg.clients + 1, " ranks (--clients ", cfg.clients, " + 1), but this is rank ",
               g.rank(), " of ", g.size());
  secagg::init();
  Server s(g, cfg);
  s.inspect = inspect;
  FedResult r;
  const int64_t t0 = now_ns();
  for (int64_t round = 0; round < cfg.rounds; ++round) {
    RoundRecord rec = run_round(s, round);
    r.rejected += rec.rejected;
    if (rec.eval_loss >= 0) r.eval_loss = rec.eval_loss;
    if (on_round) on_round(rec);
    const bool applied = rec.applied;
    r.rounds.push_back(std::move(rec));
    const int needed = cfg.secure_agg ? cfg.t() : 1;
    if (applied || s.alive() >= needed) continue;
    // The dead never come back: with fewer live clients than a round needs, no later round
    // can complete. The live ones are told to stop, so that none is left waiting.
    std::string gone;
    for (int k = 0; k < cfg.clients; ++k)
      if (s.dead[size_t(k)]) gone += cat(gone.empty() ? "" : ", ", k);
    stop_clients(s, round);
    await_exits(s);
    fail("round ", round + 1, "/", cfg.rounds, ": ", r.rounds.back().note, "; client",
         cfg.clients - s.alive() == 1 ? " " : "s ", gone, " died and ", s.alive(), " of ", cfg.clients,
         " remain", cfg.secure_agg ? cat(", below the threshold ", needed) : std::string(),
         ": no later round can complete");
  }
  stop_clients(s, cfg.rounds);
  r.wall_s = double(now_ns() - t0) / 1e9;
  r.bytes_total = s.traffic.sent + s.traffic.received;
  uint64_t active_bytes = 0;
  int active = 0;
  for (int k = 0; k < cfg.clients; ++k)
    if (s.took_part[size_t(k)]) active_bytes += s.client_bytes[size_t(k)], ++active;
  r.bytes_per_client = double(active_bytes) / std::max(1, active);
  if (cfg.dp()) {
    SgmQuery q;
    q.q = double(cfg.per_round) / cfg.clients;
    q.sigma = cfg.dp_noise;
    q.steps = cfg.rounds;
    q.delta = cfg.dp_delta;
    r.epsilon = epsilon(q).epsilon;
  }
  r.params.assign(s.model.params(), s.model.params() + s.P);
  return r;
}

}  // namespace strata::fed
