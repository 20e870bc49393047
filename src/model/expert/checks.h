// The Mixture-of-Experts settings' own checks, header-only so that the engine's config
// (model/expert/config.cc MoEConfig::validate) and the planner's model (plan/model_spec.cc,
// also built into the Python module without the model library) say the same thing in the same
// words: one line naming the flag and the numbers.
#pragma once
#include <cstdint>

#include "core/error.h"

namespace strata::model::expert {

// Fine-grained and shared experts: both need routed experts; neither is negative.
inline void check_expert_widths(int64_t experts, int64_t expert_ffn, int64_t shared_experts) {
  STRATA_CHECK_SETTING(experts != 0 || shared_experts == 0, setting("shared-experts"), " ",
                       shared_experts, " needs routed experts (", setting("experts"),
                       " E): shared experts sit beside them in an MoE block");
  STRATA_CHECK_SETTING(experts != 0 || expert_ffn == 0, setting("expert-ffn"), " ", expert_ffn,
                       " needs routed experts (", setting("experts"), " E)");
  STRATA_CHECK_SETTING(expert_ffn >= 0, setting("expert-ffn"), " must not be negative (got ",
                       expert_ffn, "; 0: the dense MLP's width)");
  STRATA_CHECK_SETTING(shared_experts >= 0, setting("shared-experts"),
                       " must not be negative (got ", shared_experts, ")");
}

// Node-limited routing: E experts in G equal groups, each token within its best M of them,
// which must hold its top-k; M = 0 (and G = 0): no limit.
inline void check_route_groups(int64_t experts, int64_t top_k, int64_t groups, int64_t max_groups) {
  STRATA_CHECK_SETTING(groups >= 0 && max_groups >= 0, setting("route-groups"), " and ",
                       setting("route-max-groups"), " must not be negative (got ", groups, " and ",
                       max_groups, ")");
  STRATA_CHECK_SETTING(experts > 0 || max_groups == 0, setting("route-max-groups"), " ", max_groups,
                       " needs routed experts (", setting("experts"), " E)");
  if (max_groups == 0) {
    STRATA_CHECK_SETTING(groups == 0, setting("route-groups"), " ", groups, " needs ",
                         setting("route-max-groups"), " M (the groups a token may reach)");
    return;
  }
  STRATA_CHECK_SETTING(groups > 0, setting("route-max-groups"), " ", max_groups, " needs ",
                       setting("route-groups"),
                       " G (the expert groups: one per host of the ep ranks)");
  STRATA_CHECK_SETTING(experts % groups == 0, setting("experts"), " ", experts,
                       " do not divide into ", setting("route-groups"), " ", groups,
                       " groups of equal size");
  STRATA_CHECK_SETTING(max_groups <= groups, setting("route-max-groups"), " ", max_groups,
                       " is larger than the ", groups, " groups (", setting("route-groups"), ")");
  STRATA_CHECK_SETTING(max_groups * (experts / groups) >= top_k, setting("route-max-groups"), " ",
                       max_groups, " x ", experts / groups, " experts per group is fewer than ",
                       setting("top-k"), " ", top_k, ": a token could not find its k experts");
}

}  // namespace strata::model::expert
