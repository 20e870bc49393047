// Layer costs, split and planned step of a pipeline run: terms in train/pipeline_costs.h.
#include "train/pipeline_costs.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "core/env.h"
#include "core/error.h"
#include "core/stats.h"
#include "core/timer.h"
#include "train/metrics.h"

namespace strata::train {

namespace pl = parallel::pipeline;
using nlohmann::json;

static const EnvVar kPpCosts("STRATA_PP_COSTS", "measure",
                             "pipeline: what the default layer split balances and the planned "
                             "bubble uses: measure (time each layer type on rank 0 at the "
                             "run's shapes) or estimate (flop counts; no timing, transfer 0)");

namespace {

bool measuring() {
  const std::string v = kPpCosts.get();
  STRATA_CHECK(v == "measure" || v == "estimate", "STRATA_PP_COSTS=", v,
               " is not measure or estimate");
  return v == "measure";
}

// Half the median round trip of one message between pp ranks 0 and 1, on every pp rank.
double measure_transfer(comm::ProcessGroup& pp, int64_t floats) {
  constexpr int kTrips = 5, kTag = 1 << 30;
  double t = 0;
  if (pp.rank() < 2) {
    std::vector<float> buf(size_t(floats), 0.0f);
    const int peer = 1 - pp.rank();
    std::vector<double> trips;
    for (int r = 0; r <= kTrips; ++r) {
      const int64_t t0 = now_ns();
      if (pp.rank() == 0) {
        pp.send(buf.data(), buf.size(), DType::f32, peer, kTag);
        pp.recv(buf.data(), buf.size(), DType::f32, peer, kTag);
      } else {
        pp.recv(buf.data(), buf.size(), DType::f32, peer, kTag);
        pp.send(buf.data(), buf.size(), DType::f32, peer, kTag);
      }
      if (r > 0) trips.push_back(double(now_ns() - t0) * 1e-9);
    }
    t = median(trips) / 2;
  }
  pp.broadcast(&t, 1, 0);
  return t;
}

json pass_json(const model::PassCost& p, double unit) {
  return {{"f", p.f * unit}, {"b", p.b * unit}, {"w", p.w * unit}};
}

}  // namespace

PipelineCosts pipeline_costs(const TrainConfig& cfg, const ParallelConfig& pc,
                             const pl::Schedule& sched, int micro_batch, DType compute,
                             int64_t msg_floats, comm::ProcessGroup& world,
                             comm::ProcessGroup* pp) {
  const pl::PipelineOptions& o = pc.pipeline;
  const bool measure = measuring();
  PipelineCosts out;
  out.costs = model::estimate_layer_costs(cfg.model, cfg.train_seq(), sched.split_backward);
  if (measure) {
    if (world.rank() == 0) {
      if (cfg.threads > 0) omp_set_num_threads(cfg.threads), openblas_set_num_threads(cfg.threads);
      out.costs = model::measure_layer_costs(cfg.model, micro_batch, cfg.train_seq(), compute,
                                             sched.split_backward);
    }
    double v[9];
    const model::PassCost* parts[3] = {&out.costs.embed, &out.costs.block, &out.costs.head};
    for (int i = 0; i < 3; ++i) v[3 * i] = parts[i]->f, v[3 * i + 1] = parts[i]->b, v[3 * i + 2] = parts[i]->w;
    world.broadcast(v, 9, 0);
    out.costs.embed = {v[0], v[1], v[2]};
    out.costs.block = {v[3], v[4], v[5]};
    out.costs.head = {v[6], v[7], v[8]};
    out.costs.measured = true;
  }
  out.chunks = model::split_layers(cfg.model, sched.stages, sched.virt, o.split, out.costs);
  out.split_from = !o.split.empty() ? "--pp-split" : measure ? "measured costs" : "estimated costs";
  if (measure && pp && pp->size() > 1) out.transfer_s = measure_transfer(*pp, msg_floats);
  pl::Costs c;
  c.transfer = out.transfer_s;
  for (const model::StageChunk& ch : out.chunks) {
    const model::PassCost p = model::chunk_cost(out.costs, ch);
    c.virt.push_back({p.f, p.b, p.w});
  }
  out.planned = pl::predict(sched.kind, sched.stages, sched.micro, sched.virt, c);
  out.model = c;
  return out;
}

pl::Prediction replay(const PipelineCosts& c, const pl::Schedule& sched,
                      const std::vector<double>& busy_s) {
  pl::Costs k = c.model;
  const int P = sched.stages;
  for (int s = 0; s < P; ++s) {
    double per_micro = 0;
    for (int ch = 0; ch < sched.virt; ++ch) {
      const pl::Costs::Virtual& v = k.virt.at(size_t(sched.virtual_stage(s, ch)));
      per_micro += v.f + v.b + v.w;
    }
    const double scale = per_micro > 0 ? busy_s.at(size_t(s)) / (sched.micro * per_micro) : 1;
    for (int ch = 0; ch < sched.virt; ++ch) {
      pl::Costs::Virtual& v = k.virt[size_t(sched.virtual_stage(s, ch))];
      v.f *= scale, v.b *= scale, v.w *= scale;
    }
  }
  return pl::predict(sched.kind, P, sched.micro, sched.virt, k);
}

PipelineStep account_step(const pl::Executor& ex, const PipelineCosts& c, comm::ProcessGroup& pp) {
  const pl::Schedule& sched = ex.schedule();
  const int P = sched.stages;
  // Each wait split at the moment the peer posted its send (executor.h: MessageTimes).
  const std::vector<int64_t>& sent = ex.messages().sent_ns;
  std::vector<int64_t> all_sent(sent.size() * size_t(P));
  pp.all_gather(sent.data(), all_sent.data(), sent.size(), DType::i64);
  const pl::WaitSplit split = pl::split_waits(sched, ex.messages(), all_sent);
  constexpr int kT = 5;
  const double mine[kT] = {ex.last().busy_s, ex.last().step_s, ex.last().recv_wait_s,
                           split.peer_s, split.transfer_s};
  std::vector<double> all(size_t(kT * P));
  pp.all_gather(mine, all.data(), kT, DType::f64);
  json busy = json::array(), bub = json::array(), waits = json::array(), peer = json::array(),
       transfer = json::array();
  PipelineStep out;
  std::vector<double> busy_s;
  // The schedule's time is the longest stage's (the stages start together, after the previous
  // step's gradient-norm all-reduce over pp): a stage that finishes early (the last one, whose
  // last backward comes before the first stage's) is idle for the rest, as in the formula.
  double span = 0;
  for (int s = 0; s < P; ++s) span = std::max(span, all[size_t(kT * s + 1)]);
  for (int s = 0; s < P; ++s) {
    const double* x = &all[size_t(kT * s)];
    const double bf = span > 0 ? 1 - x[0] / span : 0;
    out.bubble_own_window += x[1] > 0 ? (1 - x[0] / x[1]) / P : 0;
    busy_s.push_back(x[0]);
    busy.push_back(x[0] * 1e3);
    waits.push_back(x[2] * 1e3);
    peer.push_back(x[3] * 1e3);
    transfer.push_back(x[4] * 1e3);
    bub.push_back(bf);
    out.bubble_mean += bf / P;
    out.transfer_share += span > 0 ? x[4] / span / P : 0;
  }
  out.replayed = replay(c, sched, busy_s).bubble;
  out.record = {{"pp_busy_ms", busy},       {"pp_recv_wait_ms", waits},
                {"pp_peer_wait_ms", peer},  {"pp_transfer_wait_ms", transfer},
                {"pp_bubble", bub},         {"pp_bubble_replayed", out.replayed},
                {"pp_bubble_mean", out.bubble_mean}, {"pp_schedule_ms", span * 1e3}};
  return out;
}

json pipeline_costs_json(const PipelineCosts& c) {
  const double unit = c.costs.measured ? 1e3 : 1;  // ms, or relative flops
  json sizes = json::array();
  for (const model::StageChunk& ch : c.chunks) sizes.push_back(ch.end - ch.begin);
  return {{"split", sizes},
          {"split_from", c.split_from},
          {"layer_costs",
           {{"unit", c.costs.measured ? "ms per micro-batch" : "flops per token"},
            {"embedding", pass_json(c.costs.embed, unit)},
            {"block", pass_json(c.costs.block, unit)},
            {"head", pass_json(c.costs.head, unit)}}},
          {"transfer_ms", c.transfer_s * 1e3},
          {"bubble_planned", c.planned.bubble},
          {"bubble_planned_no_transfer", c.planned.bubble_ideal}};
}

std::string pipeline_costs_line(const PipelineCosts& c) {
  std::string sizes;
  for (const model::StageChunk& ch : c.chunks) sizes += cat(sizes.empty() ? "" : ",", ch.end - ch.begin);
  const bool ms = c.costs.measured;
  auto tot = [&](const model::PassCost& p) {
    return ms ? fmt("%.2f ms", p.total() * 1e3) : fmt("%.3g flops/token", p.total());
  };
  return cat("pipeline split ", sizes, " (", c.split_from, "); per micro-batch forward + backward",
             ms ? " (measured)" : " (estimated)", ": embedding ", tot(c.costs.embed), ", block ",
             tot(c.costs.block), ", head ", tot(c.costs.head), "; stage-to-stage message ",
             fmt("%.3f", c.transfer_s * 1e3), " ms; planned bubble ", fmt("%.3f", c.planned.bubble));
}

}  // namespace strata::train
