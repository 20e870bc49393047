// Internals of model::GPT shared by its one-process forward/backward (gpt.cc) and its
// tensor-parallel forward/backward (gpt_tp.cc): activations, unit bindings, view pointers.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/trace.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "model/expert/moe.h"
#include "model/gpt.h"

namespace strata::model {

inline constexpr int kViewsPerLayer = 12;

// Pointers to one block's twelve views (parameters or gradients), in table order.
struct Block {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

// One block's activations. Under tensor parallelism with T ranks, rows of the residual
// region (ln1, res2, ln2, res3 and norm statistics) are the local rows n, and the
// column-parallel outputs (qkv, atty, fch, fch_gelu, att_lse) have 1/T of the columns.
struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch,
      *fch_gelu, *res3;
  uint16_t *ln1_h = nullptr, *ln2_h = nullptr, *gelu_h = nullptr;  // bf16 compute: instead of
                                                                   // ln1, ln2, fch_gelu
  uint16_t *qkv_h = nullptr, *atty_h = nullptr, *fch_h = nullptr;  // and of qkv, atty, fch
};

// Hands out consecutive pieces of one buffer.
struct Carver {
  float* base;
  int64_t used = 0;
  float* take(int64_t n) {
    float* p = base ? base + used : nullptr;
    used += (n + 15) / 16 * 16;  // keep every piece 64-byte aligned
    return p;
  }
  // n bf16 values, or none (nullptr) when `want` is false.
  uint16_t* take_bf16(int64_t n, bool want) {
    return want ? reinterpret_cast<uint16_t*>(take((n + 1) / 2)) : nullptr;
  }
  // n floats, or none (nullptr) when `want` is false.
  float* take_if(int64_t n, bool want) { return want ? take(n) : nullptr; }
};

// A "compute" trace span for one unit's work, built only when tracing is on.
class UnitSpan {
 public:
  UnitSpan(const char* pass, const char* what, int layer = -1) {
    if (!tracer().enabled()) return;
    std::string name = std::string(pass) + " " + what;
    if (layer >= 0) name += std::to_string(layer);
    span_.emplace(tracer(), std::move(name), "compute");
  }

 private:
  std::optional<TraceSpan> span_;
};

// Activation sizes: N rows of a whole micro-batch, n of them held in the residual region,
// 1/T of the columns of the column-parallel layers, Vr local vocabulary columns.
struct ActShape {
  int64_t N = 0, n = 0;
  int T = 1;
  int64_t Vr = 0;
  int64_t rep = 0;  // floats of the replicated-gradient scratch (tensor parallel only)
};

// One block's activations (LayerActs) for a micro-batch of a.N rows.
// attn_f32: qkv and the attention output in fp32 even under bf16 (context parallelism).
inline void carve_layer(Carver& c, LayerActs& l, const GPTConfig& cfg, const ActShape& a,
                        bool bf16, bool attn_f32) {
  const int64_t C = cfg.dim, N = a.N, n = a.n, Cl = C / a.T;
  const bool f32 = !bf16;
  l.ln1 = c.take_if(n * C, f32);
  l.ln1_h = c.take_bf16(n * C, bf16);
  l.ln1_mean = c.take(n);
  l.ln1_rstd = c.take(n);
  l.qkv = c.take_if(3 * N * Cl, attn_f32);
  l.qkv_h = c.take_bf16(3 * N * Cl, !attn_f32);
  l.atty = c.take_if(N * Cl, attn_f32);
  l.atty_h = c.take_bf16(N * Cl, !attn_f32);
  l.att_lse = c.take(N * cfg.heads / a.T);
  l.res2 = c.take(n * C);
  l.ln2 = c.take_if(n * C, f32);
  l.ln2_h = c.take_bf16(n * C, bf16);
  l.ln2_mean = c.take(n);
  l.ln2_rstd = c.take(n);
  l.fch = c.take_if(4 * N * Cl, f32);
  l.fch_h = c.take_bf16(4 * N * Cl, bf16);
  l.fch_gelu = c.take_if(4 * N * Cl, f32);
  l.gelu_h = c.take_bf16(4 * N * Cl, bf16);
  l.res3 = c.take(n * C);
}

struct GPT::Impl {
  std::vector<float*> unit_params, unit_grads;
  std::vector<int64_t> view_rel;  // offset of each view inside its unit
  std::vector<int> view0;  // first view of unit u + 1: block l (l < L), ln_f (L), expert units
  ExpertShard experts;  // the experts this rank holds (GPT::expert_shard())
  std::shared_ptr<expert::MoE> moe;  // MoE blocks (model/expert/moe.h); null when dense
  UnitHooks hooks;
  ContextComm* cp = nullptr;  // context parallelism (model/context/gpt_cp.h); null: none

  Buffer acts_buf, input_buf;
  float *encoded = nullptr, *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  uint16_t* lnf_h = nullptr;  // bf16 compute: instead of lnf
  bool bf16 = false;          // bf16 compute (one process and tensor parallel alike)
  float *logits = nullptr, *losses = nullptr, *ce_lse = nullptr;
  float *dres = nullptr, *dbuf_c = nullptr, *dbuf_4c = nullptr, *dqkv = nullptr;
  // Tensor parallel only: two (N, C) scratch tensors (gathered inputs, partial sums), the
  // replicated parameters' gradients of one unit before their tp reduction, CE statistics.
  float *full_a = nullptr, *full_b = nullptr, *rep_grads = nullptr, *ce_stats = nullptr;
  Buffer logits_full;  // tensor parallel logits() gathered over the vocabulary, on demand
  std::vector<LayerActs> layers;
  int32_t *tokens = nullptr, *targets = nullptr;
  float* weights = nullptr;
  bool has_weights = false;
  // The rows of the forward under way, when its caller named them (GPT::forward's ids): the
  // MoE blocks key their router jitter by them; positions (T) under context parallelism.
  expert::TokenIds token_ids;
  bool has_token_ids = false;
  std::vector<int> token_positions;

  int B = 0, T = 0;
  bool forward_done = false;  // a forward with targets ran and backward may follow
  bool logits_valid = false;
  bool hidden_valid = false;  // hidden() ran and backward_hidden may follow (gpt_heads.cc)

  // Layout pass with base = nullptr counts the floats; the second pass assigns pointers.
  int64_t carve(float* base, const GPTConfig& cfg, const ActShape& a) {
    Carver c{base};
    const int64_t C = cfg.dim, N = a.N, n = a.n, Cl = C / a.T;
    const bool f32 = !bf16;
    // Context-parallel attention (ring, Ulysses) reads and writes fp32 qkv and outputs.
    const bool attn_f32 = f32 || cp != nullptr;
    encoded = c.take(n * C);
    layers.resize(cfg.layers);
    for (LayerActs& l : layers) carve_layer(c, l, cfg, a, bf16, attn_f32);
    lnf = c.take_if(n * C, f32);
    lnf_h = c.take_bf16(n * C, bf16);
    lnf_mean = c.take(n);
    lnf_rstd = c.take(n);
    logits = c.take(N * a.Vr);
    losses = c.take(N);
    ce_lse = c.take(N);
    dres = c.take(n * C);
    dbuf_c = c.take(n * C);
    dbuf_4c = c.take(4 * N * Cl);
    dqkv = c.take(3 * N * Cl);
    if (a.T > 1) {
      full_a = c.take(N * C);
      full_b = c.take(N * C);
      rep_grads = c.take(a.rep);
      ce_stats = c.take(2 * N);
    }
    return c.used;
  }

  void before(int unit, Pass p) {
    if (hooks.before_unit) hooks.before_unit(unit, p);
  }
  void after(int unit, Pass p) {
    if (hooks.after_unit) hooks.after_unit(unit, p);
  }
};

inline Block block_views(float* base, const std::vector<int64_t>& rel, int layer) {
  STRATA_CHECK(base, "unit ", layer + 1, " has no memory bound");
  const int64_t* r = rel.data() + 2 + kViewsPerLayer * layer;
  return Block{base + r[0], base + r[1], base + r[2], base + r[3], base + r[4],  base + r[5],
               base + r[6], base + r[7], base + r[8], base + r[9], base + r[10], base + r[11]};
}

// The views of the block whose first view is `first` (an MoE block's first eight views are
// a dense block's; the rest are not read as MLP views).
inline Block block_views_at(float* base, const std::vector<int64_t>& rel, int first, int layer) {
  STRATA_CHECK(base, "unit ", layer + 1, " has no memory bound");
  const int64_t* r = rel.data() + first;
  return Block{base + r[0], base + r[1], base + r[2], base + r[3], base + r[4],  base + r[5],
               base + r[6], base + r[7], base + r[8], base + r[9], base + r[10], base + r[11]};
}

// An MoE block's place in the model (model/gpt_moe.cc): null for a dense block.
struct MoEBlock {
  expert::MoE* moe;
  int index;  // among the MoE blocks
  int unit;   // its expert unit (L + 2 + index)
  expert::MoEWeights w, g;
  float scale;  // backward: the loss scale (aux and z gradients)
  const expert::TokenIds* ids = nullptr;  // forward: who its rows are (null: anonymous)
};
// Calls the before hook of the block's expert unit (forward, or backward when with_grads);
// moe_block_done calls its after hook (nothing for a dense block).
std::unique_ptr<MoEBlock> moe_block(GPT::Impl& im, const GPTConfig& cfg, int layer,
                                    bool with_grads, float scale);
void moe_block_done(GPT::Impl& im, const MoEBlock* b, Pass pass);
// The MoE half of a block: out (N, C) += experts(x); backward: dx (N, C) written from dout.
void moe_block_forward(MoEBlock& b, const float* x, const uint16_t* xh, float* out, int64_t N,
                       bool bf16);
void moe_block_backward(MoEBlock& b, const float* dout, float* dx, bool bf16);
// Names the rows of the forward under way (B items of im.T local rows; under context
// parallelism their global positions come from the cp layout) for the MoE blocks, until
// the returned guard ends; nothing without an MoE block or without ids.sample.
struct TokenIdsScope {
  GPT::Impl& im;
  TokenIdsScope(GPT::Impl& im, const SampleIds& ids, int B);
  ~TokenIdsScope();
};

// LayerNorm output into whichever of the fp32 (f) or bf16 (h) buffers exists.
inline void layernorm_out(float* f, uint16_t* h, float* mean, float* rstd, const float* x,
                          const float* w, const float* b, int64_t N, int C) {
  if (h)
    kernels::layernorm_forward(h, mean, rstd, x, w, b, N, C);
  else
    kernels::layernorm_forward(f, mean, rstd, x, w, b, N, C);
}

// Where a matmul producing qkv or fch writes: the fp32 activation itself, or under bf16
// compute the fp32 scratch (at least (N, 4Cl)) that store_qkv / gelu_out round from.
inline float* gemm_out(float* f, float* scratch) { return f ? f : scratch; }

// qkv (N, 3Cl) written by the matmul into gemm_out(a.qkv, scratch): kept as bf16 under bf16
// compute (the attention tile products round it to bf16 anyway, so nothing is lost).
inline void store_qkv(LayerActs& a, const float* scratch, int64_t n) {
  if (a.qkv_h) kernels::f32_to_bf16(a.qkv_h, scratch, n);
}

inline void attention_out(LayerActs& a, int B, int T, int C, int NH) {
  if (a.qkv_h)
    kernels::attention_forward(a.atty_h, a.att_lse, a.qkv_h, B, T, C, NH);
  else
    kernels::attention_forward(a.atty, a.att_lse, a.qkv, B, T, C, NH);
}

// dqkv (N, 3Cl) written; datt (N, Cl).
inline void attention_grad(float* dqkv, const float* datt, const LayerActs& a, int B, int T, int C,
                           int NH) {
  if (a.qkv_h)
    kernels::attention_backward(dqkv, datt, a.qkv_h, a.atty_h, a.att_lse, B, T, C, NH);
  else
    kernels::attention_backward(dqkv, datt, a.qkv, a.atty, a.att_lse, B, T, C, NH);
}

// GELU of fc (n values at gemm_out(a.fch, scratch)): fp32, or under bf16 compute its output
// and the pre-GELU input both stored in bf16, from the fp32 matmul output in one pass.
inline void gelu_out(LayerActs& a, const float* fc, int64_t n) {
  if (a.fch_h)
    kernels::gelu_forward(a.gelu_h, a.fch_h, fc, n);
  else
    kernels::gelu_forward(a.fch_gelu, fc, n);
}

// d (n) = d * gelu'(fc), fc read from whichever store the forward kept.
inline void gelu_grad(float* d, const LayerActs& a, int64_t n) {
  if (a.fch_h)
    kernels::gelu_backward(d, a.fch_h, d, n);
  else
    kernels::gelu_backward(d, a.fch, d, n);
}

inline float* checked(float* p, int unit, const char* what) {
  STRATA_CHECK(p, "unit ", unit, " has no ", what, " memory bound");
  return p;
}

// One-process passes of gpt.cc that the custom heads (gpt_heads.cc) share: input checks,
// the trunk forward (im.lnf for (B, T), hooks of units 0 .. L+1) and the trunk backward from
// d loss / d lnf in im.dbuf_c (hooks before(L+1, B) .. after(0, B)).
void check_inputs(const GPTConfig& cfg, int max_batch, const int32_t* tokens,
                  const int32_t* targets, int B, int T);
void trunk_forward(GPT::Impl& im, const GPTConfig& cfg, const int32_t* tokens, int B, int T);
void trunk_backward(GPT::Impl& im, const GPTConfig& cfg, int B, int T,
                    float scale = 1.0f);  // scale: the loss scale, for MoE auxiliary losses

// One block of the one-process model (gpt.cc), also run by a pipeline stage (model/stage.h):
// x (B·T, C) -> a.res3; backward: dres holds d loss / d res3 on entry, d loss / d x on exit.
// scratch (B·T, 4C): the fp32 matmul outputs that bf16 compute stores rounded. cp: the
// context-parallel group of attention (null: the one-rank kernel); moe: the block's experts
// instead of its MLP (null: a dense block).
void block_forward(const GPTConfig& cfg, const Block& w, LayerActs& a, const float* x, int B, int T,
                   float* scratch, ContextComm* cp = nullptr, int layer = 0,
                   MoEBlock* moe = nullptr);
void block_backward(const GPTConfig& cfg, const Block& w, const Block& g, const LayerActs& a,
                    const float* x, float* dres, float* dbuf_c, float* dbuf_4c, float* dqkv, int B,
                    int T, ContextComm* cp = nullptr, int layer = 0, MoEBlock* moe = nullptr);

// Tensor-parallel forward, backward and logits (gpt_tp.cc).
double tp_forward(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s);
void tp_backward(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s, float scale);
const float* tp_logits(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s);

}  // namespace strata::model
