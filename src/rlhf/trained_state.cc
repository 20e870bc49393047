// Engine-trained PPO models and their whole-model checkpoint tensors (trained_state.h).
#include "rlhf/trained_state.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace strata::rlhf {

model::GPTConfig recomputing(model::GPTConfig c, model::RecomputePolicy p) {
  c.recompute = p;
  c.validate();
  return c;
}

std::unique_ptr<parallel::DataParallelEngine> make_trained_engine(model::GPT& gpt, comm::ProcessGroup& group,
                                                                  int stage,
                                                                  const parallel::OptimConfig& optim,
                                                                  const std::vector<float>& params) {
  parallel::DataParallelOptions o;
  o.stage = stage;
  o.precision = cost::Precision::fp32;
  auto engine = parallel::make_data_parallel_engine(gpt, group, o, optim, /*seed=*/1);
  const int64_t psi = gpt.num_params();
  STRATA_CHECK(int64_t(params.size()) == psi, "trained model: ", params.size(), " parameters for a model of ",
               psi);
  for (const parallel::StateShard& s : engine->state_shards()) {
    if (s.name != "params") continue;
    const int64_t end = std::min(s.end, psi);
    if (end > s.begin)
      std::memcpy(s.data, params.data() + s.begin, sizeof(float) * size_t(end - s.begin));
  }
  engine->state_loaded(0);
  return engine;
}

static const char* const kStates[] = {"params", "exp_avg", "exp_avg_sq"};

static int state_index(const std::string& name) {
  for (int i = 0; i < 3; ++i)
    if (name == kStates[i]) return i;
  return -1;
}

FullState::FullState(parallel::DataParallelEngine& engine, comm::ProcessGroup& group, int64_t psi,
                     const std::string& prefix)
    : engine_(engine), group_(group), psi_(psi), full_(3, std::vector<float>(size_t(psi), 0.0f)) {
  for (int i = 0; i < 3; ++i) named_.push_back({prefix + "." + kStates[i], full_[size_t(i)].data(), psi});
}

void FullState::gather() {
  for (const parallel::StateShard& s : engine_.state_shards()) {
    const int i = state_index(s.name);
    if (i < 0) continue;
    float* out = full_[size_t(i)].data();
    if (s.begin == 0 && s.end >= psi_) {  // held whole (stage 0, or the parameters below 3)
      std::memcpy(out, s.data, sizeof(float) * size_t(psi_));
    } else {  // this rank's ZeRO shard: every rank's own range within [0, Ψ), in rank order
      STRATA_CHECK(s.begin == engine_.layout().own().begin, "checkpoint: state ", s.name, " of rank ",
                   group_.rank(), " holds [", s.begin, ", ", s.end, "), not its own shard");
      group_.all_gather_v(s.data, out, engine_.layout().split_counts({0, psi_}), DType::f32);
    }
  }
}

void FullState::scatter(int64_t steps) {
  for (const parallel::StateShard& s : engine_.state_shards()) {
    const int i = state_index(s.name);
    if (i < 0) continue;
    const int64_t end = std::min(s.end, psi_);
    if (end > s.begin)
      std::memcpy(s.data, full_[size_t(i)].data() + s.begin, sizeof(float) * size_t(end - s.begin));
  }
  engine_.state_loaded(steps);
}

}  // namespace strata::rlhf
