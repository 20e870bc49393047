#include "kernels/swiglu.h"

#include <algorithm>

#include "core/dtype.h"
#include "kernels/fastmath.h"
#include "kernels/isa_target.h"  // last: what follows is compiled for the level

namespace strata::kernels::STRATA_ISA {

namespace {
constexpr int64_t kBlock = 4096;  // elements per parallel task

inline void put(float* o, float v) { *o = v; }
inline void put(uint16_t* o, float v) { *o = f32_to_bf16(v); }

inline float get(const float* p) { return *p; }
inline float get(const uint16_t* p) { return bf16_to_f32(*p); }

inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

// out = silu(gate) * up; gate_h, up_h, when not null, receive the inputs rounded to bf16.
template <typename Out>
void forward_impl(Out* out, const float* gate, const float* up, int64_t n,
                  uint16_t* gate_h = nullptr, uint16_t* up_h = nullptr) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock, i1 = std::min(n, i0 + kBlock);
    for (int64_t i = i0; i < i1; ++i) {
      const float g = gate[i];
      put(out + i, g * sigmoid(g) * up[i]);
    }
    if (gate_h)
      for (int64_t i = i0; i < i1; ++i) {
        gate_h[i] = f32_to_bf16(gate[i]);
        up_h[i] = f32_to_bf16(up[i]);
      }
  }
}

template <typename In>
void backward_impl(float* dgate, float* dup, const In* gate, const In* up, const float* dout,
                   int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i1 = std::min(n, (blk + 1) * kBlock);
    for (int64_t i = blk * kBlock; i < i1; ++i) {
      const float g = get(gate + i), u = get(up + i), d = dout[i];  // read before any write
      const float s = sigmoid(g);
      dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
      dup[i] = d * g * s;
    }
  }
}

// Rows of a fused (gate | up) matrix gu (N, 2F) -> out (N, F); gu_h, when not null, (N, 2F)
// receives gu rounded to bf16. The same element arithmetic as forward_impl.
template <typename Out>
void forward_rows_impl(Out* out, uint16_t* gu_h, const float* gu, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const float *gate = gu + r * 2 * F, *up = gate + F;
    Out* o = out + r * F;
    for (int j = 0; j < F; ++j) {
      const float g = gate[j];
      put(o + j, g * sigmoid(g) * up[j]);
    }
    if (gu_h)
      for (int j = 0; j < 2 * F; ++j) gu_h[r * 2 * F + j] = f32_to_bf16(gate[j]);
  }
}

template <typename In>
void backward_rows_impl(float* dgu, const In* gu, const float* dout, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const In *gate = gu + r * 2 * F, *up = gate + F;
    float *dgate = dgu + r * 2 * F, *dup = dgate + F;
    const float* d = dout + r * F;
    for (int j = 0; j < F; ++j) {
      const float g = get(gate + j), u = get(up + j);
      const float s = sigmoid(g);
      dgate[j] = d[j] * u * s * (1.0f + g * (1.0f - s));
      dup[j] = d[j] * g * s;
    }
  }
}

}  // namespace

void swiglu_forward_rows(float* out, const float* gu, int64_t N, int F) {
  forward_rows_impl(out, nullptr, gu, N, F);
}
void swiglu_forward_rows(uint16_t* out, uint16_t* gu_h, const float* gu, int64_t N, int F) {
  forward_rows_impl(out, gu_h, gu, N, F);
}
void swiglu_backward_rows(float* dgu, const float* gu, const float* dout, int64_t N, int F) {
  backward_rows_impl(dgu, gu, dout, N, F);
}
void swiglu_backward_rows(float* dgu, const uint16_t* gu, const float* dout, int64_t N, int F) {
  backward_rows_impl(dgu, gu, dout, N, F);
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  forward_impl(out, gate, up, n);
}
void swiglu_forward(uint16_t* out, const float* gate, const float* up, int64_t n) {
  forward_impl(out, gate, up, n);
}
void swiglu_forward(uint16_t* out, uint16_t* gate_h, uint16_t* up_h, const float* gate,
                    const float* up, int64_t n) {
  forward_impl(out, gate, up, n, gate_h, up_h);
}

void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up,
                     const float* dout, int64_t n) {
  backward_impl(dgate, dup, gate, up, dout, n);
}
void swiglu_backward(float* dgate, float* dup, const uint16_t* gate, const uint16_t* up,
                     const float* dout, int64_t n) {
  backward_impl(dgate, dup, gate, up, dout, n);
}

}  // namespace strata::kernels::STRATA_ISA
