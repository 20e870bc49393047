#include "model/expert/experts.h"

#include "kernels/gelu.h"
#include "kernels/swiglu.h"
#include "model/tensor/linear.h"

namespace strata::model::expert {

using tensor::act;
using tensor::linear_backward;
using tensor::linear_forward;

void experts_forward(const std::vector<ExpertViews>& views, const std::vector<int64_t>& rows,
                     const float* X, float* H, float* A, float* O, int C, int F, bool proj_bias,
                     bool bf16, bool gated) {
  const int HF = gated ? 2 * F : F;  // H's columns
  for (size_t e = 0; e < views.size(); ++e) {
    const int64_t r0 = rows[e], m = rows[e + 1] - r0;
    if (m == 0) continue;
    const ExpertViews& w = views[e];
    linear_forward(bf16, H + r0 * HF, act(X + r0 * C, nullptr, C), w.fcw, w.fcb, m, C, HF);
    if (gated)
      kernels::swiglu_forward_rows(A + r0 * F, H + r0 * HF, m, F);
    else
      kernels::gelu_forward(A + r0 * F, H + r0 * F, m * F);
    linear_forward(bf16, O + r0 * C, act(A + r0 * F, nullptr, F), w.projw,
                   proj_bias ? w.projb : nullptr, m, F, C);
  }
}

void experts_backward(const std::vector<ExpertViews>& views,
                      const std::vector<ExpertViews>& grads, const std::vector<int64_t>& rows,
                      const float* X, const float* H, const float* A, const float* dO, float* dA,
                      float* dX, int C, int F, bool bf16, bool gated, float* dH) {
  const int HF = gated ? 2 * F : F;
  for (size_t e = 0; e < views.size(); ++e) {
    const int64_t r0 = rows[e], m = rows[e + 1] - r0;
    if (m == 0) continue;
    const ExpertViews &w = views[e], &g = grads[e];
    linear_backward(bf16, dA + r0 * F, g.projw, g.projb, dO + r0 * C, act(A + r0 * F, nullptr, F),
                    w.projw, m, F, C);
    float* dh = gated ? dH + r0 * HF : dA + r0 * F;  // GELU's in place
    if (gated)
      kernels::swiglu_backward_rows(dh, H + r0 * HF, dA + r0 * F, m, F);
    else
      kernels::gelu_backward(dh, H + r0 * F, dA + r0 * F, m * F);
    linear_backward(bf16, dX + r0 * C, g.fcw, g.fcb, dh, act(X + r0 * C, nullptr, C), w.fcw, m, C,
                    HF);
  }
}

}  // namespace strata::model::expert
