// The GPT's MoE blocks (model/expert/moe.h): where their router and expert views lie in a
// unit, and the calls block_forward and block_backward make instead of the dense MLP.
#include <memory>

#include "model/expert/moe.h"
#include "model/gpt_impl.h"

namespace strata::model {

// View order of an MoE block after ln_2 (model/shard.cc): router, then 4 views per expert.
static expert::MoEWeights moe_views(float* base, const std::vector<int64_t>& rel, int first,
                                    int E) {
  expert::MoEWeights w;
  if (!base) {
    w.experts.assign(size_t(E), expert::ExpertViews{});
    return w;
  }
  const int64_t* r = rel.data() + first + 8;
  w.router = base + r[0];
  for (int e = 0; e < E; ++e) {
    const int64_t* x = r + 1 + 4 * e;
    w.experts.push_back({base + x[0], base + x[1], base + x[2], base + x[3]});
  }
  return w;
}

std::unique_ptr<MoEBlock> moe_block(GPT::Impl& im, const GPTConfig& cfg, int layer,
                                    bool with_grads, float scale) {
  if (!im.moe || !cfg.moe.is_moe_layer(layer)) return nullptr;
  const int first = im.view0[size_t(layer)], E = cfg.moe.experts;
  auto b = std::make_unique<MoEBlock>();
  b->moe = im.moe.get();
  b->index = (layer + 1) / cfg.moe.every - 1;
  b->w = moe_views(checked(im.unit_params[size_t(layer + 1)], layer + 1, "parameter"),
                   im.view_rel, first, E);
  b->g = moe_views(with_grads ? checked(im.unit_grads[size_t(layer + 1)], layer + 1, "gradient")
                              : nullptr,
                   im.view_rel, first, E);
  b->scale = scale;
  return b;
}

void moe_block_forward(MoEBlock& b, const float* x, const uint16_t* xh, float* out, int64_t N,
                       bool bf16) {
  b.moe->forward(b.index, x, xh, out, N, b.w, bf16);
}

void moe_block_backward(MoEBlock& b, const float* dout, float* dx, bool bf16) {
  b.moe->backward(b.index, dout, dx, b.w, b.g, bf16, b.scale);
}

}  // namespace strata::model
