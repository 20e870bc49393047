// Activation memory: what strata's own GPT allocates on one rank (exact, the engine's
// accounting and `strata plan --local`), and what one layer of a published model keeps under
// Korthikanti et al.'s accounting (the planner's search over models it does not run).
//
// strata's GPT: the model's buffers (model/part.h's carve_slot) for micro-batches of up to b
// sequences, per tp rank, plus under context parallelism the ContextComm's buffers.
//
// Published models: one transformer layer for one micro-batch, after Korthikanti et al. 2022,
// "Reducing Activation Recomputation in Large Transformer Models", section 4.
//
// Terms: s sequence length (per context-parallel rank), b micro-batch, h hidden, a heads,
// t tensor-parallel degree; 16-bit activations (2 bytes) and 1-byte dropout masks.
// Their GPT layer (MHA, GELU MLP of 4h, dropout) stores, in bytes:
//   attention  11sbh + 5as²b   (QKV input 2, Q and K 4, V 2, projection input 2, mask 1;
//                               softmax output 2as²b, its dropout mask as²b and output 2as²b)
//   MLP        19sbh           (input 2, GELU input 8, GELU output 8, dropout mask 1)
//   2 norms     4sbh
// giving the paper's closed forms:
//   no parallelism                  sbh(34 + 5as/h)
//   tensor parallel                 sbh(10 + 24/t + 5as/(ht))
//   tensor + sequence parallel      sbh/t · (34 + 5as/h)
//   + selective recomputation       sbh/t · 34          (attention core recomputed)
//   full recomputation              2sbh (÷t with sequence parallelism): the layer input only
// The general form below keeps their accounting term by term, so grouped-query attention
// (K and V of kv-hidden width), a SwiGLU MLP of width f (gate, up and their product: 6sbf)
// and models without dropout follow from the same terms; MoE layers store the MLP terms for
// each of the top-k experts a token visits.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "cost/shapes.h"

namespace strata::cost {

// Activation bytes the model allocates on one tp rank for micro-batches of up to
// `micro_batch` sequences of max_seq (model/part.h's carve_slot, without its 64-byte
// alignment padding, plus tokens, targets and weights). bf16 compute keeps the norm outputs
// (ln1, ln2, ln_f: n·C each), qkv (3·N·Cl), the attention output (N·Cl) and the GELU input
// and output (4·N·Cl each) in bf16, half their fp32 bytes.
// attn_fp32: qkv and the attention output stay fp32 under bf16 (context parallelism).
// Recomputation (m.recompute, docs/recompute.md): selective drops each layer's two norm
// outputs and its fp32 GELU output into one shared copy; full keeps only the output (n·C) of
// each of m.recomputed_layers layers plus one shared working layer (a layer but its output);
// with m.recompute_bf16_inputs the outputs a next recomputed layer reads are bf16.
// The breakdown by buffer: activation_buffers below.
struct ActivationBuffers {
  int64_t embedding = 0;     // the embedding output (the first block's input)
  int64_t layers_kept = 0;   // every layer's kept activations
  int64_t recompute = 0;     // recomputation's shared working copy
  int64_t head = 0;          // final norm, logits, losses
  int64_t scratch = 0;       // backward and tensor-parallel scratch
  int64_t inputs = 0;        // tokens, targets, weights
  int64_t total() const { return embedding + layers_kept + recompute + head + scratch + inputs; }
  // (name, bytes) of each, as summary.json and `strata plan --local` report them.
  std::vector<std::pair<const char*, int64_t>> named() const {
    return {{"embedding", embedding}, {"layers_kept", layers_kept}, {"recompute_work", recompute},
            {"head", head}, {"scratch", scratch}, {"inputs", inputs}};
  }
};

// Llama blocks (m.llama) keep the same buffers at their widths: qkv (NH/T + 2NKVl)·hs columns,
// the MLP's (gate | up) 2F/T and SwiGLU output F/T, RMSNorm's rstd only (no mean), and no
// position-table gradient in the tp scratch; their backward scratch also holds SwiGLU's two
// gradients (N·(2F + F)/T).
// One tp rank's columns of a block's activations (model/block.h LocalWidths): qkv, the MLP's
// column-parallel output fc (GPT-2 F/T, Llama's gate | up 2F/T) and its activation F/T.
struct BlockColumns {
  int64_t qkv, fc, act;
};
// Width C, NH query and NKV key/value heads, MLP width F (SwiGLU's gate | up when llama).
inline BlockColumns block_columns(int64_t C, int64_t NH, int64_t NKV, int64_t F, bool llama, int tp) {
  const int64_t act = F / tp;
  return {(NH / tp + 2 * tp_kv_heads(NKV, tp)) * (C / NH), (llama ? 2 : 1) * act, act};
}
inline BlockColumns block_columns(const GptShape& m, int tp) {
  return block_columns(m.dim, m.heads, kv_heads_of(m), dense_ffn(m), m.llama, tp);
}

inline ActivationBuffers activation_buffers(const GptShape& m, int tp, bool sp, int rank,
                                            int64_t micro_batch, bool bf16_compute = false,
                                            bool attn_fp32 = false) {
  const int64_t N = micro_batch * m.max_seq, C = m.dim, L = m.layers, T = tp;
  const int64_t n = sp && T > 1 ? (N + T - 1) / T : N, Cl = C / T;
  const int64_t Vr = tp_vocab_rows(m.padded_vocab, tp, rank);
  const auto [qkv, fc, act] = block_columns(m, tp);
  const int64_t stats = m.llama ? 1 : 2;  // norm statistics per norm and row
  // bf16-able activations in floats: whole under fp32, halves (rounded up) under bf16.
  auto out = [&](int64_t e) { return bf16_compute ? (e + 1) / 2 : e; };
  auto att = [&](int64_t e) { return attn_fp32 ? e : out(e); };
  const int64_t layer = 2 * n * C + 2 * out(n * C) + 2 * stats * n + att(N * qkv) + att(N * Cl) +
                        out(N * fc) + out(N * act) + N * m.heads / T;
  // What selective recomputation drops from a layer: ln1, ln2 and (fp32) the GELU output.
  const int64_t dropped = 2 * out(n * C) + (bf16_compute ? 0 : N * act);
  ActivationBuffers b;
  b.embedding = 4 * n * C;
  if (m.recompute == Recompute::selective) {
    b.layers_kept = 4 * L * (layer - dropped);
    b.recompute = 4 * dropped;
  } else if (m.recompute == Recompute::full) {
    const int64_t R = m.recomputed_layers;
    // --recompute-inputs bf16: the first R - 1 recomputed blocks keep their outputs (the next
    // recomputed block's input) in bf16, and one fp32 copy of such an input is widened in the
    // working set (model/part.h rounded_in).
    const int64_t H = m.recompute_bf16_inputs && R > 1 ? R - 1 : 0;
    b.layers_kept = 4 * ((R - H) * n * C + H * ((n * C + 1) / 2) + (L - R) * layer);
    b.recompute = R > 0 ? 4 * (layer - n * C + (m.recompute_bf16_inputs ? n * C : 0)) : 0;
  } else {
    b.layers_kept = 4 * L * layer;
  }
  b.head = 4 * (out(n * C) + stats * n + N * Vr + 2 * N);             // ln_f, logits, losses
  const int64_t mlp = std::max(qkv, fc + (m.llama ? act : 0));        // matmul outputs, MLP grads
  b.scratch = 4 * (2 * n * C + N * mlp + N * qkv);                    // gradient scratch
  const int64_t table = m.llama ? 0 : m.max_seq * C;                  // wpe's gradient
  if (T > 1) b.scratch += 4 * (2 * N * C + table + 6 * C + 2 * N);    // tp scratch
  b.inputs = 12 * N;
  return b;
}

inline int64_t tp_activation_bytes(const GptShape& m, int tp, bool sp, int rank,
                                   int64_t micro_batch, bool bf16_compute = false,
                                   bool attn_fp32 = false) {
  return activation_buffers(m, tp, sp, rank, micro_batch, bf16_compute, attn_fp32).total();
}

// Bytes of the buffers a ContextComm holds for micro-batches of B sequences (Tl local rows,
// Cl query columns, Kl key/value columns (0: Cl), NH heads on this rank): ring keeps two kv
// blocks, two travelling dkv blocks and one received (each B·Tl·2Kl) plus D (B·NH·Tl);
// Ulysses keeps send, receive and the head-sharded qkv gradient (3 x B·Tl·(Cl + 2C·kw), kw =
// ulysses_kv_columns: Cl + 2Kl with whole heads), the head-sharded dO (B·Tl·Cl) plus every
// layer's head-sharded output, and with key/value heads shared by cp ranks every layer's
// head-sharded qkv too.
inline int64_t cp_buffer_bytes(bool ring, int C, int layers, int64_t B, int64_t Tl, int64_t Cl,
                               int64_t NH, int64_t Kl = 0) {
  if (C <= 1) return 0;
  const int64_t N = B * Tl, K = Kl > 0 ? Kl : Cl;
  if (ring) return 4 * (5 * N * 2 * K + N * NH);
  const int64_t kw = ulysses_kv_columns(K, C, Cl / NH), sharded = N * (Cl + 2 * C * kw);
  const int64_t kept = C * kw > K ? layers * sharded : 0;
  return 4 * (3 * sharded + N * Cl + layers * N * Cl + kept);
}

// Activation bytes of a (tp rank of a) cp rank, as GPT allocates them plus the cp buffers for
// micro-batches of b sequences of seq tokens: the model's buffers hold ceil(max_seq / C) rows
// per sequence (the tensor-parallel position-gradient scratch still spans the whole table).
inline int64_t cp_activation_bytes(const GptShape& m, int tp, bool sp, int rank, int64_t b,
                                   bool bf16, bool ring, int C, int64_t seq) {
  GptShape local = m;
  local.max_seq = (m.max_seq + C - 1) / C;
  int64_t bytes = tp_activation_bytes(local, tp, sp, rank, b, bf16, /*attn_fp32=*/C > 1);
  if (tp > 1 && !m.llama) bytes += 4 * (m.max_seq - local.max_seq) * m.dim;
  return bytes + cp_buffer_bytes(ring, C, int(m.layers), b, seq / C, m.dim / tp, m.heads / tp,
                                 kv_columns(m, tp));
}

// Published models, one layer (the terms above).

struct LayerShape {
  double s = 0;          // tokens of one sequence on this rank (sequence / context parallel)
  double s_kv = 0;       // keys each query attends to (the whole sequence under context
                         // parallelism); 0 means s
  double b = 0;          // micro-batch
  double h = 0;          // hidden
  double a = 0;          // attention heads
  double kv_hidden = 0;  // width of K and V (h without grouped-query attention)
  double ffn = 0;        // MLP inner width
  bool gated = false;    // SwiGLU (three matrices) instead of GELU (two)
  bool dropout = true;
  double experts_per_token = 1;  // top-k for MoE layers, 1 for dense
};

// Bytes that tensor parallelism without sequence parallelism leaves replicated on every rank:
// the two norm inputs, the QKV and MLP inputs, and the two dropout masks.
inline double replicated_act_bytes(const LayerShape& x) {
  const double sbh = x.s * x.b * x.h;
  return sbh * (4 + 2 + 2 * x.experts_per_token + (x.dropout ? 2 : 0));
}

// Bytes split across tensor-parallel ranks, excluding the attention-score (s²) terms.
inline double split_act_bytes(const LayerShape& x) {
  const double sb = x.s * x.b;
  double attn = sb * (2 * x.h + 4 * x.kv_hidden + 2 * x.h);  // Q, K and V, projection input
  double mlp = sb * x.ffn * (x.gated ? 6 : 4) * x.experts_per_token;
  return attn + mlp;
}

// The attention-score terms that selective recomputation drops: softmax output (2as²b),
// with dropout also its mask (as²b) and output (2as²b).
inline double score_act_bytes(const LayerShape& x) {
  const double keys = x.s_kv > 0 ? x.s_kv : x.s;
  return x.a * x.s * keys * x.b * (x.dropout ? 5 : 2);
}

// Activation bytes one layer keeps per micro-batch on one rank.
inline double layer_activation_bytes(const LayerShape& x, int t, bool seq_parallel, Recompute r) {
  const double sbh = x.s * x.b * x.h;
  if (r == Recompute::full) return seq_parallel ? 2 * sbh / t : 2 * sbh;
  const double scores = r == Recompute::selective ? 0 : score_act_bytes(x) / t;
  const double split = split_act_bytes(x) / t + scores;
  const double rep = replicated_act_bytes(x);
  return seq_parallel ? rep / t + split : rep + split;
}

// The paper's closed forms, kept for tests and documentation.
inline double korthikanti_no_parallel(double s, double b, double h, double a) {
  return s * b * h * (34 + 5 * a * s / h);
}
inline double korthikanti_tensor_parallel(double s, double b, double h, double a, double t) {
  return s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
}
inline double korthikanti_tensor_sequence_parallel(double s, double b, double h, double a,
                                                   double t) {
  return s * b * h / t * (34 + 5 * a * s / h);
}
inline double korthikanti_selective(double s, double b, double h, double t) {
  return s * b * h / t * 34;
}

}  // namespace strata::cost
