// The federated client loop: see server.h.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "fed/dp.h"
#include "fed/local.h"
#include "fed/secagg_protocol.h"
#include "fed/server.h"
#include "fed/wire.h"

namespace strata::fed {
namespace {

constexpr uint64_t kDropoutStream = 0xD809'0000'0000'0000ull;
constexpr uint64_t kLocalStream = 0x10CA'0000'0000'0000ull;

struct Client {
  comm::ProcessGroup& g;
  const FedConfig& cfg;
  int id;
  FedData data;
  model::GPT model;
  int64_t P;
  Traffic traffic;

  Client(comm::ProcessGroup& group, const FedConfig& c, int k)
      : g(group), cfg(c), id(k),
        data(open_fed_data(c.data, c.seed, c.partition, c.clients, k, c.local.seq)),
        model(c.model, batch_rows(c, data)), P(model.num_params()) {}

  static int batch_rows(const FedConfig& c, const FedData& d) {
    const int64_t n = int64_t(d.windows.size());
    return int(std::max<int64_t>(1, std::min<int64_t>(64, c.local.batch > 0 ? c.local.batch : n)));
  }

  void send(Kind kind, int64_t round, const void* p, uint64_t bytes, double a = 0, double b = 0,
            uint64_t train_ns = 0) {
    Header h;
    h.kind = uint16_t(kind);
    h.round = round;
    h.client = id;
    h.bytes = bytes;
    h.a = a;
    h.b = b;
    h.reserved = train_ns;
    send_message(g, 0, h, p, traffic);
  }
  void send(Kind kind, int64_t round, const std::vector<uint8_t>& p) {
    send(kind, round, p.data(), p.size());
  }
  // The server's next message of this round; nullopt-like false when it ends the round.
  bool expect(Kind kind, int64_t round, Message& m) {
    m = recv_message(g, 0, traffic);
    if (m.h.kind == uint16_t(Kind::control) && (m.h.flags & (kAbort | kExcluded))) return false;
    STRATA_CHECK(m.h.kind == uint16_t(kind) && m.h.round == round, "fed client ", id,
                 ": expected ", kind_name(kind), " for round ", round, ", got ",
                 kind_name(Kind(m.h.kind)), " for round ", m.h.round);
    return true;
  }
  // Where a simulated dropout leaves the round, a client injected to die (--inject-kill)
  // SIGKILLs itself: the server must tell the two apart by nothing but the closed channel.
  bool drops_out(int64_t round) const {
    auto listed = [&](const std::vector<int>& ids) {
      return std::find(ids.begin(), ids.end(), id) != ids.end();
    };
    if (round == cfg.kill_round && listed(cfg.kill_clients)) ::kill(::getpid(), SIGKILL);
    if (cfg.drop_round >= 0 && round >= cfg.drop_round && listed(cfg.drop_clients)) return true;
    if (cfg.dropout <= 0) return false;
    Rng r(cfg.seed, kDropoutStream + (uint64_t(id) << 32) + uint64_t(round));
    return r.uniform_double() < cfg.dropout;
  }
  void maybe_delay() const {
    if (id == cfg.slow_client && cfg.slow_s > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(cfg.slow_s));
  }
  uint64_t payload_words(int64_t round) const {  // an injected wrong size, for tests
    return id == cfg.bad_client && round == cfg.bad_round ? uint64_t(P) / 2 : uint64_t(P);
  }
};

void secure_round(Client& c, int64_t round, std::vector<float>& d, double samples,
                  uint64_t train_ns) {
  const FedConfig& cfg = c.cfg;
  secagg::ClientRound cr(c.id, uint64_t(round), cfg.t());
  c.send(Kind::keys, round, cr.advertise());
  Message m;
  if (!c.expect(Kind::roster, round, m)) return;
  c.send(Kind::shares, round, cr.share_keys(m.payload));
  if (!c.expect(Kind::shares_fwd, round, m)) return;
  cr.receive_shares(m.payload);
  if (c.drops_out(round)) {  // after its masks were shared: the server must rebuild them
    c.send(Kind::gone, round, nullptr, 0);
    return;
  }
  // x = quantized (n / n_mean) d, plus the weight word; DP: clipped d plus a noise share.
  const secagg::Quantizer q(cfg.sa_range, cfg.per_round);
  const double n_mean = double(c.data.total_windows) / cfg.clients;
  const double scale = cfg.dp() ? 1.0 : samples / n_mean;
  std::vector<uint32_t> x(size_t(c.P) + 1);
  for (int64_t i = 0; i < c.P; ++i) x[size_t(i)] = q.encode(float(scale * d[size_t(i)]));
  x[size_t(c.P)] = cfg.dp() ? 1u : uint32_t(samples);
  cr.mask(x);
  c.maybe_delay();
  const uint64_t words = round == cfg.bad_round && c.id == cfg.bad_client ? x.size() / 2 : x.size();
  c.send(Kind::masked, round, x.data(), words * 4, 0, 0, train_ns);
  if (!c.expect(Kind::survivors, round, m)) return;
  c.send(Kind::unmask, round, cr.unmask(m.payload));
}

void client_round(Client& c, int64_t round) {
  const FedConfig& cfg = c.cfg;
  Message m;
  if (!c.expect(Kind::model, round, m)) return;
  STRATA_CHECK(m.payload.size() == size_t(c.P) * 4, "fed client ", c.id, ": model of ",
               m.payload.size(), " bytes, expected ", c.P * 4);
  std::vector<float> w(size_t(c.P));
  std::memcpy(w.data(), m.payload.data(), m.payload.size());
  std::memcpy(c.model.params(), w.data(), m.payload.size());
  const int64_t t0 = now_ns();
  Rng rng(cfg.seed, kLocalStream + (uint64_t(c.id) << 32) + uint64_t(round));
  const LocalResult lr = train_local(c.model, *c.data.train, c.data.windows, cfg.local, rng);
  const uint64_t train_ns = uint64_t(now_ns() - t0);
  std::vector<float> d(size_t(c.P));
  const float* wl = c.model.params();
  for (int64_t i = 0; i < c.P; ++i) d[size_t(i)] = wl[i] - w[size_t(i)];
  if (cfg.dp()) {
    clip_to_norm(d.data(), c.P, cfg.dp_clip);
    if (cfg.secure_agg) {  // the server never sees the sum unnoised: each client adds a share
      Rng noise = client_noise_rng(cfg.seed, c.id, round);
      add_gaussian(d.data(), c.P, cfg.dp_noise * cfg.dp_clip / std::sqrt(double(cfg.t())), noise);
    }
  }
  if (cfg.secure_agg) return secure_round(c, round, d, double(lr.samples), train_ns);
  if (c.drops_out(round)) return c.send(Kind::gone, round, nullptr, 0);
  c.maybe_delay();
  c.send(Kind::update, round, d.data(), c.payload_words(round) * 4, double(lr.samples), lr.loss,
         train_ns);
}

}  // namespace

void run_client(comm::ProcessGroup& g, const FedConfig& cfg) {
  cfg.validate();
  STRATA_CHECK(g.rank() >= 1 && g.size() == cfg.clients + 1, "fed: a client is rank 1..",
               cfg.clients, " of ", cfg.clients + 1, " ranks, but this is rank ", g.rank(), " of ",
               g.size());
  secagg::init();
  Client c(g, cfg, g.rank() - 1);
  for (;;) {
    Message m = recv_message(g, 0, c.traffic);
    STRATA_CHECK(m.h.kind == uint16_t(Kind::control), "fed client ", c.id,
                 ": expected a control message, got ", kind_name(Kind(m.h.kind)));
    if (m.h.flags & kStop) return;
    if (!(m.h.flags & kParticipate)) continue;  // not sampled, or a late "excluded"/"abort"
    client_round(c, m.h.round);
  }
}

}  // namespace strata::fed
