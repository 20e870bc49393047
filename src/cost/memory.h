// Model-state bytes per data-parallel rank under ZeRO (Rajbhandari et al. 2020): the engine's
// memory accounting (parallel/), which the planner (plan/) uses as is, so the two agree to the
// byte.
// Ψ parameters over N ranks; shards are padded so any Ψ splits over any N: each rank holds
// ceil(Ψ/N) elements of every sharded state (core/shard.h).
//   stage 0: every state replicated           stage 2: + gradients sharded
//   stage 1: optimizer states sharded         stage 3: + parameters sharded
// With K optimizer bytes per parameter, bf16 and AdamW (K = 12): 16Ψ, 4Ψ + 12Ψ/N,
// 2Ψ + 14Ψ/N, 16Ψ/N bytes per rank for stages 0..3.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/shard.h"

namespace strata::cost {

enum class Precision : uint8_t { fp32, bf16 };
// Muon (parallel/muon.h): the blocks' matrices keep one momentum (4 bytes), the rest AdamW's
// two; state_bytes_per_param gives AdamW's, and the planner takes 4 bytes off per matrix
// element a GPU updates (muon_saving_bytes).
enum class Optimizer : uint8_t { adamw, sgd, muon };

struct ModelStateBytes {
  int64_t parameters = 0;  // working parameters (bf16 or fp32)
  int64_t gradients = 0;   // working gradients
  int64_t optimizer = 0;   // AdamW m and v, plus fp32 master weights under bf16
  int64_t total() const { return parameters + gradients + optimizer; }
  ModelStateBytes& operator+=(const ModelStateBytes& o) {
    parameters += o.parameters;
    gradients += o.gradients;
    optimizer += o.optimizer;
    return *this;
  }
};

// What one parameter costs in each model state.
struct StateBytesPerParam {
  int64_t parameter = 0;  // working copy
  int64_t gradient = 0;   // working gradient
  int64_t optimizer = 0;  // master copy (when the working copy is not fp32) + moments
  int64_t total() const { return parameter + gradient + optimizer; }
};

// fp32: 4 + 4 + optimizer. bf16: 2-byte parameters, gradients in bf16 (2, DeepSpeed's
// default) or fp32 (4, Megatron's main_grad), fp32 master (4) + moments.
// AdamW keeps m and v (8 bytes); SGD keeps a momentum buffer (4 bytes).
inline StateBytesPerParam state_bytes_per_param(Precision p, bool fp32_grads = false,
                                                Optimizer opt = Optimizer::adamw) {
  StateBytesPerParam b;
  const int64_t moments = opt == Optimizer::sgd ? 4 : 8;
  b.parameter = p == Precision::bf16 ? 2 : 4;
  b.gradient = (p == Precision::bf16 && !fp32_grads) ? 2 : 4;
  b.optimizer = moments + (p == Precision::bf16 ? 4 : 0);
  return b;
}

inline ModelStateBytes zero_model_state_bytes(int64_t psi, int64_t n, int stage,
                                              const StateBytesPerParam& per) {
  STRATA_CHECK(stage >= 0 && stage <= 3, "ZeRO stage ", stage, " does not exist (0, 1, 2 or 3)");
  STRATA_CHECK(n >= 1 && psi >= 0, "ZeRO sharding of ", psi, " parameters over ", n, " ranks");
  const int64_t shard = shard_elems(psi, n);
  ModelStateBytes b;
  b.parameters = (stage >= 3 ? shard : psi) * per.parameter;
  b.gradients = (stage >= 2 ? shard : psi) * per.gradient;
  b.optimizer = (stage >= 1 ? shard : psi) * per.optimizer;
  return b;
}

// bf16: 2 + 2 + (4 master + 4 m + 4 v) = 16 bytes/param; fp32: 4 + 4 + (4 m + 4 v) = 16.
inline ModelStateBytes zero_model_state_bytes(int64_t psi, int64_t n, int stage, Precision p) {
  return zero_model_state_bytes(psi, n, stage, state_bytes_per_param(p));
}

// A rank of a Mixture-of-Experts model (parallel/region.h): its dense parameters sharded over
// the n_dense ranks of dp x cp, its experts (Ψ_experts: the E/ep experts it holds) over the
// n_edp = n_dense / ep ranks that hold the same experts.
inline ModelStateBytes moe_model_state_bytes(int64_t psi_dense, int64_t n_dense,
                                             int64_t psi_experts, int64_t n_edp, int stage,
                                             Precision p) {
  ModelStateBytes b = zero_model_state_bytes(psi_dense, n_dense, stage, p);
  if (psi_experts > 0) b += zero_model_state_bytes(psi_experts, n_edp, stage, p);
  return b;
}

// The optimizer bytes Muon saves on a rank that updates Ψ_muon matrix elements spread over n
// ranks (their shard under ZeRO 1-3, the average; all of them at ZeRO 0): 4 each.
inline int64_t muon_saving_bytes(int64_t psi_muon, int64_t n, int stage) {
  return 4 * (stage >= 1 ? shard_elems(psi_muon, n) : psi_muon);
}

// Replica groups (DiLoCo, parallel/outer.h): each rank keeps the global parameters and the
// outer momentum in fp32 (8 bytes per parameter; 4 more with an overlap, which keeps what it
// sent, and 4 more with error feedback, which keeps the residual) for the part its optimizer
// updates: Ψ at ZeRO 0, its shard of the n ranks under ZeRO 1-3. So a group's ranks hold 8Ψ
// between them when sharded, 8Ψ each when not.
inline int64_t outer_state_bytes(int64_t psi, int64_t n, int stage, bool overlap, bool error_feedback = false) {
  STRATA_CHECK(n >= 1 && psi >= 0, "outer state of ", psi, " parameters over ", n, " ranks");
  return (stage >= 1 ? shard_elems(psi, n) : psi) * (8 + (overlap ? 4 : 0) + (error_feedback ? 4 : 0));
}

}  // namespace strata::cost
