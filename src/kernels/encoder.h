// Token + position embedding.
//   out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
// Cost: B*T*C adds forward; the same backward. The backward scatters into wte rows that
// several tokens may share, so it is parallelised over channel ranges (each channel's sum
// runs over the tokens in order): deterministic and independent of the thread count.
#pragma once
#include <cstdint>

namespace strata::kernels {

// out (B,T,C); tokens (B,T) in [0, V); wte (V,C); wpe (>=T, C) or nullptr (no learned
// positions: rotary models). pos (B,T): the wpe row of each
// token (documents packed into a sequence restart their positions), or nullptr: row t.
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C, const int32_t* pos = nullptr);
// dwte (V,C) +=, dwpe (>=T, C) += (or nullptr); dout (B,T,C); tokens (B,T)
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C, const int32_t* pos = nullptr);

}  // namespace strata::kernels
