#include "model/context/context_comm.h"

#include "core/error.h"

namespace strata::model {

ContextComm::ContextComm(comm::ProcessGroup& group, CpOptions options)
    : group_(group), opt_(options), size_(group.size()), rank_(group.rank()) {}

float* ContextComm::scratch(int i, int64_t n) {
  if (int(scratch_.size()) <= i) scratch_.resize(size_t(i) + 1);
  Buffer& b = scratch_[size_t(i)];
  if (int64_t(b.bytes()) < n * int64_t(sizeof(float)))
    b = Buffer(MemCategory::activations, size_t(n) * sizeof(float));
  return b.as<float>();
}

int64_t ContextComm::buffer_bytes() const {
  int64_t n = 0;
  for (const Buffer& b : scratch_) n += int64_t(b.bytes());
  for (const Buffer& b : saved_) n += int64_t(b.bytes());
  return n;
}

void ContextComm::forward(int layer, float* out, float* lse, float* qkv, int B, int Tl, int Cl,
                          int NH, bool bf16) {
  STRATA_CHECK(Cl % NH == 0, "context-parallel attention: width ", Cl, " not divisible by ", NH,
               " heads");
  if (opt_.mode == CpMode::ring)
    ring_forward(out, lse, qkv, B, Tl, Cl, NH, bf16);
  else
    ulysses_forward(layer, out, lse, qkv, B, Tl, Cl, NH, bf16);
}

void ContextComm::backward(int layer, float* dqkv, const float* dout, const float* qkv,
                           const float* out, const float* lse, int B, int Tl, int Cl, int NH,
                           bool bf16) {
  if (opt_.mode == CpMode::ring)
    ring_backward(dqkv, dout, qkv, out, lse, B, Tl, Cl, NH, bf16);
  else
    ulysses_backward(layer, dqkv, dout, qkv, lse, B, Tl, Cl, NH, bf16);
}

}  // namespace strata::model
