// One GPT-2 transformer block, written once: forward, backward, and backward in two passes
// (zero-bubble's input and weight passes), over a tensor-parallel communicator whose size-1
// form does no communication, an optional context-parallel group for attention and optional
// experts in place of the MLP. One process is tp = 1 of this code; a tensor-parallel rank, a
// pipeline stage and an expert-parallel rank run the same passes. The block knows its shapes,
// its activations and its communicators, never the model that calls it.
//
// Terms: N = B·T rows of the micro-batch, n = tc.local_rows(N) rows of the residual region
// (N/T with sequence parallelism over T ranks, else N), C width, Cl = C/T, NHl = NH/T local
// heads. Megatron-LM with sequence parallelism (f, g: model/tensor/collectives.h):
//
//   x (n,C) -ln1-> -f-> qkv column (N,3Cl) -attention on NHl heads-> (N,Cl) -proj row-> g
//           -> + x + b -> res2 (n,C) -ln2-> -f-> fc column (N,4Cl) -gelu-> -fc proj row->
//           g -> + res2 + b -> res3 (n,C)
//
// At T = 1 f and g are identities and the residual adds are fused into the output
// projections (out = x + y @ W^T + b, kernels/matmul.h), so dres flows through unchanged and
// the norms' input gradients accumulate into it.
//
// Replicated parameters (norms, row-parallel biases) see only this rank's n rows under SP:
// at T > 1 their gradients for the micro-batch go to the scratch `rep`, are summed over tp
// under SP and then added (+=) to the block's, so accumulation over micro-batches stays
// exact; at T = 1 they accumulate directly.
//
// Activations kept per block and row (LayerActs): ln1, qkv (3Cl), attention output (Cl),
// res2, ln2, fc (4Cl), gelu (4Cl), res3, norm statistics and the attention log-sum-exp.
// Under bf16 compute the matmul inputs that are only read as bf16 (ln1, ln2, qkv, attention
// output, fc, gelu) are stored in bf16 (the matmuls and attention tile products round them
// anyway); residuals, statistics and lse stay fp32. Under context parallelism qkv and the
// attention output stay fp32 (the ring and Ulysses exchange fp32).
//
// Llama blocks (BlockArch::llama) run the same passes with RMSNorm for the norms (no bias,
// no mean), no linear biases, rotary embeddings turning q and k after the qkv product (the
// rows' positions in BlockCtx::pos) and before attention (turned back in the backward after
// attention's), grouped-query attention on NHl query and NKVl key/value heads (qkv is
// (N, (NHl + 2NKVl)·hs)) and a SwiGLU MLP: one column-parallel (gate | up) product of 2Fl
// columns, silu(gate)·up (Fl) kept where GPT-2 keeps the GELU output, the down projection
// row-parallel. At NKVl = NHl and F = 4C the activations have GPT-2's widths.
//
// An MoE block (docs/moe.md) replaces the MLP half: its input is the (gathered) ln2 output,
// every tp rank routes alike and runs its 4C/T hidden units of each expert; the partial
// outputs are reduce-scattered (SP) or all-reduced like the MLP's c_proj output.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "cost/activations.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/expert/moe.h"
#include "model/tensor/collectives.h"

namespace strata::model {

class ContextComm;  // model/context/context_comm.h

// The block's architecture and widths on the whole model (model_part.h GPTConfig): width C,
// NH query and NKV key/value heads, MLP width F; llama: RMSNorm eps and RoPE (theta, scaling).
struct BlockArch {
  bool llama = false;
  int C = 0, NH = 0, NKV = 0, F = 0;
  float eps = 1e-5f;
  kernels::Rope rope{};  // base theta and Llama 3.1's frequency scaling
  int hs() const { return C / NH; }
};

// Pointers to one block's views (parameters or gradients), in table order; GPT-2 has all
// twelve, a Llama block no biases (null) and its q|k|v and gate|up views adjacent, so qkvw
// and fcw are the fused matrices.
struct Block {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
// Which of a block's views (in its unit's table order, model/shard.cc) Block's i-th pointer
// is: i for GPT-2; for a Llama block (norm | q k v | o | norm | gate up | down) the first view
// of each fused matrix, and -1 for the biases it lacks.
int block_view_index(bool llama, int i);
// The Block of one block's views, view(v) the pointer of its v-th view in its unit's table
// order (the training parts' units and the KV decoder's whole-model table alike); the roles
// a Llama block lacks stay null.
template <class View>
Block block_of(bool llama, View&& view) {
  float* p[12];
  for (int i = 0; i < 12; ++i) {
    const int v = block_view_index(llama, i);
    p[i] = v < 0 ? nullptr : view(v);
  }
  return Block{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}

// One block's activations. Under tensor parallelism with T ranks, rows of the residual
// region (ln1, res2, ln2, res3 and norm statistics) are the local rows n, and the
// column-parallel outputs (qkv, atty, fch, fch_gelu, att_lse) have 1/T of the columns.
struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch,
      *fch_gelu, *res3;
  uint16_t *ln1_h = nullptr, *ln2_h = nullptr, *gelu_h = nullptr;  // bf16 compute: instead of
                                                                   // ln1, ln2, fch_gelu
  uint16_t *qkv_h = nullptr, *atty_h = nullptr, *fch_h = nullptr;  // and of qkv, atty, fch
  uint16_t* res3_h = nullptr;  // BlockKeep::output_bf16: instead of res3
};

// Hands out consecutive pieces of one buffer (base = nullptr counts the floats).
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

// Activation sizes: N rows of a whole micro-batch, n of them held in the residual region,
// 1/T of the columns of the column-parallel layers, Vr local vocabulary columns.
struct ActShape {
  int64_t N = 0, n = 0;
  int T = 1;
  int64_t Vr = 0;
};

// One tp rank's widths of a block: qkv columns (NH + 2NKV)·hs/T, the MLP's column-parallel
// output (GPT-2 F/T, Llama's gate | up 2F/T) and its activation (F/T).
// (cost::block_columns, the formula's, is the one source of the three column counts.)
struct LocalWidths {
  int64_t C, Cl, heads, qkv, fc, act;
  LocalWidths(const BlockArch& m, int T) : LocalWidths(m, T, cost::block_columns(m.C, m.NH, m.NKV, m.F, m.llama, T)) {}

 private:
  LocalWidths(const BlockArch& m, int T, cost::BlockColumns c)
      : C(m.C), Cl(m.C / T), heads(m.NH / T), qkv(c.qkv), fc(c.fc), act(c.act) {}
};

// What one block keeps for its backward (model_part.h RecomputePolicy): everything; all but
// the norms' outputs and the fp32 GELU output (selective); its output only (output: full
// recomputation), in bf16 (output_bf16: --recompute-inputs bf16, for a block the next of its
// chunk recomputes from). `work` carves the complement a part needs once: everything but the
// output (full), or just what selective drops (dropped).
enum class BlockKeep : uint8_t { all, selective, output, output_bf16, work, dropped };
// Full recomputation: the block keeps its output only (in fp32 or bf16).
inline bool keeps_output_only(BlockKeep k) {
  return k == BlockKeep::output || k == BlockKeep::output_bf16;
}

// Carves one block's activations for a.N rows (those `keep` names). attn_f32: qkv and the
// attention output in fp32 even under bf16 (context parallelism).
void carve_layer(Carver& c, LayerActs& l, const BlockArch& m, const ActShape& a, bool bf16,
                 bool attn_f32, BlockKeep keep = BlockKeep::all);

// The activations a block's passes run on: the ones it keeps, with what it does not keep
// taken from the part's recompute scratch `work` (carved as BlockKeep::work or ::dropped);
// under output_bf16 the fp32 output is the caller's to place (res3 null).
LayerActs effective_acts(const LayerActs& kept, const LayerActs& work, BlockKeep keep);

// A micro-batch's shapes on this rank: rows, local rows, width, local width and heads,
// local vocabulary rows [v0, v0 + Vr).
struct TpDims {
  int B = 0, T = 0;  // batch, sequence (local rows under context parallelism)
  int64_t N = 0, n = 0;
  int C = 0, Cl = 0, NHl = 0;
  int NKVl = 0, Fl = 0;  // local key/value heads and MLP width
  BlockArch m;           // the whole model's
  int64_t v0 = 0, Vr = 0;
  LocalWidths w() const { return LocalWidths(m, C / Cl); }
  kernels::AttentionShape attention() const { return {B, T, NHl, NKVl, m.hs()}; }
};

// Backward (and forward) scratch: dres, dbuf_c (n, C); dbuf_4c (N, max(fc, qkv) columns);
// dqkv (N, qkv columns);
// full_a, full_b (N, C) for gathered rows (T > 1 only); rep (T·C + 6C) for the replicated
// gradients of one micro-batch (T > 1 only).
struct TpScratch {
  float *dres = nullptr, *dbuf_c = nullptr, *dbuf_4c = nullptr, *dqkv = nullptr;
  float *full_a = nullptr, *full_b = nullptr, *rep = nullptr;
};

// An MoE block's experts and router (model/expert/moe.h), for one pass.
struct MoEBlock {
  expert::MoE* moe;
  int index;  // among the MoE blocks
  int unit;   // its expert unit
  expert::MoEWeights w, g;
  float scale;  // backward: the loss scale (aux and z gradients)
  const expert::TokenIds* ids = nullptr;  // forward: who its rows are (null: anonymous)
  int slot = 0;  // the activation slot of the micro-batch (its routing state in the MoE)
  int64_t seq_rows = 0;  // forward: the local rows of each sequence (0: one sequence)
};
// The MoE half of a block: out (N, C) += experts(x); backward: dx (N, C) written from dout.
void moe_block_forward(MoEBlock& b, const float* x, const uint16_t* xh, float* out, int64_t N,
                       bool bf16);
void moe_block_backward(MoEBlock& b, const float* dout, float* dx, bool bf16);

// What one block's pass runs over: the tp communicator (size 1: none), the micro-batch's
// shapes, the scratch, the cp group of attention (null: the one-rank kernel) with the key
// its saved state is kept under, the experts instead of the MLP (null: dense), and the
// documents attention must not cross (MicroInput::doc_start; null: none).
struct BlockCtx {
  TensorComm& tc;
  const TpDims& d;
  const TpScratch& s;
  ContextComm* cp = nullptr;
  int key = 0;
  MoEBlock* moe = nullptr;
  const int32_t* doc_start = nullptr;
  const int32_t* pos = nullptr;  // (B, T) rotary positions of the rows (Llama blocks)
  bool few_rows = false;  // a decoding step's few rows: the forward's fp32 products by the row
                          // pass (model/tensor/linear.h linear_forward)
};

// The output gradients kept from the input pass to the weight pass of one block and slot.
struct BlockStash {
  float* d3 = nullptr;    // (N, C) fc proj's output gradient (whole rows, gathered over tp)
  float* dfch = nullptr;  // (N, 4Cl) fc's (after GELU's backward)
  float* d2 = nullptr;    // (N, C) attn proj's (gathered)
  float* dqkv = nullptr;  // (N, 3Cl) qkv's
};
inline int64_t block_stash_floats(int64_t N, const LocalWidths& w) {
  return N * (2 * w.C + w.fc + w.qkv);
}

// x (n, C) -> a.res3 (n, C).
void block_forward(const BlockCtx& c, const Block& w, LayerActs& a, const float* x);
// block_forward in its three parts, for a caller whose attention reads keys and values kept
// elsewhere (the KV-cache decoder, rlhf/kv_cache.h): the attention's input (x -> a.ln1 ->
// a.qkv, q and k turned by RoPE at c.pos for Llama), the attention itself (a.qkv -> a.atty,
// a.att_lse) and the rest (a.atty -> a.res2 -> a.res3: output projection and residual, norm,
// MLP and residual; at tp 1 a.res2 and a.res3 may both be x, updated in place).
void block_forward_qkv(const BlockCtx& c, const Block& w, LayerActs& a, const float* x);
void block_forward_rest(const BlockCtx& c, const Block& w, LayerActs& a, const float* x);
// c.s.dres (n, C): d loss / d res3 on entry, d loss / d x on exit; g += the block's gradients.
void block_backward(const BlockCtx& c, const Block& w, const Block& g, const LayerActs& a,
                    const float* x);
// Recomputes, before a backward pass, what the block did not keep (e from effective_acts):
// selective: the norms' outputs from x and res2 (their statistics again, the same bits) and,
// fp32 compute, the GELU output from its input; output: the whole forward from x. The
// kernels are deterministic, so the backward sees the bits the forward saw.
void block_recompute(const BlockCtx& c, const Block& w, LayerActs& e, const float* x, BlockKeep keep);

// block_backward in two passes (zero-bubble): the input pass computes d loss / d x (and the
// norms' gradients) and keeps the linear layers' output gradients in st; the weight pass
// accumulates the linear layers' weight gradients from them (the same products, so the same
// numbers; under SP it all-gathers the two norm outputs again rather than keeping them).
// Dense blocks only.
void block_backward_input(const BlockCtx& c, const Block& w, const Block& g, const LayerActs& a,
                          const float* x, const BlockStash& st);
void block_backward_weight(const BlockCtx& c, const Block& g, const LayerActs& a,
                           const BlockStash& st);

// The block's norm (LayerNorm, or RMSNorm for Llama: mean = null, b = null) into whichever of
// the fp32 (f) or bf16 (h) buffers exists.
void norm_out(const BlockArch& m, float* f, uint16_t* h, float* mean, float* rstd, const float* x,
              const float* w, const float* b, int64_t N);
// dx (N, C) += d loss / d x; gw, gb (C) += (gb null for RMSNorm); dout (N, C).
void norm_backward(const BlockArch& m, float* dx, float* gw, float* gb, const float* dout,
                   const float* x, const float* w, const float* mean, const float* rstd,
                   int64_t N);

// Final norm backward: s.dbuf_c (n, C) d loss / d its output -> s.dres (n, C) (written)
// d loss / d x; gw, gb (C) += its weight and bias gradients (summed over tp under SP; gb null
// for RMSNorm).
void final_norm_backward(TensorComm& tc, const TpDims& d, const TpScratch& s, const float* w,
                         float* gw, float* gb, const float* x, const float* mean,
                         const float* rstd);

}  // namespace strata::model
