// The GPT's context-parallel pieces (model/gpt.cc calls them when the model has a cp group):
// a rank keeps its chunks of every sequence (model/context/layout.h) and runs the whole model
// on those local rows; only the position embedding and attention need to know where the rows
// lie in the sequence.
#pragma once
#include <cstdint>

#include "model/context/context_comm.h"
#include "model/gpt_impl.h"

namespace strata::model {

// im.tokens, im.targets, im.weights (B, Tl) <- this rank's rows of (B, T); im.T = Tl.
void cp_take_inputs(GPT::Impl& im, const ContextComm& cc, const int32_t* tokens,
                    const int32_t* targets, const float* weights, int B, int T);
// out (B, Tl, C) = wte[tokens] + wpe[global position] for this rank's local rows of tokens
// (B, Tl); the backward adds (+=) dwte, dwpe from dout (B, Tl, C).
void cp_encoder_forward(const ContextComm& cc, float* out, const int32_t* tokens,
                        const float* wte, const float* wpe, int B, int Tl, int C);
void cp_encoder_backward(const ContextComm& cc, float* dwte, float* dwpe, const float* dout,
                         const int32_t* tokens, int B, int Tl, int C);
// encoded (B, Tl, C) = wte[tokens] + wpe[global position] for the local rows.
void cp_embed_forward(GPT::Impl& im, const ContextComm& cc, const float* wte, const float* wpe,
                      int C);
// dwte, dwpe (+=) from dres (B, Tl, C).
void cp_embed_backward(GPT::Impl& im, const ContextComm& cc, float* dwte, float* dwpe, int C);
// Tensor parallel: local (Tl, C) <- the wpe rows of this rank's positions, so that a layer
// that adds wpe row t to local row t adds the right position; the gradient of such a local
// table, local_grad (Tl, C), is added (+=) to the rows of dwpe it came from.
const float* cp_local_wpe(float* local, const ContextComm& cc, const float* wpe, int Tl, int C);
void cp_add_wpe_grad(float* dwpe, const ContextComm& cc, const float* local_grad, int Tl, int C);

// A layer's attention: the one-rank kernel, or the cp group's (ring or Ulysses) when cc is set.
// out (B,T,C); lse (B,NH,T); qkv (B,T,3C), T the local rows.
void attention_forward(ContextComm* cc, int layer, float* out, float* lse, float* qkv, int B,
                       int T, int C, int NH, bool bf16);
void attention_backward(ContextComm* cc, int layer, float* dqkv, const float* dout,
                        const float* qkv, const float* out, const float* lse, int B, int T, int C,
                        int NH, bool bf16);

// Logits (B, T, Vp) of a prompt under cp: padded to a length the layout can split into chunks
// of a multiple of `multiple` rows (causal: padding changes no earlier position), computed on
// the local rows by local_forward(Tl) (which returns them, (B, Tl, Vp)), gathered over cp.
const float* cp_logits(GPT::Impl& im, const GPTConfig& cfg, ContextComm& cc,
                       const int32_t* tokens, int B, int T, int multiple,
                       const std::function<const float*(int T)>& local_forward);

}  // namespace strata::model
