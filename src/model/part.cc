// The trunk's passes over a part's chunks (model/part.h). Embedding and loss are
// vocab-parallel under tensor parallelism (model/tensor/vocab.h: the logits exist only as
// (N, Vr) on each rank); at T = 1 they are the one-process kernels. Under context
// parallelism the rows are this rank's chunks of each sequence and the embedding adds each
// row's global position (model/context/gpt_cp.h).
#include "model/part.h"

#include <cstring>

#include "core/phase.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "model/context/gpt_cp.h"
#include "model/shard.h"
#include "model/tensor/linear.h"
#include "model/tensor/vocab.h"

namespace strata::model {

namespace k = strata::kernels;
namespace tn = strata::model::tensor;

BlockArch block_arch(const GPTConfig& cfg) {
  return {cfg.llama(), cfg.dim, cfg.heads, cfg.kv(), cfg.hidden(), cfg.norm_eps, cfg.rope()};
}

void carve_slot(Carver& c, Slot& s, const StageChunk& ch, const GPTConfig& cfg, const ActShape& a,
                bool bf16, bool split, bool attn_f32) {
  const BlockArch m = block_arch(cfg);
  const LocalWidths w(m, a.T);
  const int64_t C = cfg.dim, N = a.N, n = a.n;
  const bool f32 = !bf16;
  s.x = c.take(n * C);
  s.layers.resize(size_t(ch.end - ch.begin));
  for (int i = 0; i < ch.end - ch.begin; ++i)
    carve_layer(c, s.layers[size_t(i)], m, a, bf16, attn_f32, block_keep(cfg, ch, ch.begin + i));
  s.stash.resize(split ? s.layers.size() : 0);
  for (BlockStash& st : s.stash) {
    st.d3 = c.take(N * C);
    st.dfch = c.take(N * w.fc);
    st.d2 = c.take(N * C);
    st.dqkv = c.take(N * w.qkv);
  }
  s.gin = c.take_if(n * C, !ch.head);
  s.gout = c.take_if(n * C, !ch.embed);
  if (!ch.head) return;
  s.lnf = c.take_if(n * C, f32);
  s.lnf_h = c.take_bf16(n * C, bf16);
  s.lnf_mean = c.take_if(n, !cfg.llama());
  s.lnf_rstd = c.take(n);
  s.logits = c.take(N * a.Vr);
  s.losses = c.take(N);
  s.lse = c.take(N);
}

void Part::set_table(const std::vector<ParamView>& global) {
  std::vector<int64_t> begin;
  for (const ParamView& v : global) {
    if (size_t(v.unit) >= begin.size()) begin.resize(size_t(v.unit) + 1, INT64_MAX);
    begin[size_t(v.unit)] = std::min(begin[size_t(v.unit)], v.offset);
  }
  view_rel.clear();
  view0.clear();
  for (size_t i = 0; i < global.size(); ++i) {
    const ParamView& v = global[i];
    view_rel.push_back(v.offset - begin[size_t(v.unit)]);
    if (v.unit >= 1 && (i == 0 || global[i - 1].unit != v.unit)) view0.push_back(int(i));
  }
}

BlockKeep block_keep(const GPTConfig& cfg, const StageChunk& ch, int l) {
  const int i = l - ch.begin;
  if (cfg.recomputes_block(l, i)) {
    const bool next = l + 1 < ch.end && cfg.recomputes_block(l + 1, i + 1);
    return cfg.recompute.bf16_inputs && next ? BlockKeep::output_bf16 : BlockKeep::output;
  }
  return cfg.recompute.mode == Recompute::selective ? BlockKeep::selective : BlockKeep::all;
}

void Part::carve_scratch(Carver& c, const ActShape& a, const std::vector<StageChunk>& chunks, bool attn_f32) {
  const BlockArch m = block_arch(cfg);
  const LocalWidths w(m, a.T);
  const int64_t C = cfg.dim, N = a.N, n = a.n;
  // Recomputation's working layer: a whole one (but its output) when some block keeps only
  // its output, else what selective recomputation drops.
  bool full = false;
  for (const StageChunk& ch : chunks)
    for (int l = ch.begin; l < ch.end; ++l) full = full || cfg.recomputes_block(l, l - ch.begin);
  work = LayerActs{};
  if (full || cfg.recompute.mode == Recompute::selective)
    carve_layer(c, work, m, a, bf16, attn_f32, full ? BlockKeep::work : BlockKeep::dropped);
  rounded_in = c.take_if(n * C, full && cfg.recompute.bf16_inputs);
  s.dres = c.take(n * C);
  s.dbuf_c = c.take(n * C);
  // The matmul outputs and MLP gradients: GPT-2 (N, 4Cl); Llama (N, fc + act) for SwiGLU's
  // two gradients (model/block.cc act_grad_buf), or the qkv product if wider.
  s.dbuf_4c = c.take(N * std::max(w.qkv, w.fc + (m.llama ? w.act : 0)));
  s.dqkv = c.take(N * w.qkv);
  if (a.T > 1) {
    s.full_a = c.take(N * C);
    s.full_b = c.take(N * C);
    // The position table's gradient of a micro-batch (no table in a Llama) and the replicated
    // views' (6C).
    s.rep = c.take((cfg.llama() ? 0 : int64_t(cfg.seq) * C) + 6 * C);
    ce_stats = c.take(2 * N);
  }
}

TpDims Part::dims(int B, int T) const {
  TpDims d;
  d.B = B;
  d.T = T;
  d.N = int64_t(B) * T;
  d.n = tc->local_rows(d.N);
  d.C = cfg.dim;
  d.Cl = cfg.dim / shard.size;
  d.NHl = cfg.heads / shard.size;
  d.NKVl = int(cost::tp_kv_heads(cfg.kv(), shard.size));
  d.Fl = cfg.hidden() / shard.size;
  d.m = block_arch(cfg);
  const VocabSlice vs = vocab_slice(cfg.padded_vocab, shard);
  d.v0 = vs.begin;
  d.Vr = vs.size();
  STRATA_CHECK(!tc->sequence_parallel() || d.N % shard.size == 0, "sequence parallelism over ",
               shard.size, " ranks needs rows divisible by ", shard.size, " (batch ", B,
               " x seq ", T, ")");
  return d;
}

Block Part::views(float* base, int layer) const {
  STRATA_CHECK(base, "unit ", layer + 1, " has no memory bound");
  const int64_t* r = view_rel.data() + view0[size_t(layer)];
  return block_of(cfg.llama(), [&](int v) { return base + r[v]; });
}

namespace {

// One MLP's views from its first one's relative offsets r (GPT-2: c_fc w, b, c_proj w, b;
// Llama: gate | up as one matrix, down).
expert::ExpertViews mlp_views(float* base, const int64_t* r, bool llama) {
  return llama ? expert::ExpertViews{base + r[0], nullptr, base + r[2], nullptr}
               : expert::ExpertViews{base + r[0], base + r[1], base + r[2], base + r[3]};
}

// An MoE block's router is view 8 of its block's unit (after ln_2, model/shard.cc; a Llama
// block's view 6), its shared experts (if any) the MLP views right after it; its routed
// experts are the views of its expert unit, 4 per held expert (GPT-2) or 3 (Llama). All E
// slots are returned (global ids), the ones this rank does not hold empty.
expert::MoEWeights moe_views(float* block, float* experts, const std::vector<int64_t>& rel,
                             int first, int first_expert_view, int E, ExpertShard x, bool llama,
                             bool shared) {
  expert::MoEWeights w;
  w.experts.assign(size_t(E), expert::ExpertViews{});
  if (!block) return w;
  const int router = first + (llama ? 6 : 8);
  w.router = block + rel[size_t(router)];
  if (shared) w.shared = mlp_views(block, rel.data() + router + 1, llama);
  const int per = E / x.size, views = llama ? 3 : 4;
  for (int j = 0; j < per; ++j)
    w.experts[size_t(x.rank * per + j)] = mlp_views(experts, rel.data() + first_expert_view + views * j, llama);
  return w;
}

}  // namespace

// Calls the before hook of the block's expert unit (forward, or backward when with_grads);
// moe_block_done calls its after hook (nothing for a dense block).
std::unique_ptr<MoEBlock> Part::moe_block(int layer, bool with_grads, float scale, int slot) {
  if (!moe || !cfg.moe.is_moe_layer(layer)) return nullptr;
  const int first = view0[size_t(layer)], E = cfg.moe.experts;
  const bool shared = cfg.moe.shared_experts > 0;
  auto b = std::make_unique<MoEBlock>();
  b->moe = moe.get();
  b->index = cfg.moe.moe_index(layer);
  b->unit = cfg.layers + 2 + b->index;
  const Pass pass = with_grads ? Pass::backward : Pass::forward;
  before(b->unit, pass);
  const int xv = view0[size_t(b->unit - 1)];
  b->w = moe_views(checked(unit_params[size_t(layer + 1)], layer + 1, "parameter"),
                   checked(unit_params[size_t(b->unit)], b->unit, "parameter"), view_rel, first,
                   xv, E, experts, cfg.llama(), shared);
  if (with_grads)
    b->g = moe_views(checked(unit_grads[size_t(layer + 1)], layer + 1, "gradient"),
                     checked(unit_grads[size_t(b->unit)], b->unit, "gradient"), view_rel, first,
                     xv, E, experts, cfg.llama(), shared);
  else
    b->g = moe_views(nullptr, nullptr, view_rel, first, xv, E, experts, cfg.llama(), shared);
  b->scale = scale;
  b->ids = ids;
  b->slot = slot;
  return b;
}

void Part::moe_block_done(const MoEBlock* b, Pass pass) {
  if (b) after(b->unit, pass);
}

void check_doc_starts(const int32_t* doc_start, int B, int T) {
  for (int b = 0; b < B; ++b) {
    const int32_t* ds = doc_start + int64_t(b) * T;
    for (int t = 0; t < T; ++t)
      STRATA_CHECK(ds[t] >= (t ? ds[t - 1] : 0) && ds[t] <= t, "document starts of row ", b,
                   ": position ", t, " starts its document at ", ds[t],
                   " (starts must grow along the sequence and not pass the position)");
  }
}

const int32_t* Part::doc_positions(const MicroInput& in, const TpDims& d) {
  if (!in.doc_start) return nullptr;
  const int C = cp ? cp->size() : 1, T = d.T * C;  // the whole sequence's length
  const SeqLayout L = cp ? cp->layout(T) : SeqLayout{CpChunks::contiguous, 1, T};
  doc_pos.resize(size_t(d.B) * d.T);
  for (int b = 0; b < d.B; ++b)
    for (int t = 0; t < d.T; ++t) {
      const int g = cp ? L.position(cp->rank(), t) : t;
      doc_pos[size_t(b) * d.T + t] = g - in.doc_start[int64_t(b) * T + g];
    }
  return doc_pos.data();
}

const int32_t* Part::rope_positions(const MicroInput& in, const TpDims& d) {
  if (!cfg.llama()) return nullptr;
  if (const int32_t* pos = doc_positions(in, d)) return pos;  // restart in each document
  rope_pos.resize(size_t(d.B) * d.T);
  const SeqLayout L = cp ? cp->layout(d.T * cp->size()) : SeqLayout{CpChunks::contiguous, 1, d.T};
  for (int b = 0; b < d.B; ++b)
    for (int t = 0; t < d.T; ++t) rope_pos[size_t(b) * d.T + t] = cp ? L.position(cp->rank(), t) : t;
  return rope_pos.data();
}

void Part::embed_forward(float* out, const MicroInput& in, const TpDims& d) {
  UnitSpan sp("forward", "embed");
  float* p0 = checked(unit_params[0], 0, "parameter");
  const float* wte = p0 + view_rel[0];
  if (cfg.llama()) {  // no position table: rotary positions turn q and k in every block
    if (tc->size() > 1)
      tn::embedding_forward(*tc, out, in.tokens, wte, d.v0, d.Vr, nullptr, s.full_a, d.B, d.T, d.C);
    else
      k::encoder_forward(out, in.tokens, wte, nullptr, d.B, d.T, d.C);
    return;
  }
  const float* wpe = p0 + view_rel[1];
  // Documents: each row's position in its document (also under cp: whatever the row's chunk).
  if (const int32_t* pos = doc_positions(in, d)) {
    if (tc->size() > 1)
      tn::embedding_forward(*tc, out, in.tokens, wte, d.v0, d.Vr, wpe, s.full_a, d.B, d.T, d.C,
                            pos);
    else
      k::encoder_forward(out, in.tokens, wte, wpe, d.B, d.T, d.C, pos);
    return;
  }
  if (tc->size() > 1) {
    if (cp) wpe = cp_local_wpe(s.rep, *cp, wpe, d.T, d.C);  // the local rows' positions
    tn::embedding_forward(*tc, out, in.tokens, wte, d.v0, d.Vr, wpe, s.full_a, d.B, d.T, d.C);
  } else if (cp) {  // the local rows at their global positions
    cp_encoder_forward(*cp, out, in.tokens, wte, wpe, d.B, d.T, d.C);
  } else {
    k::encoder_forward(out, in.tokens, wte, wpe, d.B, d.T, d.C);
  }
}

// d loss / d the embedding's output in s.dres.
void Part::embed_backward(const MicroInput& in, const TpDims& d) {
  UnitSpan sp("backward", "embed");
  float* g0 = checked(unit_grads[0], 0, "gradient");
  float* dwte = g0 + view_rel[0];
  if (cfg.llama()) {
    if (tc->size() > 1)
      tn::embedding_backward(*tc, dwte, nullptr, s.dres, in.tokens, d.v0, d.Vr, s.full_a, d.B,
                             d.T, d.C);
    else
      k::encoder_backward(dwte, nullptr, s.dres, in.tokens, d.B, d.T, d.C);
    return;
  }
  float* dwpe = g0 + view_rel[1];
  const int32_t* pos = doc_positions(in, d);  // documents: rows by position in their document
  if (tc->size() == 1) {
    if (pos)
      k::encoder_backward(dwte, dwpe, s.dres, in.tokens, d.B, d.T, d.C, pos);
    else if (cp)
      cp_encoder_backward(*cp, dwte, dwpe, s.dres, in.tokens, d.B, d.T, d.C);
    else
      k::encoder_backward(dwte, dwpe, s.dres, in.tokens, d.B, d.T, d.C);
    return;
  }
  // This micro-batch's wpe gradient in a local table, partial under SP: rows of wpe itself
  // when documents give the positions (the whole sequence's rows under cp), else one row per
  // local row (scattered to this rank's cp positions).
  float* local = s.rep;
  const int64_t TC = int64_t(d.T) * (pos && cp ? cp->size() : 1) * d.C;
  std::memset(local, 0, sizeof(float) * size_t(TC));
  tn::embedding_backward(*tc, dwte, local, s.dres, in.tokens, d.v0, d.Vr, s.full_a, d.B, d.T, d.C,
                         pos);
  if (tc->sequence_parallel()) tc->all_reduce_sum(local, TC);
  if (cp && !pos)  // rows of this rank's positions
    cp_add_wpe_grad(dwpe, *cp, local, d.T, d.C);
  else
    for (int64_t e = 0; e < TC; ++e) dwpe[e] += local[e];
}

double Part::forward(const StageChunk& ch, Slot& sl, const MicroInput& in, int slot, Head head) {
  const TpDims d = dims(in.B, in.T);
  const bool any = d.N > 0;  // the same on every tp rank (they share the micro-batch)
  const int L = cfg.layers, C = d.C;
  PhaseState& phase = current_phase();
  if (ch.embed) {
    phase.set_layer(-1);
    before(0, Pass::forward);
    if (any) embed_forward(sl.x, in, d);
    after(0, Pass::forward);
  }
  const float* x = sl.x;
  const int32_t* pos = any ? rope_positions(in, d) : nullptr;
  for (int l = ch.begin; l < ch.end; ++l) {
    phase.set_layer(l);
    before(l + 1, Pass::forward);
    std::unique_ptr<MoEBlock> mb = moe_block(l, false, 0.0f, slot);
    LayerActs& a = sl.layers[size_t(l - ch.begin)];
    const BlockKeep keep = block_keep(cfg, ch, l);
    if (any) {
      UnitSpan sp("forward", "L", l);
      const BlockCtx c{*tc, d, s, cp, l + L * slot, mb.get(), in.doc_start, pos};
      LayerActs e = block_acts(a, keep);
      block_forward(c, views(unit_params[size_t(l + 1)], l), e, x);
      if (keep == BlockKeep::output_bf16) k::f32_to_bf16(a.res3_h, e.res3, d.n * C);
    } else if (mb) {  // no tokens here, but this rank's experts may get some
      moe_block_forward(*mb, nullptr, nullptr, nullptr, 0, bf16);
    }
    moe_block_done(mb.get(), Pass::forward);
    after(l + 1, Pass::forward);
    // The next block reads the kept value (widened from bf16 under --recompute-inputs bf16).
    x = block_input(sl, size_t(l - ch.begin + 1), d);
  }
  if (!ch.head) return 0;
  phase.set_layer(-1);
  const bool tied = cfg.tied();
  before(L + 1, Pass::forward);
  if (any) {
    UnitSpan sp("forward", "ln_f");
    float* pf = checked(unit_params[size_t(L + 1)], L + 1, "parameter");
    const int64_t* r = view_rel.data() + view0[size_t(L)];
    norm_out(d.m, sl.lnf, sl.lnf_h, sl.lnf_mean, sl.lnf_rstd, x, pf + r[0],
             cfg.llama() ? nullptr : pf + r[1], d.n);
  }
  if (tied) {
    after(L + 1, Pass::forward);
    before(0, Pass::forward);  // the tied wte again, for the logits
  }
  double loss = 0.0;
  if (any && head != Head::hidden) {
    UnitSpan sp("forward", "logits");
    const float* wte = output_layer(unit_params, "parameter");
    tn::column_forward(*tc, bf16, sl.logits, tn::act(sl.lnf, sl.lnf_h, C), wte, nullptr, s.full_a,
                       s.full_b, d.N, C, int(d.Vr));
    if (head == Head::loss && tc->size() > 1)
      loss = tn::crossentropy_forward(*tc, sl.losses, sl.lse, sl.logits, in.targets, in.weights,
                                      ce_stats, d.N, d.v0, d.Vr, cfg.vocab);
    else if (head == Head::loss)
      loss = k::crossentropy_forward(sl.losses, sl.lse, sl.logits, in.targets, in.weights, d.N,
                                     cfg.vocab, cfg.padded_vocab);
  }
  after(tied ? 0 : L + 1, Pass::forward);
  return loss;
}

float* Part::output_layer(const std::vector<float*>& units, const char* what) const {
  if (cfg.tied()) return checked(units[0], 0, what) + view_rel[0];
  const int L = cfg.layers;  // lm_head: the view after the final norm's weight
  return checked(units[size_t(L + 1)], L + 1, what) + view_rel[size_t(view0[size_t(L)] + 1)];
}

void Part::backward(const StageChunk& ch, Slot& sl, const MicroInput& in, float scale, int slot,
                    bool split, Head from) {
  const TpDims d = dims(in.B, in.T);
  const bool any = d.N > 0;
  const int L = cfg.layers, C = d.C;
  const bool tied = cfg.tied();
  if (ch.head) {
    before(tied ? 0 : L + 1, Pass::backward);  // the unit of the output layer
    if (any && from != Head::hidden) {
      UnitSpan sp("backward", "logits");
      const float* wte = output_layer(unit_params, "parameter");
      if (from == Head::loss && tc->size() > 1)
        tn::crossentropy_backward(sl.logits, sl.lse, in.targets, in.weights, scale, d.N, d.v0,
                                  d.Vr, cfg.vocab);
      else if (from == Head::loss)
        k::crossentropy_backward(sl.logits, sl.lse, in.targets, in.weights, scale, d.N, cfg.vocab,
                                 cfg.padded_vocab);
      if (split)  // the weight gradient is left to backward_weight, which reads sl.logits
        tn::column_backward_input(*tc, bf16, s.dbuf_c, sl.logits, wte, s.full_b, d.N, C,
                                  int(d.Vr));
      else
        tn::column_backward(*tc, bf16, s.dbuf_c, output_layer(unit_grads, "gradient"), nullptr,
                            sl.logits, tn::act(sl.lnf, sl.lnf_h, C), wte, s.full_a, s.full_b, d.N,
                            C, int(d.Vr));
    }
    if (tied) before(L + 1, Pass::backward);
    if (any) {
      UnitSpan sp("backward", "ln_f");
      const float* pf = checked(unit_params[size_t(L + 1)], L + 1, "parameter");
      float* gf = checked(unit_grads[size_t(L + 1)], L + 1, "gradient");
      const int64_t* r = view_rel.data() + view0[size_t(L)];
      final_norm_backward(*tc, d, s, pf + r[0], gf + r[0], cfg.llama() ? nullptr : gf + r[1],
                          sl.out(), sl.lnf_mean, sl.lnf_rstd);
    }
    if (!split) after(L + 1, Pass::backward);
  } else if (any) {
    std::memcpy(s.dres, sl.gin, sizeof(float) * size_t(d.n * C));
  }
  PhaseState& phase = current_phase();
  const int32_t* pos = any ? rope_positions(in, d) : nullptr;
  for (int l = ch.end - 1; l >= ch.begin; --l) {
    phase.set_layer(l);
    before(l + 1, Pass::backward);
    std::unique_ptr<MoEBlock> mb = moe_block(l, true, scale, slot);
    const size_t i = size_t(l - ch.begin);
    if (any) {
      UnitSpan sp("backward", "L", l);
      const BlockCtx c{*tc, d, s, cp, l + L * slot, mb.get(), in.doc_start, pos};
      const Block w = views(unit_params[size_t(l + 1)], l);
      const Block g = views(checked(unit_grads[size_t(l + 1)], l + 1, "gradient"), l);
      const float* x = block_input(sl, i, d);
      const LayerActs e = recomputed(c, w, sl.layers[i], x, block_keep(cfg, ch, l));
      if (split && !mb)  // an MoE block's expert backward is not split: all of it runs here
        block_backward_input(c, w, g, e, x, sl.stash[i]);
      else
        block_backward(c, w, g, e, x);
    } else if (mb) {  // this rank's experts may have received tokens
      moe_block_backward(*mb, nullptr, nullptr, bf16);
    }
    moe_block_done(mb.get(), Pass::backward);
    if (!split) after(l + 1, Pass::backward);
  }
  phase.set_layer(-1);
  if (ch.embed) {
    if (!ch.head || !tied) before(0, Pass::backward);  // the embedding alone
    if (any) embed_backward(in, d);
  } else if (any) {
    std::memcpy(sl.gout, s.dres, sizeof(float) * size_t(d.n * C));
  }
  if (!split && (ch.embed || (ch.head && tied))) after(0, Pass::backward);
}

LayerActs Part::block_acts(const LayerActs& kept, BlockKeep keep) const {
  LayerActs e = effective_acts(kept, work, keep);
  if (keep == BlockKeep::output_bf16) e.res3 = s.dbuf_c;
  return e;
}

const float* Part::block_input(const Slot& sl, size_t i, const TpDims& d) {
  if (i == 0) return sl.x;
  const LayerActs& prev = sl.layers[i - 1];
  if (!prev.res3_h) return prev.res3;
  k::bf16_to_f32(rounded_in, prev.res3_h, d.n * d.C);
  return rounded_in;
}

LayerActs Part::recomputed(const BlockCtx& c, const Block& w, const LayerActs& kept, const float* x,
                           BlockKeep keep) {
  LayerActs e = block_acts(kept, keep);
  if (keep == BlockKeep::all) return e;
  UnitSpan sp("recompute", keep == BlockKeep::selective ? "norms L" : "L", c.key % cfg.layers);
  const int64_t t0 = now_ns();
  block_recompute(c, w, e, x, keep);
  recompute_ns += now_ns() - t0;
  return e;
}

// Under the split backward the after hooks of a pass come here, once each unit's gradients
// are complete.
void Part::backward_weight(const StageChunk& ch, Slot& sl, const MicroInput& in, int slot) {
  const TpDims d = dims(in.B, in.T);
  const bool any = d.N > 0;
  const int L = cfg.layers;
  if (ch.head) {
    if (any) {  // dwte (Vr, C) += dlogits^T @ f(lnf): lnf all-gathered again under SP
      UnitSpan sp("weight", "head");
      tn::column_backward_weight(*tc, bf16, output_layer(unit_grads, "gradient"), nullptr, sl.logits, tn::act(sl.lnf, sl.lnf_h, d.C), s.full_a,
                                 s.full_b, d.N, d.C, int(d.Vr));
    }
    after(L + 1, Pass::backward);
  }
  const int32_t* pos = any ? rope_positions(in, d) : nullptr;
  for (int l = ch.end - 1; l >= ch.begin; --l) {
    if (any && !(moe && cfg.moe.is_moe_layer(l))) {  // an MoE block's ran whole in backward
      UnitSpan sp("weight", "L", l);
      const size_t i = size_t(l - ch.begin);
      const BlockCtx c{*tc, d, s, cp, l + L * slot, nullptr, in.doc_start, pos};
      // What the block did not keep is recomputed again: the input pass's copy is gone.
      const float* x = block_input(sl, i, d);
      const LayerActs e = recomputed(c, views(unit_params[size_t(l + 1)], l), sl.layers[i], x,
                                     block_keep(cfg, ch, l));
      block_backward_weight(c, views(checked(unit_grads[size_t(l + 1)], l + 1, "gradient"), l),
                            e, sl.stash[i]);
    }
    after(l + 1, Pass::backward);
  }
  if (ch.embed || (ch.head && cfg.tied())) after(0, Pass::backward);
}

}  // namespace strata::model
