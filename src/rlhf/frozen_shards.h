// A frozen model's parameters ZeRO-3-sharded over the data-parallel ranks (PPO's reference
// and reward model under --zero 3): each rank keeps S = ceil(Ψ/N) floats of the flat
// parameters (parallel/layout.h's ShardLayout, as the engine shards the trained models) and
// the model's unit hooks all-gather every unit into a slot right before its use, forward
// only: no gradients, no optimizer state. Two slots (category comm): unit 0 (embeddings,
// used at the start and again by the logits) and one for the current transformer block or
// final LayerNorm. Every rank must run the model's forwards the same number of times (the
// PPO shares are equal), or the gathers would not match.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "core/memory.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"
#include "parallel/layout.h"

namespace strata::rlhf {

class FrozenShards {
 public:
  // gpt: built with allocate_state = false; params: its gpt.num_params() floats, alike on
  // every rank (only this rank's shard is kept).
  FrozenShards(model::GPT& gpt, comm::ProcessGroup& group, const std::vector<float>& params);
  int64_t shard_bytes() const { return int64_t(shard_.bytes()); }
  int64_t gather_bytes() const { return int64_t(slots_.bytes()); }

 private:
  void gather(int unit);

  model::GPT& gpt_;
  comm::ProcessGroup& pg_;
  parallel::ShardLayout layout_;
  Buffer shard_;  // S floats (category parameters)
  Buffer slots_;  // unit 0, then the largest other unit (category comm)
  int64_t other_offset_ = 0;
};

// A frozen model's memory per rank as the RLHF summaries report it: parameters (the shard
// plus `replicated` bytes kept whole, such as a value head, under ZeRO-3, when `shards` is
// not null; else `whole` bytes), no gradients or optimizer state, the gather slots (comm),
// and `activations`.
nlohmann::json frozen_memory(const FrozenShards* shards, int64_t whole, int64_t replicated, int64_t activations);

}  // namespace strata::rlhf
