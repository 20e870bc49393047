// The custom-head passes of model/gpt.h (backward from logits, from the final hidden state)
// and the value model built on them.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "rlhf/value_model.h"
#include "tiny.h"

namespace strata::rlhf {
namespace {

TEST(GptHeads, BackwardFromLogitsEqualsTheCrossEntropyBackward) {
  const model::GPTConfig cfg = test::tiny_config(16);
  const std::vector<float> p = test::tiny_params(cfg, 4, 3.0f);
  const int B = 2, T = 9, Vp = cfg.padded_vocab;
  std::vector<int32_t> tok(size_t(B) * T), tgt(size_t(B) * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 11 + 2) % cfg.vocab), tgt[i] = int32_t((i * 5 + 1) % cfg.vocab);
  model::GPT a(cfg, B), b(cfg, B);
  std::copy(p.begin(), p.end(), a.params());
  std::copy(p.begin(), p.end(), b.params());
  a.zero_grads();
  b.zero_grads();
  const float scale = 1.0f / (B * T);
  a.forward(tok.data(), tgt.data(), nullptr, B, T);
  a.backward(scale);
  // d mean CE / d z = (softmax(z) - onehot) / N over the real vocabulary.
  const float* z = b.logits(tok.data(), B, T);
  std::vector<float> dz(size_t(B) * T * Vp, 0.0f);
  for (int n = 0; n < B * T; ++n) {
    const float* row = z + int64_t(n) * Vp;
    double mx = -1e30, sum = 0;
    for (int v = 0; v < cfg.vocab; ++v) mx = std::max(mx, double(row[v]));
    for (int v = 0; v < cfg.vocab; ++v) sum += std::exp(row[v] - mx);
    for (int v = 0; v < cfg.vocab; ++v)
      dz[size_t(n) * Vp + v] = float((std::exp(row[v] - mx) / sum - (v == tgt[size_t(n)])) * scale);
  }
  b.backward_logits(dz.data());
  double worst = 0, mag = 0;
  for (int64_t i = 0; i < a.num_params(); ++i) {
    worst = std::max(worst, double(std::abs(a.grads()[i] - b.grads()[i])));
    mag = std::max(mag, double(std::abs(a.grads()[i])));
  }
  EXPECT_GT(mag, 1e-3);
  EXPECT_LT(worst, 1e-5 * mag + 1e-7);
  EXPECT_THROW(b.backward_logits(dz.data()), Error);  // logits were consumed
}

TEST(GptHeads, ValueModelGradientsMatchFiniteDifferences) {
  const model::GPTConfig cfg = test::tiny_config(8);
  const std::vector<float> p = test::tiny_params(cfg, 9, 2.0f);
  const int B = 2, T = 6;
  ValueModel vm(cfg, B);
  std::copy(p.begin(), p.end(), vm.params());
  for (int c = 0; c <= cfg.dim; ++c) vm.head()[size_t(c)] = 0.1f * float((c * 7) % 11 - 5);
  std::vector<int32_t> tok(size_t(B) * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 13 + 1) % cfg.vocab);
  std::vector<float> w(size_t(B) * T), v(size_t(B) * T);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.3f * float(int(i % 5) - 2);
  auto loss = [&] {
    vm.forward(tok.data(), B, T, v.data());
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += double(w[i]) * v[i];
    return s;
  };
  vm.zero_grads();
  loss();
  vm.backward(w.data());
  // A few trunk parameters of every unit, and head entries; central differences in fp32.
  const std::vector<int64_t> picks = {5, 40 * 32 + 3, vm.gpt().unit_range(1).first + 77,
                                      vm.gpt().unit_range(2).first + 1500, vm.gpt().unit_range(3).first};
  for (int64_t i : picks) {
    const float keep = vm.params()[i], h = 1e-2f;
    vm.params()[i] = keep + h;
    const double up = loss();
    vm.params()[i] = keep - h;
    const double down = loss();
    vm.params()[i] = keep;
    const double fd = (up - down) / (2 * h), g = vm.gpt().grads()[i];
    EXPECT_NEAR(g, fd, 2e-2 * std::max(1.0, std::abs(fd))) << "param " << i;
  }
  for (int c : {0, 17, cfg.dim}) {
    const float keep = vm.head()[size_t(c)], h = 1e-2f;
    vm.head()[size_t(c)] = keep + h;
    const double up = loss();
    vm.head()[size_t(c)] = keep - h;
    const double down = loss();
    vm.head()[size_t(c)] = keep;
    EXPECT_NEAR(vm.head_grad()[c], (up - down) / (2 * h), 1e-2 * std::max(1.0, std::abs(up - down) / (2 * h)));
  }
}

TEST(GptHeads, FrozenValueModelHasNoGradients) {
  const model::GPTConfig cfg = test::tiny_config(8);
  ValueModel vm(cfg, 1, /*trainable=*/false);
  EXPECT_EQ(vm.gpt().grads(), nullptr);
  const std::vector<float> p = test::tiny_params(cfg, 1);
  std::copy(p.begin(), p.end(), vm.params());
  std::vector<int32_t> tok = {1, 2, 3};
  std::vector<float> v(3), dv(3, 1.0f);
  vm.forward(tok.data(), 1, 3, v.data());
  EXPECT_THROW(vm.backward(dv.data()), Error);
}

}  // namespace
}  // namespace strata::rlhf
