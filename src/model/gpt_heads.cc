// Backward passes from a loss computed outside the model (gpt.h: hidden, backward_logits,
// backward_hidden): the logits' or the final LayerNorm output's gradient enters where the
// cross-entropy's would, and the part's backward (model/part.h) does the rest. One process, fp32
// compute (the bf16 model stores ln_f's output in bf16 only). Cost: the trunk forward or
// backward, plus one (N, C) x (C, Vp) product for backward_logits.
#include <cstring>

#include "core/phase.h"
#include "model/gpt.h"
#include "model/gpt_impl.h"
#include "model/tensor/linear.h"

namespace strata::model {

static void require_plain(const GPT& m, const char* what) {
  STRATA_CHECK(!m.tensor_comm() && m.compute() == DType::f32, what,
               ": custom heads need a one-process fp32 model (no tensor parallelism, no bf16)");
}

const float* GPT::hidden(const int32_t* tokens, int B, int T) {
  require_plain(*this, "hidden");
  Impl& im = *impl_;
  check_inputs(cfg_, max_batch_, tokens, nullptr, B, T);
  PhaseScope phase(PhaseKind::forward);
  im.forward_done = false;
  im.logits_valid = false;
  im.B = B;
  im.T = T;
  std::memcpy(im.tokens, tokens, sizeof(int32_t) * int64_t(B) * T);
  // The logits' place in the hook sequence is kept, without their work.
  im.p.forward(im.whole, im.slot, {im.tokens, nullptr, nullptr, B, T, nullptr}, 0, Head::hidden);
  im.hidden_valid = true;
  return im.slot.lnf;
}

void GPT::backward_logits(const float* dlogits) {
  require_plain(*this, "backward_logits");
  Impl& im = *impl_;
  STRATA_CHECK(im.logits_valid, "backward_logits: no logits(tokens) or forward before it");
  im.forward_done = false;
  im.logits_valid = false;
  PhaseScope phase(PhaseKind::backward);
  const int64_t N = int64_t(im.B) * im.T;
  if (N > 0 && dlogits != im.slot.logits)
    std::memcpy(im.slot.logits, dlogits, sizeof(float) * size_t(N * cfg_.padded_vocab));
  im.p.backward(im.whole, im.slot, {im.tokens, nullptr, nullptr, im.B, im.T}, 1.0f, 0,
              /*split=*/false, Head::logits);
}

void GPT::backward_hidden(const float* dhidden) {
  require_plain(*this, "backward_hidden");
  Impl& im = *impl_;
  STRATA_CHECK(im.hidden_valid, "backward_hidden: no hidden(tokens) before it");
  im.hidden_valid = false;
  PhaseScope phase(PhaseKind::backward);
  const int64_t N = int64_t(im.B) * im.T;
  if (N > 0) std::memcpy(im.p.s.dbuf_c, dhidden, sizeof(float) * size_t(N * cfg_.dim));
  im.p.backward(im.whole, im.slot, {im.tokens, nullptr, nullptr, im.B, im.T}, 1.0f, 0,
              /*split=*/false, Head::hidden);
}

}  // namespace strata::model
