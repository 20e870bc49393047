#include "model/context/gpt_cp.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/encoder.h"

namespace strata::model {

int cp_take_inputs(const ContextComm& cc, const MicroInput& in, int32_t* tokens,
                   int32_t* targets, float* weights) {
  const SeqLayout L = cc.layout(in.T);
  STRATA_CHECK(in.T % (cc.size() * L.chunks_per_rank()) == 0, "context parallelism over ",
               cc.size(), " ranks (", cp_chunks_name(L.kind), ") cannot split a sequence of ",
               in.T, " tokens");
  L.take(tokens, in.tokens, in.B, cc.rank(), 1);
  if (in.targets) L.take(targets, in.targets, in.B, cc.rank(), 1);
  if (in.weights) L.take(weights, in.weights, in.B, cc.rank(), 1);
  return L.local_len();
}

void cp_encoder_forward(const ContextComm& cc, float* out, const int32_t* tokens,
                        const float* wte, const float* wpe, int B, int Tl, int C) {
  const SeqLayout L = cc.layout(Tl * cc.size());
  const int S = L.chunk_len();
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < L.chunks_per_rank(); ++c) {
      const int64_t row = int64_t(b) * Tl + int64_t(c) * S;
      kernels::encoder_forward(out + row * C, tokens + row, wte,
                               wpe + int64_t(L.chunk_id(cc.rank(), c)) * S * C, 1, S, C);
    }
}

void cp_encoder_backward(const ContextComm& cc, float* dwte, float* dwpe, const float* dout,
                         const int32_t* tokens, int B, int Tl, int C) {
  const SeqLayout L = cc.layout(Tl * cc.size());
  const int S = L.chunk_len();
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < L.chunks_per_rank(); ++c) {
      const int64_t row = int64_t(b) * Tl + int64_t(c) * S;
      kernels::encoder_backward(dwte, dwpe + int64_t(L.chunk_id(cc.rank(), c)) * S * C,
                                dout + row * C, tokens + row, 1, S, C);
    }
}

const float* cp_local_wpe(float* local, const ContextComm& cc, const float* wpe, int Tl, int C) {
  const SeqLayout L = cc.layout(Tl * cc.size());
  for (int t = 0; t < Tl; ++t)
    std::memcpy(local + int64_t(t) * C, wpe + int64_t(L.position(cc.rank(), t)) * C,
                sizeof(float) * C);
  return local;
}

void cp_add_wpe_grad(float* dwpe, const ContextComm& cc, const float* local_grad, int Tl, int C) {
  const SeqLayout L = cc.layout(Tl * cc.size());
  for (int t = 0; t < Tl; ++t) {
    float* d = dwpe + int64_t(L.position(cc.rank(), t)) * C;
    const float* g = local_grad + int64_t(t) * C;
    for (int c = 0; c < C; ++c) d[c] += g[c];
  }
}

void attention_forward(ContextComm* cc, int layer, float* out, float* lse, float* qkv, int B,
                       int T, int C, int NH, bool bf16, const int32_t* doc_start, int NKV) {
  if (cc)
    cc->forward(layer, out, lse, qkv, B, T, C, NH, bf16, doc_start, NKV);
  else
    kernels::attention_forward(out, lse, qkv, {B, T, NH, NKV ? NKV : NH, C / NH}, bf16, doc_start);
}

void attention_backward(ContextComm* cc, int layer, float* dqkv, const float* dout,
                        const float* qkv, const float* out, const float* lse, int B, int T, int C,
                        int NH, bool bf16, const int32_t* doc_start, int NKV) {
  if (cc)
    cc->backward(layer, dqkv, dout, qkv, out, lse, B, T, C, NH, bf16, doc_start, NKV);
  else
    kernels::attention_backward(dqkv, dout, qkv, out, lse, {B, T, NH, NKV ? NKV : NH, C / NH}, bf16,
                                doc_start);
}

const float* cp_logits(ContextComm& cc, int max_seq, int64_t Vp, Buffer& scratch,
                       int32_t* local_tokens, const int32_t* tokens, int B, int T, int multiple,
                       const std::function<const float*(int T)>& local_forward) {
  const int parts = cc.size() * cc.layout(T).chunks_per_rank() * multiple;
  const int Tp = (T + parts - 1) / parts * parts;
  STRATA_CHECK(Tp <= max_seq, "logits: ", T, " tokens padded to ", Tp,
               " for context parallelism exceed the position table (", max_seq, ")");
  std::vector<int32_t> padded(size_t(B) * Tp, 0);
  for (int b = 0; b < B; ++b)
    std::copy(tokens + int64_t(b) * T, tokens + int64_t(b + 1) * T, padded.begin() + int64_t(b) * Tp);
  const SeqLayout L = cc.layout(Tp);
  L.take(local_tokens, padded.data(), B, cc.rank(), 1);
  const int Tl = L.local_len();
  const int64_t local = int64_t(B) * Tl * Vp;
  const float* mine = local_forward(Tl);
  const std::vector<float> rows(mine, mine + local);  // local_forward may use logits_full
  const size_t need = sizeof(float) * size_t(local * cc.size() + int64_t(B) * Tp * Vp);
  if (scratch.bytes() < need) scratch = Buffer(MemCategory::activations, need);
  float* blocks = scratch.as<float>();
  float* full = blocks + local * cc.size();
  if (B > 0) cc.group().all_gather_async(rows.data(), blocks, size_t(local), DType::f32)->wait();
  for (int r = 0; r < cc.size(); ++r) L.put(full, blocks + r * local, B, r, Vp);
  // (B, Tp, Vp) -> (B, T, Vp): drop each row's padding
  for (int b = 1; b < B && Tp != T; ++b)
    std::memmove(full + int64_t(b) * T * Vp, full + int64_t(b) * Tp * Vp, sizeof(float) * T * Vp);
  return full;
}

}  // namespace strata::model
