#include "model/context/context_comm.h"

#include <ctime>

#include "core/error.h"
#include "core/timer.h"

namespace strata::model {

ContextComm::ContextComm(comm::ProcessGroup& group, CpOptions options)
    : group_(group), opt_(options), size_(group.size()), rank_(group.rank()) {}

namespace {
int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}
}  // namespace

ContextComm::ComputeClock::ComputeClock(ContextComm& c)
    : c_(c), wall0_(now_ns()), cpu0_(thread_cpu_ns()) {}

ContextComm::ComputeClock::~ComputeClock() {
  c_.compute_ns_ += now_ns() - wall0_;
  c_.compute_cpu_ns_ += thread_cpu_ns() - cpu0_;
}

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
                          int NH, bool bf16, const int32_t* doc_start, int NKV) {
  STRATA_CHECK(Cl % NH == 0, "context-parallel attention: width ", Cl, " not divisible by ", NH,
               " heads");
  NKV = NKV ? NKV : NH;
  STRATA_CHECK(NH % NKV == 0, "context-parallel attention: ", NKV, " key/value heads do not divide ",
               NH, " heads");
  if (opt_.mode == CpMode::ring)
    ring_forward(out, lse, qkv, B, Tl, Cl, NH, NKV, bf16, doc_start);
  else
    ulysses_forward(layer, out, lse, qkv, B, Tl, Cl, NH, NKV, bf16, doc_start);
}

void ContextComm::backward(int layer, float* dqkv, const float* dout, const float* qkv,
                           const float* out, const float* lse, int B, int Tl, int Cl, int NH,
                           bool bf16, const int32_t* doc_start, int NKV) {
  NKV = NKV ? NKV : NH;
  if (opt_.mode == CpMode::ring)
    ring_backward(dqkv, dout, qkv, out, lse, B, Tl, Cl, NH, NKV, bf16, doc_start);
  else
    ulysses_backward(layer, dqkv, dout, qkv, lse, B, Tl, Cl, NH, NKV, bf16, doc_start);
}

}  // namespace strata::model
