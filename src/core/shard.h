// ZeRO's shard rounding, shared by the engine's layout (parallel/), sharded checkpoints
// (ckpt/) and the memory model (cost/memory.h), which must agree to the element:
// Ψ elements over N ranks are padded so any Ψ splits over any N, and every rank's shard
// buffer holds S = ceil(Ψ/N) elements (rank r owns [r·S, (r+1)·S) clipped to Ψ).
#pragma once
#include <cstdint>

namespace strata {

inline int64_t shard_elems(int64_t psi, int64_t n) { return (psi + n - 1) / n; }

}  // namespace strata
