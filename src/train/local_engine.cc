#include "train/local_engine.h"

#include <cmath>

#include "core/error.h"
#include "kernels/adamw.h"

namespace strata::train {

LocalEngine::LocalEngine(model::GPT& model, const parallel::OptimConfig& cfg)
    : model_(model),
      cfg_(cfg),
      m_(MemCategory::optimizer, size_t(model.num_params()) * sizeof(float)),
      v_(MemCategory::optimizer, size_t(model.num_params()) * sizeof(float)) {
  STRATA_CHECK(model.params() && model.grads(),
               "the single-process engine needs the model's own flat parameter and gradient "
               "buffers");
  spans_ = model::decay_ranges(model.param_table(), 0, model.num_params());
}

void LocalEngine::begin_step() {
  model_.zero_grads();
}

float LocalEngine::step(float lr) {
  float* grads = model_.grads();
  const double sum_sq = kernels::sum_squares(grads, model_.num_params());
  const kernels::AdamWStep s =
      parallel::adamw_step(cfg_, lr, ++steps_, kernels::clip_scale(sum_sq, cfg_.grad_clip));
  for (const model::DecayRange& sp : spans_)
    kernels::adamw_update(model_.params() + sp.begin, grads + sp.begin, m_.as<float>() + sp.begin,
                          v_.as<float>() + sp.begin, sp.end - sp.begin, sp.decay, s);
  return float(std::sqrt(sum_sq));
}

std::vector<parallel::StateShard> LocalEngine::state_shards() {
  const int64_t psi = model_.num_params();
  return {{"params", DType::f32, 0, psi, 0, psi, model_.params()},
          {"exp_avg", DType::f32, 0, psi, 0, psi, m_.data()},
          {"exp_avg_sq", DType::f32, 0, psi, 0, psi, v_.data()}};
}

void LocalEngine::state_loaded(int64_t step_count) {
  STRATA_CHECK(step_count >= 0, "state_loaded: step count ", step_count, " must be >= 0");
  steps_ = step_count;
}

}  // namespace strata::train
