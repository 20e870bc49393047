// Compute costs: model FLOPs per trained token and MFU (the engine's accounting, which the
// planner uses as is), the FLOPs of one GPT block's forward (the pipeline's estimated layer
// costs, model/stage_cost.h), and Megatron-LM's per-iteration count (the planner's report).
// Model FLOPs (what MFU counts) do not include recomputation; hardware FLOPs do.
//
// PaLM (Chowdhery et al. 2022) appendix B, per token: 6N for the matmuls of forward and
// backward (N parameters) plus 12·L·d·T for attention scores and values (T = sequence
// length). A GPT block's forward is a third of its share: 2·12d² for its matmuls plus 4·T·d
// for the scores and values.
//
// Megatron-LM (Narayanan et al. 2021, eq. 3), for a GPT of l layers, hidden h, sequence s,
// vocabulary V and batch B, with full activation recomputation (4 passes of the layers:
// forward, recomputed forward and a backward costing two):
//   F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))
// and without recomputation (3 passes): 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
#pragma once
#include <cstdint>

#include "cost/shapes.h"

namespace strata::cost {

// Training FLOPs per token (PaLM, above).
inline double train_flops_per_token(double n_params, int64_t layers, int64_t dim, int64_t seq) {
  return 6.0 * n_params + 12.0 * double(layers) * double(dim) * double(seq);
}

// Model FLOPs per token of m trained on sequences of `seq` tokens: N = the parameters a token
// multiplies by (cost::active_matmul_params), what the planner's MFU counts.
inline double model_flops_per_token(const GptShape& m, int64_t seq) {
  return train_flops_per_token(double(active_matmul_params(m)), m.layers, m.dim, seq);
}

// Forward FLOPs per token of attention's scores and values over sequences of `seq` tokens,
// 4·seq·C (Megatron's convention: no causal halving), and of the logits, 2·C·Vp.
inline double attention_core_forward_flops_per_token(double dim, double seq) {
  return 4.0 * seq * dim;
}
inline double logits_forward_flops_per_token(const GptShape& m) {
  return 2.0 * double(m.dim) * double(m.padded_vocab);
}
// Forward FLOPs per token of one block of m over sequences of `seq` tokens, dense or (moe) an
// MoE block: 2 per matrix weight a token multiplies by (q, k, v, o; the MLP's, or the router's,
// the shared experts' and K routed experts') and the attention core. Norms and biases are left
// out, as Megatron leaves them: 2·(C·(C + 2·Ckv) + C² + (2 or 3)·C·F) + 4·T·C dense.
inline double block_forward_flops_per_token(const GptShape& m, double seq, bool moe = false) {
  const bool gated = block_parts(m).gated;
  auto mats = [&](int64_t H) { return mlp_params(m.dim, 1, H, gated, /*biases=*/false); };
  const int64_t shared = m.shared_ffn > 0 ? mats(m.shared_ffn) : 0;
  const int64_t mlp =
      moe ? router_params(m) + m.top_k * mats(expert_ffn(m)) + shared : mats(dense_ffn(m));
  return 2.0 * double(attention_matrix_params(m, 1) + mlp) +
         attention_core_forward_flops_per_token(double(m.dim), seq);
}
// The same for a dense block of width `dim`, heads and kv_heads key/value heads and an MLP of
// `ffn` columns, gated (SwiGLU) or not; and GPT-2's (24·C² + 4·T·C).
inline double block_forward_flops_per_token(double dim, double seq, double heads, double kv_heads,
                                            double ffn, bool gated) {
  GptShape m;
  m.dim = int64_t(dim), m.heads = int64_t(heads), m.kv_heads = int64_t(kv_heads);
  m.ffn = int64_t(ffn), m.llama = gated;
  return block_forward_flops_per_token(m, seq);
}
inline double block_forward_flops_per_token(double dim, double seq) {
  return block_forward_flops_per_token(dim, seq, 1, 1, default_ffn(false, int64_t(dim)), false);
}

// Selective recomputation's work per token and block (docs/recompute.md): both norms again
// (statistics and outputs, C elements each) and, under fp32 compute only (bf16 keeps it), the
// MLP's activation from its kept input (F elements). Operations per element, a transcendental
// (tanh, exp) counted as kernels/fastmath.h's ~12: LayerNorm 8 (mean 1, variance 3,
// normalise 2, scale and shift 2), RMSNorm 4 (square and sum 2, scale 1, weight 1), GELU 20
// (the cubic and its scales 5, tanh, 1 + and x/2 3), SwiGLU's silu(gate)·up 17 (negate, exp,
// 1 +, divide, x gate, x up): GPT-2 96·C, Llama 8·C + 17·F. Bytes: a norm reads its fp32
// input and writes its output (fp32, or bf16 under bf16 compute); GELU reads fc and writes its
// output (8·F), SwiGLU reads gate and up and writes one (12·F); per-row statistics and the
// weights are not counted.
struct ElementwiseWork {
  double norm_ops = 0, norm_bytes = 0;  // the two norms (rows of C)
  double act_ops = 0, act_bytes = 0;    // the MLP's activation (rows of F)
};
inline ElementwiseWork selective_recompute_per_token(double dim, double ffn, bool llama,
                                                     bool bf16) {
  ElementwiseWork w;
  w.norm_ops = 2 * (llama ? 4 : 8) * dim;
  w.norm_bytes = 2 * (4 + (bf16 ? 2 : 4)) * dim;
  if (!bf16) {
    w.act_ops = (llama ? 17 : 20) * ffn;
    w.act_bytes = (llama ? 12 : 8) * ffn;
  }
  return w;
}

// Model FLOPs utilisation: achieved model FLOP/s over the peak.
inline double mfu(double tokens_per_s, double flops_per_token, double peak_flops) {
  return peak_flops > 0 ? tokens_per_s * flops_per_token / peak_flops : 0.0;
}

// Megatron-LM's FLOPs per iteration; full_recompute selects the 96 (4-pass) or 72 (3-pass)
// form above.
inline double megatron_flops_per_iteration(double B, double s, double l, double h, double V,
                                           bool full_recompute = true) {
  if (full_recompute) return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

// Narayanan et al. 2021 eq. 4: end-to-end training time ≈ 8·T·P / (n·X) seconds for T tokens,
// P parameters, n GPUs each achieving X FLOP/s (full recomputation: 8 = 2 · 4 passes).
inline double megatron_training_time_s(double tokens, double params, double n_gpus,
                                       double flops_per_gpu) {
  return 8.0 * tokens * params / (n_gpus * flops_per_gpu);
}

// Muon's Newton-Schulz iteration (kernels/muon.h) on a rows x cols matrix, `steps` times: with
// m = min and n = max of the two, X Xᵀ (2 m² n), A A (2 m³) and B X (2 m² n) per step.
inline double newton_schulz_flops(int64_t rows, int64_t cols, int steps) {
  const double m = double(rows < cols ? rows : cols), n = double(rows < cols ? cols : rows);
  return double(steps) * (4 * m * m * n + 2 * m * m * m);
}

}  // namespace strata::cost
