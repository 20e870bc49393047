// Forward-only ZeRO-3 shards of a frozen model (frozen_shards.h).
#include "rlhf/frozen_shards.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace strata::rlhf {

FrozenShards::FrozenShards(model::GPT& gpt, comm::ProcessGroup& group, const std::vector<float>& params)
    : gpt_(gpt),
      pg_(group),
      layout_(gpt.num_params(), group.size(), group.rank()),
      shard_(MemCategory::parameters, sizeof(float) * size_t(layout_.shard_elems())) {
  STRATA_CHECK(int64_t(params.size()) == gpt.num_params(), "frozen model: ", params.size(),
               " parameters for a model of ", gpt.num_params());
  const parallel::Range own = layout_.own();
  std::memset(shard_.data(), 0, shard_.bytes());
  if (!own.empty())
    std::memcpy(shard_.data(), params.data() + own.begin, sizeof(float) * size_t(own.size()));
  int64_t largest = 0;
  for (int u = 1; u < gpt.num_units(); ++u) {
    const auto [b, e] = gpt.unit_range(u);
    largest = std::max(largest, e - b);
  }
  const auto [b0, e0] = gpt.unit_range(0);
  other_offset_ = e0 - b0;
  slots_ = Buffer(MemCategory::comm, sizeof(float) * size_t(other_offset_ + largest));
  model::UnitHooks hooks;
  hooks.before_unit = [this](int unit, model::Pass pass) {
    STRATA_CHECK(pass == model::Pass::forward, "frozen model: backward of unit ", unit, " on rank ",
                 pg_.rank(), " (sharded frozen models run forwards only)");
    gather(unit);
  };
  gpt.set_hooks(std::move(hooks));
}

void FrozenShards::gather(int unit) {
  const auto [b, e] = gpt_.unit_range(unit);
  const parallel::Range r{b, e};
  const parallel::Range mine = layout_.own_part(r);
  const float* send = shard_.as<float>() + (mine.empty() ? 0 : mine.begin - layout_.own().begin);
  float* dst = slots_.as<float>() + (unit == 0 ? 0 : other_offset_);
  pg_.all_gather_v(send, dst, layout_.split_counts(r), DType::f32);
  gpt_.bind_unit(unit, dst, nullptr);
}

nlohmann::json frozen_memory(const FrozenShards* shards, int64_t whole, int64_t replicated, int64_t activations) {
  return {{"parameters", shards ? shards->shard_bytes() + replicated : whole},
          {"gradients", 0},
          {"optimizer", 0},
          {"comm", shards ? shards->gather_bytes() : 0},
          {"activations", activations}};
}

}  // namespace strata::rlhf
