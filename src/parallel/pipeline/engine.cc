#include "parallel/pipeline/engine.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/adamw.h"

namespace strata::parallel::pipeline {

StageEngine::StageEngine(model::StageModel& model, Mesh& mesh, const OptimConfig& optim,
                         uint64_t seed)
    : model_(model),
      mesh_(mesh),
      optim_(optim),
      m_(MemCategory::optimizer, sizeof(float) * size_t(model.num_params())),
      v_(MemCategory::optimizer, sizeof(float) * size_t(model.num_params())) {
  spans_ = model::decay_ranges(model.param_table(), 0, model.num_params());
  model_.init(seed);
  std::memset(m_.data(), 0, m_.bytes());
  std::memset(v_.data(), 0, v_.bytes());
}

void StageEngine::begin_step() { model_.zero_grads(); }

void StageEngine::end_backward() {
  if (mesh_.has_embed()) {
    const auto [b, e] = model_.wte_range();
    STRATA_CHECK(e > b, "pipeline: rank in the embed group holds no wte");
    mesh_.embed().all_reduce(model_.grads() + b, size_t(e - b));
  }
  if (mesh_.dims().dp > 1) mesh_.dp().all_reduce(model_.grads(), size_t(model_.num_params()));
}

float StageEngine::step(float lr) {
  const float* g = model_.grads();
  double sum_sq = kernels::sum_squares(g, model_.num_params());
  // Unit 0 counts on the stage that runs the embedding; a last stage's copy is left out.
  const bool embeds = mesh_.first_stage();
  if (model_.holds(0) && !embeds) {
    const auto [b, e] = model_.unit_range(0);
    sum_sq -= kernels::sum_squares(g + b, e - b);
  }
  if (mesh_.has_pp()) mesh_.pp().all_reduce(&sum_sq, 1);
  const kernels::AdamWStep s =
      adamw_step(optim_, lr, ++steps_, kernels::clip_scale(sum_sq, optim_.grad_clip));
  for (const model::DecayRange& sp : spans_)
    kernels::adamw_update(model_.params() + sp.begin, model_.grads() + sp.begin,
                          m_.as<float>() + sp.begin, v_.as<float>() + sp.begin, sp.end - sp.begin,
                          sp.decay, s);
  return float(std::sqrt(sum_sq));
}

std::vector<StateShard> StageEngine::state_shards() {
  // Every dp replica of the stage holds it all; each writes its 1/D share.
  const int64_t psi = model_.num_params(), D = mesh_.dims().dp, d = mesh_.dp_rank();
  const int64_t wb = psi * d / D, we = psi * (d + 1) / D;
  return {{"params", DType::f32, 0, psi, wb, we, model_.params()},
          {"exp_avg", DType::f32, 0, psi, wb, we, m_.data()},
          {"exp_avg_sq", DType::f32, 0, psi, wb, we, v_.data()}};
}

void StageEngine::state_loaded(int64_t step_count) {
  STRATA_CHECK(step_count >= 0, "state_loaded: step count ", step_count, " must be >= 0");
  steps_ = step_count;
}

}  // namespace strata::parallel::pipeline
