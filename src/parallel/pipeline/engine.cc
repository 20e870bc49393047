#include "parallel/pipeline/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/adamw.h"
#include "parallel/precision.h"

namespace strata::parallel::pipeline {

StageEngine::StageEngine(model::StageModel& model, Mesh& mesh, const OptimConfig& optim,
                         uint64_t seed, int zero, DType reduce)
    : model_(model), mesh_(mesh), optim_(optim), zero_(zero), reduce_(reduce) {
  STRATA_CHECK(zero == 0 || zero == 1, "--pp with --zero ", zero,
               ": the stage engine runs ZeRO 0 or 1");
  const int64_t psi = model.num_params(), D = zero == 1 ? replicas() : 1;
  for (int64_t r = 0; r < D; ++r) counts_.push_back(size_t(psi * (r + 1) / D - psi * r / D));
  const int64_t d = zero == 1 ? mesh.dp_cp_index() : 0;
  begin_ = psi * d / D;
  end_ = psi * (d + 1) / D;
  const size_t share = sizeof(float) * size_t(end_ - begin_);
  m_ = Buffer(MemCategory::optimizer, share);
  v_ = Buffer(MemCategory::optimizer, share);
  if (zero == 1 && D > 1) share_grads_ = Buffer(MemCategory::gradients, share);
  if (reduce_ == DType::bf16 && replicas() > 1) {
    wire_ = Buffer(MemCategory::comm, size_t(psi) * dtype_size(DType::bf16));
    if (zero == 1) wire_share_ = Buffer(MemCategory::comm, size_t(end_ - begin_) * dtype_size(DType::bf16));
  }
  spans_ = model::decay_ranges(model.param_table(), begin_, end_);
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
  if (replicas() == 1) return;
  const int64_t psi = model_.num_params();
  if (reduce_ == DType::bf16) {
    convert(wire_.data(), DType::bf16, model_.grads(), DType::f32, psi);
    if (zero_ == 1) {
      mesh_.dp_cp().reduce_scatter_v(wire_.data(), wire_share_.data(), counts_, DType::bf16, comm::ReduceOp::sum);
      convert(share_grads_.data(), DType::f32, wire_share_.data(), DType::bf16, end_ - begin_);
    } else {
      mesh_.dp_cp().all_reduce(wire_.data(), wire_.data(), size_t(psi), DType::bf16, comm::ReduceOp::sum);
      convert(model_.grads(), DType::f32, wire_.data(), DType::bf16, psi);
    }
    return;
  }
  if (zero_ == 1)
    mesh_.dp_cp().reduce_scatter_v(model_.grads(), share_grads_.data(), counts_, DType::f32,
                                comm::ReduceOp::sum);
  else
    mesh_.dp_cp().all_reduce(model_.grads(), size_t(psi));
}

float StageEngine::step(float lr) {
  // The gradients of [begin_, end_), indexed from begin_.
  const float* g = zero_ == 1 && replicas() > 1 ? share_grads_.as<float>() : model_.grads() + begin_;
  // Each view counts once over the mesh: unit 0 on the stage that runs the embedding (a last
  // stage's copy is left out), a tp-replicated view on tp rank 0.
  double sum_sq = 0;
  for (const model::ParamView& v : model_.param_table()) {
    if ((v.unit == 0 && !mesh_.first_stage()) || (v.replicated && mesh_.tp_rank() != 0)) continue;
    const int64_t lo = std::max(v.offset, begin_), hi = std::min(v.offset + numel(v.shape), end_);
    if (hi > lo) sum_sq += kernels::sum_squares(g + (lo - begin_), hi - lo);
  }
  if (zero_ == 1 && replicas() > 1) mesh_.dp_cp().all_reduce(&sum_sq, 1);
  if (mesh_.has_tp()) mesh_.tp().all_reduce(&sum_sq, 1);
  if (mesh_.has_pp()) mesh_.pp().all_reduce(&sum_sq, 1);
  const kernels::AdamWStep s =
      adamw_step(optim_, lr, ++steps_, kernels::clip_scale(sum_sq, optim_.grad_clip));
  for (const model::DecayRange& sp : spans_)
    kernels::adamw_update(model_.params() + sp.begin, g + (sp.begin - begin_),
                          m_.as<float>() + (sp.begin - begin_), v_.as<float>() + (sp.begin - begin_),
                          sp.end - sp.begin, sp.decay, s);
  if (zero_ == 1 && replicas() > 1)
    mesh_.dp_cp().all_gather_v(model_.params() + begin_, model_.params(), counts_, DType::f32);
  return float(std::sqrt(sum_sq));
}

std::vector<StateShard> StageEngine::state_shards() {
  // Every dp·cp replica of the stage holds all its parameters and writes its 1/D share; the
  // moments are the share itself under ZeRO 1.
  const int64_t psi = model_.num_params(), D = replicas(), d = mesh_.dp_cp_index();
  const int64_t wb = psi * d / D, we = psi * (d + 1) / D;
  return {{"params", DType::f32, 0, psi, wb, we, model_.params()},
          {"exp_avg", DType::f32, begin_, end_, wb, we, m_.data()},
          {"exp_avg_sq", DType::f32, begin_, end_, wb, we, v_.data()}};
}

void StageEngine::state_loaded(int64_t step_count) {
  STRATA_CHECK(step_count >= 0, "state_loaded: step count ", step_count, " must be >= 0");
  steps_ = step_count;
}

}  // namespace strata::parallel::pipeline
