// A block's attention under context parallelism: the cp group's ring or Ulysses attention
// (model/context/context_comm.h) when cc is set, else the one-rank kernel.
#pragma once
#include <cstdint>

namespace strata::model {

class ContextComm;

// A layer's attention: the one-rank kernel, or the cp group's (ring or Ulysses) when cc is set.
// out (B,T,C); lse (B,NH,T); qkv (B,T,(NH + 2NKV)·C/NH), T the local rows. doc_start: (B, T·cp)
// document starts of the whole sequence (kernels/attention.h), or nullptr. NKV: key/value
// heads (grouped-query attention), 0: NH.
void attention_forward(ContextComm* cc, int layer, float* out, float* lse, float* qkv, int B,
                       int T, int C, int NH, bool bf16, const int32_t* doc_start, int NKV = 0);
void attention_backward(ContextComm* cc, int layer, float* dqkv, const float* dout,
                        const float* qkv, const float* out, const float* lse, int B, int T, int C,
                        int NH, bool bf16, const int32_t* doc_start, int NKV = 0);


}  // namespace strata::model
