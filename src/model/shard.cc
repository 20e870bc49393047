#include "model/shard.h"

#include "core/error.h"
#include "model/parallel_rules.h"

namespace strata::model {

VocabSlice vocab_slice(int64_t padded_vocab, TpShard s) {
  const int64_t begin = padded_vocab * s.rank / s.size;
  return {begin, begin + cost::tp_vocab_rows(padded_vocab, s.size, s.rank)};
}

void check_tensor_parallel(const GPTConfig& cfg, int tp, bool sequence_parallel, int seq, int cp) {
  STRATA_CHECK_SETTING(tp >= 1, setting("tp"), " must be at least 1 (got ", tp, ")");
  STRATA_CHECK_SETTING(tp_splits_heads(cfg.heads, tp), setting("tp"), " ", tp,
                       " does not divide the model's ", cfg.heads,
                       " attention heads (each tensor-parallel rank takes whole heads)");
  STRATA_CHECK_SETTING(cfg.padded_vocab >= tp, setting("tp"), " ", tp,
                       " exceeds the padded vocabulary ", cfg.padded_vocab);
  STRATA_CHECK_SETTING(
      splits_kv_heads(cfg.kv(), tp), setting("tp"), " ", tp, " and the model's ", cfg.kv(),
      " key/value heads: one must divide the other (each tensor-parallel rank takes "
      "whole key/value heads, or one head replicated on the ranks sharing it)");
  STRATA_CHECK_SETTING(cfg.hidden() % tp == 0, setting("tp"), " ", tp,
                       " does not divide the MLP width ", cfg.hidden(), " (",
                       cfg.llama() ? setting("ffn") : cat("4 x ", setting("dim")), ")");
  if (cfg.moe.enabled()) {
    const int He = cfg.moe.expert_width(cfg.hidden()), Hs = cfg.moe.shared_width(cfg.hidden());
    STRATA_CHECK_SETTING(He % tp == 0 && Hs % tp == 0, setting("tp"), " ", tp,
                         " does not divide the experts' hidden width ", He,
                         Hs > 0 ? cat(" and the shared experts' ", Hs) : "", " (",
                         setting("expert-ffn"), ")");
  }
  // With context parallelism each cp rank's seq / cp tokens are what the tp ranks split.
  const int local = seq / cp;
  STRATA_CHECK_SETTING(!sequence_parallel || tp == 1 || local % tp == 0, setting("sp"), " with ",
                       setting("tp"), " ", tp, ": ",
                       cp > 1 ? cat(setting("seq"), " ", seq, " / ", setting("cp"), " ", cp, " = ",
                                    local, " tokens per cp rank")
                              : cat("the training sequence ", setting("seq"), " ", seq),
                       " is not divisible by ", tp,
                       " (sequence parallelism splits each rank's tokens over the ", setting("tp"),
                       " ranks; use ", setting("no-sp"),
                       " "
                       "or another ",
                       setting("seq"), ")");
}

namespace {

// Appends views with their pieces; `off` is the running local flat offset.
class TableBuilder {
 public:
  explicit TableBuilder(TpShard s) : s_(s) {}
  std::vector<ShardedView> out;

  // A view that holds `boxes` (offsets, extents) of global tensor `name` of `global`.
  // replicated: other tp ranks hold the same boxes; primary: this rank counts them (a
  // replicated view's first holder; tp rank 0 unless given).
  void add(const std::string& name, const Shape& global, int unit, bool decay,
           const std::vector<std::pair<std::vector<int64_t>, Shape>>& boxes, bool replicated,
           int primary_rank = 0) {
    const bool primary = !replicated || s_.rank == primary_rank;
    ShardedView v;
    int64_t n = 0;
    for (const auto& [offsets, extents] : boxes) {
      TensorPiece p;
      p.name = name;
      p.global_shape = global;
      p.offsets = offsets;
      p.extents = extents;
      p.local_offset = off_ + n;
      p.primary = primary;
      n += p.numel();
      v.pieces.push_back(std::move(p));
    }
    // Local shape: the boxes stacked along dimension 0 (they share the other extents).
    Shape local = boxes.front().second;
    local[0] = 0;
    for (const auto& b : boxes) local[0] += b.second[0];
    v.view = ParamView{name, local, off_, unit, decay, replicated, primary};
    off_ += n;
    out.push_back(std::move(v));
  }
  void whole(const std::string& name, const Shape& global, int unit, bool decay, bool replicated) {
    add(name, global, unit, decay, {{std::vector<int64_t>(global.size(), 0), global}}, replicated);
  }
  // Rows [k·R + r·R/T, k·R + (r+1)·R/T) for each of `stacks` blocks of R rows.
  // With one rank: the whole tensor, one piece.
  void column(const std::string& name, const Shape& global, int unit, bool decay, int stacks) {
    if (s_.size == 1) return whole(name, global, unit, decay, false);
    const int64_t R = global[0] / stacks, part = R / s_.size;
    std::vector<std::pair<std::vector<int64_t>, Shape>> boxes;
    for (int k = 0; k < stacks; ++k) {
      std::vector<int64_t> o(global.size(), 0);
      o[0] = k * R + s_.rank * part;
      Shape e = global;
      e[0] = part;
      boxes.push_back({o, e});
    }
    add(name, global, unit, decay, boxes, false);
  }
  // The rows of whole key/value heads (NKV heads of hs rows, global (NKV·hs, C)): NKV/T heads
  // per rank like column(), or with fewer heads than ranks the one head rank r's query heads
  // share, replicated on the T/NKV ranks sharing it (the first of them primary).
  void kv_heads(const std::string& name, int64_t NKV, int64_t hs, int64_t C, int unit) {
    const int64_t share = cost::tp_kv_share(NKV, s_.size);
    if (share == 1) return column(name, {NKV * hs, C}, unit, true, 1);
    const int64_t head = s_.rank / share;
    add(name, {NKV * hs, C}, unit, true, {{{head * hs, 0}, {hs, C}}}, true,
        int(head * share));
  }
  // Columns [r·K/T, (r+1)·K/T) of an (OC, K) matrix.
  void row(const std::string& name, const Shape& global, int unit, bool decay) {
    const int64_t part = global[1] / s_.size;
    add(name, global, unit, decay, {{{0, s_.rank * part}, {global[0], part}}}, false);
  }

 private:
  TpShard s_;
  int64_t off_ = 0;
};

}  // namespace

// Llama blocks: the names are Hugging Face's LlamaForCausalLM names without "model.". q, k
// and v are three views but adjacent, so a rank's rows of them (its NH/T query and NKVl
// key/value heads, cost::tp_kv_heads) form one (q | k | v) matrix the block multiplies at
// once; gate and up likewise form one (gate | up) matrix of 2F/T rows.
static std::vector<ShardedView> llama_table(const GPTConfig& cfg, TpShard s, ExpertShard x) {
  STRATA_CHECK_SETTING(splits_kv_heads(cfg.kv(), s.size), setting("tp"), " ", s.size,
                       " and the model's ", cfg.kv(),
                       " key/value heads: one must divide the other");
  STRATA_CHECK_SETTING(cfg.hidden() % s.size == 0, setting("tp"), " ", s.size,
                       " does not divide the MLP width ", cfg.hidden(), " (", setting("ffn"), ")");
  TableBuilder t(s);
  const int64_t C = cfg.dim, hs = cfg.head_dim(), F = cfg.hidden();
  const VocabSlice vs = vocab_slice(cfg.padded_vocab, s);
  auto vocab_rows = [&](const std::string& name, int unit) {
    t.add(name, {cfg.padded_vocab, C}, unit, true, {{{vs.begin, 0}, {vs.size(), C}}}, false);
  };
  vocab_rows("embed_tokens.weight", 0);
  // A SwiGLU MLP of H hidden units (the dense one, a shared expert or a routed expert of an
  // MoE block): gate and up column-parallel, down row-parallel.
  auto mlp = [&](const std::string& p, int unit, int64_t H) {
    t.column(p + "gate_proj.weight", {H, C}, unit, true, 1);
    t.column(p + "up_proj.weight", {H, C}, unit, true, 1);
    t.row(p + "down_proj.weight", {C, H}, unit, true);
  };
  const int64_t He = cfg.moe.expert_width(int(F)), Hs = cfg.moe.shared_width(int(F));
  STRATA_CHECK_SETTING(!cfg.moe.enabled() || (He % s.size == 0 && Hs % s.size == 0), setting("tp"),
                       " ", s.size, " does not divide the experts' hidden width ", He,
                       Hs > 0 ? cat(" and the shared experts' ", Hs) : "", " (",
                       setting("expert-ffn"), ")");
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const int u = l + 1;
    t.whole(p + "input_layernorm.weight", {C}, u, false, true);
    t.column(p + "self_attn.q_proj.weight", {cfg.heads * hs, C}, u, true, 1);
    t.kv_heads(p + "self_attn.k_proj.weight", cfg.kv(), hs, C, u);
    t.kv_heads(p + "self_attn.v_proj.weight", cfg.kv(), hs, C, u);
    t.row(p + "self_attn.o_proj.weight", {C, C}, u, true);
    t.whole(p + "post_attention_layernorm.weight", {C}, u, false, true);
    if (cfg.moe.is_moe_layer(l)) {  // the router and shared experts here, the routed
                                    // experts in the expert units below
      t.whole(p + "mlp.router.weight", {cfg.moe.experts, C}, u, true, true);
      if (Hs > 0) mlp(p + "mlp.shared_experts.", u, Hs);
    } else {
      mlp(p + "mlp.", u, F);
    }
  }
  t.whole("norm.weight", {C}, cfg.layers + 1, false, true);
  if (!cfg.tied()) vocab_rows("lm_head.weight", cfg.layers + 1);
  int u = cfg.layers + 2;
  for (int l = 0; l < cfg.layers; ++l) {
    if (!cfg.moe.is_moe_layer(l)) continue;
    const int per = cfg.moe.experts / x.size;
    for (int e = x.rank * per; e < (x.rank + 1) * per; ++e)
      mlp("layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".", u, He);
    ++u;
  }
  return std::move(t.out);
}

std::vector<ShardedView> build_sharded_table(const GPTConfig& cfg, TpShard s, ExpertShard x) {
  STRATA_CHECK(s.size >= 1 && s.rank >= 0 && s.rank < s.size, "tensor-parallel rank ", s.rank,
               " of ", s.size, " is not a valid position");
  STRATA_CHECK_SETTING(cfg.heads % s.size == 0, setting("tp"), " ", s.size,
                       " does not divide the model's ", cfg.heads, " attention heads");
  const int E = cfg.moe.experts;
  STRATA_CHECK_SETTING(x.size >= 1 && x.rank >= 0 && x.rank < x.size && (E == 0 || E % x.size == 0),
                       "expert-parallel rank ", x.rank, " of ", x.size, " cannot hold E/ep of ", E,
                       " experts (", setting("ep"), " must divide ", setting("experts"), ")");
  if (cfg.llama()) return llama_table(cfg, s, x);
  TableBuilder t(s);
  const int64_t C = cfg.dim;
  const VocabSlice vs = vocab_slice(cfg.padded_vocab, s);
  t.add("wte", {cfg.padded_vocab, C}, 0, true, {{{vs.begin, 0}, {vs.size(), C}}}, false);
  t.whole("wpe", {cfg.seq, C}, 0, true, true);
  // An MLP of H hidden units (the dense one, the shared experts or a routed expert) in unit
  // `unit`: c_fc column-parallel, c_proj row-parallel, its bias replicated over tp.
  auto mlp = [&](const std::string& x, int unit, int64_t H) {
    t.column(x + "c_fc.weight", {H, C}, unit, true, 1);
    t.column(x + "c_fc.bias", {H}, unit, false, 1);
    t.row(x + "c_proj.weight", {C, H}, unit, true);
    t.whole(x + "c_proj.bias", {C}, unit, false, true);
  };
  const int64_t He = cfg.moe.expert_width(cfg.hidden()), Hs = cfg.moe.shared_width(cfg.hidden());
  STRATA_CHECK_SETTING(!cfg.moe.enabled() || (He % s.size == 0 && Hs % s.size == 0), setting("tp"),
                       " ", s.size, " does not divide the experts' hidden width ", He,
                       Hs > 0 ? cat(" and the shared experts' ", Hs) : "", " (",
                       setting("expert-ffn"), ")");
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const int u = l + 1;
    t.whole(p + "ln_1.weight", {C}, u, false, true);
    t.whole(p + "ln_1.bias", {C}, u, false, true);
    t.column(p + "attn.c_attn.weight", {3 * C, C}, u, true, 3);
    t.column(p + "attn.c_attn.bias", {3 * C}, u, false, 3);
    t.row(p + "attn.c_proj.weight", {C, C}, u, true);
    t.whole(p + "attn.c_proj.bias", {C}, u, false, true);
    t.whole(p + "ln_2.weight", {C}, u, false, true);
    t.whole(p + "ln_2.bias", {C}, u, false, true);
    if (cfg.moe.is_moe_layer(l)) {  // model/expert/moe.h: the router here (replicated over tp)
                                    // and the shared experts, routed experts in the expert units
      t.whole(p + "mlp.router.weight", {E, C}, u, true, true);
      if (Hs > 0) mlp(p + "mlp.shared_experts.", u, Hs);
      continue;
    }
    mlp(p + "mlp.", u, cfg.hidden());
  }
  t.whole("ln_f.weight", {C}, cfg.layers + 1, false, true);
  t.whole("ln_f.bias", {C}, cfg.layers + 1, false, true);
  // Expert units, one per MoE block: this ep rank's experts [rank·E/P, (rank+1)·E/P), each
  // split over tp like the dense MLP.
  int u = cfg.layers + 2;
  for (int l = 0; l < cfg.layers; ++l) {
    if (!cfg.moe.is_moe_layer(l)) continue;
    const std::string p = "h." + std::to_string(l) + ".mlp.experts.";
    const int per = E / x.size;
    for (int e = x.rank * per; e < (x.rank + 1) * per; ++e) {
      mlp(p + std::to_string(e) + ".", u, He);
    }
    ++u;
  }
  return std::move(t.out);
}

TensorLayout tensor_layout(const GPTConfig& cfg, TpShard s, ExpertShard x) {
  TensorLayout out;
  for (ShardedView& v : build_sharded_table(cfg, s, x))
    for (TensorPiece& p : v.pieces) out.push_back(std::move(p));
  return out;
}

cost::GptShape gpt_shape(const GPTConfig& cfg) {
  int64_t recomputed = 0;  // of the one-process model: the single chunk [0, L)
  for (int l = 0; l < cfg.layers; ++l) recomputed += cfg.recomputes_block(l, l);
  cost::GptShape m;
  m.layers = cfg.layers, m.dim = cfg.dim, m.heads = cfg.heads, m.max_seq = cfg.seq;
  m.vocab = cfg.vocab, m.padded_vocab = cfg.padded_vocab;
  m.llama = cfg.llama(), m.kv_heads = cfg.kv(), m.ffn = cfg.hidden(), m.tied = cfg.tied();
  m.moe_layers = cfg.moe.moe_layers(cfg.layers), m.experts = cfg.moe.experts;
  if (cfg.moe.enabled()) {
    m.top_k = cfg.moe.top_k;
    m.expert_ffn = cfg.moe.expert_ffn;
    m.shared_ffn = cfg.moe.shared_width(cfg.hidden());
    m.route_groups = cfg.moe.route_groups, m.route_max_groups = cfg.moe.route_max_groups;
  }
  m.recompute = cfg.recompute.mode;
  m.recomputed_layers = recomputed;
  m.recompute_bf16_inputs = cfg.recompute.bf16_inputs;
  return m;
}

namespace {

void check_expert_split(const GPTConfig& cfg, int ep) {
  STRATA_CHECK_SETTING(ep >= 1 && cfg.moe.experts % ep == 0, setting("experts"), " ",
                       cfg.moe.experts, " is not divisible by ", setting("ep"), " ", ep);
}

}  // namespace

int64_t local_num_params(const GPTConfig& cfg, TpShard s, ExpertShard x) {
  if (cfg.moe.enabled()) check_expert_split(cfg, x.size);
  return cost::local_params(gpt_shape(cfg), s.size, s.rank, x.size);
}

int64_t expert_params(const GPTConfig& cfg, int ep, int tp) {
  if (!cfg.moe.enabled()) return 0;
  check_expert_split(cfg, ep);
  return int64_t(cfg.moe.moe_layers(cfg.layers)) * (cfg.moe.experts / ep) *
         cost::expert_mlp_params(gpt_shape(cfg), tp);
}

}  // namespace strata::model
