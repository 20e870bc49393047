// Activation memory of one transformer layer for one micro-batch, after Korthikanti et al.
// 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.
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
#include <cstdint>

namespace strata::plan {

enum class Recompute : uint8_t { none, selective, full };

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

}  // namespace strata::plan
