// Model-state bytes per data-parallel rank under ZeRO (Rajbhandari et al. 2020), shared by
// the planner and by the engine's memory accounting, which must agree to the byte.
// Ψ parameters over N ranks; shards are padded so any Ψ splits over any N: each rank holds
// ceil(Ψ/N) elements of every sharded state.
#pragma once
#include <cstdint>

namespace strata::plan {

enum class Precision : uint8_t { fp32, bf16 };

struct ModelStateBytes {
  int64_t parameters = 0;  // working parameters (bf16 or fp32)
  int64_t gradients = 0;   // working gradients
  int64_t optimizer = 0;   // AdamW m and v, plus fp32 master weights under bf16
  int64_t total() const { return parameters + gradients + optimizer; }
};

inline int64_t shard_elems(int64_t psi, int64_t n) { return (psi + n - 1) / n; }

// bf16: 2 + 2 + (4 master + 4 m + 4 v) = 16 bytes/param; fp32: 4 + 4 + (4 m + 4 v) = 16.
inline ModelStateBytes zero_model_state_bytes(int64_t psi, int64_t n, int stage, Precision p) {
  const int64_t pb = p == Precision::bf16 ? 2 : 4;      // parameter bytes
  const int64_t gb = pb;                                // gradient bytes
  const int64_t ob = p == Precision::bf16 ? 12 : 8;     // optimizer bytes
  const int64_t shard = shard_elems(psi, n);
  ModelStateBytes b;
  b.parameters = (stage >= 3 ? shard : psi) * pb;
  b.gradients = (stage >= 2 ? shard : psi) * gb;
  b.optimizer = (stage >= 1 ? shard : psi) * ob;
  return b;
}

}  // namespace strata::plan
