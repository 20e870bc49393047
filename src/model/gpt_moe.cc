// The GPT's MoE blocks (model/expert/moe.h): where their router and expert views lie in a
// unit, and the calls block_forward and block_backward make instead of the dense MLP.
#include <memory>

#include "model/context/context_comm.h"
#include "model/expert/moe.h"
#include "model/gpt_impl.h"

namespace strata::model {

// An MoE block's router is view 8 of its block's unit (after ln_2, model/shard.cc); its
// experts are the views of its expert unit, 4 per held expert. All E slots are returned
// (global ids), the ones this rank does not hold empty.
static expert::MoEWeights moe_views(float* block, float* experts, const std::vector<int64_t>& rel,
                                    int first, int first_expert_view, int E, ExpertShard x) {
  expert::MoEWeights w;
  w.experts.assign(size_t(E), expert::ExpertViews{});
  if (!block) return w;
  w.router = block + rel[size_t(first + 8)];
  const int per = E / x.size;
  for (int j = 0; j < per; ++j) {
    const int64_t* r = rel.data() + first_expert_view + 4 * j;
    w.experts[size_t(x.rank * per + j)] = {experts + r[0], experts + r[1], experts + r[2],
                                           experts + r[3]};
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
  b->unit = cfg.layers + 2 + b->index;
  const Pass pass = with_grads ? Pass::backward : Pass::forward;
  im.before(b->unit, pass);
  const int xv = im.view0[size_t(b->unit - 1)];
  const ExpertShard x = im.experts;
  b->w = moe_views(checked(im.unit_params[size_t(layer + 1)], layer + 1, "parameter"),
                   checked(im.unit_params[size_t(b->unit)], b->unit, "parameter"), im.view_rel,
                   first, xv, E, x);
  if (with_grads)
    b->g = moe_views(checked(im.unit_grads[size_t(layer + 1)], layer + 1, "gradient"),
                     checked(im.unit_grads[size_t(b->unit)], b->unit, "gradient"), im.view_rel,
                     first, xv, E, x);
  else
    b->g = moe_views(nullptr, nullptr, im.view_rel, first, xv, E, x);
  b->scale = scale;
  b->ids = im.has_token_ids ? &im.token_ids : nullptr;
  return b;
}

void moe_block_done(GPT::Impl& im, const MoEBlock* b, Pass pass) {
  if (b) im.after(b->unit, pass);
}

void moe_block_forward(MoEBlock& b, const float* x, const uint16_t* xh, float* out, int64_t N,
                       bool bf16) {
  b.moe->forward(b.index, x, xh, out, N, b.w, bf16, b.ids);
}

void moe_block_backward(MoEBlock& b, const float* dout, float* dx, bool bf16) {
  b.moe->backward(b.index, dout, dx, b.w, b.g, bf16, b.scale);
}

TokenIdsScope::TokenIdsScope(GPT::Impl& im, const SampleIds& ids, int B) : im(im) {
  im.has_token_ids = im.moe && ids.sample;
  if (!im.has_token_ids) return;
  im.token_positions.clear();
  if (im.cp) {
    const SeqLayout layout = im.cp->layout(im.T * im.cp->size());
    for (int t = 0; t < im.T; ++t) im.token_positions.push_back(layout.position(im.cp->rank(), t));
  }
  im.token_ids = {ids.sample, im.cp ? im.token_positions.data() : nullptr, B, im.T, ids.epoch};
}

TokenIdsScope::~TokenIdsScope() { im.has_token_ids = false; }

}  // namespace strata::model
