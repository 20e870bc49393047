// Value head over a GPT trunk (value_model.h).
#include "rlhf/value_model.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace strata::rlhf {

void bind_frozen(model::GPT& gpt, float* params) {
  for (int u = 0; u < gpt.num_units(); ++u) gpt.bind_unit(u, params + gpt.unit_range(u).first, nullptr);
}

ValueModel::ValueModel(const model::GPTConfig& cfg, int max_batch, bool trainable,
                       bool allocate_state)
    : gpt_(cfg, max_batch, trainable && allocate_state),
      head_(size_t(cfg.dim) + 1, 0.0f),
      head_grad_(size_t(cfg.dim) + 1, 0.0f),
      dhidden_(size_t(max_batch) * cfg.seq * cfg.dim),
      hidden_(size_t(max_batch) * cfg.seq * cfg.dim) {
  if (!trainable) {
    if (allocate_state) {
      frozen_ = Buffer(MemCategory::parameters, sizeof(float) * gpt_.num_params());
      bind_frozen(gpt_, frozen_.as<float>());
    }
    head_grad_.clear();
    dhidden_.clear();
  }
}

void ValueModel::forward(const int32_t* tokens, int B, int T, float* values) {
  const int C = config().dim;
  const float* h = gpt_.hidden(tokens, B, T);
  const int64_t N = int64_t(B) * T;
  std::memcpy(hidden_.data(), h, sizeof(float) * N * C);
  const float* w = head_.data();
  const float b = head_[size_t(C)];
  for (int64_t n = 0; n < N; ++n) {
    double v = b;
    for (int c = 0; c < C; ++c) v += double(h[n * C + c]) * w[c];
    values[n] = float(v);
  }
  B_ = B;
  T_ = T;
}

void ValueModel::backward(const float* dv) {
  STRATA_CHECK(!head_grad_.empty(), "backward of a frozen value model");
  const int C = config().dim;
  const int64_t N = int64_t(B_) * T_;
  const float* w = head_.data();
  float* gw = head_grad_.data();
  for (int64_t n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      dhidden_[size_t(n * C + c)] = dv[n] * w[c];
      gw[c] += dv[n] * hidden_[size_t(n * C + c)];
    }
    gw[C] += dv[n];
  }
  gpt_.backward_hidden(dhidden_.data());
}

void ValueModel::zero_grads() {
  gpt_.zero_grads();
  zero_head_grad();
}

void ValueModel::zero_head_grad() { std::fill(head_grad_.begin(), head_grad_.end(), 0.0f); }

}  // namespace strata::rlhf
