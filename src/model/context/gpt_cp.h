// The model's context-parallel pieces (model/part.cc and model/gpt.cc call them when the part
// has a cp group):
// a rank keeps its chunks of every sequence (model/context/layout.h) and runs the whole model
// on those local rows; only the position embedding and attention need to know where the rows
// lie in the sequence.
#pragma once
#include <cstdint>
#include <functional>

#include "core/memory.h"
#include "model/chunk.h"
#include "model/context/attention.h"
#include "model/context/context_comm.h"

namespace strata::model {

// tokens, targets, weights (B, Tl) <- this rank's rows of in's (B, T) (targets and weights
// only when in has them); returns Tl. Throws one line when the layout cannot split T.
int cp_take_inputs(const ContextComm& cc, const MicroInput& in, int32_t* tokens,
                   int32_t* targets, float* weights);
// out (B, Tl, C) = wte[tokens] + wpe[global position] for this rank's local rows of tokens
// (B, Tl); the backward adds (+=) dwte, dwpe from dout (B, Tl, C).
void cp_encoder_forward(const ContextComm& cc, float* out, const int32_t* tokens,
                        const float* wte, const float* wpe, int B, int Tl, int C);
void cp_encoder_backward(const ContextComm& cc, float* dwte, float* dwpe, const float* dout,
                         const int32_t* tokens, int B, int Tl, int C);
// Tensor parallel: local (Tl, C) <- the wpe rows of this rank's positions, so that a layer
// that adds wpe row t to local row t adds the right position; the gradient of such a local
// table, local_grad (Tl, C), is added (+=) to the rows of dwpe it came from.
const float* cp_local_wpe(float* local, const ContextComm& cc, const float* wpe, int Tl, int C);
void cp_add_wpe_grad(float* dwpe, const ContextComm& cc, const float* local_grad, int Tl, int C);

// Logits (B, T, Vp) of a prompt under cp: padded to a length the layout can split into chunks
// of a multiple of `multiple` rows (causal: padding changes no earlier position; at most
// max_seq), the local rows put into local_tokens (B, Tl), computed there by local_forward(Tl)
// (which returns them, (B, Tl, Vp)), gathered over cp into `scratch` (grown as needed).
const float* cp_logits(ContextComm& cc, int max_seq, int64_t Vp, Buffer& scratch,
                       int32_t* local_tokens, const int32_t* tokens, int B, int T, int multiple,
                       const std::function<const float*(int T)>& local_forward);

}  // namespace strata::model
