#include "kernels/gelu.h"

#include "core/dtype.h"
#include "kernels/fastmath.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr int64_t kBlock = 4096;  // elements per parallel task

inline void put(float* o, float v) { *o = v; }
inline void put(uint16_t* o, float v) { *o = f32_to_bf16(v); }

inline float get(const float* p) { return *p; }
inline float get(const uint16_t* p) { return bf16_to_f32(*p); }

// out = gelu(inp); inp_h, when not null, receives inp rounded to bf16 in the same pass.
template <typename Out>
void forward_impl(Out* out, const float* inp, int64_t n, uint16_t* inp_h = nullptr) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i1 = std::min(n, (blk + 1) * kBlock);
    for (int64_t i = blk * kBlock; i < i1; ++i) {
      const float x = inp[i];
      const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
      put(out + i, 0.5f * x * (1.0f + fast_tanh(u)));
    }
    if (inp_h)
      for (int64_t i = blk * kBlock; i < i1; ++i) inp_h[i] = f32_to_bf16(inp[i]);
  }
}

template <typename In>
void backward_impl(float* dinp, const In* inp, const float* dout, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i1 = std::min(n, (blk + 1) * kBlock);
    for (int64_t i = blk * kBlock; i < i1; ++i) {
      const float x = get(inp + i);
      const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
      const float th = fast_tanh(u);
      const float sech2 = 1.0f - th * th;
      const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
      dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
    }
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) { forward_impl(out, inp, n); }
void gelu_forward(uint16_t* out, const float* inp, int64_t n) { forward_impl(out, inp, n); }
void gelu_forward(uint16_t* out, uint16_t* inp_h, const float* inp, int64_t n) {
  forward_impl(out, inp, n, inp_h);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  backward_impl(dinp, inp, dout, n);
}
void gelu_backward(float* dinp, const uint16_t* inp, const float* dout, int64_t n) {
  backward_impl(dinp, inp, dout, n);
}

}  // namespace strata::kernels::STRATA_ISA
