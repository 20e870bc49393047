// The engine's parameter count (cost::local_params on model::gpt_shape) against the elements of
// the table of views a tensor- and expert-parallel rank actually builds (model/shard.h): every
// preset's model at each tp that splits it, and MoE blocks with fine-grained and shared experts
// on each ep rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cost/shapes.h"
#include "model/gpt.h"
#include "model/parallel_rules.h"
#include "model/shard.h"

using namespace strata;

namespace {

int64_t table_elements(const model::GPTConfig& cfg, model::TpShard s, model::ExpertShard x) {
  int64_t n = 0;
  for (const model::ShardedView& v : model::build_sharded_table(cfg, s, x))
    n += numel(v.view.shape);
  return n;
}

}  // namespace

TEST(ShapeParams, LocalParamsAreTheRankTable) {
  std::vector<std::pair<std::string, model::GPTConfig>> configs;
  for (const char* name : {"tiny", "small", "gpt2", "llama-tiny", "llama-100m", "tinyllama-1.1b"})
    configs.emplace_back(name, model::GPTConfig::preset(name));
  model::GPTConfig moe = model::GPTConfig::preset("tiny");
  moe.moe.experts = 4, moe.moe.top_k = 2, moe.moe.every = 2;
  configs.emplace_back("tiny, MoE every 2", moe);
  model::GPTConfig fine = model::GPTConfig::preset("llama-tiny");
  fine.moe.experts = 8, fine.moe.top_k = 2, fine.moe.expert_ffn = 192, fine.moe.shared_experts = 2;
  configs.emplace_back("llama-tiny, fine-grained and shared", fine);
  for (const auto& [name, cfg] : configs) {
    const cost::GptShape g = model::gpt_shape(cfg);
    for (int tp : {1, 2, 3, 4, 8}) {
      if (!model::tp_splits_heads(cfg.heads, tp) || !model::splits_kv_heads(cfg.kv(), tp)) continue;
      for (int ep : {1, 2, 4}) {
        if (ep > 1 && cfg.moe.experts % ep != 0) continue;
        if (ep > 1 && !cfg.moe.enabled()) continue;
        for (int r = 0; r < tp; ++r)
          EXPECT_EQ(cost::local_params(g, tp, r, ep), table_elements(cfg, {tp, r}, {ep, ep - 1}))
              << name << " tp " << tp << " rank " << r << " ep " << ep;
      }
    }
  }
}
