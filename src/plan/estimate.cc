// Per-layout estimate: terms and formulas in estimate.h.
#include "plan/estimate.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "cost/flops.h"
#include "cost/stage_activations.h"
#include "model/parallel_rules.h"
#include "parallel/pipeline/predict.h"

namespace strata::plan {

namespace {

int64_t layers_on_stage(const ModelSpec& m, int pp) { return (m.layers + pp - 1) / pp; }

// K/V width one tensor-parallel rank holds: heads are split, or one head is replicated per
// rank when tp exceeds the KV heads.
double kv_local(const ModelSpec& m, int tp) { return double(cost::kv_columns(gpt_shape(m), tp)); }

// Tokens of one micro-batch on one context-parallel rank, and the divisor that sequence
// parallelism applies to activations outside the tensor-parallel regions.
struct Shape {
  double s_loc, b, h, sbh, act_div;
  bool sp;
};

Shape shape_of(const TrainSetup& s, const Layout& l) {
  Shape x;
  x.s_loc = double(s.model.seq) / l.cp;
  x.b = l.micro_batch;
  x.h = double(s.model.hidden);
  x.sbh = x.s_loc * x.b * x.h;
  x.sp = s.seq_parallel && l.tp > 1;
  x.act_div = x.sp ? l.tp : 1;
  return x;
}

LayerShape layer_shape(const TrainSetup& s, const Layout& l) {
  const ModelSpec& m = s.model;
  LayerShape x;
  x.s = double(m.seq) / l.cp;
  x.s_kv = double(m.seq);
  x.b = l.micro_batch;
  x.h = double(m.hidden);
  x.a = double(m.heads);
  x.kv_hidden = double(m.kv_hidden());
  x.ffn = double(m.ffn);
  x.gated = m.mlp == MlpKind::swiglu;
  x.dropout = m.dropout;
  x.experts_per_token = m.moe() ? double(m.top_k) : 1.0;
  if (m.moe()) {
    // Each token's MLP input and hidden units: K routed copies of fe units, and the shared
    // experts' input and S·fe units, counted as one more MLP of the mean width.
    const double mlps = double(m.top_k) + (m.shared_experts > 0 ? 1 : 0);
    x.ffn = (double(m.top_k) * double(m.expert_width()) + double(m.shared_width())) / mlps;
    x.experts_per_token = mlps;
  }
  return x;
}

}  // namespace

StageParams stage_params(const ModelSpec& m, const Layout& l, bool first, bool last) {
  m.validate();
  const cost::GptShape g = gpt_shape(m);
  const int tp = l.tp;
  const int64_t h = m.hidden, f = m.ffn;
  const bool gated = m.mlp == MlpKind::swiglu;
  const int64_t mats = gated ? 3 : 2;
  // One MLP of w hidden units on a tp rank, and its matrices' elements.
  auto mlp_of = [&](int64_t w) { return cost::mlp_params_of(g, tp, w); };
  auto mats_of = [&](int64_t w) { return cost::mlp_params(h, tp, w, gated, /*biases=*/false); };
  // MoE: the router and the shared experts are dense (replicated over ep, split over tp as the
  // dense MLP); the rank's E/ep routed experts of fe units each are the expert parameters.
  const int64_t fe = m.expert_width(), fs = m.moe() ? m.shared_width() : 0;
  const int64_t moe_mlp = cost::router_params(g) + cost::shared_mlp_params(g, tp);
  const int64_t dense_layer = cost::attention_params(g, tp) + 2 * cost::norm_params(g) +
                              (m.moe() ? moe_mlp : mlp_of(f));
  const int64_t expert_layer = m.moe() ? (m.experts / l.ep) * cost::expert_mlp_params(g, tp) : 0;
  const int64_t layers = layers_on_stage(m, l.pp);
  StageParams p;
  p.dense = layers * dense_layer;
  p.expert = layers * expert_layer;
  p.layers = layers;
  p.dense_blocks = layers * dense_layer;
  // Muon's matrices: q, k, v, o and the MLP's (each expert's), as parallel/muon.h cuts them.
  p.muon_dense =
      layers * (cost::attention_matrix_params(g, tp) + (m.moe() ? mats_of(fs) : mats_of(f)));
  p.muon_expert = layers * (m.moe() ? (m.experts / l.ep) * mats_of(fe) : 0);
  // Each matrix is orthogonalised whole (a tp rank gathers its slices first).
  auto mlp_ns = [&](int64_t w) {
    return (mats - 1) * cost::newton_schulz_flops(w, h, 5) +
           cost::newton_schulz_flops(h, w, 5);
  };
  const double mlps_ns = m.moe() ? double(m.experts / l.ep) * mlp_ns(fe) + (fs > 0 ? mlp_ns(fs) : 0.0)
                                 : mlp_ns(f);
  p.ns_flops = double(layers) * (2 * cost::newton_schulz_flops(h, h, 5) +
                                 2 * cost::newton_schulz_flops(m.kv_hidden(), h, 5) + mlps_ns);
  p.largest_layer = dense_layer + expert_layer;
  // The vocabulary's rows on the largest tp rank (the last: the uneven split's remainder).
  const int64_t vocab_rows = cost::embedding_params(g, tp, tp - 1);
  if (first) p.dense += vocab_rows + cost::position_params(g);
  if (last) {
    p.dense += cost::norm_params(g);
    if (!m.tied || l.pp > 1) p.dense += vocab_rows;  // the head (a tied copy on the last stage)
  }
  return p;
}

bool engine_describes(const ModelSpec& m) {
  if (m.moe()) return false;
  const bool gpt = m.mlp == MlpKind::gelu && m.ffn == cost::default_ffn(false, m.hidden) &&
                   m.kv_heads == m.heads && m.layernorm && m.biases && m.learned_pos && m.tied;
  const bool llama = m.mlp == MlpKind::swiglu && !m.layernorm && !m.biases && !m.learned_pos;
  return gpt || llama;
}

bool engine_runs(const ModelSpec& m, const Layout& l) {
  // strata's tp ranks take whole key/value heads or share one (model/shard.cc).
  return engine_describes(m) && model::splits_kv_heads(m.kv_heads, l.tp);
}

std::string korthikanti_reason(const ModelSpec& m, const Layout& l) {
  if (m.moe()) return "MoE blocks are not in the engine's formula";
  if (!engine_describes(m)) return "a layer neither strata's GPT-2 nor its Llama block";
  if (!engine_runs(m, l))
    return cat(m.kv_heads, " KV heads neither divide nor are divisible by tp ", l.tp);
  return "a shape past the engine formula's int64 counts";
}

cost::GptShape engine_shape(const ModelSpec& m, Recompute r) {
  cost::GptShape g = gpt_shape(m);
  g.recompute = r;
  g.recomputed_layers = r == Recompute::full ? m.layers : 0;
  return g;
}

std::vector<int> chunk_slots_of(const TrainSetup& s, int pp, int64_t micro, int stage) {
  if (pp == 1) return {1};
  const int M = int(std::min<int64_t>(micro, std::numeric_limits<int>::max()));
  return parallel::pipeline::predicted_slots(s.schedule, pp, M, s.virtual_stages, stage);
}

namespace {

// Whether the engine's formula, which counts in int64, stays exact for micro-batches of b
// sequences of s tokens held `slots` times: a bound on every term (per token, at most
// L·(30h + 6f + a) + V + 64h + 6f + 64 floats per slot) below 2^62 bytes, far past any GPU.
// Past it (shapes no cluster holds) the floating-point Korthikanti terms report the size.
bool engine_counts_exactly(const ModelSpec& m, const Layout& l, int slots) {
  const double h = double(m.hidden), f = double(m.ffn);
  const double per_token = double(m.layers) * (30.0 * h + 6.0 * f + double(m.heads)) +
                           double(m.padded_vocab()) + 64.0 * h + 6.0 * f + 64;
  return 4 * double(slots) * double(l.micro_batch) * double(m.seq) * per_token < 0x1p62;
}

// Activation bytes of pipeline stage `stage` (P = 1: the only one) on one GPU, the chunks of
// its virtual stages c·P + stage holding ⌈L/(P·V)⌉ blocks each and the schedule's slots;
// sets *in_flight to the micro-batches its slots hold (summed over chunks) and *engine to
// whether they are the engine's buffers.
double stage_activations(const TrainSetup& s, const Layout& l, int stage, int* in_flight,
                         bool* engine) {
  const ModelSpec& m = s.model;
  const Shape x = shape_of(s, l);
  const int P = l.pp;
  const std::vector<int> slots = chunk_slots_of(s, P, l.micro_batches(s.global_batch), stage);
  const int V = int(slots.size());
  const int64_t blocks = (m.layers + int64_t(P) * V - 1) / (int64_t(P) * V);
  *in_flight = 0;
  for (int c = 0; c < V; ++c) *in_flight += slots[size_t(c)];
  const bool first = stage == 0, last = stage == P - 1;
  *engine = engine_runs(m, l) && engine_counts_exactly(m, l, *in_flight);
  if (*engine) {  // strata's GPT-2 or Llama: the engine's buffers on its largest tp rank
    const cost::GptShape g = engine_shape(m, l.recompute);
    const bool bf16 = s.precision == Precision::bf16, ring = s.cp_mode == CpMode::ring;
    if (P == 1)
      return double(l.cp > 1 ? cost::cp_activation_bytes(g, l.tp, x.sp, l.tp - 1, l.micro_batch,
                                                         bf16, ring, l.cp, m.seq)
                             : cost::tp_activation_bytes(g, l.tp, x.sp, l.tp - 1, l.micro_batch,
                                                         bf16));
    std::vector<cost::ChunkSlots> chunks;
    for (int c = 0; c < V; ++c) {
      const int v = c * P + stage;
      chunks.push_back({blocks, l.recompute == Recompute::full ? blocks : 0, v == 0,
                        v == P * V - 1, slots[size_t(c)]});
    }
    const bool split = s.schedule == parallel::pipeline::ScheduleKind::zb;  // W keeps a stash
    return double(cost::stage_activation_buffers(g, chunks, split, l.tp, x.sp, l.tp - 1,
                                                 l.micro_batch, bf16, l.cp, ring, m.seq)
                      .total());
  }
  // Korthikanti et al.'s terms (MoE, layers or layouts strata does not run: korthikanti_reason).
  const LayerShape ls = layer_shape(s, l);
  double acts =
      double(*in_flight) * double(blocks) * layer_activation_bytes(ls, l.tp, x.sp, l.recompute);
  if (first && m.dropout) acts += slots[0] * x.sbh / x.act_div;  // embedding's 1-byte mask
  if (last)
    acts += 4 * x.sbh / x.act_div +                                    // final norm, head input
            4 * x.s_loc * x.b * double(m.padded_vocab()) / l.tp;       // fp32 logits
  if (l.recompute == Recompute::full)  // the backward's working layer
    acts += layer_activation_bytes(ls, l.tp, x.sp, Recompute::none);
  return acts;
}

}  // namespace

MemoryEstimate estimate_memory(const TrainSetup& s, const Layout& l) {
  const ModelSpec& m = s.model;
  const StateBytesPerParam per = s.state_bytes();
  const Shape x = shape_of(s, l);
  const int64_t n_dense = int64_t(l.dp) * l.cp, n_expert = n_dense / l.ep;

  auto stage = [&](bool first, bool last) {
    MemoryEstimate e;
    StageParams p = stage_params(m, l, first, last);
    e.dense_params = p.dense;
    e.expert_params = p.expert;
    e.states = zero_model_state_bytes(p.dense, n_dense, l.zero, per);
    e.states += zero_model_state_bytes(p.expert, n_expert, l.zero, per);
    if (s.optimizer == Optimizer::muon) {
      e.muon_params = p.muon_dense + p.muon_expert;
      e.ns_flops = p.ns_flops;
      e.states.optimizer -= muon_saving_bytes(p.muon_dense, n_dense, l.zero) +
                            (p.muon_expert > 0 ? muon_saving_bytes(p.muon_expert, n_expert, l.zero) : 0);
    }
    e.activations =
        stage_activations(s, l, first ? 0 : l.pp - 1, &e.in_flight, &e.engine_activations);
    const bool engine = e.engine_activations;
    // Communication buffers.
    double buf = 0;
    if (l.zero == 1 || l.zero == 2)
      buf += std::min(2 * s.bucket_mib * 1048576.0, double(e.states.gradients));
    if (l.zero == 3) buf += double(p.largest_layer) * (2 * per.parameter + per.gradient);
    if (x.sp && !engine) buf += 2 * x.sbh;  // gathered layer input (the engine's tp scratch)
    if (l.pp > 1) buf += 2 * 2 * x.sbh / x.act_div;                    // send and receive
    if (l.ep > 1) buf += 2 * 2 * x.sbh * double(m.top_k) / x.act_div;  // dispatch, combine
    if (l.cp > 1 && s.cp_mode == CpMode::ring && !engine)  // (the engine's: cp_buffer_bytes)
      buf += 2 * 2 * x.s_loc * x.b * kv_local(m, l.tp) * 2;  // K and V, double-buffered
    // Muon at stages 1-3: two blocks gathered in fp32 at once (one in flight while the other
    // is orthogonalised).
    if (s.optimizer == Optimizer::muon && l.zero >= 1) buf += 2.0 * 4 * double(p.largest_layer);
    e.comm_buffers = buf;
    return e;
  };
  if (l.pp == 1) {
    MemoryEstimate e = stage(true, true);
    e.stage = "only";
    return e;
  }
  MemoryEstimate a = stage(true, false), b = stage(false, true);
  a.stage = "first";
  b.stage = "last";
  return a.total() >= b.total() ? a : b;
}

namespace {

struct Links {
  Link tp, cp, ep, dp, dp_expert, pp;
  bool cp_inter, ep_inter, dp_inter, dpe_inter, pp_inter;
};

Links links_of(const TrainSetup& s, const Layout& l) {
  const int64_t G = s.gpu.gpus_per_node;
  Links k;
  k.tp = s.gpu.intra;
  k.cp_inter = !group_in_node(l.tp, l.cp, G);
  k.ep_inter = !group_in_node(l.tp, l.ep, G);
  k.dp_inter = !group_in_node(l.tp, int64_t(l.cp) * l.dp, G);
  k.dpe_inter = !group_in_node(int64_t(l.tp) * l.ep, int64_t(l.cp) * l.dp / l.ep, G);
  k.pp_inter = !group_in_node(int64_t(l.tp) * l.cp * l.dp, l.pp, G);
  k.cp = k.cp_inter ? s.gpu.inter : s.gpu.intra;
  k.ep = k.ep_inter ? s.gpu.inter : s.gpu.intra;
  k.dp = k.dp_inter ? s.gpu.inter : s.gpu.intra;
  k.dp_expert = k.dpe_inter ? s.gpu.inter : s.gpu.intra;
  k.pp = k.pp_inter ? s.gpu.inter : s.gpu.intra;
  return k;
}

CommItem item(std::string dim, std::string what, Collective op, int group, bool inter, double bytes,
              double calls, double time, double exposed) {
  return {std::move(dim), std::move(what), op, group, inter, bytes, calls, time, exposed};
}

// What one micro-batch costs on the busiest (last) stage, before communication.
struct MicroBatch {
  double M = 0;                 // micro-batches per step
  double F = 0;                 // sustained FLOP/s
  double layers = 0;            // layers on the stage
  double t_fwd = 0, t_bwd = 0;  // seconds
  double recompute = 0;         // seconds, every recomputation pass
  int passes = 0;               // recomputation passes per backward (zero-bubble's W: 2)
  double attn_flops_tok = 0;    // attention-core forward FLOPs per token
  double layer_flops_tok = 0;   // one layer's forward FLOPs per token
  double recompute_tok = 0;     // one pass's recomputation per token and layer (FLOPs or ops)
  bool full = false;
};

// Selective recomputation's seconds per micro-batch on the stage, for a model whose buffers
// are the engine's: its elementwise work (cost::selective_recompute_per_token; norms on the
// rows of the residual region, n = N/t under sequence parallelism, the MLP's activation on
// F/t columns), timed as the slower of its operations at the sustained FLOP rate and its bytes
// at HBM bandwidth (the optimizer step's rate): memory-bound on every GPU preset.
double elementwise_recompute_s(const TrainSetup& s, const Layout& l, const MicroBatch& c,
                               const cost::ElementwiseWork& w) {
  const Shape x = shape_of(s, l);
  const double rows = x.s_loc * x.b, norm_rows = rows / x.act_div;
  const double ops = norm_rows * w.norm_ops + rows * w.act_ops / l.tp;
  const double bytes = norm_rows * w.norm_bytes + rows * w.act_bytes / l.tp;
  return c.layers * std::max(ops / c.F, bytes / (s.gpu.hbm_gbps * 1e9));
}

// engine: the activations are the engine's buffers, so selective recomputation is strata's
// (elementwise); else Korthikanti et al.'s (the attention core again), as their bytes assume.
MicroBatch micro_batch_compute(const TrainSetup& s, const Layout& l, int64_t micro, bool engine) {
  const ModelSpec& m = s.model;
  MicroBatch c;
  c.M = double(micro);
  c.F = s.gpu.peak_flops() * s.gpu.efficiency;
  c.layers = double(layers_on_stage(m, l.pp));
  c.full = l.recompute == Recompute::full;
  const double shard = double(l.tp) * l.cp;
  const double tokens = double(l.micro_batch) * double(m.seq);
  c.layer_flops_tok = layer_forward_flops_per_token(m, double(m.seq));
  c.attn_flops_tok = attention_core_forward_flops_per_token(m, double(m.seq));
  const double fwd_layers = tokens * c.layers * c.layer_flops_tok / shard;
  const double fwd = fwd_layers + tokens * logits_forward_flops_per_token(m) / shard;
  c.t_fwd = fwd / c.F;
  c.t_bwd = 2 * fwd / c.F;
  if (l.recompute == Recompute::none) return c;
  // Zero-bubble's weight pass recomputes again after other micro-batches used the working
  // layer (docs/recompute.md); Korthikanti's accounting assumes one pass.
  c.passes = engine && s.schedule == parallel::pipeline::ScheduleKind::zb && l.pp > 1 ? 2 : 1;
  double once = 0;
  if (c.full) {  // one more forward of every block
    c.recompute_tok = c.layer_flops_tok;
    once = fwd_layers / c.F;
  } else if (engine) {
    const cost::ElementwiseWork w = cost::selective_recompute_per_token(
        double(m.hidden), double(m.ffn), m.mlp == MlpKind::swiglu, s.precision == Precision::bf16);
    c.recompute_tok = w.norm_ops + w.act_ops;
    once = elementwise_recompute_s(s, l, c, w);
  } else {
    c.recompute_tok = c.attn_flops_tok;
    once = tokens * c.layers * c.attn_flops_tok / shard / c.F;
  }
  c.recompute = c.passes * once;
  return c;
}

// Tensor, context, expert and pipeline communication of one micro-batch; appends the items.
struct ModelParallelTimes {
  double tp = 0, cp = 0, ep = 0, pp = 0;  // exposed seconds per micro-batch
};

ModelParallelTimes model_parallel_comm(const TrainSetup& s, const Layout& l, const MicroBatch& c,
                                       const Links& k, Estimate& e) {
  const ModelSpec& m = s.model;
  const Shape x = shape_of(s, l);
  const double act_bytes = x.sbh * 2;  // one (b, s/cp, h) activation in bf16
  const double M = c.M, L = c.layers;
  ModelParallelTimes t;
  if (l.tp > 1) {
    const double calls = L * (4 + (c.full ? 2 * c.passes : 0));
    t.tp = calls * allreduce_s(act_bytes, l.tp, k.tp);
    e.comm.push_back(item("tp",
                          x.sp ? "all-gather + reduce-scatter pairs, 2 per layer fwd, 2 bwd"
                               : "2 all-reduces per layer fwd, 2 bwd",
                          Collective::allreduce, l.tp, false, act_bytes, calls * M, t.tp * M,
                          t.tp * M));
    if (m.kv_heads < l.tp) {  // shared key/value heads (model/block.cc share_kv_grads)
      const int share = int(l.tp / m.kv_heads);
      const double bytes = x.s_loc * x.b * 2 * double(m.head_dim()) * 2;  // dk | dv, bf16
      const double kv = L * allreduce_s(bytes, share, k.tp);
      t.tp += kv;
      e.comm.push_back(item("tp",
                            "dk, dv of each shared KV head summed over its tp ranks, 1 per layer bwd",
                            Collective::allreduce, share, false, bytes, L * M, kv * M, kv * M));
    }
  }
  if (l.cp > 1 && s.cp_mode == CpMode::ring) {
    const double block = 2 * x.s_loc * x.b * kv_local(m, l.tp) * 2;  // K and V of one rank
    const double comm_f = (l.cp - 1) * send_recv_s(block, k.cp);
    const double attn_f = s.overlap * x.s_loc * x.b * c.attn_flops_tok / l.tp / c.F;
    const double passes = c.full ? 1 + c.passes : 1;  // forward passes (recomputation repeats it)
    t.cp = L * (passes * std::max(0.0, comm_f - attn_f) + std::max(0.0, 2 * (comm_f - attn_f)));
    e.comm.push_back(item("cp",
                          "ring attention: K/V blocks pass cp-1 hops per layer, hidden "
                          "behind the attention they feed",
                          Collective::send_recv, l.cp, k.cp_inter, block,
                          L * (l.cp - 1) * (2 + passes) * M, L * (passes + 2) * comm_f * M,
                          t.cp * M));
  } else if (l.cp > 1) {
    const double bytes = x.s_loc * x.b * (2 * x.h / l.tp + 2 * kv_local(m, l.tp)) * 2;
    const double fwds = c.full ? 1 + c.passes : 1;  // forward passes
    t.cp = L * (fwds + 1) * 4 * all_to_all_s(bytes / 4, l.cp, k.cp);
    e.comm.push_back(item("cp", "Ulysses: 4 all-to-alls per layer fwd (q, k, v, out), 4 bwd",
                          Collective::all_to_all, l.cp, k.cp_inter, bytes / 4,
                          L * (fwds + 1) * 4 * M, t.cp * M, t.cp * M));
  }
  if (l.ep > 1) {
    // One row per token and owner rank of its experts: min(K, ep, R) rows, R the ranks its
    // --route-max-groups groups lie on (cost/comm.h).
    const int64_t rows = std::min<int64_t>(
        {m.top_k, l.ep, ep_group_limit_ranks(m.experts, l.ep, m.route_groups, m.route_max_groups)});
    const double bytes = x.sbh * double(rows) * 2 / x.act_div;
    const double calls = L * (4 + (c.full ? 2 * c.passes : 0));
    t.ep = calls * all_to_all_s(bytes, l.ep, k.ep);
    e.comm.push_back(item("ep",
                          cat("token dispatch + combine all-to-alls per MoE layer, fwd and bwd: ", rows,
                              " row(s) per token, one per owner rank (min(top-k ", m.top_k, ", ep ", l.ep,
                              m.limits_groups() ? cat(", the ranks of ", m.route_max_groups, " of ",
                                                      m.route_groups, " expert groups")
                                                : std::string(),
                              "))"),
                          Collective::all_to_all, l.ep, k.ep_inter, bytes, calls * M, t.ep * M,
                          t.ep * M));
  }
  if (l.pp > 1) {
    const double bytes = act_bytes / x.act_div;
    t.pp = 2 * send_recv_s(bytes, k.pp);
    e.comm.push_back(item("pp", "activation forward, its gradient backward, per micro-batch",
                          Collective::send_recv, 2, k.pp_inter, bytes, 2 * M, t.pp * M, t.pp * M));
  }
  return t;
}

// Data-parallel gradient and ZeRO traffic for the dense and the expert parameters. Returns
// the exposed seconds per micro-batch (ZeRO-2/3) and sets `final_s`, the exposed seconds
// after the pipeline drains (ZeRO-0/1/2).
double data_parallel_comm(const TrainSetup& s, const Layout& l, const MicroBatch& c, const Links& k,
                          Estimate& e, double* final_s) {
  const StateBytesPerParam per = s.state_bytes();
  const double M = c.M;
  double final_reduce = 0, final_gather = 0, micro_comm = 0;
  auto group = [&](const char* dim, double params, int n, bool inter, const Link& link) {
    if (n <= 1 || params <= 0) return;
    const double g = params * per.gradient, p = params * per.parameter;
    const double rs = reduce_scatter_s(g, n, link), ag = all_gather_s(p, n, link);
    switch (l.zero) {
      case 0: {
        const double ar = allreduce_s(g, n, link);
        final_reduce += ar;
        e.comm.push_back(
            item(dim, "all-reduce gradients (2Ψ)", Collective::allreduce, n, inter, g, 1, ar, 0));
        break;
      }
      case 1:
        final_reduce += rs;
        final_gather += ag;
        e.comm.push_back(item(dim, "reduce-scatter gradients (Ψ)", Collective::reduce_scatter, n,
                              inter, g, 1, rs, 0));
        e.comm.push_back(item(dim, "all-gather updated parameters (Ψ)", Collective::all_gather, n,
                              inter, p, 1, ag, 0));
        break;
      case 2:
        micro_comm += rs;
        final_gather += ag;
        e.comm.push_back(item(dim, "reduce-scatter gradients every micro-batch (Ψ each)",
                              Collective::reduce_scatter, n, inter, g, M, rs * M, 0));
        e.comm.push_back(item(dim, "all-gather updated parameters (Ψ)", Collective::all_gather, n,
                              inter, p, 1, ag, 0));
        break;
      default:
        micro_comm += 2 * ag + rs;
        e.comm.push_back(item(dim,
                              "all-gather parameters fwd and bwd, reduce-scatter gradients, "
                              "every micro-batch (3Ψ each)",
                              Collective::all_gather, n, inter, p, 3 * M, (2 * ag + rs) * M, 0));
    }
  };
  group("dp", double(e.mem.dense_params), l.dp * l.cp, k.dp_inter, k.dp);
  group("dp-expert", double(e.mem.expert_params), l.dp * l.cp / l.ep, k.dpe_inter, k.dp_expert);
  const double fwd = s.overlap * c.t_fwd, bwd = s.overlap * c.t_bwd;
  double per_micro = 0;
  if (l.zero == 2) per_micro = std::max(0.0, micro_comm - bwd);
  if (l.zero == 3) per_micro = std::max(0.0, micro_comm - (fwd + bwd + s.overlap * c.recompute));
  // The last reduction hides behind the last backward, the gather behind the next forward.
  *final_s = std::max(0.0, final_reduce - bwd) + std::max(0.0, final_gather - fwd);
  // Spread the exposed share over the data-parallel items in proportion to their time.
  double total = 0;
  const double exposed = per_micro * M + *final_s;
  for (const CommItem& it : e.comm)
    if (it.dim.rfind("dp", 0) == 0) total += it.time_s;
  for (CommItem& it : e.comm)
    if (it.dim.rfind("dp", 0) == 0 && total > 0) it.exposed_s = exposed * it.time_s / total;
  return per_micro;
}

// The pipeline's makespan from its schedule (parallel/pipeline/predict.h): sets the bubble, the
// exposed stage-to-stage transfers and the pp item's exposed time. comm: per micro-batch
// communication on the stage; transfer: one message.
void pipeline_time(const TrainSetup& s, const Layout& l, const MicroBatch& c, double comm,
                   double transfer, Estimate& e) {
  namespace pl = parallel::pipeline;
  TimeBreakdown& t = e.time;
  t.bubble = t.pp = 0;
  if (l.pp == 1 || c.M < 1) return;
  const double V = s.virtual_stages;
  pl::Costs k;
  k.f = (c.t_fwd + comm / 3) / V;
  if (s.schedule == pl::ScheduleKind::zb) {
    const double again = c.passes > 1 ? c.recompute / c.passes : 0;  // W's recomputation
    k.b = (c.t_bwd / 2 + c.recompute - again + 2 * comm / 3) / V;
    k.w = (c.t_bwd / 2 + again) / V;
  } else {
    k.b = (c.t_bwd + c.recompute + 2 * comm / 3) / V;
  }
  k.transfer = transfer;
  const pl::Prediction p = pl::predict(s.schedule, l.pp, int(c.M), s.virtual_stages, k);
  t.bubble = std::max(0.0, p.makespan_ideal - c.M * t.t_micro);
  t.pp = p.makespan - p.makespan_ideal;
  e.pipeline_bubble = p.bubble;
  e.pipeline_bubble_ideal = p.bubble_ideal;
  e.pp_transfer_s = transfer;
  e.pipeline_formula = pl::bubble_formula(s.schedule, l.pp, int(c.M), s.virtual_stages);
  for (CommItem& it : e.comm)
    if (it.dim == "pp") it.exposed_s = t.pp;
}

// Muon's step on the busiest stage: under ZeRO 1-3 each block's momentum all-gathered and its
// orthogonalised matrices reduce-scattered, in fp32, over the dense (and expert) group, after
// the backward; and the Newton-Schulz FLOPs, each matrix on one GPU of the group (every GPU
// at ZeRO 0). Adds the comm items; returns the seconds (on the critical path).
double muon_step_s(const TrainSetup& s, const Layout& l, const MicroBatch& c, const Links& k, Estimate& e) {
  const StageParams p = stage_params(s.model, l, true, l.pp == 1);
  const int n_dense = l.dp * l.cp, n_expert = n_dense / l.ep;
  double t = p.ns_flops / (l.zero >= 1 ? n_dense : 1) / c.F;
  auto move = [&](const char* dim, double params, int n, bool inter, const Link& link) {
    if (l.zero == 0 || n <= 1 || params <= 0) return;
    const double bytes = 4 * params, time = all_gather_s(bytes, n, link) + reduce_scatter_s(bytes, n, link);
    t += time;
    e.comm.push_back(item(dim, "Muon: all-gather momentum, reduce-scatter orthogonalised matrices (fp32, per block)",
                          Collective::all_gather, n, inter, bytes, 2, time, time));
  };
  move("muon", double(p.dense_blocks), n_dense, k.dp_inter, k.dp);
  move("muon-expert", double(p.expert), n_expert, k.dpe_inter, k.dp_expert);
  if (l.tp > 1) {  // the owned matrices' slices gathered whole over the tp group, in fp32
    const double bytes = 4.0 * double(p.muon_dense + p.muon_expert) * l.tp / (l.zero >= 1 ? n_dense : 1);
    const double time = all_gather_s(bytes, l.tp, k.tp);
    t += time;
    e.comm.push_back(item("muon-tp", "Muon: all-gather the tp slices of each owned matrix (fp32)", Collective::all_gather,
                          l.tp, false, bytes, 1, time, time));
  }
  return t;
}

}  // namespace

Estimate evaluate(const TrainSetup& s, const Layout& l) {
  const ModelSpec& m = s.model;
  Estimate e;
  e.layout = l;
  e.micro_batches = l.micro_batches(s.global_batch);
  e.mem = estimate_memory(s, l);
  e.usable_bytes = s.gpu.memory_bytes() * (1.0 - s.headroom);
  e.fits = e.mem.total() <= e.usable_bytes;

  const MicroBatch c = micro_batch_compute(s, l, e.micro_batches, e.mem.engine_activations);
  const Links k = links_of(s, l);
  const ModelParallelTimes mp = model_parallel_comm(s, l, c, k, e);
  double dp_final = 0;
  const double zero_mb = data_parallel_comm(s, l, c, k, e, &dp_final);

  TimeBreakdown& t = e.time;
  const double M = c.M;
  t.t_micro = c.t_fwd + c.t_bwd + c.recompute + mp.tp + mp.cp + mp.ep + zero_mb;
  t.compute = M * (c.t_fwd + c.t_bwd);
  t.recompute = M * c.recompute;
  t.tp = M * mp.tp;
  t.cp = M * mp.cp;
  t.ep = M * mp.ep;
  t.zero_micro = M * zero_mb;
  pipeline_time(s, l, c, mp.tp + mp.cp + mp.ep + zero_mb, mp.pp / 2, e);
  t.dp_final = dp_final;
  t.optimizer = 2.0 * double(e.mem.states.total()) / (s.gpu.hbm_gbps * 1e9);
  if (s.optimizer == Optimizer::muon) t.optimizer += muon_step_s(s, l, c, k, e);
  t.step_s = t.compute + t.recompute + t.tp + t.cp + t.ep + t.pp + t.zero_micro + t.bubble +
             t.dp_final + t.optimizer;

  const double tokens = double(s.global_batch) * double(m.seq);
  const double L = double(m.layers);
  const double recompute_tok = L * c.passes * c.recompute_tok;
  e.model_flops_per_step = tokens * model_flops_per_token(m);
  e.hardware_flops_per_step =
      tokens * (3 * (L * c.layer_flops_tok + logits_forward_flops_per_token(m)) + recompute_tok);
  e.tokens_per_s = tokens / t.step_s;
  e.mfu = e.model_flops_per_step / (t.step_s * double(s.gpus) * s.gpu.peak_flops());
  return e;
}

}  // namespace strata::plan
